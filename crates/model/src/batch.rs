//! The flat description of one forward pass over many sequences.
//!
//! ```text
//!  tokens:    | s0: 5 prefill tokens | s1: 1 decode | s2: 3 prefill (chunk) |
//!  positions: | 0 1 2 3 4            | 17           | 32 33 34              |
//!  slots:     table[pos / p] * p + pos % p, per token
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
    /// Physical block of each logical block, covering at least `pos + len` tokens (for a
    /// hybrid cache layout: the pages of group 0, the full-attention layers).
    pub block_table: Vec<u32>,
    /// Hybrid cache layouts: the pages of groups 1.. (window layers), each covering
    /// `pos + len` tokens; entries behind every query's window are never read (the KV
    /// manager marks them released). Empty for the single layout.
    pub window_tables: Vec<Vec<u32>>,
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
    /// The block table of page group `group` (0: `block_table`).
    pub fn table(&self, group: usize) -> &[u32] {
        match group {
            0 => &self.block_table,
            g => &self.window_tables[g - 1],
        }
    }
}

impl ForwardBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a sequence's new tokens starting at position `pos`.
    pub fn push(&mut self, tokens: &[u32], pos: usize, block_table: Vec<u32>, n_logits: usize) {
        let start = self.tokens.len();
        self.tokens.extend_from_slice(tokens);
        self.seqs.push(SeqSpan {
            start,
            len: tokens.len(),
            pos,
            block_table,
            window_tables: Vec::new(),
            n_logits,
            n_hidden: 0,
            decode_from: if tokens.len() == 1 { pos } else { usize::MAX },
            lora: None,
        });
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
