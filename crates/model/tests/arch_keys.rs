//! glm4 and cohere2 read their switches from the keys and tensors llama.cpp's converter
//! writes, and fail at load naming whichever is missing or misshapen. The files are the
//! oracle fixtures testdata/arch/{glm4,cohere2}.gguf, copied with one change each.

use folio_gguf::{GgufFile, GgufWriter, Value};
use folio_model::{Arch, Model, ModelConfig, ModelError};
use std::path::PathBuf;

fn fixture(arch: &str) -> GgufFile {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/arch/{arch}.gguf"));
    GgufFile::open(&p).expect("fixture")
}

/// A copy of the fixture without `drop_key`, without or with a replaced tensor `tensor`
/// (`None`: dropped; `Some(dims)`: zeros of that shape, added if the file has none).
fn edited(arch: &str, drop_key: &str, tensor: &str, replace: Option<&[u64]>) -> GgufFile {
    let f = fixture(arch);
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != drop_key && k != "general.alignment" {
            w.add_metadata(k, v.clone());
        }
    }
    if let Some(dims) = replace.filter(|_| f.tensor(tensor).is_none()) {
        let n: u64 = dims.iter().product();
        w.add_tensor_f32(
            tensor,
            dims,
            folio_gguf::GgmlType::F32,
            &vec![0.0; n as usize],
        )
        .expect("zeros");
    }
    for t in f.tensors() {
        if t.name != tensor {
            w.add_tensor(&t.name, &t.dims, t.ggml_type, f.tensor_data(t).to_vec());
        }
        if let Some(dims) = replace.filter(|_| t.name == tensor) {
            let n: u64 = dims.iter().product();
            w.add_tensor_f32(&t.name, dims, t.ggml_type, &vec![0.0; n as usize])
                .expect("zeros");
        }
    }
    GgufFile::from_bytes(w.to_bytes()).expect("valid gguf")
}

fn err(f: &GgufFile) -> String {
    match Model::from_gguf(f) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

fn metadata_err(f: &GgufFile, key: &str) {
    match Model::from_gguf(f) {
        Err(ModelError::Metadata { key: k, what }) => assert_eq!(k, key, "{what}"),
        Err(other) => panic!("expected a Metadata error for {key}, got {other}"),
        Ok(_) => panic!("loaded without {key}"),
    }
}

#[test]
fn glm4_config() {
    let c = ModelConfig::from_gguf(&fixture("glm4")).unwrap();
    assert_eq!(c.arch, Arch::Glm4);
    assert_eq!((c.head_dim, c.rope_dim), (16, 8));
    assert!(!c.arch.rope_neox() && c.arch.post_norms() && c.arch.fused_gate_up());
    assert!(!c.layer_norm && !c.parallel_block && c.logit_mul == 1.0);
}

#[test]
fn cohere2_config() {
    let c = ModelConfig::from_gguf(&fixture("cohere2")).unwrap();
    assert_eq!(c.arch, Arch::Cohere2);
    assert_eq!(c.sliding_window, Some(5));
    assert_eq!(c.window_layers, [true, true, true, false]);
    assert_eq!(c.nope_layers, [false, false, false, true]);
    assert!(c.layer_norm && c.parallel_block);
    assert_eq!(c.logit_mul, 0.25);
    assert_eq!(c.rms_eps, 1e-5);
}

#[test]
fn cohere2_required_keys() {
    for key in [
        "cohere2.logit_scale",
        "cohere2.attention.layer_norm_epsilon",
        "cohere2.attention.sliding_window",
    ] {
        metadata_err(&edited("cohere2", key, "", None), key);
    }
}

#[test]
fn glm4_tensors_are_named() {
    let e = err(&edited("glm4", "", "blk.1.post_ffw_norm.weight", None));
    assert!(
        e.contains("blk.1.post_ffw_norm.weight") && e.contains("missing"),
        "{e}"
    );
    let e = err(&edited(
        "glm4",
        "",
        "blk.0.post_attention_norm.weight",
        None,
    ));
    assert!(e.contains("blk.0.post_attention_norm.weight"), "{e}");
    // An unfused ffn_up (feed_forward_length rows, not twice that).
    let e = err(&edited("glm4", "", "blk.0.ffn_up.weight", Some(&[64, 96])));
    assert!(
        e.contains("blk.0.ffn_up.weight") && e.contains("2 × glm4.feed_forward_length"),
        "{e}"
    );
}

#[test]
fn cohere2_ignores_an_output_tensor() {
    // llama.cpp always ties cohere2's head to the embeddings.
    let f = edited("cohere2", "", "output.weight", Some(&[64, 300]));
    assert!(f.tensor("output.weight").is_some());
    let m = Model::from_gguf(&f).unwrap();
    assert!(m.weights.output.is_none());
}

/// A copy of the fixture with one more key.
fn with_key(arch: &str, key: &str, value: Value) -> GgufFile {
    let f = fixture(arch);
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "general.alignment" {
            w.add_metadata(k, v.clone());
        }
    }
    w.add_metadata(key, value);
    for t in f.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ggml_type, f.tensor_data(t).to_vec());
    }
    GgufFile::from_bytes(w.to_bytes()).expect("valid gguf")
}

#[test]
fn glm4_nextn_layers_are_refused() {
    let f = with_key("glm4", "glm4.nextn_predict_layers", Value::U32(1));
    metadata_err(&f, "glm4.nextn_predict_layers");
}

/// GLM-4V's M-RoPE sections load (NeoX rotation, the angle of text positions: pinned
/// against llama.cpp by the `glm4_mrope` oracle); a fourth (vision) section or a malformed
/// list is refused naming the key and its value.
#[test]
fn glm4_mrope_sections() {
    let sections = |s: &[i32]| Value::Array(s.iter().map(|&x| Value::I32(x)).collect());
    let key = "glm4.rope.dimension_sections";
    let m =
        Model::from_gguf(&with_key("glm4", key, sections(&[2, 2, 4, 0]))).expect("M-RoPE loads");
    assert!(m.config.rope_neox, "M-RoPE on text rotates NeoX pairs");
    let m =
        Model::from_gguf(&with_key("glm4", key, sections(&[0; 4]))).expect("zero sections load");
    assert!(
        !m.config.rope_neox,
        "glm4 without sections rotates adjacent pairs"
    );
    for (s, what) in [
        (&[2, 2, 4, 1][..], "[2, 2, 4, 1]: an M-RoPE fourth"),
        (&[2, 2, 4][..], "[2, 2, 4]: expected 4"),
    ] {
        let f = with_key("glm4", key, sections(s));
        match Model::from_gguf(&f) {
            Err(ModelError::Metadata { key: k, what: w }) => {
                assert_eq!(k, key);
                assert!(w.starts_with(what), "{w}");
            }
            Err(other) => panic!("expected a Metadata error for {key}, got {other}"),
            Ok(_) => panic!("loaded with sections {s:?}"),
        }
    }
}
