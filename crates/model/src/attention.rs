//! Causal grouped-query attention over the paged KV cache.
//!
//! Keys and values are read through each sequence's block table in place, in the cache's
//! storage format: nothing is gathered into a contiguous copy. One kernel call covers one
//! (token, KV head) pair and all the query heads that share that KV head, so each cached
//! key/value row is loaded and decoded once per group (GQA); the kernel itself is
//! [`folio_kernels::attn::attend_with`].

use crate::{ForwardBatch, KvCache};
use folio_kernels::attn;
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
    /// Per-worker scratch: the group's f16-rounded queries, then the kernel's scores (and,
    /// on the reference path, the decoded K/V rows of the context).
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Shapes the attention kernel needs.
#[derive(Clone, Copy)]
pub struct AttnShape<'a> {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Score scale (`ModelConfig::attn_scale`).
    pub scale: f32,
    /// Tokens a query sees, itself included, in a sliding-window layer; `None`: all.
    pub window: Option<usize>,
    /// Attention logit soft-capping (`ModelConfig::attn_softcap`).
    pub softcap: Option<f32>,
    /// The format whose precision the queries are rounded to before the kernel (compute
    /// precision, [`crate::AttnPrecision`]); `None`: f32 queries.
    pub q_round: Option<folio_kernels::attn::KvFormat>,
    /// GPT-OSS's attention sinks: one logit per query head (`n_heads`), in each head's
    /// softmax denominator; `None`: no sinks.
    pub sinks: Option<&'a [f32]>,
}

/// `q`: [n_tokens][n_heads·hd] (RoPE applied); the layer's K/V for every new token must
/// already be in `kv`. Writes `out`: [n_tokens][n_heads·hd]. `llama_orders`: decoded tokens
/// (from `SeqSpan::decode_from` on) sum in llama.cpp's lone-query order, else every token
/// in the batched one.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    batch: &ForwardBatch,
    token_pos: &[(usize, usize)],
    kv: &KvCache,
    layer: usize,
    shape: AttnShape<'_>,
    llama_orders: bool,
    q: &[f32],
    out: &mut [f32],
    pool: &ThreadPool,
) {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim: hd,
        scale,
        window,
        softcap,
        q_round,
        sinks,
    } = shape;
    let group = n_heads / n_kv_heads;
    let n_tokens = batch.n_tokens();
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let isa = folio_kernels::cpu::isa();
    let views: Vec<attn::PagedKv> = (0..n_kv_heads).map(|h| kv.head_view(layer, h)).collect();
    let page_group = kv.layout.group(layer);
    let task = |t: usize, h: usize| {
        let (seq_idx, pos) = token_pos[t];
        let table = batch.seqs[seq_idx].table(page_group);
        let first = t * n_heads * hd + h * group * hd;
        SCRATCH.with(|s| {
            let (qbuf, scores) = &mut *s.borrow_mut();
            // NOTE: llama.cpp multiplies an f16 K cache with Q converted to f16 (and the
            // softmax weights converted to f16 against V). Rounding the same way (the
            // default, `q_round` = f16) keeps greedy outputs on the same side of close calls.
            qbuf.clear();
            qbuf.extend_from_slice(&q[first..first + group * hd]);
            if let Some(f) = q_round {
                attn::round_queries(f, hd, qbuf);
            }
            // SAFETY: the (t, heads h*group .. (h+1)*group) region is this task's alone.
            let o = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(first), group * hd) };
            let order = if llama_orders && pos >= batch.seqs[seq_idx].decode_from {
                attn::SumOrder::Single
            } else {
                attn::SumOrder::Batched
            };
            let qs = attn::Queries {
                q: qbuf,
                n: group,
                scale,
                order,
                first: window.map_or(0, |w| (pos + 1).saturating_sub(w)),
                softcap,
                sinks: sinks.map(|s| &s[h * group..(h + 1) * group]),
            };
            attn::attend_with(isa, &views[h], table, pos + 1, &qs, scores, o);
        });
    };
    // One task per token when there are enough tokens to keep every thread busy: it walks
    // all KV heads of a sequence, so each cache block's heads (adjacent in memory) are read
    // by one core in turn instead of in three pieces by different cores (measured ~13%
    // faster at 16 sequences x 256 tokens). Few tokens (a lone decode): a task per head.
    if n_tokens >= 2 * pool.n_threads() {
        pool.run(n_tokens, &|t| (0..n_kv_heads).for_each(|h| task(t, h)));
    } else {
        pool.run(n_tokens * n_kv_heads, &|i| {
            task(i / n_kv_heads, i % n_kv_heads)
        });
    }
}
