//! The reference attention, for any ISA and head size, in llama.cpp's arithmetic (see the
//! module doc): plain Rust, one value at a time. The AVX-512 and AVX2 kernels must equal it
//! bit for bit; cases they do not cover run it as is.

use super::lanes::{reduce16, softmax_lanes_sink, LANES};
use super::{load_row_scalar, PagedKv, Queries, SumOrder};
use half::f16;

/// Accumulator sets of the single-query order (`ggml_vec_dot_f16`'s 4 vectors).
const SETS: usize = 4;

/// `a · b` in `order`. Batched: lane i % 16 sums terms i, i + 16, … by FMA, then
/// [`reduce16`]. Single: set (i / 16) % 4, lane i % 16, for the first `n & !63` terms, sets
/// combined as (s0 + s2) + (s1 + s3), [`reduce16`], then the remaining terms' f32 products
/// added in f64. (Written chunk by chunk so the lane loops vectorize.)
#[inline(always)]
fn dot(order: SumOrder, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = match order {
        SumOrder::Batched => n.next_multiple_of(LANES),
        SumOrder::Single => n & !(SETS * LANES - 1),
    };
    let mut s = [[0f32; LANES]; SETS];
    for (c, (ac, bc)) in a.chunks(LANES).zip(b.chunks(LANES)).enumerate() {
        if c * LANES >= np {
            break;
        }
        let set = match order {
            SumOrder::Batched => 0,
            SumOrder::Single => c % SETS,
        };
        for ((acc, &x), &y) in s[set].iter_mut().zip(ac).zip(bc) {
            *acc = x.mul_add(y, *acc);
        }
    }
    match order {
        SumOrder::Batched => reduce16(&s[0]),
        SumOrder::Single => {
            let v: [f32; LANES] =
                std::array::from_fn(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]));
            let mut sum = reduce16(&v) as f64;
            for i in np..n {
                sum += (a[i] * b[i]) as f64;
            }
            sum as f32
        }
    }
}

/// [`attend`] compiled with AVX2 and FMA enabled, so its lane loops vectorize and its
/// `mul_add`s are single instructions (the same IEEE operations, the same bits).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn attend_avx2(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    attend(kv, table, n_ctx, qs, scratch, out)
}

#[inline(always)]
pub fn attend(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let Queries {
        q,
        n: n_q,
        scale,
        order,
        first,
        softcap,
        ..
    } = *qs;
    let (hd, bs) = (kv.head_dim, kv.paging.block_size);
    let (krb, vrb) = (kv.k_row_bytes, kv.v_row_bytes);
    // llama.cpp's lanes, sets and softmax chunks follow the cache cell, i.e. the absolute
    // position: below, j counts from `base`, the visible range's start rounded down to a
    // whole set of lanes; the `lead` positions before `first` are masked (score −∞,
    // probability 0) and their rows are never read.
    let lead = first % (SETS * LANES);
    let base = first - lead;
    let n_ctx = n_ctx - base;
    // Scores, then every decoded K row of the context.
    scratch.resize(n_q * n_ctx + n_ctx * hd, 0.0);
    let (scores, rows) = scratch.split_at_mut(n_q * n_ctx);
    // Row index of position base + j (in K and V alike).
    let at = |j: usize| {
        let p = base + j;
        let (block, row) = folio_core::kv::page(table, p, bs);
        kv.row_index(block, row)
    };
    for (j, row) in rows.chunks_exact_mut(hd).enumerate().skip(lead) {
        let off = at(j) * krb;
        load_row_scalar(kv.k_format, &kv.k[off..off + krb], row);
    }
    for g in 0..n_q {
        let qg = &q[g * hd..(g + 1) * hd];
        for (j, row) in rows.chunks_exact(hd).enumerate() {
            scores[g * n_ctx + j] = match j < lead {
                true => f32::NEG_INFINITY,
                false => dot(order, qg, row) * scale,
            };
        }
    }
    for (g, p) in scores.chunks_exact_mut(n_ctx).enumerate() {
        // (The cap acts on scores; the mask after it, as in ggml.)
        super::softcap_scores(&mut p[lead..], softcap);
        softmax_lanes_sink(p, qs.sink(g));
        for v in p.iter_mut() {
            *v = f16::from_f32(*v).to_f32();
        }
    }
    // Values: position by position (rows read in order), each weighted row added to its
    // (set, lane) accumulator of every output value; then sets and lanes combined as the
    // dot products in `dot` combine them, and the single order's tail added in f64.
    let (sets, n_lanes_pos) = match order {
        SumOrder::Batched => (1, n_ctx),
        SumOrder::Single => (SETS, n_ctx.min(n_ctx.next_multiple_of(super::KV_PAD) & !63)),
    };
    let width = sets * LANES * hd;
    let mut acc = vec![0f32; n_q * width];
    let mut v = vec![0f32; hd];
    for j in lead..n_lanes_pos {
        let off = at(j) * vrb;
        load_row_scalar(kv.v_format, &kv.v[off..off + vrb], &mut v);
        for g in 0..n_q {
            let w = scores[g * n_ctx + j];
            let set = if sets == 1 { 0 } else { (j / LANES) % SETS };
            let a = &mut acc[g * width + (set * LANES + j % LANES) * hd..][..hd];
            for (a, &x) in a.iter_mut().zip(&v) {
                *a = x.mul_add(w, *a);
            }
        }
    }
    let mut sums = vec![0f64; n_q * hd];
    // (Plain loops: closures would not inherit `attend_avx2`'s target features.)
    let mut lanes = [0f32; LANES];
    for g in 0..n_q {
        let a = &acc[g * width..(g + 1) * width];
        for d in 0..hd {
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = if sets == 1 {
                    a[l * hd + d]
                } else {
                    let s = |set: usize| a[(set * LANES + l) * hd + d];
                    (s(0) + s(2)) + (s(1) + s(3))
                };
            }
            sums[g * hd + d] = reduce16(&lanes) as f64;
        }
    }
    // The f64 tail, position by position onto the lane sum (`ggml_vec_dot_f16`'s order).
    for j in n_lanes_pos.max(lead)..n_ctx {
        let off = at(j) * vrb;
        load_row_scalar(kv.v_format, &kv.v[off..off + vrb], &mut v);
        for g in 0..n_q {
            let w = scores[g * n_ctx + j];
            for (s, &x) in sums[g * hd..(g + 1) * hd].iter_mut().zip(&v) {
                *s += (x * w) as f64;
            }
        }
    }
    for (o, s) in out.iter_mut().zip(&sums) {
        *o = *s as f32;
    }
}
