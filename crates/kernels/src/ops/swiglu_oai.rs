//! GPT-OSS's gated activation, ggml's `swiglu_oai`: the gate clamped from above, the up
//! projection clamped on both sides and shifted by one.
//!
//! ggml computes it one value at a time with libm's `expf` on every CPU (no SIMD form),
//! so this scalar loop is the only one: Rust's `f32::exp` is the same libm call.

/// GPT-OSS's constants (llama.cpp's `build_moe_ffn`, `LLM_FFN_SWIGLU_OAI_MOE`).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// `out = x · σ(alpha · x) · (y + 1)` with `x = min(gate, limit)` and
/// `y = clamp(up, −limit, limit)`, each operation as ggml's
/// `ggml_compute_forward_swiglu_oai_f32` orders it: `x / (1 + expf(alpha · −x))`.
pub fn swiglu_oai_mul(gate: &[f32], up: &[f32], out: &mut [f32], alpha: f32, limit: f32) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "swiglu_oai_mul: gate, up and out lengths differ"
    );
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        let glu = x / (1.0 + (alpha * -x).exp());
        *o = glu * (y + 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_gate_above_and_up_both_sides() {
        let mut g = [0.0f32, 1.0, 100.0, -3.0, 8.0];
        let u = [0.0f32, 0.5, -100.0, 2.0, 100.0];
        let g0 = g;
        swiglu_oai_mul(&g0, &u, &mut g, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT);
        let f = |x: f32, y: f32| x / (1.0 + (1.702f32 * -x).exp()) * (y + 1.0);
        assert_eq!(g[0], 0.0);
        assert_eq!(g[1].to_bits(), f(1.0, 0.5).to_bits());
        // Gate 100 → 7, up −100 → −7.
        assert_eq!(g[2].to_bits(), f(7.0, -7.0).to_bits());
        assert_eq!(g[3].to_bits(), f(-3.0, 2.0).to_bits());
        assert_eq!(g[4].to_bits(), f(7.0, 7.0).to_bits());
        // x·σ(1.702x) at 1 is ≈ 0.8458, times 1.5.
        assert!((g[1] - 0.8458 * 1.5).abs() < 1e-3, "{}", g[1]);
    }
}
