//! Dense (f32 / f16) matmul: `out[b][r] = dot(x[b], W[r])`.
//!
//! Batched like the quantized path: a weight row is loaded once per group of 4 activation
//! rows (it stays in L1 across groups), so n rows do not cost n reads from memory.

use crate::cpu::Isa;
use half::f16;

/// Weight element types a dense row can hold.
pub(crate) trait DenseElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
}
impl DenseElem for f32 {
    fn to_f32(self) -> f32 {
        self
    }
}
impl DenseElem for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Rows `r0..r1` of `w` (`rows x cols`) against all `n` activation rows.
///
/// # Safety
/// `out` holds `n * rows` floats; no other thread writes rows `r0..r1` concurrently.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_rows<T: DenseElem>(
    isa: Isa,
    w: &[T],
    cols: usize,
    rows: usize,
    r0: usize,
    r1: usize,
    x: &[f32],
    n: usize,
    out: *mut f32,
) {
    for r in r0..r1 {
        let wr = &w[r * cols..(r + 1) * cols];
        let mut b = 0;
        while b < n {
            let nr = 4.min(n - b);
            let mut res = [0f32; 4];
            let xs = &x[b * cols..(b + nr) * cols];
            dot_rows(isa, wr, xs, nr, &mut res);
            for (j, &v) in res.iter().enumerate().take(nr) {
                *out.add((b + j) * rows + r) = v;
            }
            b += nr;
        }
    }
}

/// `res[j] = dot(w, xs[j])` for `nr <= 4` consecutive rows of `xs`.
fn dot_rows<T: DenseElem>(isa: Isa, w: &[T], xs: &[f32], nr: usize, res: &mut [f32; 4]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::TypeId;
        let is_f16 = TypeId::of::<T>() == TypeId::of::<f16>();
        // SAFETY: the isa was clamped to the CPU by the caller; T is checked by TypeId.
        unsafe {
            match isa {
                Isa::Avx512 if is_f16 => {
                    return simd::dot_rows_512::<true>(
                        w.as_ptr() as *const u8,
                        w.len(),
                        xs,
                        nr,
                        res,
                    )
                }
                Isa::Avx512 => {
                    return simd::dot_rows_512::<false>(
                        w.as_ptr() as *const u8,
                        w.len(),
                        xs,
                        nr,
                        res,
                    )
                }
                Isa::Avx2 if is_f16 => {
                    return simd::dot_rows_256::<true>(
                        w.as_ptr() as *const u8,
                        w.len(),
                        xs,
                        nr,
                        res,
                    )
                }
                Isa::Avx2 => {
                    return simd::dot_rows_256::<false>(
                        w.as_ptr() as *const u8,
                        w.len(),
                        xs,
                        nr,
                        res,
                    )
                }
                Isa::Scalar => {}
            }
        }
    }
    let _ = isa;
    let cols = w.len();
    for (j, rj) in res.iter_mut().enumerate().take(nr) {
        let x = &xs[j * cols..(j + 1) * cols];
        *rj = w.iter().zip(x).map(|(a, b)| a.to_f32() * b).sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn load16<const F16: bool>(w: *const u8, k: usize) -> __m512 {
        if F16 {
            _mm512_cvtph_ps(_mm256_loadu_si256(w.add(2 * k) as *const __m256i))
        } else {
            _mm512_loadu_ps((w as *const f32).add(k))
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn dot_rows_512<const F16: bool>(
        w: *const u8,
        cols: usize,
        xs: &[f32],
        nr: usize,
        res: &mut [f32; 4],
    ) {
        let mut acc = [_mm512_setzero_ps(); 4];
        let x = xs.as_ptr();
        let mut k = 0;
        while k + 16 <= cols {
            let wv = load16::<F16>(w, k);
            for (j, a) in acc.iter_mut().enumerate().take(nr) {
                *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x.add(j * cols + k)), *a);
            }
            k += 16;
        }
        if k < cols {
            let mask: __mmask16 = (1u16 << (cols - k)) - 1;
            let wv = if F16 {
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, w.add(2 * k) as *const i16))
            } else {
                _mm512_maskz_loadu_ps(mask, (w as *const f32).add(k))
            };
            for (j, a) in acc.iter_mut().enumerate().take(nr) {
                let xv = _mm512_maskz_loadu_ps(mask, x.add(j * cols + k));
                *a = _mm512_fmadd_ps(wv, xv, *a);
            }
        }
        for j in 0..nr {
            res[j] = _mm512_reduce_add_ps(acc[j]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_rows_256<const F16: bool>(
        w: *const u8,
        cols: usize,
        xs: &[f32],
        nr: usize,
        res: &mut [f32; 4],
    ) {
        let mut acc = [_mm256_setzero_ps(); 4];
        let x = xs.as_ptr();
        let mut k = 0;
        while k + 8 <= cols {
            let wv = if F16 {
                _mm256_cvtph_ps(_mm_loadu_si128(w.add(2 * k) as *const __m128i))
            } else {
                _mm256_loadu_ps((w as *const f32).add(k))
            };
            for (j, a) in acc.iter_mut().enumerate().take(nr) {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.add(j * cols + k)), *a);
            }
            k += 8;
        }
        for j in 0..nr {
            let mut t = [0f32; 8];
            _mm256_storeu_ps(t.as_mut_ptr(), acc[j]);
            let mut s = t.iter().sum::<f32>();
            for kk in k..cols {
                let wk = if F16 {
                    half::f16::from_bits((w as *const u16).add(kk).read_unaligned()).to_f32()
                } else {
                    (w as *const f32).add(kk).read_unaligned()
                };
                s += wk * *x.add(j * cols + kk);
            }
            res[j] = s;
        }
    }
}
