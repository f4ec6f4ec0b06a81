//! AVX-512 and AVX2 versions of the element-wise ops. Tails use masks (AVX-512) or the
//! scalar code (AVX2). SiLU uses llama.cpp's exp approximation (`attn::expf_512`).

use super::scalar;
use std::arch::x86_64::*;

// ---------------------------------------------------------------- AVX-512

#[inline(always)]
unsafe fn mask16(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn scale_mul_512(x: &[f32], w: &[f32], s: f32, out: &mut [f32]) {
    let vs = _mm512_set1_ps(s);
    let mut i = 0;
    while i < x.len() {
        let m = mask16(x.len() - i);
        let v = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        let g = _mm512_maskz_loadu_ps(m, w.as_ptr().add(i));
        _mm512_mask_storeu_ps(
            out.as_mut_ptr().add(i),
            m,
            _mm512_mul_ps(_mm512_mul_ps(v, vs), g),
        );
        i += 16;
    }
}

/// Values ahead of the one being activated whose lines [`silu_mul_512`] prefetches (2 KiB).
const SILU_AHEAD: usize = 512;

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn silu_mul_512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    while i < gate.len() {
        // The gated FFN reads gate and up from memory (the gate-up matmul streams its
        // output past the caches), and a vector division a line keeps the hardware
        // prefetcher from running far enough ahead: pull each stream's line
        // `SILU_AHEAD` values on (a prefetch past the end is dropped, never faults).
        _mm_prefetch::<_MM_HINT_T0>(gate.as_ptr().wrapping_add(i + SILU_AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(up.as_ptr().wrapping_add(i + SILU_AHEAD) as *const i8);
        let m = mask16(gate.len() - i);
        let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
        let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
        // llama.cpp's `ggml_v_silu`: x / (1 + e^(0 - x)) with its exp approximation.
        let e = crate::attn::expf_512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        let s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, _mm512_mul_ps(s, u));
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn add_512(x: &mut [f32], y: &[f32]) {
    let mut i = 0;
    while i < x.len() {
        let m = mask16(x.len() - i);
        let a = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        let b = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(x.as_mut_ptr().add(i), m, _mm512_add_ps(a, b));
        i += 16;
    }
}

// ---------------------------------------------------------------- AVX2

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_mul_256(x: &[f32], w: &[f32], s: f32, out: &mut [f32]) {
    let vs = _mm256_set1_ps(s);
    let mut i = 0;
    while i + 8 <= x.len() {
        let v = _mm256_loadu_ps(x.as_ptr().add(i));
        let g = _mm256_loadu_ps(w.as_ptr().add(i));
        _mm256_storeu_ps(
            out.as_mut_ptr().add(i),
            _mm256_mul_ps(_mm256_mul_ps(v, vs), g),
        );
        i += 8;
    }
    for j in i..x.len() {
        out[j] = x[j] * s * w[j];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn add_256(x: &mut [f32], y: &[f32]) {
    let mut i = 0;
    while i + 8 <= x.len() {
        let a = _mm256_loadu_ps(x.as_ptr().add(i));
        let b = _mm256_loadu_ps(y.as_ptr().add(i));
        _mm256_storeu_ps(x.as_mut_ptr().add(i), _mm256_add_ps(a, b));
        i += 8;
    }
    scalar::add_inplace(&mut x[i..], &y[i..]);
}

/// The scalar SwiGLU compiled with FMA (single-instruction `mul_add`s, same bits).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn silu_mul_fma(gate: &[f32], up: &[f32], out: &mut [f32]) {
    scalar::silu_mul(gate, up, out)
}
