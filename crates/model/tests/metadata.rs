//! Implausible metadata fails at load with an error naming the key, the limit and the
//! value, before anything is sized from it (a `block_count` of 2^31 used to abort the
//! process on a huge allocation; NaN epsilons and zero rope dimensions used to load and
//! emit garbage).

use folio_testkit::tiny as common;

use common::{writer, Shape};
use folio_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use folio_model::{Model, ModelError};

const SHAPE: Shape = Shape {
    d: 64,
    heads: 4,
    kv_heads: 2,
    hd: 16,
    ffn: 128,
    vocab: 40,
    layers: 2,
    ctx: 64,
};

fn tiny() -> GgufWriter {
    writer(&SHAPE, "llama", &|_| GgmlType::F32, 7)
}

/// Loads the tiny model with `key` set to `value`; returns the error.
fn load_with(key: &str, value: Value) -> ModelError {
    let mut w = tiny();
    w.add_metadata(key, value);
    load(w)
}

fn load(w: GgufWriter) -> ModelError {
    let f = GgufFile::from_bytes(w.to_bytes()).expect("valid gguf");
    match Model::from_gguf(&f) {
        Ok(_) => panic!("loaded"),
        Err(e) => e,
    }
}

/// A `Metadata` error for `key` whose message names the key and holds every `parts`.
fn assert_metadata(e: ModelError, key: &str, parts: &[&str]) {
    let msg = e.to_string();
    match &e {
        ModelError::Metadata { key: k, .. } => assert_eq!(k, key, "{msg}"),
        other => panic!("expected a Metadata error for {key}, got {other:?}"),
    }
    assert!(msg.contains(key), "{msg}");
    for p in parts {
        assert!(msg.contains(p), "{msg} lacks {p}");
    }
}

#[test]
fn the_tiny_model_loads() {
    let f = GgufFile::from_bytes(tiny().to_bytes()).unwrap();
    Model::from_gguf(&f).expect("baseline loads");
}

#[test]
fn huge_block_count_is_an_error_not_an_abort() {
    let e = load_with("llama.block_count", Value::U32(1 << 31));
    assert_metadata(e, "llama.block_count", &["2147483648", "1024"]);
}

#[test]
fn huge_embedding_length_is_refused() {
    let e = load_with("llama.embedding_length", Value::U64(1 << 40));
    assert_metadata(e, "llama.embedding_length", &["1099511627776", "65536"]);
}

#[test]
fn huge_head_counts_are_refused() {
    let e = load_with("llama.attention.head_count", Value::U32(4096));
    assert_metadata(e, "llama.attention.head_count", &["4096", "1..=1024"]);
    let e = load_with("llama.attention.head_count_kv", Value::U32(0));
    assert_metadata(e, "llama.attention.head_count_kv", &["0", "1..=1024"]);
}

#[test]
fn huge_ffn_length_is_refused() {
    let e = load_with("llama.feed_forward_length", Value::U64(1 << 33));
    assert_metadata(e, "llama.feed_forward_length", &["8589934592", "262144"]);
}

#[test]
fn huge_context_length_is_refused() {
    let e = load_with("llama.context_length", Value::U64(1 << 40));
    assert_metadata(e, "llama.context_length", &["1099511627776", "16777216"]);
}

#[test]
fn huge_vocab_is_refused() {
    let e = load_with("llama.vocab_size", Value::U64(1 << 32));
    assert_metadata(e, "llama.vocab_size", &["4294967296", "4194304"]);
}

#[test]
fn bad_rms_epsilon_is_refused() {
    let k = "llama.attention.layer_norm_rms_epsilon";
    assert_metadata(load_with(k, Value::F32(f32::NAN)), k, &["NaN", "> 0"]);
    assert_metadata(load_with(k, Value::F32(-1e-5)), k, &["-0.00001", "> 0"]);
}

#[test]
fn bad_rope_freq_base_is_refused() {
    let k = "llama.rope.freq_base";
    assert_metadata(load_with(k, Value::F32(f32::NAN)), k, &["NaN", "> 0"]);
    assert_metadata(load_with(k, Value::F32(-10000.0)), k, &["-10000", "> 0"]);
    assert_metadata(
        load_with(k, Value::F32(f32::INFINITY)),
        k,
        &["inf", "finite"],
    );
}

