//! The reference attention, for any ISA and head size, in llama.cpp's arithmetic (see the
//! module doc): plain Rust, one value at a time. The AVX-512 kernel must equal it bit for
//! bit; other ISAs run it as is.

use super::lanes::{reduce16, softmax_lanes, LANES};
use super::{load_row_scalar, PagedKv, SumOrder};
use half::f16;

/// Accumulator sets of the single-query order (`ggml_vec_dot_f16`'s 4 vectors).
const SETS: usize = 4;

/// A dot product of `n` terms in `order`: `term(i)` gives the pair of factors of term i.
/// Batched: lane i % 16 sums terms i, i + 16, … by FMA, then [`reduce16`]. Single: set
/// (i / 16) % 4, lane i % 16, for the first `n & !63` terms, sets combined as
/// (s0 + s2) + (s1 + s3), [`reduce16`], then the remaining terms' f32 products added in f64.
fn dot(order: SumOrder, n: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    match order {
        SumOrder::Batched => {
            let mut lanes = [0f32; LANES];
            for i in 0..n {
                let (a, b) = term(i);
                lanes[i % LANES] = a.mul_add(b, lanes[i % LANES]);
            }
            reduce16(&lanes)
        }
        SumOrder::Single => {
            let np = n & !(SETS * LANES - 1);
            let mut s = [[0f32; LANES]; SETS];
            for i in 0..np {
                let (a, b) = term(i);
                let (j, l) = ((i / LANES) % SETS, i % LANES);
                s[j][l] = a.mul_add(b, s[j][l]);
            }
            let v: [f32; LANES] =
                std::array::from_fn(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]));
            let mut sum = reduce16(&v) as f64;
            for i in np..n {
                let (a, b) = term(i);
                sum += (a * b) as f64;
            }
            sum as f32
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn attend(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
    scale: f32,
    order: SumOrder,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (hd, bs, rb) = (kv.head_dim, kv.block_size, kv.row_bytes());
    // Scores, then every decoded K or V row of the context (kept: the value sums walk
    // positions in their own order).
    scratch.resize(n_q * n_ctx + n_ctx * hd, 0.0);
    let (scores, rows) = scratch.split_at_mut(n_q * n_ctx);
    let at = |j: usize| kv.row_offset(table[j / bs] as usize, j % bs);
    for (j, row) in rows.chunks_exact_mut(hd).enumerate() {
        let off = at(j);
        load_row_scalar(kv.format, &kv.k[off..off + rb], row);
    }
    for g in 0..n_q {
        let qg = &q[g * hd..(g + 1) * hd];
        for (j, row) in rows.chunks_exact(hd).enumerate() {
            scores[g * n_ctx + j] = dot(order, hd, |d| (qg[d], row[d])) * scale;
        }
    }
    for p in scores.chunks_exact_mut(n_ctx) {
        softmax_lanes(p);
        for v in p.iter_mut() {
            *v = f16::from_f32(*v).to_f32();
        }
    }
    for (j, row) in rows.chunks_exact_mut(hd).enumerate() {
        let off = at(j);
        load_row_scalar(kv.format, &kv.v[off..off + rb], row);
    }
    for g in 0..n_q {
        let p = &scores[g * n_ctx..(g + 1) * n_ctx];
        for d in 0..hd {
            // Zero weights past the context stand in for llama.cpp's masked cells: it
            // attends over the cache padded to KV_PAD cells (what decides which positions
            // the single order leaves to its f64 tail).
            let n = match order {
                SumOrder::Batched => n_ctx,
                SumOrder::Single => n_ctx.next_multiple_of(super::KV_PAD),
            };
            out[g * hd + d] = dot(order, n, |j| {
                if j < n_ctx {
                    (rows[j * hd + d], p[j])
                } else {
                    (0.0, 0.0)
                }
            });
        }
    }
}
