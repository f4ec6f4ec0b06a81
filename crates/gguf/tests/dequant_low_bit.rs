//! MXFP4, TQ1_0, TQ2_0, IQ1_S and IQ1_M against gguf-py (llama.cpp's independent numpy
//! implementation): its outputs on random blocks are pinned in testdata/ggml-low-bit/ by
//! tests/crosscheck/pin_low_bit.py. Dequantization must match bit for bit, and so must the
//! reference quantizers of MXFP4, TQ1_0 and TQ2_0 (ggml's `quantize_row_*_ref`).

use std::path::PathBuf;

use folio_gguf::dequant::{dequantize, e8m0_to_f32_half};
use folio_gguf::quant::quantize;
use folio_gguf::GgmlType;

fn pinned(file: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/ggml-low-bit")
        .join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const TYPES: [(&str, GgmlType, u32, usize, usize); 5] = [
    ("MXFP4", GgmlType::MXFP4, 39, 32, 17),
    ("TQ1_0", GgmlType::TQ1_0, 34, 256, 54),
    ("TQ2_0", GgmlType::TQ2_0, 35, 256, 66),
    ("IQ1_S", GgmlType::IQ1_S, 19, 256, 50),
    ("IQ1_M", GgmlType::IQ1_M, 29, 256, 56),
];

#[test]
fn ids_and_geometry_are_ggmls() {
    for (name, ty, id, bs, ts) in TYPES {
        assert_eq!(GgmlType::from_u32(id), ty);
        assert_eq!(ty.to_u32(), id);
        assert_eq!(ty.name(), Some(name));
        assert_eq!(format!("{ty}"), name);
        assert_eq!(
            (ty.block_size(), ty.type_size()),
            (Some(bs), Some(ts)),
            "{name}"
        );
    }
}

#[test]
fn dequantization_matches_gguf_py_bit_for_bit() {
    for (name, ty, _, bs, ts) in TYPES {
        let blocks = pinned(&format!("{name}.blocks"));
        let want = f32s(&pinned(&format!("{name}.f32")));
        assert_eq!((blocks.len(), want.len()), (8 * ts, 8 * bs), "{name}");
        let mut got = vec![f32::NAN; want.len()];
        dequantize(ty, &blocks, &mut got).unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name} value {i}: folio {a} gguf-py {b}"
            );
        }
    }
}

#[test]
fn quantizers_match_gguf_py_bit_for_bit() {
    for name in ["MXFP4", "TQ1_0", "TQ2_0"] {
        let ty = TYPES.iter().find(|t| t.0 == name).unwrap().1;
        let src = f32s(&pinned(&format!("q_{name}.src")));
        assert_eq!(
            quantize(ty, &src).unwrap(),
            pinned(&format!("q_{name}.bin")),
            "{name}"
        );
    }
}

#[test]
fn e8m0_half_scale_covers_the_subnormals() {
    assert_eq!(e8m0_to_f32_half(0).to_bits(), 0x0020_0000); // 2^-128
    assert_eq!(e8m0_to_f32_half(1).to_bits(), 0x0040_0000); // 2^-127
    assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
    assert_eq!(e8m0_to_f32_half(128), 1.0);
    assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
}

/// Hand-built blocks against hand formulas: one value of each kind per type.
#[test]
fn hand_built_blocks() {
    let deq = |ty: GgmlType, b: &[u8], n: usize| {
        let mut y = vec![0.0; n];
        dequantize(ty, b, &mut y).unwrap();
        y
    };
    // MXFP4: e = 129 -> d = 2; nibble 7 = +12, nibble 13 = -6.
    let mut b = vec![129u8];
    b.extend([0x7D; 16]);
    let y = deq(GgmlType::MXFP4, &b, 32);
    assert_eq!((y[0], y[16]), (-12.0, 24.0));
    // TQ2_0: qs[0] = 0b10_01_00_10 -> elements 0, 32, 64, 96 = +1, -1, 0, +1 (times d = 0.5).
    let mut b = vec![0u8; 66];
    b[0] = 0b1001_0010;
    b[64..66].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    let y = deq(GgmlType::TQ2_0, &b, 256);
    assert_eq!(
        (y[0], y[32], y[64], y[96], y[1]),
        (0.5, -0.5, 0.0, 0.5, -0.5)
    );
    // TQ1_0: the byte for digits (2, 0, 1, 1, 2) most significant first: q = 2*81 + 0 + 9 + 3
    // + 2 = 176, stored as ceil(176 * 256 / 243) = 186.
    let mut b = vec![0u8; 54];
    b[0] = 186;
    b[52..54].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
    let y = deq(GgmlType::TQ1_0, &b, 256);
    assert_eq!(
        [y[0], y[32], y[64], y[96], y[128]],
        [1.0, -1.0, 0.0, 0.0, 1.0]
    );
    // IQ1_S: grid entry 0 is all -1; scale 3 -> dl = 7d; delta sign bit set -> -1/8.
    let mut b = vec![0u8; 50];
    b[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
    b[34..36].copy_from_slice(&(0x8000u16 | (3 << 12)).to_le_bytes());
    let y = deq(GgmlType::IQ1_S, &b, 256);
    assert_eq!(y[0], 7.0 * (-1.0 - 0.125));
    // IQ1_M: d = 1.0 (f16 0x3C00 spread over the nibbles), first half scale 2 -> dl = 5.
    let mut b = vec![0u8; 56];
    let words: [u16; 4] = [2, 0, 0xC000, 0x3000];
    for (i, w) in words.iter().enumerate() {
        b[48 + 2 * i..50 + 2 * i].copy_from_slice(&w.to_le_bytes());
    }
    let y = deq(GgmlType::IQ1_M, &b, 256);
    assert_eq!(y[0], 5.0 * (-1.0 + 0.125));
}

/// Every new type's quantizer round-trips Gaussian values with the error its few levels
/// allow (relative RMS error, measured: MXFP4 0.12; TQ1_0 / TQ2_0 0.83, as ggml's
/// reference scale d = amax rounds most values to 0; IQ1_S 0.61, IQ1_M 0.53), and an
/// all-zero block stays 0.
#[test]
fn quantizers_round_trip() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let x: Vec<f32> = (0..2048)
        .map(|_| {
            let (a, b): (f32, f32) = (rng.gen_range(1e-6..1.0), rng.gen_range(0.0..1.0));
            (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos() * 0.1
        })
        .collect();
    let rms = |v: &[f32]| (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32).sqrt();
    for (name, ty, _, _, _) in TYPES {
        let q = quantize(ty, &x).unwrap();
        let mut y = vec![0.0; x.len()];
        dequantize(ty, &q, &mut y).unwrap();
        let err: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
        let rel = rms(&err) / rms(&x);
        eprintln!("{name}: relative RMS error {rel}");
        let bound = match name {
            "MXFP4" => 0.15,
            "IQ1_S" => 0.7,
            "IQ1_M" => 0.6,
            _ => 0.9,
        };
        assert!(rel < bound, "{name}: {rel}");
        let zero = quantize(ty, &[0.0; 256]).unwrap();
        let mut y = vec![1.0; 256];
        dequantize(ty, &zero, &mut y).unwrap();
        assert!(y.iter().all(|v| *v == 0.0), "{name}");
    }
}
