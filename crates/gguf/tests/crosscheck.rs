//! Cross-check against llama.cpp's independent Python implementation (gguf-py).
//!
//! Skipped unless FOLIO_GGUF_CROSSCHECK names a folder made by `tests/crosscheck/gen.py`
//! (needs `pip install gguf numpy`). Compares dequantization of random blocks, the
//! reference quantizers, and reading a file written by gguf-py's GGUFWriter.

use std::path::PathBuf;

use folio_gguf::dequant::dequantize;
use folio_gguf::quant::quantize;
use folio_gguf::{GgmlType, GgufFile, Value};

fn dir() -> Option<PathBuf> {
    match std::env::var_os("FOLIO_GGUF_CROSSCHECK") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!(
                "SKIP: set FOLIO_GGUF_CROSSCHECK to a folder made by tests/crosscheck/gen.py"
            );
            None
        }
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const TYPES: [(&str, GgmlType); 17] = [
    ("Q4_0", GgmlType::Q4_0),
    ("Q4_1", GgmlType::Q4_1),
    ("Q8_0", GgmlType::Q8_0),
    ("Q4_K", GgmlType::Q4_K),
    ("Q6_K", GgmlType::Q6_K),
    ("Q5_0", GgmlType::Q5_0),
    ("Q5_1", GgmlType::Q5_1),
    ("Q2_K", GgmlType::Q2_K),
    ("Q3_K", GgmlType::Q3_K),
    ("Q5_K", GgmlType::Q5_K),
    ("IQ4_NL", GgmlType::IQ4_NL),
    ("IQ4_XS", GgmlType::IQ4_XS),
    ("IQ2_XXS", GgmlType::IQ2_XXS),
    ("IQ2_XS", GgmlType::IQ2_XS),
    ("IQ2_S", GgmlType::IQ2_S),
    ("IQ3_XXS", GgmlType::IQ3_XXS),
    ("IQ3_S", GgmlType::IQ3_S),
];

#[test]
fn dequantization_matches_gguf_py() {
    let Some(dir) = dir() else { return };
    for (name, ty) in TYPES {
        let blocks = std::fs::read(dir.join(format!("deq_{name}.bin"))).unwrap();
        let expected = f32s(&std::fs::read(dir.join(format!("deq_{name}.f32"))).unwrap());
        let mut got = vec![0.0; expected.len()];
        assert_eq!(blocks.len(), 64 * ty.type_size().unwrap(), "{name}");
        dequantize(ty, &blocks, &mut got).unwrap();
        // gguf-py computes in float32 with ggml's operation order: results are bit-identical.
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name} value {i}: folio {a} gguf-py {b}"
            );
        }
    }
}

#[test]
fn quantizers_match_gguf_py() {
    let Some(dir) = dir() else { return };
    for (name, ty) in [
        ("Q4_0", GgmlType::Q4_0),
        ("Q4_1", GgmlType::Q4_1),
        ("Q5_0", GgmlType::Q5_0),
        ("Q5_1", GgmlType::Q5_1),
        ("Q8_0", GgmlType::Q8_0),
        ("BF16", GgmlType::BF16),
        ("F16", GgmlType::F16),
    ] {
        let src = f32s(&std::fs::read(dir.join(format!("q_{name}.src"))).unwrap());
        let expected = std::fs::read(dir.join(format!("q_{name}.bin"))).unwrap();
        let got = quantize(ty, &src).unwrap();
        let diff = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
        assert_eq!(got.len(), expected.len(), "{name}");
        assert_eq!(diff, 0, "{name}: {diff} bytes differ from gguf-py");
    }
}

#[test]
fn reads_a_file_written_by_gguf_py() {
    let Some(dir) = dir() else { return };
    let f = GgufFile::open(&dir.join("mixed.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(
        f.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert_eq!(
        f.get("tokenizer.ggml.add_bos_token"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap(),
        ["<s>", "a", "héllo"]
    );
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").unwrap(),
        [0.0, -1.5, 2.25]
    );
    assert_eq!(
        f.get_i64_array("tokenizer.ggml.token_type").unwrap(),
        [3, 1, 1]
    );
    assert_eq!(f.get("x.i64"), Some(&Value::I64(-7)));
    assert_eq!(f.get("x.f64"), Some(&Value::F64(0.1)));
    let t = f.tensor("f32").unwrap();
    assert_eq!(t.dims, [4, 2]);
    assert_eq!(
        f.tensor_f32("f32").unwrap(),
        (0..8).map(|i| i as f32).collect::<Vec<_>>()
    );
    let q8 = f.tensor("q8").unwrap();
    assert_eq!(
        (q8.ggml_type, q8.dims.as_slice(), q8.n_bytes),
        (GgmlType::Q8_0, &[32u64, 2][..], 68)
    );
    let v = f.tensor_f32("q8").unwrap();
    assert!(
        (v[0] + 1.0).abs() < 0.01 && (v[63] - 1.0).abs() < 0.01,
        "{} {}",
        v[0],
        v[63]
    );
    assert_eq!(f.tensor_f32("f16").unwrap(), [0.5, -2.0]);
}

#[test]
fn real_model_tensors_match_gguf_py() {
    let Some(dir) = dir() else { return };
    let Ok(model) = std::fs::read_to_string(dir.join("model_path.txt")) else {
        eprintln!("SKIP: gen.py found no model");
        return;
    };
    let f = GgufFile::open(std::path::Path::new(model.trim())).unwrap();
    for name in [
        "blk.0.attn_q.weight",
        "blk.0.attn_norm.weight",
        "token_embd.weight",
    ] {
        let expected = f32s(&std::fs::read(dir.join(format!("model_{name}.f32"))).unwrap());
        let got = f.tensor_f32(name).unwrap();
        assert_eq!(got.len(), expected.len(), "{name}");
        let diff = got
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(diff, 0, "{name}: {diff} values differ from gguf-py");
    }
}
