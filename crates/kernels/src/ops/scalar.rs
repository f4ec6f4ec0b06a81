//! Scalar reference versions of the element-wise ops (what the SIMD versions are tested
//! against, and the fallback on CPUs without AVX2).

/// 1/rms exactly as ggml's rms_norm computes it: f32 squares summed in order into a
/// double, the mean rounded to f32, then 1/sqrtf(mean + eps). Every ISA uses this (a row
/// is a few hundred values) so that greedy outputs stay on llama.cpp's side of close calls.
pub fn ggml_rms_scale(x: &[f32], eps: f32) -> f32 {
    let mut sum = 0f64;
    for &v in x {
        sum += (v * v) as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = ggml_rms_scale(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

#[inline(always)]
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + crate::attn::expf_ggml(0.0 - g)) * u;
    }
}

pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
