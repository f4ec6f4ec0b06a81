//! The forward pass of a tiny llama against the plain f32 reference for every weight
//! type, and of a Q4_K_M-like file whose matrices mix types.

use folio_testkit::tiny as common;

use common::build_with;
use common::reference::{check, check_file, SHAPE};
use folio_gguf::GgmlType;

// The reference dequantizes the same stored weights, so weight quantization itself is not
// in the error; see `tolerance`.
#[test]
fn llama_every_type_matches_reference() {
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
    ] {
        check("llama", ty);
    }
}

/// The low-bit types (GPT-OSS's MXFP4, the ternary TQ1_0 / TQ2_0, the 1-bit grids IQ1_S /
/// IQ1_M), each a whole tiny model.
#[test]
fn llama_low_bit_types_match_reference() {
    for ty in [
        GgmlType::MXFP4,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ] {
        check("llama", ty);
    }
}

/// A Q4_K_M-like file: Q4_K matrices with Q6_K V projections, FFN down and output (the
/// fused Q/K/V then stacks parts of two types).
#[test]
fn mixed_types_match_reference() {
    let ty_of = |name: &str| {
        if name.contains("attn_v") || name.contains("ffn_down") || name == "output.weight" {
            GgmlType::Q6_K
        } else if name.contains("attn_k") {
            GgmlType::Q5_0
        } else {
            GgmlType::Q4_K
        }
    };
    for arch in ["llama", "qwen2"] {
        check_file(arch, GgmlType::Q4_K, build_with(&SHAPE, arch, &ty_of, 42));
    }
}
