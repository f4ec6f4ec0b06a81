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
    // Known size, no dequantizer: Q8_K (id 15, 292 bytes per 256 values).
    let mut out = vec![0.0; 256];
    let err = dequantize(GgmlType::from_u32(15), &[0; 292], &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor type Q8_K (ggml type 15) is not supported for dequantization"
    );
    let err = quantize(GgmlType::from_u32(15), &[0.0; 256]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor type Q8_K (ggml type 15) is not supported for quantization"
    );
    // Unknown layout: IQ2_XXS (id 16). Display and Debug both name the type.
    let err = dequantize(GgmlType::from_u32(16), &[0; 66], &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor type IQ2_XXS (ggml type 16) is not supported for sizing (unknown block layout)"
    );
    assert!(format!("{err:?}").contains("IQ2_XXS"), "{err:?}");
    assert!(!format!("{err:?}").contains("Other("), "{err:?}");
    let err = quantize(GgmlType::from_u32(16), &[0.0; 256]).unwrap_err();
    assert!(err.to_string().contains("IQ2_XXS"), "{err}");
    assert!(quantize(GgmlType::from_u32(99), &[0.0]).is_err());
    // A hand-made Other(id) of a supported id behaves as its variant.
    assert_eq!(
        deq(GgmlType::Other(6), &[0; 22], 32),
        deq(GgmlType::Q5_0, &[0; 22], 32)
    );
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
        (Q5_0, 32, 22),
        (Q5_1, 32, 24),
        (Q8_0, 32, 34),
        (Q2_K, 256, 84),
        (Q3_K, 256, 110),
        (Q4_K, 256, 144),
        (Q5_K, 256, 176),
        (Q6_K, 256, 210),
        (IQ4_NL, 32, 18),
        (IQ4_XS, 256, 136),
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
    for (id, ty, name) in [
        (6, Q5_0, "Q5_0"),
        (7, Q5_1, "Q5_1"),
        (10, Q2_K, "Q2_K"),
        (11, Q3_K, "Q3_K"),
        (13, Q5_K, "Q5_K"),
        (20, IQ4_NL, "IQ4_NL"),
        (23, IQ4_XS, "IQ4_XS"),
    ] {
        assert_eq!((GgmlType::from_u32(id), ty.to_u32()), (ty, id));
        assert_eq!(
            (ty.to_string(), format!("{ty:?}")),
            (name.into(), name.into())
        );
    }
    assert_eq!(GgmlType::from_u32(16), Other(16));
    assert_eq!(format!("{:?}", Other(16)), "IQ2_XXS (ggml type 16)");
    assert_eq!(Other(34).to_string(), "TQ1_0 (ggml type 34)");
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

// ---- Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS ----

const KV: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Q5_0/Q5_1 quants: element j (j < 16) in the low nibble of qs[j], element j + 16 in the
/// high nibble; bit 4 of element i is bit i of the little-endian u32 qh.
fn pack_q5(code: impl Fn(usize) -> u8) -> Vec<u8> {
    let qh: u32 = (0..32).map(|i| u32::from(code(i) >> 4) << i).sum();
    let mut b = qh.to_le_bytes().to_vec();
    b.extend((0..16).map(|j| (code(j) & 0xF) | ((code(j + 16) & 0xF) << 4)));
    b
}

#[test]
fn q5_0_and_q5_1_blocks() {
    let code = |i: usize| ((i * 7 + 3) % 32) as u8;
    let mut b = h(0.5).to_vec();
    b.extend(pack_q5(code));
    assert_eq!(b.len(), 22);
    let expected: Vec<f32> = (0..32).map(|i| 0.5 * (code(i) as f32 - 16.0)).collect();
    assert_eq!(deq(GgmlType::Q5_0, &b, 32), expected);
    // element 4: code 31 -> 0.5 * 15 = 7.5; element 9: code 2 -> -7
    assert_eq!((expected[4], expected[9]), (7.5, -7.0));

    let mut b = h(0.25).to_vec();
    b.extend(h(-2.0));
    b.extend(pack_q5(code));
    assert_eq!(b.len(), 24);
    let expected: Vec<f32> = (0..32).map(|i| 0.25 * code(i) as f32 - 2.0).collect();
    assert_eq!(deq(GgmlType::Q5_1, &b, 32), expected);

    // qh bit 17 -> element 17 gains 16 steps; qs[1] high nibble bit 0 -> element 17 one step.
    let mut b = vec![0u8; 22];
    b[..2].copy_from_slice(&h(1.0));
    b[2 + 2] = 0x02; // qh bit 17
    b[6 + 1] = 0x10;
    let y = deq(GgmlType::Q5_0, &b, 32);
    assert_eq!(y[17], 1.0);
    assert!(y.iter().enumerate().all(|(i, &v)| i == 17 || v == -16.0));
}

