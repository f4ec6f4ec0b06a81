//! llama.cpp's exact arithmetic for Q5_K, Q6_K, TQ1_0, TQ2_0, IQ1_S and IQ1_M weights
//! (`--numerics llama`).
//!
//! On x86 llama.cpp (b11312) multiplies these types with `ggml_vec_dot_<type>_q8_K`, their
//! `__AVX2__` branch even on AVX-512 CPUs (ggml's CPU "repack" picks no interleaved layout
//! for them on x86), one output value at a time,
//! after quantizing each activation row to Q8_K (`quantize_row_q8_K_ref`: one f32 scale per
//! 256 values, `-127 / max`, round-half-even, plus 16-value sums `bsums`). Per superblock
//! and per lane `l` of 8 (one int32 lane of a 256-bit register: values `32c + 4l .. +4`
//! of every 32-value chunk `c`):
//! ```text
//! sumi[l] = sum_c sum_{k in lane l of chunk c} s16[k/16] * q[k] * y[k]
//!           - off * (bsums[2l] * s16[2l] + bsums[2l+1] * s16[2l+1])          (int32, exact)
//! acc[l]  = fma(y.d * w.d, f32(sumi[l]), acc[l])
//! summs   = fma(-y.d * w.dmin, f32(sum_j mins[j] * (bsums[2j] + bsums[2j+1])), summs)  (Q5_K)
//! out     = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7)) + summs
//! ```
//! (`s16` is the scale of each 16 values: Q6_K's int8 scales, Q5_K's 6-bit scale of each
//! 32 twice; `off` is 32 for Q6_K's unsigned 6-bit codes, 0 for Q5_K; GCC contracts the
//! `summs += dmin * isum` into one FMA, checked in the peer's object code.)
//!
//! The ternary types are Q6_K's formula with every `s16 = 1` and `off = 1` (codes 0..2 are
//! `value + 1`; `ggml_vec_dot_tq{1,2}_0_q8_K` subtract `bsums` the same way, and GCC turns
//! their `add(mul(sumi, d), acc)` into the same FMA, checked in the object code).
//!
//! IQ1_S / IQ1_M (`g` the grid value in {-1, 0, 1}, `δ` the ±1 sign of the 1/8 offset, per
//! 32 values for IQ1_S, per 8 for IQ1_M; `d = y.d * w.d`):
//! ```text
//! sumi[l]  = sum_{k in lane l} s16[k/16] * g[k] * y[k]
//! acc[l]   = fma(d, f32(sumi[l]), acc[l])
//! IQ1_S:   isum = sum_ib (bsums[2ib] + bsums[2ib+1]) * δ_ib * s16[2ib];  acc1 = fma(d, f32(isum), acc1)
//!          out  = hsum(acc) + acc1 / 8
//! IQ1_M:   sumi2[l] = sum_{k in lane l} s16[k/16] * δ[k/8] * y[k];  acc2[l] = fma(d, f32(sumi2[l]), acc2[l])
//!          out  = hsum(acc) + hsum(acc2) / 8
//! ```
//! (the `/ 8` is exact, so ggml's `+ IQ1S_DELTA * acc1` needs no FMA decision). Every ISA here
//! performs exactly these f32 operations in this order, so SIMD equals the scalar
//! reference bit for bit. The AVX2 kernel is also the AVX-512 one, as in llama.cpp.
//!
//! The weights are decoded at `set_sums` time from the superblock layout into one record
//! per row and superblock (codes as bytes, 352 bytes per 256 values: ~1.6x a Q6_K file's
//! bytes, ~7x an IQ1_S one's), kept only while the llama numerics are on: a parity mode,
//! not a serving one.

use super::sb_format::{codes32, f16_bits, SbPacked, SbType, PANEL, PARALLEL_PANELS};
use crate::cpu::Isa;
use crate::pool::{split_over_cores, SendPtr, ThreadPool};

/// Values per superblock (ggml's `QK_K`).
const QK: usize = 256;

