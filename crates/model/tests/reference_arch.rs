//! The forward pass of each dense architecture (qwen2, qwen3, gemma3, gemma2, phi3 with
//! LongRoPE, Mistral's sliding window) and of RoPE variants (Llama 3 `rope_freqs`, YaRN)
//! against the plain f32 reference; a wrong-length `rope_freqs` is refused.

use folio_testkit::tiny as common;

use common::reference::{check, check_file, prompt, reference, CTX, HD, SHAPE, VOCAB};
use common::{build, rel_err, writer};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

/// Llama 3.1-style frequency factors (`rope_freqs.weight`, 1 for the fast pairs up to 8 for
/// the slow ones) through the whole model; without them the logits differ.
#[test]
fn llama_rope_freqs_match_reference() {
    let factors: Vec<f32> = (0..HD / 2)
        .map(|i| 1.0 + 7.0 * (i as f32 / (HD / 2 - 1) as f32).powi(2))
        .collect();
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        let mut w = writer(&SHAPE, "llama", &|_| ty, 42);
        w.add_tensor_f32(
            "rope_freqs.weight",
            &[HD as u64 / 2],
            GgmlType::F32,
            &factors,
        )
        .expect("f32");
        check_file("llama", ty, w.to_bytes());
    }
    // The factors matter: the model without them is off against this reference.
    let mut w = writer(&SHAPE, "llama", &|_| GgmlType::F32, 42);
    w.add_tensor_f32(
        "rope_freqs.weight",
        &[HD as u64 / 2],
        GgmlType::F32,
        &factors,
    )
    .expect("f32");
    let with = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let plain = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, 42)).unwrap();
    let toks = prompt(1, 19);
    let want = reference(&with, "llama", &toks);
    let model = Model::from_gguf(&plain).unwrap();
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, (0..5).collect(), toks.len());
    let got = model.forward(&b, &mut kv, ThreadPool::global()).unwrap();
    let e = rel_err(&got[18 * VOCAB..], &want[18]);
    assert!(e > 1e-2, "factors made no difference ({e})");
}

/// YaRN (factor 4 over an original context of 1024: pairs 5..18 on the ramp) through the
/// whole model, llama and NeoX pairings, against HF's definition of it.
#[test]
fn yarn_matches_reference() {
    for arch in ["llama", "qwen2"] {
        let mut w = writer(&SHAPE, arch, &|_| GgmlType::F32, 42);
        let k = |s: &str| format!("{arch}.{s}");
        w.add_metadata(
            &k("rope.scaling.type"),
            folio_gguf::Value::String("yarn".into()),
        )
        .add_metadata(&k("rope.scaling.factor"), folio_gguf::Value::F32(4.0))
        .add_metadata(
            &k("rope.scaling.original_context_length"),
            folio_gguf::Value::U32(1024),
        );
        check_file(arch, GgmlType::F32, w.to_bytes());
    }
}

/// A wrong-length `rope_freqs` is an error naming the tensor and the key.
#[test]
fn rope_freqs_of_wrong_length_are_refused() {
    let mut w = writer(&SHAPE, "llama", &|_| GgmlType::F32, 42);
    w.add_tensor_f32("rope_freqs.weight", &[HD as u64], GgmlType::F32, &[1.0; HD])
        .expect("f32");
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let e = Model::from_gguf(&f).err().expect("refused").to_string();
    assert!(
        e.contains("rope_freqs.weight") && e.contains("llama.rope.dimension_count / 2 = 32"),
        "{e}"
    );
}

#[test]
fn qwen2_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0] {
        check("qwen2", ty);
    }
}

#[test]
fn qwen3_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_K, GgmlType::Q6_K] {
        check("qwen3", ty);
    }
}

/// Gemma 3: √d embeddings, Q/K norms, post-norms, GeGLU, a window layer (5 tokens, its own
/// RoPE base) and a global one, soft-capped logits; 19 tokens, so the window matters.
#[test]
fn gemma3_matches_reference() {
    for ty in [
        GgmlType::F32,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
    ] {
        check("gemma3", ty);
    }
}

#[test]
fn phi3_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_K, GgmlType::Q8_0] {
        check("phi3", ty);
    }
    // A context past the original one takes the long LongRoPE factors.
    let mut w = writer(&SHAPE, "phi3", &|_| GgmlType::F32, 42);
    w.add_metadata(
        "phi3.rope.scaling.original_context_length",
        folio_gguf::Value::U32(CTX as u32 / 4),
    );
    check_file("phi3", GgmlType::F32, w.to_bytes());
}

/// Gemma 2: Gemma 3's block without Q/K norms, attention scores soft-capped (a cap of 1.5
/// bends this model's scores), a window layer and a global one.
#[test]
fn gemma2_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        check("gemma2", ty);
    }
}

/// Mistral: a llama file with `attention.sliding_window` attends through a 6-token window
/// in every layer (19 tokens: the window matters from position 6 on).
#[test]
fn mistral_sliding_window_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_0] {
        let mut w = writer(&SHAPE, "llama", &|_| ty, 42);
        w.add_metadata("llama.attention.sliding_window", folio_gguf::Value::U32(6));
        let bytes = w.to_bytes();
        let f = GgufFile::from_bytes(bytes.clone()).expect("tiny gguf");
        let cfg = folio_model::ModelConfig::from_gguf(&f).expect("config");
        assert_eq!(cfg.sliding_window, Some(6));
        assert!(cfg.window_layers.iter().all(|&w| w));
        check_file("llama", ty, bytes);
    }
}
