//! The block norm: RMSNorm (every architecture but one) or a LayerNorm without bias
//! (cohere2), chosen once from the configuration.

use folio_kernels::ops;

/// Which norm and its epsilon ([`crate::ModelConfig::norm`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norm {
    pub eps: f32,
    /// LayerNorm (mean removed) instead of RMSNorm.
    pub layer: bool,
}

impl Norm {
    /// One row: `out = norm(x) * weight`.
    pub fn row(self, x: &[f32], weight: &[f32], out: &mut [f32]) {
        match self.layer {
            true => layernorm(x, weight, self.eps, out),
            false => ops::rmsnorm(x, weight, self.eps, out),
        }
    }

    /// Consecutive rows of `weight.len()` values.
    pub fn rows(self, x: &[f32], weight: &[f32], out: &mut [f32]) {
        if !self.layer {
            return ops::rmsnorm_rows(x, weight, self.eps, out);
        }
        let d = weight.len();
        for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            layernorm(xr, weight, self.eps, or);
        }
    }
}

/// `(x − mean) / √(var + eps) · weight` as ggml's `norm` then `mul`: the mean from a sum
/// in f64 rounded to f32, the variance of the centred values summed in f64.
fn layernorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let mean = sum as f32 / n as f32;
    let mut var = 0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - mean;
        var += (*o * *o) as f64;
    }
    let scale = 1.0 / ((var / n as f64) as f32 + eps).sqrt();
    for (o, &w) in out.iter_mut().zip(weight) {
        *o = *o * scale * w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layernorm_centres_and_scales() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0f32; 4];
        let n = Norm {
            eps: 0.0,
            layer: true,
        };
        n.row(&x, &[1.0, 1.0, 1.0, 2.0], &mut out);
        // mean 2.5, variance 1.25.
        let s = 1.0 / 1.25f32.sqrt();
        assert_eq!(out, [-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s * 2.0]);
    }
}
