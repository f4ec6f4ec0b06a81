//! llama.cpp's exact arithmetic for Q5_K and Q6_K weights (`--numerics llama`).
//!
//! On x86 llama.cpp (b11312) multiplies these two types with `ggml_vec_dot_q5_K_q8_K` /
//! `ggml_vec_dot_q6_K_q8_K`, their `__AVX2__` branch even on AVX-512 CPUs (ggml's CPU
//! "repack" picks no interleaved layout for Q5_K/Q6_K on x86), one output value at a time,
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
//! `summs += dmin * isum` into one FMA, checked in the peer's object code.) Every ISA here
//! performs exactly these f32 operations in this order, so SIMD equals the scalar
//! reference bit for bit. The AVX2 kernel is also the AVX-512 one, as in llama.cpp.
//!
//! The weights are decoded at `set_sums` time from the superblock layout into one record
//! per row and superblock (codes as bytes), ~1.3x the file's bytes, kept only while the
//! llama numerics are on.

use super::sb_format::{code, f16_bits, SbPacked, SbType, PANEL};
use crate::cpu::Isa;
use crate::pool::{SendPtr, ThreadPool};

/// Values per superblock (ggml's `QK_K`).
const QK: usize = 256;

/// One superblock of one weight row, decoded.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct KBlock {
    /// Unsigned codes (Q6_K: 0..63, Q5_K: 0..31) in value order.
    q: [u8; QK],
    /// Scale of each 16 values.
    s16: [i16; 16],
    /// Q5_K's mins (one per 32 values).
    mins: [i16; 8],
    d: f32,
    dmin: f32,
}

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
        matches!(ty, SbType::Q5_K | SbType::Q6_K)
    }

    /// Decodes the first `rows` rows of `p` (a type [`KRows::covers`]).
    pub fn build(p: &SbPacked, rows: usize) -> KRows {
        let desc = p.ty.desc();
        let nsb = p.nb * 32 / QK;
        let bytes = p.bytes();
        let zero = KBlock {
            q: [0; QK],
            s16: [0; 16],
            mins: [0; 8],
            d: 0.0,
            dmin: 0.0,
        };
        let mut blocks = vec![zero; rows * nsb];
        for r in 0..rows {
            let (pan, pr) = (r / PANEL, r % PANEL);
            for s in 0..nsb {
                let sbb = &bytes[(pan * nsb + s) * desc.sb_bytes()..][..desc.sb_bytes()];
                let field = |f: usize| {
                    let w = desc.fields[f];
                    let at = desc.field_off(f) + pr * w;
                    let mut v = [0u8; 4];
                    v[..w].copy_from_slice(&sbb[at..at + w]);
                    u32::from_le_bytes(v)
                };
                let b = &mut blocks[r * nsb + s];
                for sub in 0..8 {
                    let blk = &sbb[desc.header_bytes() + sub * desc.code_bytes()..];
                    for k in 0..32 {
                        b.q[sub * 32 + k] = code(&desc, blk, pr, k) as u8;
                    }
                }
                b.d = f16_bits(field(0));
                if p.ty == SbType::Q6_K {
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
    let off = if ty == SbType::Q6_K { 32 } else { 0 };
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (b, y) in w.iter().zip(y) {
        let d = y.d * b.d;
        let mut sumi = [0i32; 8];
        for k in 0..QK {
            sumi[(k % 32) / 4] += b.s16[k / 16] as i32 * b.q[k] as i32 * y.qs[k] as i32;
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
    if ty == SbType::Q5_K {
        hsum8(&acc) + summs
    } else {
        hsum8(&acc)
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
        let q6 = ty == SbType::Q6_K;
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for (b, y) in w.iter().zip(y) {
            let d = y.d * b.d;
            let s16 = _mm256_loadu_si256(b.s16.as_ptr() as *const __m256i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                let q = _mm256_loadu_si256(b.q.as_ptr().add(32 * c) as *const __m256i);
                let x = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                let p16 = _mm256_maddubs_epi16(q, x);
                let sc = _mm256_set_m128i(
                    _mm_set1_epi16(b.s16[2 * c + 1]),
                    _mm_set1_epi16(b.s16[2 * c]),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p16));
            }
            if q6 {
                let sub = _mm256_slli_epi32(_mm256_madd_epi16(bsums, s16), 5);
                sumi = _mm256_sub_epi32(sumi, sub);
            } else {
                let dmin = -y.d * b.dmin;
                let mut isum = 0i32;
                for j in 0..8 {
                    isum += b.mins[j] as i32 * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32);
                }
                summs = dmin.mul_add(isum as f32, summs);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        let mut a = [0f32; 8];
        _mm256_storeu_ps(a.as_mut_ptr(), acc);
        let h = super::hsum8(&a);
        if q6 {
            h
        } else {
            h + summs
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
                        mins: [0; 8],
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
