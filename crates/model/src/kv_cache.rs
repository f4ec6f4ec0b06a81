//! Paged KV storage: the bytes of every physical block, per layer.
//!
//! ```text
//! layer l, K (V alike):  [block 0][block 1] ... [block N-1]
//! one block:             [kv_head 0: slot 0..p × head_dim][kv_head 1: ...] ...
//! ```
//! Heads are outermost inside a block so attention streams one head's keys contiguously.
//! Ownership of blocks (tables, ref counts, prefix cache) lives in folio-core; this type
//! only stores values at the slots it is told to.

use half::f16;

/// Storage format of cached K/V values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvFormat {
    /// IEEE half precision, the default (what llama.cpp stores).
    F16,
}

impl KvFormat {
    /// Bytes per stored value (averaged over a quantization block).
    pub fn bytes_per_value(&self) -> f64 {
        match self {
            KvFormat::F16 => 2.0,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
        }
    }
}

/// The paged cache of one model: `num_blocks` blocks of `block_size` token slots.
pub struct KvCache {
    pub format: KvFormat,
    pub block_size: usize,
    pub num_blocks: usize,
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
}

impl KvCache {
    pub fn new(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        num_blocks: usize,
        format: KvFormat,
    ) -> KvCache {
        let per_layer = num_blocks * block_size * n_kv_heads * head_dim;
        KvCache {
            format,
            block_size,
            num_blocks,
            n_layers,
            n_kv_heads,
            head_dim,
            k: (0..n_layers).map(|_| vec![f16::ZERO; per_layer]).collect(),
            v: (0..n_layers).map(|_| vec![f16::ZERO; per_layer]).collect(),
        }
    }

    /// Bytes of K+V one token occupies in this cache.
    pub fn bytes_per_token(&self) -> usize {
        (2.0 * (self.n_layers * self.n_kv_heads * self.head_dim) as f64
            * self.format.bytes_per_value()) as usize
    }

    /// Offset of (block, head, slot-in-block) in a layer buffer.
    #[inline]
    pub fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        ((block * self.n_kv_heads + head) * self.block_size + slot) * self.head_dim
    }

    /// The keys and values of one layer.
    pub fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        (&self.k[layer], &self.v[layer])
    }

    pub fn layer_mut(&mut self, layer: usize) -> (&mut [f16], &mut [f16]) {
        (&mut self.k[layer], &mut self.v[layer])
    }

    /// Copies the first `n_slots` slots of block `src` into block `dst` in every layer
    /// (copy-on-write of a shared partial tail block).
    pub fn copy_block(&mut self, src: usize, dst: usize, n_slots: usize) {
        let hd = self.head_dim;
        for l in 0..self.n_layers {
            for h in 0..self.n_kv_heads {
                let s = self.offset(src, h, 0);
                let d = self.offset(dst, h, 0);
                self.k[l].copy_within(s..s + n_slots * hd, d);
                self.v[l].copy_within(s..s + n_slots * hd, d);
            }
        }
    }
}
