//! Causal grouped-query attention over the paged KV cache.
//!
//! Keys and values are read through each sequence's block table in place, in the cache's
//! storage format: nothing is gathered into a contiguous copy. One kernel call covers one
//! (token, KV head) pair and all the query heads that share that KV head, so each cached
//! key/value row is loaded and decoded once per group (GQA); the kernel itself is
//! [`folio_kernels::attn::attend_with`].

use crate::{ForwardBatch, KvCache};
use folio_kernels::attn;
use folio_kernels::lines::{release_above, Kept, Lines};
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

thread_local! {
    /// The tiled sequences' K and V rows in f32 ([`attn::widen`]), reused across layers
    /// and forwards (only the calling thread's: workers write disjoint parts).
    static WIDE: RefCell<Lines> = RefCell::new(Lines::default());
}

/// Bytes of widened rows a thread keeps from one forward to the next ([`end_forward`]):
/// the 1.5B's rows take 2 KB a position (2 KV heads, K and V, 128 f32 each), so prompts up
/// to 8k positions keep their buffer (below the 36 MB gate-up buffer a 512-token forward
/// keeps anyway); a longer one's copy (64 MB at 32k) is given back when its forward ends
/// rather than held for the life of the server.
const KEEP_WIDE_BYTES: usize = 16 << 20;

/// At a forward's end: gives the widened rows back to the allocator if a long context grew
/// them past [`KEEP_WIDE_BYTES`] (the next long prefill allocates them again, a small cost
/// beside its attention over that context).
pub(crate) fn end_forward() {
    release_above(&WIDE, KEEP_WIDE_BYTES);
}

/// Tokens per prefill tile ([`attn::attend_tile`]): each cached row is converted once per
/// tile and the tile's 8 × group query rows share it. Longer tiles spend more on the rows
/// past a token's own position (half a tile per token on average); 8 measured fastest of
/// 4, 8 and 16 on a 512-token prompt (Qwen2.5 1.5B, group 6).
const TILE_TOKENS: usize = 8;