#[test]
fn iq4_nl_block() {
    let code = |i: usize| ((i * 5 + 2) % 16) as u8;
    let mut b = h(0.5).to_vec();
    b.extend((0..16).map(|j| code(j) | (code(j + 16) << 4)));
    let expected: Vec<f32> = (0..32).map(|i| 0.5 * KV[code(i) as usize] as f32).collect();
    assert_eq!(deq(GgmlType::IQ4_NL, &b, 32), expected);
    assert_eq!(expected[0], -41.5); // code 2 -> -83
    assert_eq!(folio_gguf::dequant::KVALUES_IQ4NL, KV);
}

#[test]
fn iq4_xs_block() {
    let ls = |ib: usize| ((ib * 9 + 5) % 64) as u16; // 5, 14, 23, ..., 63 + wrap
    let code = |i: usize| ((i * 11 + 4) % 16) as u8;
    let d = 0.25f32;
    let mut b = h(d).to_vec();
    let scales_h: u16 = (0..8).map(|ib| (ls(ib) >> 4) << (2 * ib)).sum();
    b.extend(scales_h.to_le_bytes());
    b.extend((0..4).map(|k| (ls(2 * k) & 0xF) as u8 | (((ls(2 * k + 1) & 0xF) as u8) << 4)));
    for ib in 0..8 {
        b.extend((0..16).map(|j| code(32 * ib + j) | (code(32 * ib + 16 + j) << 4)));
    }
    assert_eq!(b.len(), 136);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * (ls(i / 32) as f32 - 32.0) * KV[code(i) as usize] as f32)
        .collect();
    assert_eq!(deq(GgmlType::IQ4_XS, &b, 256), expected);
    // element 0: ls 5, code 4 (-49): 0.25 * -27 * -49 = 330.75
    assert_eq!(expected[0], 330.75);
}

/// Element 128n + 32j + l of Q2_K/Q3_K keeps its 2 low bits in byte 32n + l, bits 2j..2j+1.
fn pack_2bit(code: impl Fn(usize) -> u8) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for i in 0..256 {
        qs[32 * (i / 128) + i % 32] |= (code(i) & 3) << (2 * ((i % 128) / 32));
    }
    qs
}

#[test]
fn q2_k_block() {
    let sc = |s: usize| ((s * 5 + 1) % 16) as u8;
    let mn = |s: usize| ((s * 3 + 2) % 16) as u8;
    let code = |i: usize| ((i * 7 + i / 16) % 4) as u8;
    let (d, dmin) = (0.5f32, 0.25f32);
    let mut b: Vec<u8> = (0..16).map(|s| sc(s) | (mn(s) << 4)).collect();
    b.extend(pack_2bit(code));
    b.extend(h(d));
    b.extend(h(dmin));
    assert_eq!(b.len(), 84);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * sc(i / 16) as f32 * code(i) as f32 - dmin * mn(i / 16) as f32)
        .collect();
    let got = deq(GgmlType::Q2_K, &b, 256);
    assert_eq!(got, expected);
    // element 255: sub-block 15 (scale 12, min 15), code (1785 + 15) % 4 = 0 -> -3.75
    assert_eq!(got[255], -3.75);

    // probes: scales 1, mins 0, d 1, codes 0 -> all zero; one qs bit moves one element.
    let mut base = vec![0u8; 84];
    base[..16].fill(1);
    base[80..82].copy_from_slice(&h(1.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q2_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(16, 0), (0, 1.0));
    assert_eq!(probe(16, 3), (32, 2.0));
    assert_eq!(probe(16 + 32 + 5, 6), (128 + 96 + 5, 1.0));
    assert_eq!(probe(16 + 20, 4), (64 + 20, 1.0));
}

