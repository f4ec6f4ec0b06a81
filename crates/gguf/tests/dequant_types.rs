//! F32/F16/BF16 dequantization and ggml's BF16 rounding, the ggml type table (block
//! geometry, ids, names), and length and unsupported-type errors.

mod common;

use common::deq;
use folio_gguf::dequant::dequantize;
use folio_gguf::quant::{f32_to_bf16, quantize};
use folio_gguf::{GgmlType, GgufError};

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
    // Unknown layout: NVFP4 (id 40). Display and Debug both name the type.
    let err = dequantize(GgmlType::from_u32(40), &[0; 66], &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor type NVFP4 (ggml type 40) is not supported for sizing (unknown block layout)"
    );
    assert!(format!("{err:?}").contains("NVFP4"), "{err:?}");
    assert!(!format!("{err:?}").contains("Other("), "{err:?}");
    let err = quantize(GgmlType::from_u32(40), &[0.0; 256]).unwrap_err();
    assert!(err.to_string().contains("NVFP4"), "{err}");
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
        (IQ2_XXS, 256, 66),
        (IQ2_XS, 256, 74),
        (IQ2_S, 256, 82),
        (IQ3_XXS, 256, 98),
        (IQ3_S, 256, 110),
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
        (16, IQ2_XXS, "IQ2_XXS"),
        (17, IQ2_XS, "IQ2_XS"),
        (18, IQ3_XXS, "IQ3_XXS"),
        (21, IQ3_S, "IQ3_S"),
        (22, IQ2_S, "IQ2_S"),
    ] {
        assert_eq!((GgmlType::from_u32(id), ty.to_u32()), (ty, id));
        assert_eq!(
            (ty.to_string(), format!("{ty:?}")),
            (name.into(), name.into())
        );
    }
    assert_eq!(GgmlType::from_u32(40), Other(40));
    assert_eq!(format!("{:?}", Other(40)), "NVFP4 (ggml type 40)");
    assert_eq!(Other(34).to_string(), "TQ1_0 (ggml type 34)");
    assert_eq!(Other(40).block_size(), None);
    assert_eq!(Other(40).to_string(), "NVFP4 (ggml type 40)");
    assert_eq!(Other(1000).to_string(), "unknown ggml type 1000");
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