/// The batch's tokens as `(first token, count)` runs: up to [`TILE_TOKENS`] tokens of one
/// sequence at consecutive positions, all in the batched order and seeing from position 0
/// (a prefill chunk inside the `window`, if any), or a lone token. Costliest first (the
/// last position a run sees), so the pool's tasks end together.
fn runs(
    batch: &ForwardBatch,
    token_pos: &[(usize, usize)],
    llama_orders: bool,
    window: Option<usize>,
) -> Vec<(usize, usize)> {
    let tiles = |(s, p): (usize, usize)| {
        (!llama_orders || p < batch.seqs[s].decode_from) && window.is_none_or(|w| p < w)
    };
    let mut runs = Vec::new();
    let mut t = 0;
    while t < token_pos.len() {
        let (s, p) = token_pos[t];
        let mut n = 1;
        while tiles((s, p))
            && n < TILE_TOKENS
            && t + n < token_pos.len()
            && token_pos[t + n] == (s, p + n)
            && tiles((s, p + n))
        {
            n += 1;
        }
        runs.push((t, n));
        t += n;
    }
    runs.sort_by_key(|&(t, n)| std::cmp::Reverse(token_pos[t].1 + n));
    runs
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
    // A window layer tiles the tokens its window does not cut yet (Gemma 3's 512).
    let tiled = softcap.is_none() && n_tokens >= 2 && attn::tile_supports(isa, &views[0]);
    if tiled {
        let runs = runs(batch, token_pos, llama_orders, window);
        if runs.iter().any(|&(_, n)| n > 1) {
            // Each tiled sequence's rows, widened to f32 once for all its tiles: per
            // sequence `(index, context length, first value in WIDE)`; per head, K then V.
            let mut seqs: Vec<(usize, usize, usize)> = Vec::new();
            for &(t, n) in runs.iter().filter(|&&(_, n)| n > 1) {
                let (s, p) = token_pos[t];
                match seqs.iter_mut().find(|e| e.0 == s) {
                    Some(e) => e.1 = e.1.max(p + n),
                    None => seqs.push((s, p + n, 0)),
                }
            }
            let mut total = 0;
            for e in &mut seqs {
                e.2 = total;
                total += 2 * n_kv_heads * e.1.next_multiple_of(16) * hd;
            }
            let mut wide = Kept::take(&WIDE, total);
            let wide_ptr = SyncPtr(wide.as_mut_ptr());
            // (sequence entry, head, first row): 64 rows per task.
            let pieces: Vec<(usize, usize, usize)> = seqs
                .iter()
                .enumerate()
                .flat_map(|(i, e)| {
                    let rows = e.1.next_multiple_of(16);
                    (0..n_kv_heads).flat_map(move |h| (0..rows).step_by(64).map(move |r| (i, h, r)))
                })
                .collect();
            pool.run(pieces.len(), &|i| {
                let (e, h, r0) = pieces[i];
                let (s, n, at) = seqs[e];
                let rows = n.next_multiple_of(16);
                let r1 = (r0 + 64).min(rows);
                let k_at = at + 2 * h * rows * hd;
                // SAFETY: rows r0..r1 of head h's K and V regions are this task's alone.
                let (k, v) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(
                            wide_ptr.get().add(k_at + r0 * hd),
                            (r1 - r0) * hd,
                        ),
                        std::slice::from_raw_parts_mut(
                            wide_ptr.get().add(k_at + (rows + r0) * hd),
                            (r1 - r0) * hd,
                        ),
                    )
                };
                let table = batch.seqs[s].table(page_group);
                attn::widen(isa, &views[h], table, r0..r1, n, k, v);
            });
            let wide_rows = |s: usize, h: usize| {
                let &(_, n, at) = seqs.iter().find(|e| e.0 == s).expect("a tiled sequence");
                let rows = n.next_multiple_of(16) * hd;
                let k_at = at + 2 * h * rows;
                attn::WideRows {
                    k: &wide[k_at..k_at + rows],
                    v: &wide[k_at + rows..k_at + 2 * rows],
                    head_dim: hd,
                }
            };
            let tile_task = |t0: usize, n: usize, h: usize| {
                let (seq_idx, first_pos) = token_pos[t0];
                SCRATCH.with(|s| {
                    let (qbuf, obuf) = &mut *s.borrow_mut();
                    qbuf.clear();
                    for t in t0..t0 + n {
                        let first = t * n_heads * hd + h * group * hd;
                        qbuf.extend_from_slice(&q[first..first + group * hd]);
                    }
                    if let Some(f) = q_round {
                        attn::round_queries(f, hd, qbuf);
                    }
                    obuf.resize(qbuf.len(), 0.0);
                    let tile = attn::QueryTile {
                        q: qbuf,
                        tokens: n,
                        group,
                        first_pos,
                        scale,
                        sinks: sinks.map(|s| &s[h * group..(h + 1) * group]),
                    };
                    attn::attend_tile(isa, &wide_rows(seq_idx, h), &tile, obuf);
                    for (i, o) in obuf.chunks_exact(group * hd).enumerate() {
                        let first = (t0 + i) * n_heads * hd + h * group * hd;
                        // SAFETY: token t0 + i's heads h*group .. (h+1)*group are this
                        // task's alone (runs cover each token once).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                o.as_ptr(),
                                out_ptr.get().add(first),
                                group * hd,
                            )
                        };
                    }
                });
            };
            // A tile per KV head; a lone token walks its heads in one task (see below).
            let tasks: Vec<(usize, usize, Option<usize>)> = runs
                .iter()
                .flat_map(|&(t, n)| {
                    let heads = if n > 1 { n_kv_heads } else { 1 };
                    (0..heads).map(move |h| (t, n, (n > 1).then_some(h)))
                })
                .collect();
            pool.run(tasks.len(), &|i| match tasks[i] {
                (t, n, Some(h)) => tile_task(t, n, h),
                (t, _, None) => (0..n_kv_heads).for_each(|h| task(t, h)),
            });
            return;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeqSpan;

    /// A forward's end keeps the widened rows of a short context and gives back those of
    /// a long one.
    #[test]
    fn a_forward_end_gives_back_only_a_long_contexts_rows() {
        let floats = KEEP_WIDE_BYTES / std::mem::size_of::<f32>();
        WIDE.with(|w| w.borrow_mut().set_len(floats));
        end_forward();
        assert_eq!(WIDE.with(|w| w.borrow().capacity()), floats);
        WIDE.with(|w| w.borrow_mut().set_len(floats + 16));
        end_forward();
        assert_eq!(WIDE.with(|w| w.borrow().capacity()), 0);
    }

    /// Runs split a prefill chunk into tiles of [`TILE_TOKENS`], keep a decode token alone,
    /// stop at a llama-numerics sequence's first decoded position and where a window starts
    /// to cut, and come costliest first.
    #[test]
    fn runs_tile_prefill_chunks_and_leave_decode_tokens_alone() {
        let mut b = ForwardBatch::new();
        b.push(&[1; 11], 3, vec![0], 1); // tokens 0..11, positions 3..14
        b.push(&[1], 40, vec![1], 1); // token 11: a decode step
        b.push(&[1; 2], 0, vec![2], 1); // tokens 12..14, positions 0..2
        let span = SeqSpan {
            pos: 3,
            tables: vec![vec![3]],
            n_logits: 1,
            decode_from: 5,
            ..SeqSpan::default()
        };
        b.push_seq(&[1; 4], span); // tokens 14..18, positions 3..7, decoded from 5 on
        let token_pos: Vec<(usize, usize)> = b
            .seqs
            .iter()
            .enumerate()
            .flat_map(|(s, sp)| (0..sp.len).map(move |i| (s, sp.pos + i)))
            .collect();
        assert_eq!(
            runs(&b, &token_pos, false, None),
            [(11, 1), (8, 3), (0, 8), (14, 4), (12, 2)]
        );
        assert_eq!(
            runs(&b, &token_pos, true, None),
            [(11, 1), (8, 3), (0, 8), (17, 1), (16, 1), (14, 2), (12, 2)]
        );
        // A window of 6: positions 6 and on see from past 0, and go alone.
        assert_eq!(
            runs(&b, &token_pos, false, Some(6)),
            [
                (11, 1),
                (10, 1),
                (9, 1),
                (8, 1),
                (7, 1),
                (6, 1),
                (5, 1),
                (4, 1),
                (3, 1),
                (17, 1),
                (0, 3),
                (14, 3),
                (12, 2)
            ]
        );
    }
}
