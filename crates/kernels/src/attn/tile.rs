//! Prefill attention on AVX-512: a tile of consecutive query tokens of one sequence (each
//! with the query heads that share one KV head) against that head's f16 cache, bit for
//! bit what [`super::attend_with`] gives each token alone in the batched order.
//!
//! The per-token kernel (`x86.rs`) decodes every key and value row once per token and
//! shares it among the group's 2-4 heads in registers; a 512-token prompt thus converts
//! each cached row ~256 times and keeps only a few accumulator chains busy. Here the
//! sequence's rows are converted to f32 once per layer ([`widen_512`], shared by all its
//! tiles), and each loaded row then feeds up to 8 queries (scores) or 6 × 64 output values
//! (weighted sum):
//!
//! - scores: for each block of 16 keys, 8 query rows at a time, one FMA chain per
//!   (query, key) over the row's 16-value chunks, then the 16 keys' lanes reduced
//!   together ([`super::x86::reduce16`]) and scaled: the batched order of the reference;
//! - the softmax of each query over the positions it sees ([`super::x86::softmax_512`]),
//!   its probabilities rounded to f16, zero past its own position;
//! - values: lane `l` of an output chunk sums positions `l, l + 16, …` by FMA, the lanes
//!   combined in `_mm512_reduce_add_ps`'s tree, as the reference does. A query shares its
//!   group's position range; the positions past its own weigh exactly +0 (an accumulator
//!   that starts at +0 never turns −0, and adding ±0 to it changes nothing), so every
//!   output is the reference's bits.

use super::x86::{lane_tree, reduce16, softmax_512};
use super::x86_f16::round_f16;
use super::PagedKv;
use crate::lines::{Kept, Lines};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Query rows per score block: 8 independent FMA chains cover the FMA latency (4 cycles)
/// at two FMAs a cycle, with the key row's 8 chunks (head size 128) in registers.
const SCORE_ROWS: usize = 8;

/// Query rows per value pass: 6 × 4 accumulators and 4 value chunks fill 28 of the 32
/// vector registers.
const VALUE_ROWS: usize = 6;

/// Output chunks (16 values each) per value pass.
const CB: usize = 4;

/// Keys per score block (the lanes [`reduce16`] sums at once).
const KB: usize = 16;

thread_local! {
    /// The tile's scores, then weights (`[query rows][positions padded to 16]`): per
    /// worker, reused.
    static SCORES: RefCell<Lines> = RefCell::new(Lines::default());
}

/// Converts positions `rows` of one head's f16 K and V rows to f32 rows (`k`, `v`: `[rows
/// .len()][head_dim]`), zero rows for positions at or past `n`.
///
/// # Safety
/// AVX-512 F and F16C must be present; both formats f16; `kv.check(table, 0, n)` must
/// have passed; `k` and `v` hold `rows.len() * head_dim` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn widen_512(
    kv: &PagedKv,
    table: &[u32],
    rows: std::ops::Range<usize>,
    n: usize,
    k: &mut [f32],
    v: &mut [f32],
) {
    let hd = kv.head_dim;
    let bs = kv.paging.block_size;
    let (kd, vd) = (k.as_mut_ptr(), v.as_mut_ptr());
    for (i, j) in rows.clone().enumerate().take_while(|&(_, j)| j < n) {
        let r = kv.row_index(table[j / bs] as usize, j % bs);
        let (kr, vr) = (
            kv.k.as_ptr().add(r * kv.k_row_bytes),
            kv.v.as_ptr().add(r * kv.v_row_bytes),
        );
        for c in 0..hd / 16 {
            let at = i * hd + c * 16;
            let (kh, vh) = (
                _mm256_loadu_si256(kr.add(c * 32) as *const __m256i),
                _mm256_loadu_si256(vr.add(c * 32) as *const __m256i),
            );
            _mm512_storeu_ps(kd.add(at), _mm512_cvtph_ps(kh));
            _mm512_storeu_ps(vd.add(at), _mm512_cvtph_ps(vh));
        }
    }
    let done = n.clamp(rows.start, rows.end) - rows.start;
    k[done * hd..].fill(0.0);
    v[done * hd..].fill(0.0);
}

/// Scores of `R` query rows (`q`, `[R][16 NC]`) against the 16 keys at `k` (`[16][16 NC]`):
/// `s[r * stride + key] = reduce16(chain over chunks) * scale`. The head size is a
/// constant so the chunk loop unrolls and every address is a fixed offset.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (key, row) index both the sums and the chains
unsafe fn score_block<const R: usize, const NC: usize>(
    k: *const f32,
    q: *const f32,
    vscale: __m512,
    s: *mut f32,
    stride: usize,
) {
    let hd = NC * 16;
    let mut sums = [[_mm512_setzero_ps(); KB]; R];
    for key in 0..KB {
        let row = k.add(key * hd);
        let kc: [__m512; NC] = std::array::from_fn(|c| _mm512_loadu_ps(row.add(c * 16)));
        let mut acc = [_mm512_setzero_ps(); R];
        for (c, kc) in kc.iter().enumerate() {
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(r * hd + c * 16)), *kc, *a);
            }
        }
        for r in 0..R {
            sums[r][key] = acc[r];
        }
    }
    for (r, v) in sums.iter().enumerate() {
        _mm512_storeu_ps(s.add(r * stride), _mm512_mul_ps(reduce16(v), vscale));
    }
}

