//! f16 rounding and the SIMD f32 → f16 row store (AVX-512 and F16C), bit-identical to
//! `half::f16::from_f32` (round to nearest even).

use super::{store_row_scalar, KvFormat};
use std::arch::x86_64::*;

/// Rounds probabilities to f16 precision (llama.cpp multiplies V by f16 weights).
#[inline(always)]
pub(super) unsafe fn round_f16(x: &mut [f32]) {
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i < x.len() {
        let rest = x.len() - i;
        let m: __mmask16 = if rest >= 16 { 0xffff } else { (1 << rest) - 1 };
        let v = _mm512_maskz_loadu_ps(m, p.add(i));
        let h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm512_mask_storeu_ps(p.add(i), m, _mm512_cvtph_ps(h));
        i += 16;
    }
}

/// [`round_f16`] as a dispatch target.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub unsafe fn round_f16_512(x: &mut [f32]) {
    round_f16(x)
}

/// f32 -> f16 bytes, round to nearest even (as `half::f16::from_f32`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn store_f16_512(src: &[f32], dst: &mut [u8]) {
    let mut i = 0;
    while i < src.len() {
        let rest = src.len() - i;
        let m: __mmask16 = if rest >= 16 { 0xffff } else { (1 << rest) - 1 };
        let v = _mm512_maskz_loadu_ps(m, src.as_ptr().add(i));
        let h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(2 * i) as *mut i16, m, h);
        i += 16;
    }
}

/// [`store_f16_512`] with F16C on 8 values at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn store_f16_256(src: &[f32], dst: &mut [u8]) {
    let mut i = 0;
    while i + 8 <= src.len() {
        let v = _mm256_loadu_ps(src.as_ptr().add(i));
        let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(dst.as_mut_ptr().add(2 * i) as *mut __m128i, h);
        i += 8;
    }
    store_row_scalar(KvFormat::F16, &src[i..], &mut dst[2 * i..]);
}
