//! Activation quantization to 8-bit blocks of 32 (ggml's q8_1 numerics).
//!
//! Per scale span (one block of 32 values, or the 8 blocks of a 256-value superblock for
//! the K-quant weights, as ggml's Q8_K): `d = amax / 127` (kept as f16, as ggml stores it;
//! per superblock ggml's f32 `1 / iscale`), `q = round_ties_even(x · 127/amax)` (exactly as
//! ggml computes it); per block of 32 the
//! sum of the codes `isum` (for the min / offset term of the weight formats) plus `s = d *
//! isum`, and the sums per group of 4 codes (`gsum`, the offset term of ggml's lane-wise
//! dot products). Every ISA computes the same bits: rounding is ties-to-even everywhere
//! (the SIMD conversion's default mode) and amax/sums are exact.

use crate::cpu::Isa;
use crate::ops::{gate_up_row, Activation};
use crate::pool::{SendPtr, ThreadPool};
use std::borrow::Cow;
use std::cell::RefCell;

/// Values per quantization block.
pub const QK: usize = 32;

/// Values per lane group: one `vpdpbusd` lane sums 4 products, and ggml's dot products keep
/// one float accumulator per such group (see `matmul::kernel`).
pub const GROUP: usize = 4;

/// Code sums beyond the per-block ones that a weight layout reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraSums {
    /// Per group of [`GROUP`] (ggml's lane order on symmetric layouts).
    pub groups: bool,
    /// Per 16 values (types with 16-value scales).
    pub halves: bool,
    /// One scale per [`SUPER`] values instead of per [`QK`] (the block scales repeat it),
    /// plus the block sums as i16 pairs ([`QuantizedActs::isum_pairs`]): the weight types
    /// whose kernels sum a whole superblock in integers (`SbType::int_superblock`).
    pub superblock: bool,
}

/// Values per scale in [`ExtraSums::superblock`] quantization (ggml's `QK_K`).
pub const SUPER: usize = 256;

/// The f32 rows a matmul multiplies.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// `n` rows of `cols` values.
    Rows(&'a [f32]),
    /// `n` rows of an FFN's `[gate | up]` (`2 * cols` values each): row `t` is
    /// `act(gate) * up`, computed as it is quantized ([`QuantizedActs::quantize`]).
    Gated(&'a [f32], Activation),
}

impl<'a> Input<'a> {
    /// # Panics
    /// Unless the input holds `n` rows of `cols` values (caller bugs).
    pub fn check(&self, n: usize, cols: usize) {
        match self {
            Input::Rows(x) => {
                assert_eq!(x.len(), n * cols, "x.len() must be n * cols = {n} * {cols}")
            }
            Input::Gated(gu, _) => assert_eq!(
                gu.len(),
                n * 2 * cols,
                "gate-up rows must be n * 2 * cols = {n} * 2 * {cols}"
            ),
        }
    }

    /// The `n` rows of `cols` values themselves (computed for a gated input), for the
    /// kernels that read f32 rows.
    pub fn rows(self, n: usize, cols: usize) -> Cow<'a, [f32]> {
        self.check(n, cols);
        match self {
            Input::Rows(x) => Cow::Borrowed(x),
            Input::Gated(gu, act) => {
                let mut x = vec![0f32; n * cols];
                for (t, row) in x.chunks_exact_mut(cols).enumerate() {
                    act.apply_row(gu, t, row);
                }
                Cow::Owned(x)
            }
        }
    }
}

/// Values of a gated input's row activated and quantized at a time (rounded down to whole
/// scale spans): the piece's gate and up halves and its activated values (24 KiB) stay in
/// L1 between the activation and the two passes of the quantization (the row's extreme,
/// then its codes), where a whole row (the 1.5B's 8,960 values, 35 KiB a half) did not.
const GATED_PIECE: usize = 2048;