#[test]
fn bad_rope_dimension_is_refused() {
    let k = "llama.rope.dimension_count";
    assert_metadata(load_with(k, Value::U32(0)), k, &["0", "2..=16"]);
    assert_metadata(load_with(k, Value::U32(7)), k, &["7", "even"]);
    assert_metadata(load_with(k, Value::U32(32)), k, &["32", "2..=16"]);
}

#[test]
fn value_head_size_must_match_key_head_size() {
    let k = "llama.attention.value_length";
    assert_metadata(load_with(k, Value::U32(8)), k, &["8", "16"]);
}

/// A tensor that disagrees with the keys names the key that sets the wrong dimension, and
/// is found before any matrix is repacked (the bad tensor is in the last layer).
#[test]
fn tensor_shape_names_the_key() {
    let mut w = tiny();
    // A third layer whose FFN down has the wrong inner size.
    w.add_metadata("llama.block_count", Value::U32(3));
    let base = GgufFile::from_bytes(tiny().to_bytes()).unwrap();
    for s in [
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
    ] {
        let name = format!("blk.1.{s}.weight");
        let t = base.tensor(&name).unwrap();
        w.add_tensor_f32(
            &format!("blk.2.{s}.weight"),
            &t.dims,
            GgmlType::F32,
            &base.tensor_f32(&name).unwrap(),
        )
        .unwrap();
    }
    w.add_tensor_f32(
        "blk.2.ffn_down.weight",
        &[64, 64],
        GgmlType::F32,
        &[0.0; 64 * 64],
    )
    .unwrap();
    let e = load(w);
    let msg = e.to_string();
    assert!(
        matches!(&e, ModelError::Tensor { name, .. } if name == "blk.2.ffn_down.weight"),
        "{msg}"
    );
    assert!(msg.contains("llama.feed_forward_length = 128"), "{msg}");
}

fn config_of(w: GgufWriter) -> folio_model::ModelConfig {
    let f = GgufFile::from_bytes(w.to_bytes()).expect("valid gguf");
    Model::from_gguf(&f).expect("loads").config
}

/// `rope.scaling.*` read as llama.cpp reads it (llama-model.cpp, llama-context.cpp).
#[test]
fn rope_scaling_keys_follow_llama_cpp() {
    // YaRN, factor 4 over an original context of 16: ext_factor 1, and the magnitude
    // get_mscale(4) / (1 + 0.1 ln 4) = 1 times rope.scaling.attn_factor.
    let mut w = tiny();
    w.add_metadata("llama.rope.scaling.type", Value::String("yarn".into()))
        .add_metadata("llama.rope.scaling.factor", Value::F32(4.0))
        .add_metadata("llama.rope.scaling.original_context_length", Value::U32(16))
        .add_metadata("llama.rope.scaling.attn_factor", Value::F32(1.1));
    let c = config_of(w);
    assert_eq!(c.rope_freq_scale, 0.25);
    assert_eq!(c.rope_yarn.ext_factor, 1.0);
    assert!(
        (c.rope_yarn.attn_factor - 1.1).abs() < 1e-6,
        "{:?}",
        c.rope_yarn
    );
    assert_eq!((c.rope_yarn.beta_fast, c.rope_yarn.beta_slow), (32.0, 1.0));
    assert_eq!(c.rope_yarn.orig_ctx, 16);
    // No type: linear, as llama.cpp's default; the factor applies.
    let mut w = tiny();
    w.add_metadata("llama.rope.scaling.factor", Value::F32(2.0));
    let c = config_of(w);
    assert_eq!((c.rope_freq_scale, c.rope_yarn.ext_factor), (0.5, 0.0));
    assert_eq!(c.rope_yarn.orig_ctx, SHAPE.ctx);
    // none: never scaled.
    let mut w = tiny();
    w.add_metadata("llama.rope.scaling.type", Value::String("none".into()))
        .add_metadata("llama.rope.scaling.factor", Value::F32(2.0));
    assert_eq!(config_of(w).rope_freq_scale, 1.0);
    // Unknown types and bad factors are refused naming the key.
    let k = "llama.rope.scaling.type";
    assert_metadata(
        load_with(k, Value::String("ntk".into())),
        k,
        &["ntk", "yarn"],
    );
    let k = "llama.rope.scaling.factor";
    assert_metadata(load_with(k, Value::F32(f32::NAN)), k, &["NaN"]);
    let k = "llama.rope.scaling.original_context_length";
    assert_metadata(load_with(k, Value::U32(0)), k, &["0", "16777216"]);
}
