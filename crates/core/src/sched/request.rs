//! One request: its tokens and the counters the scheduler advances.
//!
//! ```text
//! tokens:  | prompt ............................ | output ...... | draft .. |
//!          |<- cached ->|<- computed ->|<- new (this step) ->|
//!          0      num_cached     num_computed_tokens      num_tokens()
//! ```
//! There is no prefill or decode phase: `num_computed_tokens` (tokens whose KV is written)
//! catches up with `num_tokens()` (prompt + output), one chunk per step. The last output
//! token is never computed until the next step feeds it back.

use super::max_tokens::MaxTokens;

/// Identity of a request, chosen by the caller; also the KV sequence id.
pub type RequestId = u64;

pub use super::finish::FinishReason;

/// Where a request is in its life cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestStatus {
    /// In the waiting queue, never admitted.
    Waiting,
    /// Admitted: holds KV blocks and is scheduled every step it can be.
    Running,
    /// Was running; its KV was freed under memory pressure, its tokens kept. Back in the
    /// waiting queue (at the front) to be recomputed.
    Preempted,
    /// Done; never scheduled again.
    Finished(FinishReason),
}

/// A request and its progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Caller-chosen identity.
    pub id: RequestId,
    /// Prompt then output token ids, in one vector so any span slices without copying.
    tokens: Vec<u32>,
    num_prompt_tokens: usize,
    /// Most output tokens this request may produce (score only: one, never output).
    pub max_tokens: MaxTokens,
    /// Arrival time in seconds (caller's clock), for metrics and admission.
    pub arrival_s: Option<f64>,
    /// Time by which the last token must be out, seconds (caller's clock).
    pub deadline_s: Option<f64>,
    /// Life-cycle state.
    pub status: RequestStatus,
    /// Tokens whose KV is written (or scheduled to be, in the step in flight).
    pub num_computed_tokens: usize,
    /// Tokens served by the prefix cache at the latest admission.
    pub num_cached_tokens: usize,
    /// How many times this request was preempted.
    pub num_preemptions: u32,
    /// Tokens computed again after a preemption (work lost to recompute).
    pub num_recomputed_tokens: usize,
    /// Draft tokens to verify in the next step (speculative decoding); cleared by `update`.
    pub draft: Vec<u32>,
    /// Highest `num_computed_tokens` reached; computing below it again is recompute.
    pub(crate) max_computed_tokens: usize,
    /// Samples still to be forked from this request after its prompt (`n − 1` for an
    /// `n`-sample group): they count against `max_running` from admission on.
    pub forks: usize,
    /// Prefix-cache namespace: its blocks are shared only with requests of the same one
    /// (0: the base model; the engine sets its LoRA adapters' key).
    pub cache_ns: u64,
    /// Whether admission may start this request past a cached prefix (false when the
    /// caller needs logits at every prompt position, e.g. prompt scoring).
    pub use_prefix_cache: bool,
}

impl Request {
    /// A waiting request with `prompt` and at most `max_tokens` outputs.
    pub fn new(id: RequestId, prompt: Vec<u32>, max_tokens: impl Into<MaxTokens>) -> Self {
        Self {
            id,
            num_prompt_tokens: prompt.len(),
            tokens: prompt,
            max_tokens: max_tokens.into(),
            arrival_s: None,
            deadline_s: None,
            status: RequestStatus::Waiting,
            num_computed_tokens: 0,
            num_cached_tokens: 0,
            num_preemptions: 0,
            num_recomputed_tokens: 0,
            draft: Vec::new(),
            max_computed_tokens: 0,
            forks: 0,
            cache_ns: 0,
            use_prefix_cache: true,
        }
    }

    /// Sets the prefix-cache namespace.
    pub fn with_cache_ns(mut self, ns: u64) -> Self {
        self.cache_ns = ns;
        self
    }

    /// Sets whether admission may reuse cached prefix blocks (default true).
    pub fn with_prefix_cache(mut self, on: bool) -> Self {
        self.use_prefix_cache = on;
        self
    }

    /// Sets how many samples will be forked from this request (`n − 1`).
    pub fn with_forks(mut self, forks: usize) -> Self {
        self.forks = forks;
        self
    }

    /// Sets the arrival time (seconds).
    pub fn with_arrival(mut self, t: f64) -> Self {
        self.arrival_s = Some(t);
        self
    }

    /// Sets the deadline (seconds, same clock as arrival).
    pub fn with_deadline(mut self, t: f64) -> Self {
        self.deadline_s = Some(t);
        self
    }

    /// Prompt token ids.
    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.num_prompt_tokens]
    }

    /// Output token ids so far.
    pub fn output(&self) -> &[u32] {
        &self.tokens[self.num_prompt_tokens..]
    }

    /// Prompt followed by output.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Known tokens: prompt + output.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Prompt length.
    pub fn num_prompt_tokens(&self) -> usize {
        self.num_prompt_tokens
    }

    /// Output tokens so far.
    pub fn num_output_tokens(&self) -> usize {
        self.tokens.len() - self.num_prompt_tokens
    }

    /// Outputs the scheduler runs this request for ([`MaxTokens::steps`]).
    pub fn max_outputs(&self) -> usize {
        self.max_tokens.steps()
    }

    /// Drafts a next step could still keep: outputs left after the token in flight. Bounds
    /// the drafter's plan, its lookahead slots and the drafts the scheduler accepts.
    pub fn draft_room(&self) -> usize {
        self.max_outputs()
            .saturating_sub(self.num_output_tokens() + 1)
    }

    /// KV positions the request holds when it ends with `max_tokens` outputs: the last
    /// output is never fed back, so `prompt + max_tokens − 1` (DESIGN.md §requests).
    pub fn final_kv_tokens(&self) -> usize {
        (self.num_prompt_tokens + self.max_outputs() - 1).max(self.num_tokens())
    }

    /// True once finished.
    pub fn is_finished(&self) -> bool {
        matches!(self.status, RequestStatus::Finished(_))
    }

    pub(crate) fn push_output(&mut self, t: u32) {
        self.tokens.push(t);
    }
}
