//! AVX-512 and AVX2 versions of the element-wise ops. Tails use masks (AVX-512) or the
//! scalar code (AVX2). `exp` is a Cephes-style polynomial (about 2 ulp), exact 0 below
//! -87.3 so masked attention scores (-inf) get weight exactly 0.

use super::scalar;
use half::f16;
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

#[inline(always)]
unsafe fn exp512(x: __m512) -> __m512 {
    let valid = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33), _CMP_GE_OQ);
    let x = _mm512_min_ps(x, _mm512_set1_ps(88.7));
    let n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.398_199_9e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.333_452e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166_579_6e-2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.166_666_65));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5));
    let y = _mm512_fmadd_ps(
        _mm512_mul_ps(p, r),
        r,
        _mm512_add_ps(r, _mm512_set1_ps(1.0)),
    );
    _mm512_maskz_mov_ps(valid, _mm512_scalef_ps(y, n))
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn silu_mul_512(gate: &mut [f32], up: &[f32]) {
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    while i < gate.len() {
        let m = mask16(gate.len() - i);
        let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
        let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
        // llama.cpp's `ggml_v_silu`: x / (1 + e^(0 - x)) with its exp approximation.
        let e = crate::attn::expf_512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        let s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(gate.as_mut_ptr().add(i), m, _mm512_mul_ps(s, u));
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn dot_512(a: &[f32], b: &[f32]) -> f32 {
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= a.len() {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
        s1 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i + 16)),
            _mm512_loadu_ps(pb.add(i + 16)),
            s1,
        );
        i += 32;
    }
    while i < a.len() {
        let m = mask16(a.len() - i);
        s0 = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(m, pa.add(i)),
            _mm512_maskz_loadu_ps(m, pb.add(i)),
            s0,
        );
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn axpy_512(a: f32, x: &[f32], y: &mut [f32]) {
    let va = _mm512_set1_ps(a);
    let mut i = 0;
    while i < x.len() {
        let m = mask16(x.len() - i);
        let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(va, xv, yv));
        i += 16;
    }
}

#[inline(always)]
unsafe fn load_f16_512(p: *const f16, m: __mmask16) -> __m512 {
    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p as *const i16))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn dot_f16_512(a: &[f32], b: &[f16]) -> f32 {
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= a.len() {
        s0 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i)),
            load_f16_512(pb.add(i), 0xffff),
            s0,
        );
        s1 = _mm512_fmadd_ps(
            _mm512_loadu_ps(pa.add(i + 16)),
            load_f16_512(pb.add(i + 16), 0xffff),
            s1,
        );
        i += 32;
    }
    while i < a.len() {
        let m = mask16(a.len() - i);
        s0 = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(m, pa.add(i)),
            load_f16_512(pb.add(i), m),
            s0,
        );
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn axpy_f16_512(a: f32, x: &[f16], y: &mut [f32]) {
    let va = _mm512_set1_ps(a);
    let mut i = 0;
    while i < x.len() {
        let m = mask16(x.len() - i);
        let xv = load_f16_512(x.as_ptr().add(i), m);
        let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(va, xv, yv));
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn f32_to_f16_512(src: &[f32], dst: &mut [f16]) {
    let mut i = 0;
    while i < src.len() {
        let m = mask16(src.len() - i);
        let v = _mm512_maskz_loadu_ps(m, src.as_ptr().add(i));
        let h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i) as *mut i16, m, h);
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn softmax_512(x: &mut [f32]) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, p.add(i)));
        i += 16;
    }
    let max = _mm512_reduce_max_ps(vmax);
    if max == f32::NEG_INFINITY {
        return;
    }
    let vm = _mm512_set1_ps(max);
    let mut vs = _mm512_setzero_ps();
    i = 0;
    while i < n {
        let m = mask16(n - i);
        let e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), vm));
        let e = _mm512_maskz_mov_ps(m, e);
        vs = _mm512_add_ps(vs, e);
        _mm512_mask_storeu_ps(p.add(i), m, e);
        i += 16;
    }
    let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(vs));
    i = 0;
    while i < n {
        let m = mask16(n - i);
        let v = _mm512_maskz_loadu_ps(m, p.add(i));
        _mm512_mask_storeu_ps(p.add(i), m, _mm512_mul_ps(v, inv));
        i += 16;
    }
}

// ---------------------------------------------------------------- AVX2

#[inline(always)]
unsafe fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

#[inline(always)]
unsafe fn exp256(x: __m256) -> __m256 {
    let valid = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33), _CMP_GE_OQ);
    let x = _mm256_min_ps(x, _mm256_set1_ps(88.3));
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.33));
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.398_199_9e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.333_452e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166_579_6e-2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.166_666_65));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
    let y = _mm256_fmadd_ps(
        _mm256_mul_ps(p, r),
        r,
        _mm256_add_ps(r, _mm256_set1_ps(1.0)),
    );
    let e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    );
    _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), valid)
}

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

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_256(a: &[f32], b: &[f32]) -> f32 {
    let mut s = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= a.len() {
        s = _mm256_fmadd_ps(
            _mm256_loadu_ps(a.as_ptr().add(i)),
            _mm256_loadu_ps(b.as_ptr().add(i)),
            s,
        );
        i += 8;
    }
    hsum256(s) + scalar::dot(&a[i..], &b[i..])
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_256(a: f32, x: &[f32], y: &mut [f32]) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= x.len() {
        let xv = _mm256_loadu_ps(x.as_ptr().add(i));
        let yv = _mm256_loadu_ps(y.as_ptr().add(i));
        _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_fmadd_ps(va, xv, yv));
        i += 8;
    }
    scalar::axpy(a, &x[i..], &mut y[i..]);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16_256(a: &[f32], b: &[f16]) -> f32 {
    let mut s = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= a.len() {
        let bv = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i) as *const __m128i));
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), bv, s);
        i += 8;
    }
    hsum256(s) + scalar::dot_f16(&a[i..], &b[i..])
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_f16_256(a: f32, x: &[f16], y: &mut [f32]) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= x.len() {
        let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i));
        let yv = _mm256_loadu_ps(y.as_ptr().add(i));
        _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_fmadd_ps(va, xv, yv));
        i += 8;
    }
    scalar::axpy_f16(a, &x[i..], &mut y[i..]);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32_to_f16_256(src: &[f32], dst: &mut [f16]) {
    let mut i = 0;
    while i + 8 <= src.len() {
        let v = _mm256_loadu_ps(src.as_ptr().add(i));
        let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        i += 8;
    }
    scalar::f32_to_f16(&src[i..], &mut dst[i..]);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax_256(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        return;
    }
    let vm = _mm256_set1_ps(max);
    let mut vs = _mm256_setzero_ps();
    let n = x.len();
    let mut i = 0;
    while i + 8 <= n {
        let e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vm));
        vs = _mm256_add_ps(vs, e);
        _mm256_storeu_ps(x.as_mut_ptr().add(i), e);
        i += 8;
    }
    let mut sum = hsum256(vs);
    for v in &mut x[i..] {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}
