//! Dequantization of hand-built blocks against hand formulas, bit-exact quantizer checks,
//! and quantize -> dequantize error bounds.

use folio_gguf::dequant::dequantize;
use folio_gguf::quant::{f32_to_bf16, quantize};
use folio_gguf::{GgmlType, GgufError};
use half::f16;
use rand::{Rng, SeedableRng};

fn h(v: f32) -> [u8; 2] {
    let x = f16::from_f32(v);
    assert_eq!(x.to_f32(), v, "test constants must be exact in f16");
    x.to_le_bytes()
}

fn deq(ty: GgmlType, data: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    dequantize(ty, data, &mut out).unwrap();
    out
}

#[test]
fn f32_f16_bf16() {
    let data: Vec<u8> = [1.5f32, -0.0, f32::MAX]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(deq(GgmlType::F32, &data, 3), [1.5, -0.0, f32::MAX]);

    let data = [0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7c];
    let got = deq(GgmlType::F16, &data, 5);
    assert_eq!(got, [1.0, -2.0, 65504.0, 2f32.powi(-24), f32::INFINITY]);

    // bf16 0x3f80 = 1.0, 0xc0a0 = -5.0, 0x3e20 = 0.15625
    let data = [0x80, 0x3f, 0xa0, 0xc0, 0x20, 0x3e];
    assert_eq!(deq(GgmlType::BF16, &data, 3), [1.0, -5.0, 0.15625]);
}

#[test]
fn q8_0_block() {
    let mut b = h(0.5).to_vec();
    b.extend((0..32).map(|j| (j * 8 - 128) as i8 as u8)); // -128, -120, ..., 120
    let expected: Vec<f32> = (0..32).map(|j| 0.5 * (j * 8 - 128) as f32).collect();
    assert_eq!(deq(GgmlType::Q8_0, &b, 32), expected);
}

#[test]
fn q4_0_block() {
    let mut b = h(0.25).to_vec();
    // byte j: low nibble j (element j), high nibble 15 - j (element j + 16)
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let mut expected = vec![0.0; 32];
    for j in 0..16 {
        expected[j] = 0.25 * (j as f32 - 8.0);
        expected[j + 16] = 0.25 * ((15 - j) as f32 - 8.0);
    }
    assert_eq!(deq(GgmlType::Q4_0, &b, 32), expected);
    assert_eq!(expected[0], -2.0);
    assert_eq!(expected[16], 1.75);
}

#[test]
fn q4_1_block() {
    let mut b = h(0.5).to_vec();
    b.extend(h(-3.0));
    b.extend((0..16u8).map(|j| ((j * 3) % 16) | (((j * 5 + 1) % 16) << 4)));
    let mut expected = vec![0.0; 32];
    for j in 0..16 {
        expected[j] = 0.5 * ((j * 3) % 16) as f32 - 3.0;
        expected[j + 16] = 0.5 * ((j * 5 + 1) % 16) as f32 - 3.0;
    }
    assert_eq!(deq(GgmlType::Q4_1, &b, 32), expected);
    assert_eq!(&expected[..2], &[-3.0, -1.5]);
}

/// Packs 8 six-bit (scale, min) pairs the way ggml's Q4_K/Q5_K scales[12] hold them:
/// bytes 0..4: scale j (low 6 bits) + bits 4..5 of scale j+4 in the top 2 bits;
/// bytes 4..8: min j + bits 4..5 of min j+4; bytes 8..12: low 4 bits of scale j+4 | min j+4 << 4.
fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    s
}

#[test]
fn q4_k_block() {
    let sc = [3u8, 17, 63, 0, 40, 33, 5, 62];
    let m = [1u8, 60, 20, 31, 47, 16, 63, 2];
    let (d, dmin) = (0.5f32, 0.25f32);
    let q = |i: usize| ((i * 7 + 3) % 16) as u8;
    let mut b = h(d).to_vec();
    b.extend(h(dmin));
    b.extend(pack_k4_scales(sc, m));
    // qs[32*c + l]: low nibble = element 64c + l, high nibble = element 64c + 32 + l.
    for c in 0..4 {
        for l in 0..32 {
            b.push(q(64 * c + l) | (q(64 * c + 32 + l) << 4));
        }
    }
    assert_eq!(b.len(), 144);
    let expected: Vec<f32> = (0..256)
        .map(|i| {
            let s = i / 32;
            (d * sc[s] as f32) * q(i) as f32 - dmin * m[s] as f32
        })
        .collect();
    let got = deq(GgmlType::Q4_K, &b, 256);
    assert_eq!(got, expected);
    // spot checks by hand: element 0: q=3, sc=3, m=1 -> 0.5*3*3 - 0.25 = 4.25
    assert_eq!(got[0], 4.25);
    // element 255: sub-block 7 (sc 62, m 2), q = (255*7+3)%16 = 12 -> 31*12 - 0.5 = 371.5
    assert_eq!(got[255], 371.5);
}