/// `out[r] = Σ_j p[r * stride + j] · v_j` over positions `0..n` for `R` query rows, in the
/// reference's lanes and tree ([`lane_tree`], batched order).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn value_rows<const R: usize, const NC: usize>(
    v: *const f32,
    n: usize,
    p: *const f32,
    stride: usize,
    out: *mut f32,
) {
    let hd = NC * 16;
    for c0 in (0..NC).step_by(CB) {
        let mut lanes = [[[_mm512_setzero_ps(); CB]; R]; 16];
        for (l, lane) in lanes.iter_mut().enumerate().take(n) {
            let mut acc = [[_mm512_setzero_ps(); CB]; R];
            let mut j = l;
            while j < n {
                let row = v.add(j * hd + c0 * 16);
                let vc = [
                    _mm512_loadu_ps(row),
                    _mm512_loadu_ps(row.add(16)),
                    _mm512_loadu_ps(row.add(32)),
                    _mm512_loadu_ps(row.add(48)),
                ];
                for (r, a) in acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(*p.add(r * stride + j));
                    for cc in 0..CB {
                        a[cc] = _mm512_fmadd_ps(vc[cc], w, a[cc]);
                    }
                }
                j += 16;
            }
            *lane = acc;
        }
        for r in 0..R {
            for cc in 0..CB {
                let sum = lane_tree(&lanes, r, cc);
                _mm512_storeu_ps(out.add(r * hd + (c0 + cc) * 16), sum);
            }
        }
    }
}

/// Attention of `tile` (see [`super::QueryTile`]) over `rows` (the sequence's rows widened
/// by [`widen_512`]) into `out` (`[tokens][group][head_dim]`).
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C must be present; `head_dim` is 64, 128 or 256;
/// `rows` holds at least `(first_pos + tokens).next_multiple_of(16)` rows; `q` and `out`
/// hold `tokens * group * head_dim` values; `sinks`, if any, `group` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn attend_tile_512(rows: &super::WideRows, tile: &super::QueryTile, out: &mut [f32]) {
    match rows.head_dim {
        64 => tile_nc::<4>(rows, tile, out),
        128 => tile_nc::<8>(rows, tile, out),
        _ => tile_nc::<16>(rows, tile, out),
    }
}

#[inline(always)]
unsafe fn tile_nc<const NC: usize>(
    rows: &super::WideRows,
    tile: &super::QueryTile,
    out: &mut [f32],
) {
    let super::QueryTile {
        q,
        tokens,
        group,
        first_pos,
        scale,
        sinks,
    } = *tile;
    let hd = NC * 16;
    let n_max = first_pos + tokens;
    let npad = n_max.next_multiple_of(KB);
    let n_q = tokens * group;
    let mut s = Kept::take(&SCORES, n_q * npad);
    let (kp, vp, sp) = (rows.k.as_ptr(), rows.v.as_ptr(), s.as_mut_ptr());
    let vscale = _mm512_set1_ps(scale);
    // Scores: a block of keys is seen by the tokens at or after its first position.
    for j0 in (0..n_max).step_by(KB) {
        let mut r0 = j0.saturating_sub(first_pos) * group;
        while r0 < n_q {
            let (k, qr, s) = (
                kp.add(j0 * hd),
                q.as_ptr().add(r0 * hd),
                sp.add(r0 * npad + j0),
            );
            match (n_q - r0).min(SCORE_ROWS) {
                1 => score_block::<1, NC>(k, qr, vscale, s, npad),
                2 => score_block::<2, NC>(k, qr, vscale, s, npad),
                3 => score_block::<3, NC>(k, qr, vscale, s, npad),
                4 => score_block::<4, NC>(k, qr, vscale, s, npad),
                5 => score_block::<5, NC>(k, qr, vscale, s, npad),
                6 => score_block::<6, NC>(k, qr, vscale, s, npad),
                7 => score_block::<7, NC>(k, qr, vscale, s, npad),
                _ => score_block::<8, NC>(k, qr, vscale, s, npad),
            }
            r0 += SCORE_ROWS;
        }
    }
    // Each row's softmax over the positions its token sees; zero weight past them.
    for (r, p) in s[..n_q * npad].chunks_exact_mut(npad).enumerate() {
        let n = first_pos + r / group + 1;
        softmax_512(&mut p[..n], sinks.map(|s| s[r % group]));
        round_f16(&mut p[..n]);
        p[n..].fill(0.0);
    }
    // Values: a run of rows walks the positions its last row sees.
    let o = out.as_mut_ptr();
    let mut r0 = 0;
    while r0 < n_q {
        let m = (n_q - r0).min(VALUE_ROWS);
        let n = first_pos + (r0 + m - 1) / group + 1;
        let (p, op) = (s.as_ptr().add(r0 * npad), o.add(r0 * hd));
        match m {
            1 => value_rows::<1, NC>(vp, n, p, npad, op),
            2 => value_rows::<2, NC>(vp, n, p, npad, op),
            3 => value_rows::<3, NC>(vp, n, p, npad, op),
            4 => value_rows::<4, NC>(vp, n, p, npad, op),
            5 => value_rows::<5, NC>(vp, n, p, npad, op),
            _ => value_rows::<6, NC>(vp, n, p, npad, op),
        }
        r0 += VALUE_ROWS;
    }
}