/// Q3_K scales[12]: scale s (6 bits) has its low 4 bits in byte s%8 (low nibble for s < 8)
/// and its high 2 bits in byte 8 + s%4 at bits 2*(s/4) (gguf-py's IIIIAAAA ... PPLLHHDD).
fn pack_q3_scales(sc: impl Fn(usize) -> u8) -> [u8; 12] {
    let mut s = [0u8; 12];
    for k in 0..16 {
        s[k % 8] |= (sc(k) & 0xF) << (4 * (k / 8));
        s[8 + k % 4] |= (sc(k) >> 4) << (2 * (k / 4));
    }
    s
}

#[test]
fn q3_k_block() {
    let sc = |s: usize| ((s * 11 + 7) % 64) as u8;
    let code = |i: usize| ((i * 3 + i / 32) % 8) as u8; // value code - 4
    let d = 0.5f32;
    // hmask[l] bit 4n + j: bit 2 of the code of element 128n + 32j + l.
    let mut hmask = [0u8; 32];
    for i in 0..256 {
        hmask[i % 32] |= (code(i) >> 2) << (4 * (i / 128) + (i % 128) / 32);
    }
    let mut b = hmask.to_vec();
    b.extend(pack_2bit(code));
    b.extend(pack_q3_scales(sc));
    b.extend(h(d));
    assert_eq!(b.len(), 110);
    let unpacked = folio_gguf::dequant::q3_k_scales(&b[96..108]);
    assert_eq!(unpacked.to_vec(), (0..16).map(sc).collect::<Vec<_>>());
    let expected: Vec<f32> = (0..256)
        .map(|i| d * (sc(i / 16) as f32 - 32.0) * (code(i) as f32 - 4.0))
        .collect();
    let got = deq(GgmlType::Q3_K, &b, 256);
    assert_eq!(got, expected);
    // element 0: scale 7, code 0 -> 0.5 * -25 * -4 = 50
    assert_eq!(got[0], 50.0);

    // probes: all high bits set, scales 33 (-> 1), d 1 -> all zero.
    let mut base = vec![0u8; 110];
    base[..32].fill(0xFF);
    base[96..108].copy_from_slice(&pack_q3_scales(|_| 33));
    base[108..110].copy_from_slice(&h(1.0));
    assert!(deq(GgmlType::Q3_K, &base, 256).iter().all(|&v| v == 0.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] ^= 1 << bit;
        let y = deq(GgmlType::Q3_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(32 + 32 + 3, 2), (128 + 32 + 3, 1.0));
    assert_eq!(probe(5, 4), (128 + 5, -4.0)); // hmask[5] bit 4: n = 1, j = 0
    assert_eq!(probe(31, 3), (96 + 31, -4.0));
}

#[test]
fn q5_k_block() {
    let sc = [3u8, 17, 63, 0, 40, 33, 5, 62];
    let m = [1u8, 60, 20, 31, 47, 16, 63, 2];
    let (d, dmin) = (0.5f32, 0.25f32);
    let q = |i: usize| ((i * 13 + i / 64 + 3) % 32) as u8;
    let mut b = h(d).to_vec();
    b.extend(h(dmin));
    b.extend(pack_k4_scales(sc, m));
    // qh[l] bit s: bit 4 of element 32s + l.
    b.extend((0..32).map(|l| (0..8).map(|s| (q(32 * s + l) >> 4) << s).sum::<u8>()));
    for c in 0..4 {
        for l in 0..32 {
            b.push((q(64 * c + l) & 0xF) | ((q(64 * c + 32 + l) & 0xF) << 4));
        }
    }
    assert_eq!(b.len(), 176);
    let expected: Vec<f32> = (0..256)
        .map(|i| (d * sc[i / 32] as f32) * q(i) as f32 - dmin * m[i / 32] as f32)
        .collect();
    let got = deq(GgmlType::Q5_K, &b, 256);
    assert_eq!(got, expected);
    // element 2: q = 29, sc 3, m 1 -> 1.5 * 29 - 0.25 = 43.25
    assert_eq!(got[2], 43.25);
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