thread_local! {
    /// One activated piece of a gated input's row ([`GATED_PIECE`]), reused across calls.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `n` rows of `cols` activations quantized to blocks of [`QK`]; reused across calls so the
/// hot path does not allocate once it has grown to the largest batch.
#[derive(Default, Debug, Clone)]
pub struct QuantizedActs {
    n: usize,
    cols: usize,
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    isum: Vec<i32>,
    /// `isum` as f32 (exact: |isum| ≤ 32 · 127): the min term's factor, read by the
    /// kernels with a broadcast load instead of a broadcast and a conversion per row and
    /// block.
    fsum: Vec<f32>,
    /// Sums of the codes per group of 4 (8 per block): the offset term of the symmetric
    /// weight formats, taken per `vpdpbusd` lane group as ggml's dot products do.
    gsum: Vec<i32>,
    /// Sums of the codes per 16 (2 per block): the offset and min terms of the weight types
    /// whose scales cover 16 values (Q2_K, Q3_K, Q6_K).
    hsum: Vec<i32>,
    /// Block sums of blocks `2p` and `2p + 1` as the low and high i16 of one i32 (exact:
    /// |isum| ≤ 32 · 127): one `vpdpwssd` operand of the superblock min term.
    ipair: Vec<i32>,
    /// Whether the last quantization was [`ExtraSums::superblock`].
    superblock: bool,
}

impl QuantizedActs {
    /// An empty buffer.
    pub fn new() -> QuantizedActs {
        QuantizedActs::default()
    }

    /// Rows held.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Values per row (a multiple of [`QK`]).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// All codes, row-major (`n * cols`).
    pub fn codes(&self) -> &[i8] {
        &self.q[..self.n * self.cols]
    }

    /// Block scales `d`, row-major (`n * cols / 32`).
    pub fn scales(&self) -> &[f32] {
        &self.d[..self.n * self.cols / QK]
    }

    /// `d * isum` per block (the factor of a weight block's min `m`).
    pub fn sums(&self) -> &[f32] {
        &self.s[..self.n * self.cols / QK]
    }

    /// Exact integer sums of the codes per block.
    pub fn isums(&self) -> &[i32] {
        &self.isum[..self.n * self.cols / QK]
    }

    /// [`QuantizedActs::isums`] as f32 (exactly).
    pub fn isums_f32(&self) -> &[f32] {
        &self.fsum[..self.n * self.cols / QK]
    }

    /// Exact integer sums of the codes per group of [`GROUP`] (`n * cols / 4`).
    pub fn group_sums(&self) -> &[i32] {
        &self.gsum[..self.n * self.cols / GROUP]
    }

    /// Exact integer sums of the codes per 16 values (`n * cols / 16`).
    pub fn half_sums(&self) -> &[i32] {
        &self.hsum[..self.n * self.cols / 16]
    }

    /// [`QuantizedActs::isums`] of blocks `2p`, `2p + 1` packed as i16 pairs (`n * cols /
    /// 64`; filled by [`ExtraSums::superblock`] quantization only).
    pub fn isum_pairs(&self) -> &[i32] {
        if self.superblock {
            &self.ipair[..self.n * self.cols / 64]
        } else {
            &[]
        }
    }

    /// Whether one scale covers [`SUPER`] values ([`ExtraSums::superblock`]).
    pub fn superblock(&self) -> bool {
        self.superblock
    }

    /// Quantizes `x` (`n` rows of `cols`) with `isa` (clamped to what the CPU has), spreading
    /// rows over `pool` when the batch is big enough to repay the hand-off. The group sums
    /// ([`QuantizedActs::group_sums`]) and 16-sums ([`QuantizedActs::half_sums`]) are
    /// computed only when `extra` asks for them. A gated input is activated a piece of a row
    /// at a time ([`GATED_PIECE`]) into a thread's scratch buffer and quantized from there:
    /// the same bits as quantizing the activated rows, without writing them all out in f32
    /// and reading them back.
    ///
    /// # Panics
    /// If `cols` is not a multiple of 32 or `x` does not hold `n` rows of `cols` (caller
    /// bugs).
    pub fn quantize(
        &mut self,
        isa: Isa,
        x: Input<'_>,
        n: usize,
        cols: usize,
        extra: ExtraSums,
        pool: &ThreadPool,
    ) {
        let ExtraSums {
            groups: group_sums,
            halves: half_sums,
            superblock,
        } = extra;
        let span = if superblock { SUPER } else { QK };
        assert!(
            cols.is_multiple_of(span),
            "cols = {cols} must be a multiple of {span}"
        );
        let shared = span / QK;
        x.check(n, cols);
        let nb = cols / QK;
        if self.q.len() < n * cols {
            self.q.resize(n * cols, 0);
        }
        if self.gsum.len() < n * cols / GROUP {
            self.gsum.resize(n * cols / GROUP, 0);
        }
        if half_sums && self.hsum.len() < n * cols / 16 {
            self.hsum.resize(n * cols / 16, 0);
        }
        if superblock && self.ipair.len() < n * cols / 64 {
            self.ipair.resize(n * cols / 64, 0);
        }
        if self.d.len() < n * nb {
            self.d.resize(n * nb, 0.0);
            self.s.resize(n * nb, 0.0);
            self.isum.resize(n * nb, 0);
            self.fsum.resize(n * nb, 0.0);
        }
        self.n = n;
        self.cols = cols;
        self.superblock = superblock;
        let isa = isa.clamp();
        let (q, d, s, is, gs, hs) = (
            SendPtr(self.q.as_mut_ptr()),
            SendPtr(self.d.as_mut_ptr()),
            SendPtr(self.s.as_mut_ptr()),
            SendPtr(self.isum.as_mut_ptr()),
            SendPtr(self.gsum.as_mut_ptr()),
            SendPtr(self.hsum.as_mut_ptr()),
        );
        let (fs, ip) = (
            SendPtr(self.fsum.as_mut_ptr()),
            SendPtr(self.ipair.as_mut_ptr()),
        );
        // Rows r0..r1 of every buffer.
        let rows = |r0: usize, r1: usize| {
            let m = r1 - r0;
            // SAFETY: a call writes only rows r0..r1, disjoint from every other call's; the
            // buffers were sized above and outlive the calls.
            let (q, d, s, is, fs) = unsafe {
                (
                    std::slice::from_raw_parts_mut(q.get().add(r0 * cols), m * cols),
                    std::slice::from_raw_parts_mut(d.get().add(r0 * nb), m * nb),
                    std::slice::from_raw_parts_mut(s.get().add(r0 * nb), m * nb),
                    std::slice::from_raw_parts_mut(is.get().add(r0 * nb), m * nb),
                    std::slice::from_raw_parts_mut(fs.get().add(r0 * nb), m * nb),
                )
            };
            match x {
                Input::Rows(x) => {
                    quantize_blocks(isa, shared, &x[r0 * cols..r1 * cols], q, d, s, is)
                }
                Input::Gated(gu, act) => SCRATCH.with(|cell| {
                    let mut buf = cell.borrow_mut();
                    let piece = (GATED_PIECE / span).max(1) * span;
                    buf.resize(piece.min(cols), 0.0);
                    for t in 0..m {
                        let (g, u) = gate_up_row(gu, r0 + t, cols);
                        for c0 in (0..cols).step_by(piece) {
                            let c1 = (c0 + piece).min(cols);
                            let x = &mut buf[..c1 - c0];
                            act.apply(&g[c0..c1], &u[c0..c1], x);
                            let bq = t * cols + c0..t * cols + c1;
                            let bd = t * nb + c0 / QK..t * nb + c1 / QK;
                            let (qt, dt) = (&mut q[bq], &mut d[bd.clone()]);
                            let (st, it) = (&mut s[bd.clone()], &mut is[bd]);
                            quantize_blocks(isa, shared, x, qt, dt, st, it);
                        }
                    }
                }),
            }
            for (f, i) in fs.iter_mut().zip(&*is) {
                *f = *i as f32;
            }
            if superblock {
                // SAFETY: as above, rows r0..r1 only (a row holds a whole number of pairs:
                // `cols` is a multiple of `SUPER`).
                let ip = unsafe {
                    std::slice::from_raw_parts_mut(ip.get().add(r0 * nb / 2), m * nb / 2)
                };
                for (p, i) in ip.iter_mut().zip(is.chunks_exact(2)) {
                    *p = (i[0] as u16 as u32 | (i[1] as u32) << 16) as i32;
                }
            }
            if half_sums {
                // SAFETY: as above, rows r0..r1 only.
                let hs = unsafe {
                    std::slice::from_raw_parts_mut(hs.get().add(r0 * cols / 16), m * cols / 16)
                };
                fill_sums(q, hs, 16);
            }
            if group_sums {
                // SAFETY: as above, rows r0..r1 only.
                let gs = unsafe {
                    std::slice::from_raw_parts_mut(
                        gs.get().add(r0 * cols / GROUP),
                        m * cols / GROUP,
                    )
                };
                fill_group_sums(q, gs);
            }
        };
        // Below ~16K values the hand-off costs more than the work.
        let threads = pool.n_threads();
        if threads == 1 || n * cols < 16 * 1024 || n < 2 {
            rows(0, n);
        } else {
            let n_tasks = n.min(threads * 4);
            let per = n.div_ceil(n_tasks);
            pool.run(n_tasks, &|t| {
                let (r0, r1) = ((t * per).min(n), ((t + 1) * per).min(n));
                if r0 < r1 {
                    rows(r0, r1);
                }
            });
        }
    }
}

/// `gsum[g] = q[4g] + … + q[4g + 3]`.
fn fill_group_sums(q: &[i8], gsum: &mut [i32]) {
    fill_sums(q, gsum, GROUP)
}

/// `sums[g] = q[w g] + … + q[w g + w - 1]`.
fn fill_sums(q: &[i8], sums: &mut [i32], w: usize) {
    for (g, c) in sums.iter_mut().zip(q.chunks_exact(w)) {
        *g = c.iter().map(|&v| v as i32).sum();
    }
}

/// Quantizes consecutive blocks of 32: `x.len() == q.len() == 32 * d.len()`, `per`
/// consecutive blocks sharing one scale (1, or 8 for a superblock).
pub fn quantize_blocks(
    isa: Isa,
    per: usize,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    isum: &mut [i32],
) {
    let nb = d.len();
    assert!(
        x.len() == nb * QK
            && q.len() == nb * QK
            && s.len() == nb
            && isum.len() == nb
            && per > 0
            && nb.is_multiple_of(per),
        "quantize_blocks: inconsistent buffer lengths"
    );
    match isa.clamp() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: clamp() guarantees the CPU has the features.
        Isa::Avx512 => unsafe { simd::quantize_avx512(per, x, q, d, s, isum) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { simd::quantize_avx2(per, x, q, d, s, isum) },
        _ => quantize_scalar(per, x, q, d, s, isum),
    }
}

/// Rounds through f16 as ggml stores `d` and `s` in its q8_0/q8_1 blocks.
///
/// NOTE: matching llama.cpp's bits here is what keeps greedy outputs identical to its: this
/// model's logits move by tenths of a nat when activation scales shift by 2^-11.
#[inline]
pub fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// The code multiplier `id = 127 / amax` and the scale `d` (before any rounding) of a
/// scale span whose largest magnitude is `amax`: per 32 values `d = amax / 127`, as ggml's
/// q8_0/q8_1 blocks; per superblock (`per > 1`) ggml's Q8_K scale, `d = 1 / iscale` with
/// `iscale = -127 / max` (`max` the signed extreme), the same magnitude as `id`, so these
/// codes are ggml's up to a sign that `d` carries back: `d · q` is ggml's product bit for
/// bit. Once per span: its blocks share both (two divisions a span, not a block).
#[inline(always)]
fn span_scales(per: usize, amax: f32) -> (f32, f32) {
    if amax == 0.0 {
        return (0.0, 0.0);
    }
    let id = 127.0 / amax;
    (id, if per > 1 { 1.0 / id } else { amax / 127.0 })
}

/// The stored scale and `s = d · isum` of a block with span scale `d` ([`span_scales`]) and
/// code sum `isum`: per 32 values both through f16, as ggml stores them in its q8_0/q8_1
/// blocks; per superblock in f32, as ggml keeps Q8_K's.
#[inline(always)]
fn block_scales(per: usize, d: f32, isum: i32) -> (f32, f32) {
    if per > 1 {
        (d, d * isum as f32)
    } else {
        (f16_round(d), f16_round(d * isum as f32))
    }
}

/// The reference: one block at a time, plain Rust (`per` blocks share a scale).
pub fn quantize_scalar(
    per: usize,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    isum: &mut [i32],
) {
    for b in 0..d.len() {
        let g = b / per * per;
        let xb = &x[b * QK..(b + 1) * QK];
        let xg = &x[g * QK..(g + per) * QK];
        let amax = xg.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (id, ds) = span_scales(per, amax);
        let mut sum = 0i32;
        for (j, &v) in xb.iter().enumerate() {
            let c = (v * id).round_ties_even() as i32;
            let c = c.clamp(-127, 127);
            q[b * QK + j] = c as i8;
            sum += c;
        }
        (d[b], s[b]) = block_scales(per, ds, sum);
        isum[b] = sum;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::QK;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_avx512(
        per: usize,
        x: &[f32],
        q: &mut [i8],
        d: &mut [f32],
        s: &mut [f32],
        isum: &mut [i32],
    ) {
        let lim = _mm512_set1_epi32(127);
        let nlim = _mm512_set1_epi32(-127);
        let (mut id, mut ds) = (0.0, 0.0);
        for b in 0..d.len() {
            if b % per == 0 {
                let g = x.as_ptr().add(b * QK);
                let mut a = _mm512_setzero_ps();
                for k in (0..per * QK).step_by(16) {
                    a = _mm512_max_ps(a, _mm512_abs_ps(_mm512_loadu_ps(g.add(k))));
                }
                (id, ds) = super::span_scales(per, _mm512_reduce_max_ps(a));
            }
            let p = x.as_ptr().add(b * QK);
            let v0 = _mm512_loadu_ps(p);
            let v1 = _mm512_loadu_ps(p.add(16));
            let vid = _mm512_set1_ps(id);
            let i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
            let i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
            let i0 = _mm512_max_epi32(_mm512_min_epi32(i0, lim), nlim);
            let i1 = _mm512_max_epi32(_mm512_min_epi32(i1, lim), nlim);
            let out = q.as_mut_ptr().add(b * QK) as *mut __m128i;
            _mm_storeu_si128(out, _mm512_cvtepi32_epi8(i0));
            _mm_storeu_si128(out.add(1), _mm512_cvtepi32_epi8(i1));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
            (d[b], s[b]) = super::block_scales(per, ds, sum);
            isum[b] = sum;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_avx2(
        per: usize,
        x: &[f32],
        q: &mut [i8],
        d: &mut [f32],
        s: &mut [f32],
        isum: &mut [i32],
    ) {
        let sign = _mm256_set1_ps(-0.0);
        let lim = _mm256_set1_epi32(127);
        let nlim = _mm256_set1_epi32(-127);
        let (mut id, mut ds) = (0.0, 0.0);
        for b in 0..d.len() {
            if b % per == 0 {
                let g = x.as_ptr().add(b * QK);
                let mut a = _mm256_setzero_ps();
                for k in (0..per * QK).step_by(8) {
                    a = _mm256_max_ps(a, _mm256_andnot_ps(sign, _mm256_loadu_ps(g.add(k))));
                }
                let m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
                let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                let m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
                (id, ds) = super::span_scales(per, _mm_cvtss_f32(m1));
            }
            let p = x.as_ptr().add(b * QK);
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let vid = _mm256_set1_ps(id);
            let mut codes = [0i32; QK];
            for (k, vi) in v.iter().enumerate() {
                let c = _mm256_cvtps_epi32(_mm256_mul_ps(*vi, vid));
                let c = _mm256_max_epi32(_mm256_min_epi32(c, lim), nlim);
                _mm256_storeu_si256(codes.as_mut_ptr().add(8 * k) as *mut __m256i, c);
            }
            let mut sum = 0i32;
            for (j, &c) in codes.iter().enumerate() {
                q[b * QK + j] = c as i8;
                sum += c;
            }
            (d[b], s[b]) = super::block_scales(per, ds, sum);
            isum[b] = sum;
        }
    }
}
