//! Checks against the real default model; skipped (with a notice) when it is absent.

use std::path::PathBuf;

use folio_gguf::{GgmlType, GgufFile};

fn model_path() -> Option<PathBuf> {
    let path = std::env::var_os("FOLIO_MODEL")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| {
                PathBuf::from(h).join(".cache/folio/models/SmolLM2-135M-Instruct.Q4_1.gguf")
            })
        })?;
    if path.exists() {
        Some(path)
    } else {
        eprintln!("SKIP: model file {} not found", path.display());
        None
    }
}

#[test]
fn real_model_header() {
    let Some(path) = model_path() else { return };
    let f = GgufFile::open(&path).expect("real model opens");
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u64("llama.embedding_length").unwrap(), 576);
    assert_eq!(f.get_u64("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(f.get_u64("llama.attention.head_count").unwrap(), 9);
    assert_eq!(f.get_u64("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );

    let count = |ty| f.tensors().iter().filter(|t| t.ggml_type == ty).count();
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(count(GgmlType::Q4_1), 210);
    assert_eq!(count(GgmlType::F32), 61);
    assert_eq!(count(GgmlType::Q8_0), 1);

    let emb = f.tensor("token_embd.weight").expect("token_embd.weight");
    assert_eq!(emb.ggml_type, GgmlType::Q8_0);
    assert_eq!(emb.dims, vec![576, 49152]);
    assert_eq!((emb.cols(), emb.rows()), (576, 49152));
    assert_eq!(emb.n_bytes, 49152 * 576 / 32 * 34);
    assert_eq!(f.tensor_data(emb).len(), emb.n_bytes);

    // Every tensor lies in the file, aligned, and dequantizes to finite values.
    let len = f.bytes().len() as u64;
    for t in f.tensors() {
        assert!(t.offset + t.n_bytes as u64 <= len, "{}", t.name);
        assert_eq!((t.offset - f.data_offset()) % 32, 0, "{}", t.name);
    }
    let norm = f.tensor_f32("blk.0.attn_norm.weight").unwrap();
    assert_eq!(norm.len(), 576);
    assert!(norm.iter().all(|v| v.is_finite()));
    let q = f.tensor_f32("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.len(), 576 * 576);
    assert!(q.iter().all(|v| v.is_finite() && v.abs() < 100.0));
    let mean_abs = q.iter().map(|v| v.abs() as f64).sum::<f64>() / q.len() as f64;
    assert!(mean_abs > 1e-4 && mean_abs < 1.0, "mean |w| {mean_abs}");
}