/// One superblock of one weight row, decoded.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct KBlock {
    /// Unsigned codes in value order (Q6_K: 0..63, Q5_K: 0..31, TQ: 0..2 = value + 1;
    /// IQ1: `(g + 1) | (δ > 0) << 2`).
    q: [u8; QK],
    /// Scale of each 16 values.
    s16: [i16; 16],
    /// Q5_K's mins (one per 32 values, `0..8`), Q2_K's (one per 16).
    mins: [i16; 16],
    d: f32,
    dmin: f32,
}

// The module doc's bytes per record.
const _: () = assert!(std::mem::size_of::<KBlock>() == 352);

/// One superblock of an activation row quantized as ggml's `block_q8_K`.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Q8K {
    qs: [i8; QK],
    bsums: [i16; 16],
    d: f32,
}

impl Q8K {
    const ZERO: Q8K = Q8K {
        qs: [0; QK],
        bsums: [0; 16],
        d: 0.0,
    };
}

/// ggml's `quantize_row_q8_K_ref` of one row (`x.len()` a multiple of 256).
pub(crate) fn quantize_q8k(x: &[f32], out: &mut [Q8K]) {
    for (xs, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xs {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *y = Q8K::ZERO;
            continue;
        }
        let iscale = -127.0f32 / max;
        for (q, &v) in y.qs.iter_mut().zip(xs) {
            // ggml's nearest_int: round half to even (|iscale * v| <= 127).
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for j in 0..16 {
            y.bsums[j] = y.qs[16 * j..16 * (j + 1)].iter().map(|&q| q as i16).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// The decoded rows of a Q5_K or Q6_K matrix.
pub(crate) struct KRows {
    ty: SbType,
    rows: usize,
    /// Superblocks per row.
    nsb: usize,
    blocks: Vec<KBlock>,
}

impl KRows {
    /// Whether llama.cpp's arithmetic is reproduced for this type.
    pub fn covers(ty: SbType) -> bool {
        matches!(
            ty,
            SbType::Q2_K
                | SbType::Q4_K
                | SbType::Q5_K
                | SbType::Q6_K
                | SbType::IQ2_XXS
                | SbType::TQ1_0
                | SbType::TQ2_0
                | SbType::IQ1_S
                | SbType::IQ1_M
        )
    }

    /// Decodes the first `rows` rows of `p` (a type [`KRows::covers`]).
    pub fn build(p: &SbPacked, rows: usize) -> KRows {
        let nsb = p.nb * 32 / QK;
        let zero = KBlock {
            q: [0; QK],
            s16: [0; 16],
            mins: [0; 16],
            d: 0.0,
            dmin: 0.0,
        };
        let mut blocks = vec![zero; rows * nsb];
        // Every weight decoded once at load: split over the cores by rows (at least
        // `PARALLEL_ROWS` a thread).
        split_over_cores(&mut blocks, nsb, PARALLEL_ROWS, |r0, chunk| {
            for (i, out) in chunk.chunks_exact_mut(nsb).enumerate() {
                decode_row(p, r0 + i, out);
            }
        });
        KRows {
            ty: p.ty,
            rows,
            nsb,
            blocks,
        }
    }

    /// `out[b * ostride + r] = dot(row r, x row b)` for every row, llama.cpp's bits.
    ///
    /// # Safety
    /// `out` must hold `(n - 1) * ostride + rows` floats; `x.len() == n * nsb * 256`.
    pub unsafe fn matmul(
        &self,
        isa: Isa,
        x: &[f32],
        n: usize,
        out: SendPtr<f32>,
        ostride: usize,
        pool: &ThreadPool,
    ) {
        let cols = self.nsb * QK;
        let mut acts = vec![Q8K::ZERO; n * self.nsb];
        for b in 0..n {
            quantize_q8k(
                &x[b * cols..(b + 1) * cols],
                &mut acts[b * self.nsb..(b + 1) * self.nsb],
            );
        }
        let acts = &acts;
        let per = 64;
        let tasks = self.rows.div_ceil(per);
        pool.run(tasks, &|t| {
            let (r0, r1) = (t * per, ((t + 1) * per).min(self.rows));
            for b in 0..n {
                let y = &acts[b * self.nsb..(b + 1) * self.nsb];
                for r in r0..r1 {
                    let w = &self.blocks[r * self.nsb..(r + 1) * self.nsb];
                    // SAFETY: task t alone writes rows r0..r1 of every output row.
                    unsafe { *out.get().add(b * ostride + r) = dot(isa, self.ty, w, y) };
                }
            }
        });
    }
}

/// The stored form `(g + 1) | (δ > 0) << 2` of an IQ1 value held as `8g ± 1` by the
/// superblock layout (`sb_format::IQ1_VALUES`).
fn iq1_code(v: i32) -> u8 {
    let g = (v + 9) / 8 - 1;
    let up = v - 8 * g > 0;
    ((g + 1) as u8) | (up as u8) << 2
}

/// `off` of the module doc: what the `bsums` term subtracts per code unit.
fn offset(ty: SbType) -> i32 {
    match ty {
        SbType::Q6_K => 32,
        SbType::TQ1_0 | SbType::TQ2_0 => 1,
        _ => 0,
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K
/// block's 12 scale bytes.
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One output value with the kernel for `isa` (AVX2 and AVX-512 run the AVX2 kernel).
pub(crate) fn dot(isa: Isa, ty: SbType, w: &[KBlock], y: &[Q8K]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: features checked just above.
        return unsafe { avx2::dot(ty, w, y) };
    }
    let _ = isa;
    dot_scalar(ty, w, y)
}

/// ggml's `hsum_float_8`.
#[inline(always)]
fn hsum8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// The reference: the lanes of ggml's AVX2 kernel one at a time.
pub(crate) fn dot_scalar(ty: SbType, w: &[KBlock], y: &[Q8K]) -> f32 {
    if matches!(ty, SbType::IQ1_S | SbType::IQ1_M) {
        return dot_iq1_scalar(ty, w, y);
    }
    let off = offset(ty);
    let signed = ty == SbType::IQ2_XXS;
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    let mut acc_m = [0f32; 4];
    for (b, y) in w.iter().zip(y) {
        let d = y.d * b.d;
        if ty == SbType::Q4_K {
            q4k_mins(b, y, &mut acc_m);
        }
        let mut sumi = [0i32; 8];
        for k in 0..QK {
            let q = if signed {
                b.q[k] as i8 as i32
            } else {
                b.q[k] as i32
            };
            sumi[(k % 32) / 4] += b.s16[k / 16] as i32 * q * y.qs[k] as i32;
        }
        if ty == SbType::Q2_K {
            let dmin = -y.d * b.dmin;
            for (l, a) in acc.iter_mut().enumerate() {
                let prod = b.mins[2 * l] as i32 * y.bsums[2 * l] as i32
                    + b.mins[2 * l + 1] as i32 * y.bsums[2 * l + 1] as i32;
                *a = dmin.mul_add(prod as f32, *a);
            }
        }
        for (l, s) in sumi.iter_mut().enumerate() {
            let bs = y.bsums[2 * l] as i32 * b.s16[2 * l] as i32
                + y.bsums[2 * l + 1] as i32 * b.s16[2 * l + 1] as i32;
            *s -= off * bs;
            acc[l] = d.mul_add(*s as f32, acc[l]);
        }
        if ty == SbType::Q5_K {
            let dmin = -y.d * b.dmin;
            let isum: i32 = (0..8)
                .map(|j| b.mins[j] as i32 * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32))
                .sum();
            summs = dmin.mul_add(isum as f32, summs);
        }
    }
    match ty {
        SbType::Q4_K => hsum8(&acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])),
        SbType::Q5_K => hsum8(&acc) + summs,
        SbType::IQ2_XXS => 0.125 * hsum8(&acc),
        _ => hsum8(&acc),
    }
}

/// Q4_K's min term, ggml's 4-lane `acc_m`: lane `m` takes the mins of 32-blocks `2m` and
/// `2m + 1` (`vpmaddwd` of the mins by the pair sums of `bsums`), one FMA per superblock.
#[inline(always)]
fn q4k_mins(b: &KBlock, y: &Q8K, acc_m: &mut [f32; 4]) {
    let dmin = -y.d * b.dmin;
    let pair = |j: usize| y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32;
    for (m, a) in acc_m.iter_mut().enumerate() {
        let prod = b.mins[2 * m] as i32 * pair(2 * m) + b.mins[2 * m + 1] as i32 * pair(2 * m + 1);
        *a = dmin.mul_add(prod as f32, *a);
    }
}

/// The IQ1_S / IQ1_M reference (module doc).
fn dot_iq1_scalar(ty: SbType, w: &[KBlock], y: &[Q8K]) -> f32 {
    let (mut acc, mut acc2, mut acc1) = ([0f32; 8], [0f32; 8], 0f32);
    for (b, y) in w.iter().zip(y) {
        let d = y.d * b.d;
        let (mut sumi, mut sumi2) = ([0i32; 8], [0i32; 8]);
        for k in 0..QK {
            let (c, s, x) = (b.q[k], b.s16[k / 16] as i32, y.qs[k] as i32);
            let delta = if c & 4 != 0 { 1 } else { -1 };
            sumi[(k % 32) / 4] += s * ((c & 3) as i32 - 1) * x;
            sumi2[(k % 32) / 4] += s * delta * x;
        }
        for l in 0..8 {
            acc[l] = d.mul_add(sumi[l] as f32, acc[l]);
            acc2[l] = d.mul_add(sumi2[l] as f32, acc2[l]);
        }
        if ty == SbType::IQ1_S {
            let isum: i32 = (0..8)
                .map(|ib| {
                    let delta = if b.q[32 * ib] & 4 != 0 { 1 } else { -1 };
                    (y.bsums[2 * ib] as i32 + y.bsums[2 * ib + 1] as i32)
                        * delta
                        * b.s16[2 * ib] as i32
                })
                .sum();
            acc1 = d.mul_add(isum as f32, acc1);
        }
    }
    if ty == SbType::IQ1_S {
        hsum8(&acc) + 0.125 * acc1
    } else {
        hsum8(&acc) + 0.125 * hsum8(&acc2)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{KBlock, SbType, Q8K};
    use std::arch::x86_64::*;

    /// ggml's AVX2 arithmetic: `vpmaddubsw` pairs, `vpmaddwd` by the 16-value scale, int32
    /// lanes, one FMA per superblock.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(ty: SbType, w: &[KBlock], y: &[Q8K]) -> f32 {
        if matches!(ty, SbType::IQ1_S | SbType::IQ1_M) {
            return dot_iq1(ty, w, y);
        }
        let off = super::offset(ty);
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        let mut acc_m = [0f32; 4];
        for (b, y) in w.iter().zip(y) {
            let d = y.d * b.d;
            if ty == SbType::Q4_K {
                super::q4k_mins(b, y, &mut acc_m);
            }
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                let q = _mm256_loadu_si256(b.q.as_ptr().add(32 * c) as *const __m256i);
                let x = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                let p16 = if ty == SbType::IQ2_XXS {
                    _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q))
                } else {
                    _mm256_maddubs_epi16(q, x)
                };
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair(b, c), p16));
            }
            if off != 0 {
                let s16 = _mm256_loadu_si256(b.s16.as_ptr() as *const __m256i);
                let bsums = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                let bs = _mm256_madd_epi16(bsums, s16);
                sumi = _mm256_sub_epi32(sumi, _mm256_mullo_epi32(bs, _mm256_set1_epi32(off)));
            }
            if ty == SbType::Q5_K {
                let dmin = -y.d * b.dmin;
                let mut isum = 0i32;
                for j in 0..8 {
                    isum += b.mins[j] as i32 * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32);
                }
                summs = dmin.mul_add(isum as f32, summs);
            }
            if ty == SbType::Q2_K {
                let mins = _mm256_loadu_si256(b.mins.as_ptr() as *const __m256i);
                let bsums = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums));
                acc = _mm256_fmadd_ps(_mm256_set1_ps(-y.d * b.dmin), prod, acc);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        let h = hsum(acc);
        match ty {
            SbType::Q4_K => h + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])),
            SbType::Q5_K => h + summs,
            SbType::IQ2_XXS => 0.125 * h,
            _ => h,
        }
    }

    /// The 16-bit scales of 32-value chunk `c`: `s16[2c]` on the low 16 values (low 128
    /// bits), `s16[2c + 1]` on the high ones.
    #[inline(always)]
    unsafe fn scale_pair(b: &KBlock, c: usize) -> __m256i {
        _mm256_set_m128i(
            _mm_set1_epi16(b.s16[2 * c + 1]),
            _mm_set1_epi16(b.s16[2 * c]),
        )
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let mut a = [0f32; 8];
        _mm256_storeu_ps(a.as_mut_ptr(), v);
        super::hsum8(&a)
    }

    /// IQ1_S / IQ1_M: `Σ g·y = Σ (g+1)·y - Σ y` and `Σ δ·y = 2 Σ [δ>0]·y - Σ y` per 16-bit
    /// pair (exact, no saturation), then the same scale and FMA steps as ggml's kernel.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_iq1(ty: SbType, w: &[KBlock], y: &[Q8K]) -> f32 {
        let (three, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        let (mut acc, mut acc2, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps(), 0f32);
        for (b, y) in w.iter().zip(y) {
            let d = y.d * b.d;
            let (mut sumi, mut sumi2) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for c in 0..8 {
                let q = _mm256_loadu_si256(b.q.as_ptr().add(32 * c) as *const __m256i);
                let x = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                let ysum = _mm256_maddubs_epi16(one, x);
                let g = _mm256_sub_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, three), x), ysum);
                let sc = scale_pair(b, c);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(g, sc));
                if ty == SbType::IQ1_M {
                    let up = _mm256_and_si256(_mm256_srli_epi16(q, 2), one);
                    let pos = _mm256_maddubs_epi16(up, x);
                    let dl = _mm256_sub_epi16(_mm256_add_epi16(pos, pos), ysum);
                    sumi2 = _mm256_add_epi32(sumi2, _mm256_madd_epi16(dl, sc));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
            if ty == SbType::IQ1_M {
                acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi2), acc2);
            } else {
                let mut isum = 0i32;
                for ib in 0..8 {
                    let delta = if b.q[32 * ib] & 4 != 0 { 1 } else { -1 };
                    isum += (y.bsums[2 * ib] as i32 + y.bsums[2 * ib + 1] as i32)
                        * delta
                        * b.s16[2 * ib] as i32;
                }
                acc1 = d.mul_add(isum as f32, acc1);
            }
        }
        if ty == SbType::IQ1_S {
            hsum(acc) + 0.125 * acc1
        } else {
            hsum(acc) + 0.125 * hsum(acc2)
        }
    }
}

