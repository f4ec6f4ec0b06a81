//! What one `schedule()` hands the executor, and what `update()` takes back.

use super::request::{FinishReason, RequestId};
use crate::kv::{CopyOp, EvictedBlock, StepId};

/// One request's share of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledRequest {
    pub id: RequestId,
    /// Tokens to compute: `tokens[start_pos..]` of prompt + output, then the drafts.
    pub token_ids: Vec<u32>,
    /// Position of `token_ids[0]`; the context attended to is `start_pos + token_ids.len()`.
    pub start_pos: usize,
    /// The request's block tables, indexed by page group ([`KvManager::tables`]): group 0
    /// the physical blocks in logical order (the full-attention layers' pages for hybrid
    /// models), then one table per window page group with `kv::RELEASED` for blocks behind
    /// the window (never read). Token `pos` of group `g` lives at
    /// [`kv::slot`](crate::kv::slot)`(&tables[g], pos, block_size)`. The executor moves
    /// them into its batch (`std::mem::take`): `update` does not read them.
    ///
    /// [`KvManager::tables`]: crate::kv::KvManager::tables
    pub tables: Vec<Vec<u32>>,
    /// The step reaches the end of the known tokens: sample (or verify drafts) from the
    /// logits of the last `1 + num_draft_tokens` positions.
    pub sample: bool,
    /// Trailing entries of `token_ids` that are drafts to verify.
    pub num_draft_tokens: usize,
}

/// One step's work, produced by `Scheduler::schedule`.
///
/// The executor must, in order: spill `evicted` blocks if it keeps a second tier, perform
/// `copies`, run the forward over `requests`, then call `Scheduler::update`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerOutput {
    pub step: StepId,
    pub requests: Vec<ScheduledRequest>,
    /// Requests preempted by this step (their KV was freed; they will be recomputed).
    pub preempted: Vec<RequestId>,
    /// Copy-on-write orders to perform before the step.
    pub copies: Vec<CopyOp>,
    /// Cached blocks evicted while allocating for this step (spill before reuse).
    pub evicted: Vec<EvictedBlock>,
    /// Tokens at prompt positions (prefill, including recompute of prompt tokens).
    pub num_prefill_tokens: usize,
    /// Tokens at output positions, drafts excluded (decode and recompute of outputs).
    pub num_decode_tokens: usize,
    /// Draft tokens to verify.
    pub num_draft_tokens: usize,
}

impl SchedulerOutput {
    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// All tokens of the step.
    pub fn num_tokens(&self) -> usize {
        self.num_prefill_tokens + self.num_decode_tokens + self.num_draft_tokens
    }
}

/// KV slots a drafter may write before the step that verifies its drafts
/// ([`Scheduler::reserve_lookahead`](super::Scheduler::reserve_lookahead)): a self-draft or
/// draft model drafting `num_slots` tokens computes K/V at positions
/// `start_pos..start_pos + num_slots` (the newest token, then each draft but the last) in
/// the request's own blocks, which also cover the verifying step's extra position.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lookahead {
    /// The request's newest token: the first position the drafter writes.
    pub start_pos: usize,
    /// Positions reserved from `start_pos` (the most drafts the drafter may make).
    pub num_slots: usize,
    /// The request's block tables by page group (as in [`ScheduledRequest`]), covering
    /// `start_pos + num_slots + 1` positions.
    pub tables: Vec<Vec<u32>>,
    /// Copy-on-write orders to perform before the drafter writes (a shared tail block
    /// that holds the first draft position).
    pub copies: Vec<CopyOp>,
}

/// The executor's result for one scheduled request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestResult {
    pub id: RequestId,
    /// Sampled tokens: none when the step did not sample, one normally, `1 + accepted`
    /// after draft verification (accepted drafts, then the correction/bonus token).
    pub new_token_ids: Vec<u32>,
    /// Set when the engine decided the request is done (EOS, stop string, max tokens).
    pub finish: Option<FinishReason>,
}