/// Q6_K 6-bit codes: element 128h + 32k + l takes its low 4 bits from ql[64h + l (+32 if k is
/// odd)] (low nibble for k < 2, high for k >= 2) and its top 2 bits from qh[32h + l] bits 2k..2k+1.
#[test]
fn q6_k_block() {
    let d = 0.125f32;
    let sc: Vec<i8> = (0..16).map(|k| (k as i8 - 8) * 9).collect(); // -72..63
    let code = |i: usize| ((i * 13 + 5) % 64) as u8;
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for hh in 0..2 {
        for l in 0..32 {
            let e = |k: usize| code(128 * hh + 32 * k + l);
            ql[64 * hh + l] = (e(0) & 0xF) | ((e(2) & 0xF) << 4);
            ql[64 * hh + l + 32] = (e(1) & 0xF) | ((e(3) & 0xF) << 4);
            qh[32 * hh + l] =
                (e(0) >> 4) | ((e(1) >> 4) << 2) | ((e(2) >> 4) << 4) | ((e(3) >> 4) << 6);
        }
    }
    let mut b = ql.to_vec();
    b.extend(qh);
    b.extend(sc.iter().map(|&s| s as u8));
    b.extend(h(d));
    assert_eq!(b.len(), 210);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * sc[i / 16] as f32 * (code(i) as i32 - 32) as f32)
        .collect();
    let got = deq(GgmlType::Q6_K, &b, 256);
    assert_eq!(got, expected);
    // element 0: code 5, sc -72 -> 0.125 * -72 * -27 = 243
    assert_eq!(got[0], 243.0);
}

/// Single-bit probes: which element does each ql/qh bit move? Guards the layout against
/// a self-consistent but wrong packing in both the test and the code.
#[test]
fn q6_k_bit_positions() {
    let mut base = vec![0u8; 210];
    base[192..208].fill(1); // all scales 1
    base[208..210].copy_from_slice(&h(1.0));
    let zero = deq(GgmlType::Q6_K, &base, 256);
    assert!(zero.iter().all(|&v| v == -32.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q6_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != -32.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]] + 32.0)
    };
    assert_eq!(probe(0, 0), (0, 1.0)); // ql[0] low nibble -> element 0
    assert_eq!(probe(0, 4), (64, 1.0)); // ql[0] high nibble -> element 64
    assert_eq!(probe(32, 0), (32, 1.0)); // ql[32] low -> element 32
    assert_eq!(probe(32 + 5, 7), (96 + 5, 8.0)); // ql[37] high bit 3 -> element 101
    assert_eq!(probe(64, 0), (128, 1.0)); // second half
    assert_eq!(probe(128, 0), (0, 16.0)); // qh[0] bits 0-1 -> element 0, value bit 4
    assert_eq!(probe(128, 3), (32, 32.0)); // qh[0] bit 3 -> element 32, value bit 5
    assert_eq!(probe(128 + 32 + 1, 6), (128 + 96 + 1, 16.0));
}

#[test]
fn q4_k_bit_positions() {
    let mut base = vec![0u8; 144];
    base[0..2].copy_from_slice(&h(1.0));
    base[4..16].copy_from_slice(&pack_k4_scales([1; 8], [0; 8]));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q4_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(16, 0), (0, 1.0));
    assert_eq!(probe(16, 4), (32, 1.0));
    assert_eq!(probe(16 + 33, 7), (64 + 32 + 1, 8.0));
    // scale of sub-block 5 = 1 | bit 4 set via bits 6-7 of scales[1] -> 17
    let mut b = base.clone();
    b[4 + 1] |= 1 << 6;
    b[16 + 32 * 2 + 3] = 0x20; // element 64*2 + 32 + 3 = 163 (sub-block 5), q = 2
    assert_eq!(deq(GgmlType::Q4_K, &b, 256)[163], 34.0);
}