/// Rows each thread of [`KRows::build`] decodes at least: the panels' worth from which
/// `SbPacked::build`'s measurement has a thread start pay for itself.
const PARALLEL_ROWS: usize = PARALLEL_PANELS * PANEL;

/// Decodes row `r` of `p` into `out` (its `nsb` superblocks).
fn decode_row(p: &SbPacked, r: usize, out: &mut [KBlock]) {
    let desc = p.ty.desc();
    let nsb = out.len();
    let bytes = p.bytes();
    let (pan, pr) = (r / PANEL, r % PANEL);
    let iq1 = matches!(p.ty, SbType::IQ1_S | SbType::IQ1_M);
    for s in 0..nsb {
        let sbb = &bytes[(pan * nsb + s) * desc.sb_bytes()..][..desc.sb_bytes()];
        let field = |f: usize| {
            let w = desc.fields[f];
            let at = desc.field_off(f) + pr * w;
            let mut v = [0u8; 4];
            v[..w].copy_from_slice(&sbb[at..at + w]);
            u32::from_le_bytes(v)
        };
        let b = &mut out[s];
        for sub in 0..8 {
            let blk = &sbb[desc.header_bytes() + sub * desc.code_bytes()..];
            for (k, c) in codes32(&desc, blk, pr).into_iter().enumerate() {
                b.q[sub * 32 + k] = match p.ty {
                    _ if iq1 => iq1_code(c - 128),
                    // The signed grid value (±8, ±25, ±43).
                    SbType::IQ2_XXS => (c - 128) as i8 as u8,
                    _ => c as u8,
                };
            }
        }
        b.d = f16_bits(field(0));
        if matches!(p.ty, SbType::TQ1_0 | SbType::TQ2_0) {
            b.s16 = [1; 16];
        } else if p.ty == SbType::Q2_K {
            b.dmin = f16_bits(field(1));
            for w in 0..4 {
                for (i, &sc) in field(2 + w).to_le_bytes().iter().enumerate() {
                    b.s16[4 * w + i] = (sc & 15) as i16;
                    b.mins[4 * w + i] = (sc >> 4) as i16;
                }
            }
        } else if p.ty == SbType::IQ2_XXS {
            for ib in 0..8 {
                let ls = 2 * ((field(1) >> (4 * ib)) & 15) as i16 + 1;
                b.s16[2 * ib] = ls;
                b.s16[2 * ib + 1] = ls;
            }
        } else if p.ty == SbType::IQ1_S {
            for ib in 0..8 {
                let ls = 2 * ((field(1) >> (3 * ib)) & 7) as i16 + 1;
                b.s16[2 * ib] = ls;
                b.s16[2 * ib + 1] = ls;
            }
        } else if p.ty == SbType::IQ1_M {
            let sc = |w: usize| (field(1 + w / 2) >> (16 * (w % 2))) & 0xffff;
            for ib in 0..8 {
                for h in 0..2 {
                    let s3 = (sc(ib / 2) >> (6 * (ib % 2) + 3 * h)) & 7;
                    b.s16[2 * ib + h] = 2 * s3 as i16 + 1;
                }
            }
        } else if p.ty == SbType::Q6_K {
            for w in 0..4 {
                for (i, &c) in field(1 + w).to_le_bytes().iter().enumerate() {
                    b.s16[4 * w + i] = c as i8 as i16;
                }
            }
        } else {
            b.dmin = f16_bits(field(1));
            let mut sc = [0u8; 12];
            for w in 0..3 {
                sc[4 * w..4 * w + 4].copy_from_slice(&field(2 + w).to_le_bytes());
            }
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, &sc);
                b.s16[2 * j] = s as i16;
                b.s16[2 * j + 1] = s as i16;
                b.mins[j] = m as i16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u32
    }

    #[test]
    fn q8k_matches_ggml_rule() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let mut y = [Q8K::ZERO];
        quantize_q8k(&x, &mut y);
        let max = x
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        assert_eq!(y[0].d, 1.0 / (-127.0 / max));
        assert_eq!(
            y[0].bsums[0],
            y[0].qs[..16].iter().map(|&q| q as i16).sum::<i16>()
        );
        assert!(y[0].qs.iter().any(|&q| q == -127 || q == 127));
    }

    /// The fast path's superblock activations (`quant_act`, 8 blocks a scale) are ggml's
    /// Q8_K on every ISA: codes equal up to the sign of the extreme, every `d · q` equal bit
    /// for bit, whether the extreme is positive or negative.
    #[test]
    fn superblock_activations_are_ggmls_q8_k() {
        let mut seed = 11u64;
        for sign in [1f32, -1.0] {
            let mut x: Vec<f32> = (0..512)
                .map(|_| (lcg(&mut seed) % 20001) as f32 / 10000.0 - 1.0)
                .collect();
            x[37] = 3.7 * sign;
            x[300] = -2.9 * sign;
            let mut want = [Q8K::ZERO; 2];
            quantize_q8k(&x, &mut want);
            for isa in crate::cpu::Isa::available() {
                let (mut q, mut d) = (vec![0i8; 512], vec![0f32; 16]);
                let (mut s, mut isum) = (vec![0f32; 16], vec![0i32; 16]);
                crate::quant_act::quantize_blocks(isa, 8, &x, &mut q, &mut d, &mut s, &mut isum);
                for (k, &qk) in q.iter().enumerate() {
                    let (w, sb) = (&want[k / 256], k / 32);
                    let wq = w.qs[k % 256];
                    assert_eq!(qk.unsigned_abs(), wq.unsigned_abs(), "{isa:?} value {k}");
                    assert_eq!(d[sb] * qk as f32, w.d * wq as f32, "{isa:?} value {k}");
                }
            }
        }
    }

    /// The IQ1 value `8g ± 1` maps back to its grid value and offset sign.
    #[test]
    fn iq1_codes_round_trip() {
        for (v, g, up) in [
            (-9, -1, 0),
            (-7, -1, 1),
            (-1, 0, 0),
            (1, 0, 1),
            (7, 1, 0),
            (9, 1, 1),
        ] {
            assert_eq!(iq1_code(v), ((g + 1) as u8) | up << 2, "{v}");
        }
    }

    /// Random blocks of the ternary and 1-bit types: every ISA equals the scalar reference.
    #[test]
    fn low_bit_types_avx2_equals_scalar() {
        let mut seed = 11u64;
        for ty in [SbType::TQ1_0, SbType::TQ2_0, SbType::IQ1_S, SbType::IQ1_M] {
            for nsb in [1, 2, 5] {
                let w: Vec<KBlock> = (0..nsb)
                    .map(|_| {
                        let mut b = KBlock {
                            q: [0; QK],
                            s16: [1; 16],
                            mins: [0; 16],
                            d: (lcg(&mut seed) % 1000) as f32 * 1e-5,
                            dmin: 0.0,
                        };
                        let signs: [u8; 32] = std::array::from_fn(|_| (lcg(&mut seed) % 2) as u8);
                        for (k, q) in b.q.iter_mut().enumerate() {
                            *q = (lcg(&mut seed) % 3) as u8;
                            match ty {
                                SbType::IQ1_S => *q |= signs[k / 32] << 2,
                                SbType::IQ1_M => *q |= signs[k / 8] << 2,
                                _ => {}
                            }
                        }
                        if ty != SbType::TQ1_0 && ty != SbType::TQ2_0 {
                            for j in 0..16 {
                                let s = 2 * (lcg(&mut seed) % 8) as i16 + 1;
                                b.s16[j] = if ty == SbType::IQ1_S && j % 2 == 1 {
                                    b.s16[j - 1]
                                } else {
                                    s
                                };
                            }
                        }
                        b
                    })
                    .collect();
                let x: Vec<f32> = (0..nsb * QK)
                    .map(|_| (lcg(&mut seed) % 2001) as f32 * 1e-3 - 1.0)
                    .collect();
                let mut y = vec![Q8K::ZERO; nsb];
                quantize_q8k(&x, &mut y);
                let want = dot_scalar(ty, &w, &y);
                assert!(want.is_finite() && want != 0.0, "{ty:?}: {want}");
                for isa in Isa::available() {
                    assert_eq!(
                        dot(isa, ty, &w, &y).to_bits(),
                        want.to_bits(),
                        "{ty:?} {isa:?}"
                    );
                }
            }
        }
    }

    /// Random blocks: the AVX2 kernel equals the scalar reference bit for bit.
    #[test]
    fn avx2_equals_scalar() {
        let mut seed = 7u64;
        for ty in [SbType::Q5_K, SbType::Q6_K] {
            for nsb in [1, 3, 6] {
                let mut w = Vec::new();
                for _ in 0..nsb {
                    let mut b = KBlock {
                        q: [0; QK],
                        s16: [0; 16],
                        mins: [0; 16],
                        d: (lcg(&mut seed) % 1000) as f32 * 1e-5,
                        dmin: (lcg(&mut seed) % 1000) as f32 * 1e-5,
                    };
                    let qmax = if ty == SbType::Q6_K { 64 } else { 32 };
                    for q in b.q.iter_mut() {
                        *q = (lcg(&mut seed) % qmax) as u8;
                    }
                    for j in 0..8 {
                        let s = if ty == SbType::Q6_K {
                            [
                                (lcg(&mut seed) % 256) as i8 as i16,
                                (lcg(&mut seed) % 256) as i8 as i16,
                            ]
                        } else {
                            let s = (lcg(&mut seed) % 64) as i16;
                            [s, s]
                        };
                        b.s16[2 * j] = s[0];
                        b.s16[2 * j + 1] = s[1];
                        b.mins[j] = if ty == SbType::Q5_K {
                            (lcg(&mut seed) % 64) as i16
                        } else {
                            0
                        };
                    }
                    w.push(b);
                }
                let x: Vec<f32> = (0..nsb * QK)
                    .map(|_| (lcg(&mut seed) % 2001) as f32 * 1e-3 - 1.0)
                    .collect();
                let mut y = vec![Q8K::ZERO; nsb];
                quantize_q8k(&x, &mut y);
                let want = dot_scalar(ty, &w, &y);
                for isa in Isa::available() {
                    assert_eq!(
                        dot(isa, ty, &w, &y).to_bits(),
                        want.to_bits(),
                        "{ty:?} {isa:?}"
                    );
                }
            }
        }
    }
}
