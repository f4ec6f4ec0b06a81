//! The runner: turns a scheduled step into forward passes. It owns the model and its paged
//! KV bytes (and a separate draft model's), executes the KV manager's copy orders, and runs
//! the forwards. It decides nothing: which tokens run, in which blocks, comes from
//! `folio_core`; what the logits mean is the output processor's (`output.rs`).

use super::Engine;
use folio_core::kv::CopyOp;
use folio_core::SchedulerOutput;
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, ForwardOutput, ForwardStats, KvCache, Model, ModelError, SeqSpan};

/// A separate draft model for speculation (`--draft-model`): it runs on every step's batch
/// too, so its own paged KV (the same block ids as the target's, its own bytes per token)
/// always holds the context it drafts from.
pub(super) struct DraftModel {
    pub model: Model,
    pub kv: KvCache,
}

/// The model side of the engine.
pub(super) struct Runner {
    pub model: Model,
    pub kv: KvCache,
    pub draft: Option<DraftModel>,
    pub pool: &'static ThreadPool,
    /// The second KV tier, if configured (`tier_io.rs` moves blocks to and from it).
    pub tier: Option<crate::tier::DiskTier>,
}

impl Runner {
    /// Executes the KV manager's copy-on-write orders, in the draft model's cache too (it
    /// shares the target's block ids).
    pub fn copy_blocks(&mut self, copies: &[CopyOp]) {
        for c in copies {
            self.kv
                .copy_block(c.src as usize, c.dst as usize, c.num_tokens);
            if let Some(d) = self.draft.as_mut() {
                d.kv.copy_block(c.src as usize, c.dst as usize, c.num_tokens);
            }
        }
    }

    /// One step's forward over `batch`: the target's logit rows and hidden rows (embedding
    /// requests) and the step's figures. A separate draft model then computes the same
    /// tokens into its own KV through the same batch, stripped of logit and hidden rows and
    /// of adapters (shaped for the target). The batch is consumed: its adapter references
    /// go before any request can finish (the registry frees an unloaded adapter's slot when
    /// its last request does).
    pub fn forward(
        &mut self,
        mut batch: ForwardBatch,
    ) -> Result<(ForwardOutput, ForwardStats), ModelError> {
        let mut fstats = self.model.stats(&batch, self.kv.bytes_per_token());
        let out = self
            .model
            .forward_with_hidden(&batch, &mut self.kv, self.pool)?;
        if let Some(m) = self.model.moe_stats() {
            // MoE: the bytes this step read (the experts that got rows), not every expert.
            fstats.weight_bytes = m.last_step_weight_bytes;
        }
        if let Some(d) = self.draft.as_mut() {
            for seq in &mut batch.seqs {
                seq.n_logits = 0;
                seq.n_hidden = 0;
                seq.lora = None;
            }
            if let Err(e) = d.model.forward(&batch, &mut d.kv, self.pool) {
                tracing::warn!("draft model forward failed: {e}");
            }
        }
        Ok((out, fstats))
    }
}

impl Engine {
    /// The step's `ForwardBatch` and how many logit rows each scheduled request gets: one
    /// per sampled position (the newest token plus its drafts), or one per prompt position
    /// of a chunk that still needs prompt scores; and how many hidden rows (embedding
    /// requests, which get no logits: see `embed`). The block tables move from `out` into
    /// the batch (`Scheduler::update` does not read them).
    pub(super) fn build_batch(
        &self,
        out: &mut SchedulerOutput,
    ) -> (ForwardBatch, Vec<usize>, Vec<usize>) {
        let mut batch = ForwardBatch::new();
        let mut rows_of = Vec::with_capacity(out.requests.len());
        let mut hidden_of = Vec::with_capacity(out.requests.len());
        for sr in &mut out.requests {
            let live = self.live.get(&sr.id);
            let mut n_logits = if sr.sample {
                1 + sr.num_draft_tokens
            } else {
                0
            };
            // Prompt scoring: a row at every position of a chunk that still needs scores.
            if let Some(sc) = live.and_then(|l| l.scores.as_ref()) {
                if sc.wants(sr.start_pos, sr.token_ids.len()) {
                    n_logits = sr.token_ids.len();
                }
            }
            let embed = live.and_then(|l| l.embed.as_ref());
            let n_hidden = embed.map_or(0, |e| e.rows_wanted(sr.start_pos, sr.token_ids.len()));
            if embed.is_some() {
                n_logits = 0;
            }
            rows_of.push(n_logits);
            hidden_of.push(n_hidden);
            // Output tokens attend as llama.cpp's decode steps do, prompt tokens as its
            // prompt batch does, however this step groups them (see `SeqSpan`).
            let lone = if sr.token_ids.len() == 1 {
                sr.start_pos
            } else {
                usize::MAX
            };
            let decode_from = self
                .sched
                .request(sr.id)
                .map_or(lone, |r| r.num_prompt_tokens());
            batch.push_seq(
                &sr.token_ids,
                SeqSpan {
                    pos: sr.start_pos,
                    tables: std::mem::take(&mut sr.tables),
                    n_logits,
                    n_hidden,
                    decode_from,
                    lora: live.and_then(|l| l.lora.clone()),
                    ..SeqSpan::default()
                },
            );
        }
        (batch, rows_of, hidden_of)
    }
}
