//! The gate activation of a gated FFN, `act(gate) · up`, named once: the model picks it
//! per architecture and the down projection's matmul applies it while quantizing its
//! input ([`crate::matmul::QMatrix::matmul_gated`]).

use super::{gelu_mul, silu_mul, swiglu_oai_mul, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

/// The gate activation of a gated FFN: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU (llama, qwen).
    Silu,
    /// GeGLU with the tanh GELU (gemma).
    Gelu,
    /// GPT-OSS's clamped SwiGLU, `x·σ(1.702x)·(y + 1)` ([`swiglu_oai_mul`]).
    SwigluOai,
}

impl Activation {
    /// `out = act(gate) * up`, each value as llama.cpp computes it.
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn apply(self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        match self {
            Activation::Silu => silu_mul(gate, up, out),
            Activation::Gelu => gelu_mul(gate, up, out),
            Activation::SwigluOai => {
                swiglu_oai_mul(gate, up, out, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT)
            }
        }
    }

    /// Row `t` of `n` rows of `[gate | up]` (`2 * out.len()` values each) through the
    /// activation into `out`.
    ///
    /// # Panics
    /// If `gu` holds no row `t` of `2 * out.len()` values.
    pub fn apply_row(self, gu: &[f32], t: usize, out: &mut [f32]) {
        let (g, u) = gate_up_row(gu, t, out.len());
        self.apply(g, u, out);
    }
}

/// Row `t`'s gate and up halves in rows of `[gate | up]` (`2 * f` values each).
///
/// # Panics
/// If `gu` holds no row `t`.
pub fn gate_up_row(gu: &[f32], t: usize, f: usize) -> (&[f32], &[f32]) {
    gu[t * 2 * f..(t + 1) * 2 * f].split_at(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_row_reads_the_gate_then_the_up_half_of_its_row() {
        // Two rows of [gate | up], 2 values each.
        let gu = [1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, -3.0];
        for act in [Activation::Silu, Activation::Gelu, Activation::SwigluOai] {
            let mut out = [0f32; 2];
            act.apply_row(&gu, 1, &mut out);
            let mut want = [0f32; 2];
            act.apply(&[-1.0, 0.5], &[2.0, -3.0], &mut want);
            assert_eq!(out.map(f32::to_bits), want.map(f32::to_bits), "{act:?}");
        }
        // silu(1) * 3 = 3 / (1 + e^-1), to the approximation's rounding.
        let mut out = [0f32; 2];
        Activation::Silu.apply_row(&gu, 0, &mut out);
        assert!(
            (out[0] - 3.0 / (1.0 + (-1f32).exp())).abs() < 1e-5,
            "{out:?}"
        );
    }
}
