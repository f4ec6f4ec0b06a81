//! GELU (tanh form) times the up projection: the feed-forward activation of Gemma.
//!
//! llama.cpp evaluates GELU through a 64 Ki-entry table indexed by the input rounded to
//! f16 (`ggml_table_gelu_f16`), exact `x` above 10 and 0 below -10. folio keeps the same
//! table so that greedy outputs agree on close calls; a table lookup per value is also
//! cheaper than `tanh`, so there is no SIMD form (a gather would not beat it).

use half::f16;
use std::sync::OnceLock;

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044715;

/// `0.5 x (1 + tanh(√(2/π) x (1 + 0.044715 x²)))` in f32, as ggml's `ggml_gelu_f32`
/// builds its table: the compiler contracts `1 + (0.044715 x) x` into one FMA (GCC's
/// default `-ffp-contract=fast` on an FMA target; seen in the object code of
/// `ggml_cpu_init`), which changes some f16 entries; `mul_add` is that FMA.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// GELU of every f16 value, rounded to f16 (128 KiB, built on first use).
fn table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu_f32(f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// ggml's GELU of `x` through table `t`: exact outside -10..10, the f16 table inside.
#[inline(always)]
fn lookup(t: &[f16], x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        t[f16::from_f32(x).to_bits() as usize].to_f32()
    }
}

/// GELU of one value the way ggml's CPU backend computes it (f16 table in -10..10).
#[inline]
pub fn gelu(x: f32) -> f32 {
    lookup(table(), x)
}

/// `out[i] = gelu(gate[i]) * up[i]` (ggml's `geglu`).
pub fn gelu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "gelu_mul: gate, up and out lengths differ"
    );
    // The table once per call, not once per value.
    let t = table();
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = lookup(t, g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_gelu_is_the_tanh_form_to_f16_precision() {
        for i in -2000..2000 {
            let x = i as f32 * 0.01;
            let (a, b) = (gelu(x), gelu_f32(x));
            assert!(
                (a - b).abs() <= 2e-3 * (1.0 + b.abs()),
                "gelu({x}) = {a}, want {b}"
            );
        }
        assert_eq!(gelu(-11.0), 0.0);
        assert_eq!(gelu(12.5), 12.5);
        assert_eq!(gelu(0.0), 0.0);
    }

    #[test]
    fn gelu_mul_multiplies_by_up() {
        let x = vec![-20.0, -1.0, 0.5, 3.0, 15.0];
        let up = vec![2.0, 3.0, -1.0, 0.5, 2.0];
        let want: Vec<f32> = x.iter().zip(&up).map(|(&x, &u)| gelu(x) * u).collect();
        let mut g = vec![f32::NAN; 5];
        gelu_mul(&x, &up, &mut g);
        assert_eq!(g, want);
        assert_eq!(g[0], 0.0);
        assert_eq!(g[4], 30.0);
    }
}
