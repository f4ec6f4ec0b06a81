//! The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): dequantization equal bit for
//! bit to gguf-py's (llama.cpp's independent numpy implementation), the parsed form's round
//! trip, and the reference quantizer's error.

use folio_gguf::dequant::dequantize;
use folio_gguf::iquant::{self, parse, write, TYPES};
use folio_gguf::quant::quantize;
use folio_gguf::GgmlType;

/// The blocks of `tests/crosscheck/iquant_vectors.py`: a 64-bit LCG, top byte per step,
/// then a sane f16 scale written over the first two bytes.
fn blocks(seed: u64, n: usize, size: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = vec![0u8; n * size];
    for b in out.chunks_exact_mut(size) {
        for v in b.iter_mut() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v = (x >> 56) as u8;
        }
        let d = 0x2000 | ((b[1] as u16 & 0x83) << 8) | b[0] as u16;
        b[..2].copy_from_slice(&d.to_le_bytes());
    }
    out
}

fn fnv(vals: &[f32]) -> u64 {
    let mut h = 0xcbf29ce484222325u64;
    for b in vals.iter().flat_map(|v| v.to_le_bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

#[test]
fn dequantization_matches_gguf_py_vectors() {
    // Printed by `python3 tests/crosscheck/iquant_vectors.py` (gguf 0.19).
    let expected = [
        (GgmlType::IQ2_XXS, 0x3b6402153f5f2372u64, 0.420928f32),
        (GgmlType::IQ2_XS, 0xbe672f36475ab4fd, -0.22197723),
        (GgmlType::IQ2_S, 0xf135bf2c5b320d42, -0.29953766),
        (GgmlType::IQ3_XXS, 0xaa5b70f11fbad991, 0.19249725),
        (GgmlType::IQ3_S, 0x68b4c632131d9c21, -0.84169006),
    ];
    for (ty, hash, first) in expected {
        let size = ty.type_size().unwrap();
        let b = blocks(ty.to_u32() as u64, 16, size);
        let mut y = vec![0f32; 16 * 256];
        dequantize(ty, &b, &mut y).unwrap();
        assert_eq!(y[0], first, "{ty}");
        assert_eq!(fnv(&y), hash, "{ty}: dequantization differs from gguf-py's");
    }
}

#[test]
fn parsed_blocks_write_back_to_the_same_bytes() {
    for ty in TYPES {
        let size = ty.type_size().unwrap();
        for b in blocks(7 + ty.to_u32() as u64, 32, size).chunks_exact(size) {
            let k = parse(ty, b);
            let mut out = vec![0u8; size];
            write(ty, &k, &mut out);
            assert_eq!(out, b, "{ty}");
        }
    }
}

#[test]
fn dequantized_values_are_scale_times_grid_values() {
    use half::f16;
    for ty in TYPES {
        let size = ty.type_size().unwrap();
        let b = blocks(99, 1, size);
        let k = parse(ty, &b);
        let v = iquant::values(ty, &k);
        let mags = iquant::magnitudes(ty);
        assert!(v.iter().all(|x| mags.contains(&x.unsigned_abs())), "{ty}");
        let mut y = vec![0f32; 256];
        dequantize(ty, &b, &mut y).unwrap();
        let d = f16::from_bits(k.d).to_f32();
        for i in 0..256 {
            assert_eq!(
                y[i],
                iquant::db(ty, d, k.ls[i / 16]) * v[i] as f32,
                "{ty} {i}"
            );
        }
    }
}

#[test]
fn quantizer_round_trip_error_is_bounded() {
    let mut x = 12345u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let src: Vec<f32> = (0..1024).map(|_| next() * 0.1).collect();
    let rms = (src.iter().map(|v| v * v).sum::<f32>() / src.len() as f32).sqrt();
    for (ty, bound) in [
        (GgmlType::IQ2_XXS, 0.4),
        (GgmlType::IQ2_XS, 0.37),
        (GgmlType::IQ2_S, 0.3),
        (GgmlType::IQ3_XXS, 0.25),
        (GgmlType::IQ3_S, 0.17),
    ] {
        let q = quantize(ty, &src).unwrap();
        assert_eq!(q.len(), 4 * ty.type_size().unwrap());
        let mut y = vec![0f32; src.len()];
        dequantize(ty, &q, &mut y).unwrap();
        let err = (src
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f32>()
            / src.len() as f32)
            .sqrt();
        eprintln!("{ty}: relative rms error {}", err / rms);
        assert!(err / rms < bound, "{ty}: relative rms error {}", err / rms);
    }
    // An all-zero block quantizes to zeros.
    for ty in TYPES {
        let q = quantize(ty, &[0.0; 256]).unwrap();
        let mut y = vec![1f32; 256];
        dequantize(ty, &q, &mut y).unwrap();
        assert!(y.iter().all(|v| *v == 0.0), "{ty}");
    }
}
