//! RoPE with frequency factors (Llama 3 `rope_freqs`, Phi-3 LongRoPE) and YaRN against a
//! plain f64 reference written here from ggml's formulas (`ggml_rope_cache_init`,
//! `rope_yarn`, `rope_yarn_ramp`, `ggml_rope_yarn_corr_dims` in ggml-cpu/ops.cpp and
//! ggml.c).

use folio_kernels::ops::{yarn_corr_dims, Rope, RopeScaling};

fn rand_vec(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// ggml's rope of one token in f64: `x` holds `n_heads` heads of `head_dim`; the first
/// `n_dims` of each rotate.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f32],
    n_heads: usize,
    head_dim: usize,
    n_dims: usize,
    pos: usize,
    base: f64,
    neox: bool,
    s: &RopeScaling,
) -> Vec<f32> {
    // ggml_rope_yarn_corr_dims, in f64.
    let corr_dim = |n_rot: f64| {
        n_dims as f64 * (s.n_ctx_orig as f64 / (n_rot * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let low = corr_dim(s.beta_fast as f64).floor().max(0.0);
    let high = corr_dim(s.beta_slow as f64).ceil().min(n_dims as f64 - 1.0);
    let freq_scale = s.freq_scale as f64;
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for h in 0..n_heads {
        let v = &mut out[h * head_dim..(h + 1) * head_dim];
        for i in 0..n_dims / 2 {
            let ff = s.freq_factors.as_ref().map_or(1.0, |f| f[i] as f64);
            let theta_extrap = pos as f64 * base.powf(-2.0 * i as f64 / n_dims as f64) / ff;
            let theta_interp = freq_scale * theta_extrap;
            let mut theta = theta_interp;
            let mut mscale = s.attn_factor as f64;
            if s.ext_factor != 0.0 {
                let y = (i as f64 - low) / (high - low).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                let mix = ramp * s.ext_factor as f64;
                theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
                mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
            }
            let (c, sn) = (theta.cos() * mscale, theta.sin() * mscale);
            let (a, b) = if neox {
                (i, i + n_dims / 2)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (v[a], v[b]);
            v[a] = x0 * c - x1 * sn;
            v[b] = x0 * sn + x1 * c;
        }
    }
    out.into_iter().map(|v| v as f32).collect()
}

/// Worst absolute difference.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Runs folio's rope and the reference over a range of positions; both pairings.
fn check(head_dim: usize, n_dims: usize, base: f32, s: &RopeScaling, tol: f32) {
    for neox in [false, true] {
        let rope = Rope::with_scaling(head_dim, n_dims, base, neox, s);
        for (k, pos) in [0usize, 1, 7, 63, 200, 511, 2000].into_iter().enumerate() {
            let x0 = rand_vec(3 * head_dim, 100 + k as u64, 1.5);
            let mut got = x0.clone();
            rope.apply(&mut got, 3, pos as u32);
            let want = reference(&x0, 3, head_dim, n_dims, pos, base as f64, neox, s);
            let e = max_diff(&got, &want);
            assert!(e < tol, "neox {neox} pos {pos}: off by {e} ({s:?})");
        }
    }
}

#[test]
fn corr_dims_are_ggmls() {
    // 64 dims, 4096 original context, base 10000: the ramp runs over pairs 10..=23.
    // corr_dim(32) = 64 ln(4096 / 64π) / (2 ln 10000) = 10.46, corr_dim(1) = 22.5.
    assert_eq!(yarn_corr_dims(64, 4096, 10000.0, 32.0, 1.0), [10.0, 23.0]);
    // The end is clamped to n_dims - 1, the start to 0 only (as ggml does).
    assert_eq!(yarn_corr_dims(8, 1 << 20, 10.0, 32.0, 1.0), [14.0, 7.0]);
    assert_eq!(yarn_corr_dims(64, 8, 10000.0, 32.0, 1.0)[0], 0.0);
}

#[test]
fn default_scaling_is_plain_rope_bit_for_bit() {
    let plain = Rope::new(64, 48, 500000.0, 0.5, false);
    let s = RopeScaling {
        freq_scale: 0.5,
        ..RopeScaling::default()
    };
    let scaled = Rope::with_scaling(64, 48, 500000.0, false, &s);
    for pos in [0u32, 3, 99, 4000] {
        let x0 = rand_vec(128, pos as u64, 1.0);
        let (mut a, mut b) = (x0.clone(), x0);
        plain.apply(&mut a, 2, pos);
        scaled.apply(&mut b, 2, pos);
        assert_eq!(a, b, "pos {pos}");
    }
}

#[test]
fn freq_factors_divide_each_pair_angle() {
    // Llama 3.1-like: factors 1 for high frequencies, up to 8 for the low ones.
    let factors: Vec<f32> = (0..32)
        .map(|i| 1.0 + 7.0 * (i as f32 / 31.0).powi(2))
        .collect();
    let s = RopeScaling {
        freq_factors: Some(factors.clone()),
        ..RopeScaling::default()
    };
    check(64, 64, 500000.0, &s, 2e-3);
    // Factors move the rotation: pair 31's angle is 8 times smaller than without them.
    let plain = Rope::new(64, 64, 500000.0, 1.0, false);
    let with = Rope::with_scaling(64, 64, 500000.0, false, &s);
    let x0 = rand_vec(64, 1, 1.0);
    let (mut a, mut b) = (x0.clone(), x0);
    plain.apply(&mut a, 1, 2000);
    with.apply(&mut b, 1, 2000);
    assert!(max_diff(&a, &b) > 1e-3);
    // Partial rotation (first 32 of 64 dims) takes the first 16 factors.
    let s16 = RopeScaling {
        freq_factors: Some(factors[..16].to_vec()),
        ..RopeScaling::default()
    };
    check(64, 32, 10000.0, &s16, 2e-3);
}

#[test]
fn yarn_mixes_along_the_ramp_and_scales_magnitude() {
    // Scale factor 4 over a 4096 original context: llama.cpp's attn_factor is
    // get_mscale(4) / (1 + 0.1 ln 4) = 1, times rope.scaling.attn_factor (here 1.1).
    let factor = 4.0f32;
    let s = RopeScaling {
        freq_scale: 1.0 / factor,
        ext_factor: 1.0,
        attn_factor: 1.1,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 4096,
        freq_factors: None,
    };
    check(64, 64, 10000.0, &s, 2e-3);
    // Half the ramp (ext_factor 0.5), other betas, partial rotation, plus freq factors.
    let s2 = RopeScaling {
        ext_factor: 0.5,
        beta_fast: 16.0,
        beta_slow: 2.0,
        freq_factors: Some((0..24).map(|i| 1.0 + i as f32 * 0.1).collect()),
        ..s.clone()
    };
    check(64, 48, 10000.0, &s2, 2e-3);
    // The magnitude: at position 0 each rotated value is scaled by
    // attn_factor · (1 + 0.1 ln 4).
    let rope = Rope::with_scaling(64, 64, 10000.0, false, &s);
    let mut x = vec![1.0f32; 64];
    rope.apply(&mut x, 1, 0);
    let m = 1.1 * (1.0 + 0.1 * factor.ln());
    assert!(x.iter().all(|&v| (v - m).abs() < 1e-6), "{x:?}");
}
