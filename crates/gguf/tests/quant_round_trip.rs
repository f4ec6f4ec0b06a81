//! Quantize -> dequantize round trips of every type: exact or within half an f16/bf16 ulp
//! for floats, per-block error bounds for the quants, and relative RMS error on smooth data.

mod common;

use common::deq;
use folio_gguf::quant::quantize;
use folio_gguf::GgmlType;
use rand::{Rng, SeedableRng};

fn random_values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.gen_range(-1.0f32..1.0) * scale)
        .collect()
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let b = quantize(ty, x).unwrap();
    assert_eq!(b.len(), ty.row_bytes(x.len()).unwrap());
    deq(ty, &b, x.len())
}

#[test]
fn float_round_trips() {
    let x = random_values(1, 1024, 100.0);
    assert_eq!(round_trip(GgmlType::F32, &x), x);
    for (ty, rel) in [
        (GgmlType::F16, 2f32.powi(-11)),
        (GgmlType::BF16, 2f32.powi(-8)),
    ] {
        for (a, b) in x.iter().zip(round_trip(ty, &x)) {
            assert!((a - b).abs() <= a.abs() * rel, "{ty}: {a} -> {b}");
        }
    }
}

/// Largest |error| in each block of `bs` values, next to the block's values.
fn block_errors<'a>(
    x: &'a [f32],
    y: &'a [f32],
    bs: usize,
) -> impl Iterator<Item = (&'a [f32], f32)> {
    x.chunks(bs).zip(y.chunks(bs)).map(|(a, b)| {
        (
            a,
            a.iter()
                .zip(b)
                .fold(0.0f32, |m, (p, q)| m.max((p - q).abs())),
        )
    })
}

#[test]
fn legacy_quant_round_trip_error_bounds() {
    for seed in 0..20 {
        let x = random_values(seed, 1024, 1.0 + seed as f32);
        // Q8_0: half a step of amax/127, plus the f16 rounding of d over 127 steps.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q8_0, &x), 32) {
            let d = blk.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 127.0;
            assert!(
                err <= d * (0.5 + 127.0 * 2f32.powi(-11)) * 1.001,
                "Q8_0 err {err} d {d}"
            );
        }
        // Q4_0: the value opposite the largest magnitude may clip by up to one step.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q4_0, &x), 32) {
            let d = blk.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 8.0;
            assert!(err <= d * 1.01, "Q4_0 err {err} d {d}");
        }
        // Q4_1: half a step of (max-min)/15 plus f16 rounding of d and m.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q4_1, &x), 32) {
            let (mn, mx) = blk
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let d = (mx - mn) / 15.0;
            assert!(
                err <= d * (0.5 + 15.0 * 2f32.powi(-11)) + mn.abs() * 2f32.powi(-11) + 1e-6,
                "Q4_1 err {err} d {d}"
            );
        }
    }
}

#[test]
fn k_quant_round_trip_error_bounds() {
    for seed in 0..20 {
        let mut x = random_values(100 + seed, 2048, 0.1 + seed as f32);
        // Edge sub-blocks: all zero, all negative, all positive, one spike.
        x[0..32].fill(0.0);
        x[32..64].iter_mut().for_each(|v| *v = -v.abs() - 3.0);
        x[64..96].iter_mut().for_each(|v| *v = v.abs() + 3.0);
        x[300] = 50.0;
        // Q4_K: within a 256 block, half of the largest sub-block step plus half of dmin,
        // with a little slack for the 6-bit rounding of the sub-block scale.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q4_K, &x), 256) {
            let sub = |c: &[f32]| {
                (c.iter().fold(f32::MIN, |a, &v| a.max(v))
                    - c.iter().fold(0.0f32, |a, &v| a.min(v)))
                    / 15.0
            };
            let max_step = blk.chunks(32).map(sub).fold(0.0f32, f32::max);
            let dmin = -blk.iter().fold(0.0f32, |a, &v| a.min(v)) / 63.0;
            let bound = 0.5 * max_step * (1.0 + 2.0 / 63.0) + dmin + 1e-6;
            assert!(err <= bound, "Q4_K seed {seed} err {err} bound {bound}");
        }
        // Q6_K: half a step of amax/31 in each 16-value sub-block, plus the scale's rounding.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q6_K, &x), 256) {
            let amax = blk.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let bound = 0.5 * (amax / 31.0) * (1.0 + 2.0 / 127.0) + 1e-6;
            assert!(err <= bound, "Q6_K seed {seed} err {err} bound {bound}");
        }
    }
    // All-zero blocks stay exactly zero.
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        assert_eq!(round_trip(ty, &[0.0; 256]), vec![0.0; 256], "{ty}");
    }
}

#[test]
fn k_quant_relative_error_on_smooth_data() {
    // Typical weights: the RMS error must be a small fraction of the RMS value.
    let x = random_values(7, 256 * 16, 0.05);
    let rms = |v: &[f32]| (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32).sqrt();
    for (ty, max_rel) in [
        (GgmlType::Q4_K, 0.12),
        (GgmlType::Q6_K, 0.03),
        (GgmlType::Q4_0, 0.15),
        (GgmlType::Q4_1, 0.12),
        (GgmlType::Q8_0, 0.01),
    ] {
        let y = round_trip(ty, &x);
        let e: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
        let rel = rms(&e) / rms(&x);
        assert!(rel < max_rel, "{ty}: relative RMS error {rel}");
    }
}