#[test]
fn length_and_type_errors() {
    let mut out = vec![0.0; 32];
    let err = dequantize(GgmlType::Q8_0, &[0; 33], &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::DataLength {
                expected: 34,
                got: 33,
                ..
            }
        ),
        "{err}"
    );
    let mut out = vec![0.0; 31];
    let err = dequantize(GgmlType::Q8_0, &[0; 34], &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::NotWholeBlocks {
                n_values: 31,
                block_size: 32,
                ..
            }
        ),
        "{err}"
    );
    let mut out = vec![0.0; 32];
    let err = dequantize(GgmlType::from_u32(6), &[0; 22], &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor type Q5_0 (ggml type 6) is not supported for dequantization"
    );
    assert!(quantize(GgmlType::from_u32(99), &[0.0]).is_err());
}

#[test]
fn ggml_type_geometry() {
    use GgmlType::*;
    let expect = [
        (F32, 1, 4),
        (F16, 1, 2),
        (BF16, 1, 2),
        (Q4_0, 32, 18),
        (Q4_1, 32, 20),
        (Q8_0, 32, 34),
        (Q4_K, 256, 144),
        (Q6_K, 256, 210),
    ];
    for (ty, bs, ts) in expect {
        assert_eq!(
            (ty.block_size(), ty.type_size()),
            (Some(bs), Some(ts)),
            "{ty}"
        );
        assert_eq!(GgmlType::from_u32(ty.to_u32()), ty);
    }
    assert_eq!(Q4_1.row_bytes(576).unwrap(), 18 * 20);
    assert!(Q4_1.row_bytes(577).is_err());
    assert_eq!(GgmlType::from_u32(3), Q4_1);
    assert_eq!(GgmlType::from_u32(30), BF16);
    assert_eq!(GgmlType::from_u32(16), Other(16));
    assert_eq!(Other(16).block_size(), None);
    assert_eq!(Other(16).to_string(), "IQ2_XXS (ggml type 16)");
    assert_eq!(Other(1000).to_string(), "unknown ggml type 1000");
}

// ---- quantizers ----

#[test]
fn q4_0_quantizer_matches_ggml_ref() {
    // x = j - 16: largest magnitude is -16, so d = -16 / -8 = 2, q = min(15, (int)((j-16)/2 + 8.5)).
    let x: Vec<f32> = (0..32).map(|j| j as f32 - 16.0).collect();
    let b = quantize(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(&b[..2], &h(2.0));
    for j in 0..16 {
        let q = |i: usize| ((i as f32 - 16.0) / 2.0 + 8.5).trunc().min(15.0) as u8;
        assert_eq!(b[2 + j], q(j) | (q(j + 16) << 4), "byte {j}");
    }
    assert_eq!(b[2], 0x80); // element 0 -> 0, element 16 -> 8
}

#[test]
fn q4_1_and_q8_0_quantizers_match_ggml_ref() {
    // x = j/2 on 0..15.5: min 0, d = 15.5/15, q = (int)(x/d + 0.5)
    let x: Vec<f32> = (0..32).map(|j| j as f32 * 0.5).collect();
    let b = quantize(GgmlType::Q4_1, &x).unwrap();
    let d = 15.5f32 / 15.0;
    assert_eq!(&b[..2], &f16::from_f32(d).to_le_bytes());
    assert_eq!(&b[2..4], &h(0.0));
    let q = |i: usize| ((x[i] * (1.0 / d)) + 0.5) as u8;
    for j in 0..16 {
        assert_eq!(b[4 + j], q(j).min(15) | (q(j + 16).min(15) << 4));
    }
    // Q8_0: amax 127 -> d = 1, q = round(x)
    let x: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 7.9 + 0.5).collect();
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let b = quantize(GgmlType::Q8_0, &x).unwrap();
    let d = amax / 127.0;
    assert_eq!(&b[..2], &f16::from_f32(d).to_le_bytes());
    for j in 0..32 {
        assert_eq!(b[2 + j] as i8, (x[j] * (1.0 / d)).round() as i8);
    }
}

#[test]
fn bf16_rounding_matches_ggml() {
    assert_eq!(f32_to_bf16(1.0), 0x3f80);
    assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80); // tie -> even
    assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82); // tie -> even (up)
    assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // NaN stays NaN, quiet
    assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
}

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
