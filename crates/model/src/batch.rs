//! The flat description of one forward pass over many sequences.
//!
//! ```text
//!  tokens:    | s0: 5 prefill tokens | s1: 1 decode | s2: 3 prefill (chunk) |
//!  positions: | 0 1 2 3 4            | 17           | 32 33 34              |
//!  slots:     folio_core::kv::slot(table, pos, p), per token and page group
//! ```
//! One batch mixes prefill chunks and decode tokens of different requests: continuous
//! batching feeds exactly this, so b rows share one read of each weight matrix.

/// One sequence's share of the batch.
#[derive(Clone, Debug, Default)]
pub struct SeqSpan {
    /// Index of this sequence's first token in [`ForwardBatch::tokens`].
    pub start: usize,
    /// Number of new tokens this step (prefill chunk length, 1 for decode, 1 + drafts).
    pub len: usize,
    /// Position of the first new token; tokens before it are already in the cache.
    pub pos: usize,
    /// Block tables indexed by page group, each covering at least `pos + len` tokens:
    /// group 0 the physical block of each logical block (for a hybrid cache layout, the
    /// full-attention layers' pages), groups 1.. the window layers' pages, whose entries
    /// behind every query's window are never read (the KV manager marks them released).
    /// Moved in from the scheduler's output; a layout with fewer groups ignores the rest.
    pub tables: Vec<Vec<u32>>,
    /// How many of this span's last tokens need logits (1 normally, 1 + drafts when
    /// verifying speculation, 0 for a prefill chunk that does not end the prompt).
    pub n_logits: usize,
    /// How many of this span's last tokens return their final hidden state (after the
    /// output norm, before the head): embedding requests pool these rows instead of
    /// sampling (every prompt position for mean pooling, the last one for last-token).
    pub n_hidden: usize,
    /// Under llama numerics (`Model::set_sums(Sums::Ggml)`), tokens at this position or
    /// later attend with llama.cpp's lone-query arithmetic (`SumOrder::Single`), earlier
    /// ones with its batched one: llama.cpp processes a prompt in one batch and decodes every
    /// output token alone, so the engine sets this to the prompt length to reproduce its
    /// outputs whatever the batching (chunked prefill, speculative verification, recompute).
    /// [`ForwardBatch::push`] sets the position of a lone token, and never for several. Fast
    /// numerics ignore it (every token in the batched order).
    pub decode_from: usize,
    /// The LoRA adapters this sequence runs with (`None`: the base model alone).
    pub lora: Option<crate::LoraSet>,
}

/// The whole step: every new token of every scheduled sequence, flattened.
#[derive(Clone, Debug, Default)]
pub struct ForwardBatch {
    pub tokens: Vec<u32>,
    pub seqs: Vec<SeqSpan>,
}

/// What one forward returns: logit rows (`[n_logit_rows][vocab]`) and hidden rows
/// (`[n_hidden_rows][d_model]`, after the output norm), each in span order.
#[derive(Clone, Debug, Default)]
pub struct ForwardOutput {
    pub logits: Vec<f32>,
    pub hidden: Vec<f32>,
}

impl SeqSpan {
    /// The block table of page group `group`.
    pub fn table(&self, group: usize) -> &[u32] {
        &self.tables[group]
    }

    /// The KV slot of position `pos` in page group `group` (block size `block_size`).
    pub fn slot(&self, group: usize, pos: usize, block_size: usize) -> usize {
        folio_core::kv::slot(&self.tables[group], pos, block_size)
    }
}

impl ForwardBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a sequence's new tokens starting at position `pos`, through one block table
    /// (a single cache layout).
    pub fn push(&mut self, tokens: &[u32], pos: usize, block_table: Vec<u32>, n_logits: usize) {
        let decode_from = if tokens.len() == 1 { pos } else { usize::MAX };
        self.push_seq(
            tokens,
            SeqSpan {
                pos,
                tables: vec![block_table],
                n_logits,
                decode_from,
                ..SeqSpan::default()
            },
        );
    }

    /// Appends a sequence's new tokens, described by `span` (its `start` and `len` are set
    /// here, from where `tokens` land in the batch).
    pub fn push_seq(&mut self, tokens: &[u32], mut span: SeqSpan) {
        span.start = self.tokens.len();
        span.len = tokens.len();
        self.tokens.extend_from_slice(tokens);
        self.seqs.push(span);
    }

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Total logit rows the forward returns, in sequence order.
    pub fn n_logit_rows(&self) -> usize {
        self.seqs.iter().map(|s| s.n_logits).sum()
    }

    /// Total hidden rows the forward returns, in sequence order.
    pub fn n_hidden_rows(&self) -> usize {
        self.seqs.iter().map(|s| s.n_hidden).sum()
    }

    /// Causal query–key pairs this batch computes: Σ c·h + c(c+1)/2 (DESIGN.md §batching).
    pub fn attention_pairs(&self) -> u64 {
        self.seqs
            .iter()
            .map(|s| {
                let (c, h) = (s.len as u64, s.pos as u64);
                c * h + c * (c + 1) / 2
            })
            .sum()
    }
}