#[test]
fn new_types_round_trip_error_bounds() {
    let half_ulp = 2f32.powi(-11);
    for seed in 0..20 {
        let mut x = random_values(200 + seed, 2048, 0.1 + seed as f32);
        x[0..32].fill(0.0);
        x[32..64].iter_mut().for_each(|v| *v = -v.abs() - 3.0);
        x[64..96].iter_mut().for_each(|v| *v = v.abs() + 3.0);
        x[300] = 50.0;
        x[700] = -50.0;
        let amax = |c: &[f32]| c.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        // Q5_0 (ggml ref): the value opposite the largest magnitude may clip by one step.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q5_0, &x), 32) {
            let d = amax(blk) / 16.0;
            assert!(err <= d * 1.01, "Q5_0 seed {seed} err {err} d {d}");
        }
        // Q5_1 (ggml ref): half a step of (max-min)/31 plus f16 rounding of d and m.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q5_1, &x), 32) {
            let (mn, mx) = blk
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let d = (mx - mn) / 31.0;
            let bound = d * (0.5 + 31.0 * half_ulp) + mn.abs() * half_ulp + 1e-6;
            assert!(err <= bound, "Q5_1 seed {seed} err {err} bound {bound}");
        }
        // Affine K-quants: half of the largest sub-block step (with the slack of the
        // rounded-up integer scale) plus dmin.
        for (ty, sub_len, qmax, smax) in [
            (GgmlType::Q2_K, 16, 3.0, 15.0),
            (GgmlType::Q5_K, 32, 31.0, 63.0),
        ] {
            for (blk, err) in block_errors(&x, &round_trip(ty, &x), 256) {
                let step = |c: &[f32]| {
                    (c.iter().fold(f32::MIN, |a, &v| a.max(v))
                        - c.iter().fold(0.0f32, |a, &v| a.min(v)))
                        / qmax
                };
                let dmin = -blk.iter().fold(0.0f32, |a, &v| a.min(v)) / smax;
                let max_step = blk.chunks(sub_len).map(step).fold(0.0f32, f32::max);
                let bound = 0.5 * max_step * (1.0 + 2.0 / smax) + dmin + 1e-6;
                assert!(err <= bound, "{ty} seed {seed} err {err} bound {bound}");
            }
        }
        // Q3_K: half a step of (sub-block amax)/3.5, the step rounded up by at most the
        // super-scale (block amax / 3.5 / 31).
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::Q3_K, &x), 256) {
            let bound = 0.5 * (amax(blk) / 3.5) * (1.0 + 1.0 / 31.0) * 1.001 + 1e-6;
            assert!(err <= bound, "Q3_K seed {seed} err {err} bound {bound}");
        }
        // IQ4_NL: 14 level units (the +113 clip; the widest half gap is 12) of amax/127.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::IQ4_NL, &x), 32) {
            let bound = 14.0 * amax(blk) / 127.0 * 1.002 + 1e-6;
            assert!(err <= bound, "IQ4_NL seed {seed} err {err} bound {bound}");
        }
        // IQ4_XS: as IQ4_NL, the sub-block scale rounded up by at most the super-scale.
        for (blk, err) in block_errors(&x, &round_trip(GgmlType::IQ4_XS, &x), 256) {
            let bound = 14.0 * amax(blk) / 127.0 * (1.0 + 1.0 / 31.0) * 1.002 + 1e-6;
            assert!(err <= bound, "IQ4_XS seed {seed} err {err} bound {bound}");
        }
    }
    // All-zero blocks stay zero (Q5_0, like ggml's Q4_0, gives -0.0: d = 0 / -16).
    for ty in NEW_TYPES {
        assert_eq!(round_trip(ty, &[0.0; 256]), vec![0.0; 256], "{ty}");
    }
}

const NEW_TYPES: [GgmlType; 7] = [
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q5_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

#[test]
fn new_types_relative_error_on_smooth_data() {
    // Measured: Q5_0 0.031, Q5_1 0.029, Q2_K 0.29, Q3_K 0.14, Q5_K 0.030, IQ4_NL/XS 0.069.
    let x = random_values(7, 256 * 16, 0.05);
    let rms = |v: &[f32]| (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32).sqrt();
    for (ty, max_rel) in [
        (GgmlType::Q5_0, 0.04),
        (GgmlType::Q5_1, 0.04),
        (GgmlType::Q2_K, 0.35),
        (GgmlType::Q3_K, 0.18),
        (GgmlType::Q5_K, 0.04),
        (GgmlType::IQ4_NL, 0.09),
        (GgmlType::IQ4_XS, 0.09),
    ] {
        let y = round_trip(ty, &x);
        let e: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
        let rel = rms(&e) / rms(&x);
        assert!(rel < max_rel, "{ty}: relative RMS error {rel}");
    }
}
