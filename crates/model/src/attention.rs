//! Causal grouped-query attention over the paged KV cache.
//!
//! Keys and values are read through each sequence's block table in place: nothing is
//! gathered into a contiguous copy. One task covers one (token, KV head) pair and all the
//! query heads that share that KV head, so each cached key/value row is loaded once per
//! group (GQA).

use crate::{ForwardBatch, KvCache};
use folio_kernels::ops;
use folio_kernels::pool::ThreadPool;
use std::cell::RefCell;

/// A raw pointer that tasks writing disjoint regions may share.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(pub *mut f32);
// SAFETY: every task writes a region no other task touches (see callers).
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// A method (not field access) so closures capture the whole `Sync` wrapper.
    #[inline]
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Shapes the attention kernel needs.
#[derive(Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// `q`: [n_tokens][n_heads·hd] (RoPE applied); the layer's K/V for every new token must
/// already be in `kv`. Writes `out`: [n_tokens][n_heads·hd].
pub fn attention(
    batch: &ForwardBatch,
    token_pos: &[(usize, usize)],
    kv: &KvCache,
    layer: usize,
    shape: AttnShape,
    q: &[f32],
    out: &mut [f32],
    pool: &ThreadPool,
) {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim: hd,
    } = shape;
    let group = n_heads / n_kv_heads;
    let n_tokens = batch.n_tokens();
    let (kc, vc) = kv.layer(layer);
    let scale = 1.0 / (hd as f32).sqrt();
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let bs = kv.block_size;
    let task = |task: usize| {
        let (t, h) = (task / n_kv_heads, task % n_kv_heads);
        let (seq_idx, pos) = token_pos[t];
        let table = &batch.seqs[seq_idx].block_table;
        let ctx = pos + 1;
        SCORES.with(|s| {
            let mut scores = s.borrow_mut();
            scores.resize(ctx * group + group * hd, 0.0);
            let (scores, qbuf) = scores.split_at_mut(ctx * group);
            // NOTE: llama.cpp multiplies an f16 K cache with Q converted to f16 (and the
            // softmax weights converted to f16 against V). Rounding the same way keeps
            // greedy outputs on the same side of close calls.
            for g in 0..group {
                let src = &q[t * n_heads * hd + (h * group + g) * hd..][..hd];
                for (d, &v) in qbuf[g * hd..(g + 1) * hd].iter_mut().zip(src) {
                    *d = half::f16::from_f32(v).to_f32();
                }
            }
            // Scores for each query head of the group, position-major per head.
            for j in 0..ctx {
                let off = kv.offset(table[j / bs] as usize, h, j % bs);
                let krow = &kc[off..off + hd];
                for g in 0..group {
                    let qh = &qbuf[g * hd..(g + 1) * hd];
                    scores[g * ctx + j] = ops::dot_f16(qh, krow) * scale;
                }
            }
            for g in 0..group {
                let sc = &mut scores[g * ctx..(g + 1) * ctx];
                ops::softmax_inplace(sc);
                for p in sc.iter_mut() {
                    *p = half::f16::from_f32(*p).to_f32();
                }
                // SAFETY: (t, head h*group+g) regions are disjoint across tasks.
                let o = unsafe {
                    std::slice::from_raw_parts_mut(
                        out_ptr.get().add(t * n_heads * hd + (h * group + g) * hd),
                        hd,
                    )
                };
                o.fill(0.0);
                for (j, &p) in sc.iter().enumerate() {
                    let off = kv.offset(table[j / bs] as usize, h, j % bs);
                    ops::axpy_f16(p, &vc[off..off + hd], o);
                }
            }
        });
    };
    pool.run(n_tokens * n_kv_heads, &task);
}
