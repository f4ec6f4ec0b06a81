//! The scalar pieces of llama.cpp's attention arithmetic on a 512-bit CPU: the 16-lane
//! reduction tree, its `expf` approximation and its softmax. Written from the operations'
//! definitions so that folio's scores and probabilities carry llama.cpp's exact bits.

/// Lanes of one 512-bit f32 vector.
pub const LANES: usize = 16;

/// The sum of 16 lanes in the tree of `_mm512_reduce_add_ps`: halves (i, i + 8), then
/// (i, i + 4), then (i, i + 2), then lane 0 + lane 1.
#[inline(always)]
pub fn reduce16(v: &[f32; LANES]) -> f32 {
    let mut t = [0f32; 8];
    for i in 0..8 {
        t[i] = v[i + 8] + v[i];
    }
    let u = [t[4] + t[0], t[5] + t[1], t[6] + t[2], t[7] + t[3]];
    (u[0] + u[2]) + (u[1] + u[3])
}

/// Constants of the exp approximation (bit patterns of its hexadecimal float literals).
pub(crate) mod expc {
    /// 1.5 · 2^23: adding it rounds to an integer.
    pub const SHIFT: u32 = 0x4b40_0000;
    /// log2(e).
    pub const LOG2E: u32 = 0x3fb8_aa3b;
    /// ln 2 split in two parts.
    pub const LN2_HI: u32 = 0x3f31_7200;
    pub const LN2_LO: u32 = 0x35bf_be8e;
    /// Polynomial coefficients, highest degree first.
    pub const C5: u32 = 0x3c07_2010;
    pub const C4: u32 = 0x3d2b_9f17;
    pub const C3: u32 = 0x3e2a_af33;
    pub const C2: u32 = 0x3eff_fedb;
    pub const C1: u32 = 0x3f7f_fff6;
}

/// `e^x` as llama.cpp computes it on AVX-512 (`ggml_v_expf`): n = round(x·log2 e),
/// b = x − n·ln 2 (in two parts), a degree-5 polynomial in b, scaled by 2^n; |n| > 192
/// gives 0 or ∞. Every operation here is one IEEE operation of that routine, in order.
#[inline(always)]
pub fn expf_ggml(x: f32) -> f32 {
    use expc::*;
    let f = f32::from_bits;
    let r = f(SHIFT);
    let z = x.mul_add(f(LOG2E), r);
    let n = z - r;
    let b = (-n).mul_add(f(LN2_LO), (-n).mul_add(f(LN2_HI), x));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let j = f(C5)
        .mul_add(b, f(C4))
        .mul_add(u, f(C3).mul_add(b, f(C2)))
        .mul_add(u, f(C1).mul_add(b, 1.0));
    // `vscalefps`: j · 2^n with one rounding (exact in f64, then rounded once); |n| <= 192
    // here, so 2^n is a normal f64 built from its exponent bits.
    (j as f64 * f64::from_bits(((n as i64 + 1023) as u64) << 52)) as f32
}

/// llama.cpp's softmax of one row: exponentials of `x − max` in chunks of 16, each chunk
/// summed by [`reduce16`] into an f64 total, then every value times `(1 / total) as f32`.
/// A row whose every value is −∞ is left as is.
#[inline(always)]
pub fn softmax_lanes(x: &mut [f32]) {
    softmax_lanes_sink(x, None)
}

/// [`softmax_lanes`] with an attention sink (GPT-OSS's learned per-head logit): `sink`
/// joins the maximum and its `expf(sink − max)` (libm's, as ggml's `soft_max`) is added to
/// the f64 total after the chunk sums, so the probabilities sum to less than 1.
#[inline(always)]
pub fn softmax_lanes_sink(x: &mut [f32], sink: Option<f32>) {
    let mut max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if let Some(s) = sink {
        max = max.max(s);
    }
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0f64;
    for chunk in x.chunks_mut(LANES) {
        let mut e = [0f32; LANES];
        for (v, ei) in chunk.iter_mut().zip(e.iter_mut()) {
            *v = expf_ggml(*v - max);
            *ei = *v;
        }
        sum += reduce16(&e) as f64;
    }
    sum += sink_term(sink, max);
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The sink's share of a softmax total whose maximum is `max`: `expf(sink − max)`, 0
/// without a sink.
#[inline(always)]
pub(crate) fn sink_term(sink: Option<f32>, max: f32) -> f64 {
    sink.map_or(0.0, |s| (s - max).exp() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expf_is_close_to_exp_and_saturates() {
        for i in -2000..=800 {
            let x = i as f32 * 0.1;
            let (a, b) = (expf_ggml(x), x.exp());
            if b > f32::MIN_POSITIVE && b.is_finite() {
                assert!(((a - b) / b).abs() < 4e-7, "x = {x}: {a} vs {b}");
            }
        }
        assert_eq!(expf_ggml(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf_ggml(-200.0), 0.0);
        assert_eq!(expf_ggml(0.0), 1.0);
    }

    #[test]
    fn reduce16_pairs_lanes_as_the_tree() {
        // 1e8 + 1 + (−1e8) depends on the order: the tree adds lanes 0 and 8 first.
        let mut v = [0f32; LANES];
        v[0] = 1e8;
        v[8] = -1e8;
        v[1] = 1.0;
        assert_eq!(reduce16(&v), 1.0);
        v[8] = 0.0;
        v[4] = -1e8;
        // (1e8 + 0) + (−1e8 + 0) = 0, then + 1 from lane 1.
        assert_eq!(reduce16(&v), 1.0);
    }

    #[test]
    fn softmax_sums_to_one_and_masks_exactly() {
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
        x[3] = f32::NEG_INFINITY;
        softmax_lanes(&mut x);
        let s: f32 = x.iter().sum();
        assert!((s - 1.0).abs() < 1e-5, "{s}");
        assert_eq!(x[3], 0.0);
        let mut all = [f32::NEG_INFINITY; 3];
        softmax_lanes(&mut all);
        assert!(all.iter().all(|v| *v == f32::NEG_INFINITY), "left as is");
    }
}
