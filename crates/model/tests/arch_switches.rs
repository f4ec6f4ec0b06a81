//! The per-architecture switches of `smollm3`, `granite`, `olmo2` and `mistral3` read from
//! the keys llama.cpp reads (llama-model.cpp, src/models/<arch>.cpp), and the load errors
//! that name a missing key or tensor. Their numerics are held to llama.cpp by
//! crates/engine/tests/arch_oracle.rs.

use folio_testkit::tiny as common;

use common::{writer, Shape};
use folio_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use folio_model::{Model, ModelConfig, ModelError};

const SHAPE: Shape = Shape {
    d: 64,
    heads: 4,
    kv_heads: 2,
    hd: 16,
    ffn: 128,
    vocab: 40,
    layers: 8,
    ctx: 64,
};

fn tiny(arch: &str) -> GgufWriter {
    writer(&SHAPE, arch, &|_| GgmlType::F32, 7)
}

fn load(w: GgufWriter) -> Result<Model, ModelError> {
    let f = GgufFile::from_bytes(w.to_bytes()).expect("valid gguf");
    Model::from_gguf(&f)
}

fn config(w: GgufWriter) -> ModelConfig {
    load(w).expect("loads").config
}

fn refusal(w: GgufWriter) -> String {
    load(w).err().expect("refused").to_string()
}

/// SmolLM3: no RoPE in layers 3, 7, ... (llama.cpp's fixed `n_no_rope_layer_step` = 4);
/// a sliding-window key changes nothing (llama.cpp reads none for it).
#[test]
fn smollm3_skips_rope_every_fourth_layer() {
    let mut w = tiny("smollm3");
    w.add_metadata("smollm3.attention.sliding_window", Value::U32(4));
    let c = config(w);
    let want = [false, false, false, true, false, false, false, true];
    assert_eq!(c.nope_layers, want);
    assert_eq!(c.sliding_window, None);
    assert!(!c.arch.rope_neox());
}

/// Granite: the four multipliers, `logit_scale` required, `rope.scaling.finetuned = false`
/// switching RoPE off in every layer.
#[test]
fn granite_multipliers_follow_llama_cpp() {
    let e = refusal(tiny("granite"));
    assert!(
        e.contains("granite.logit_scale") && e.contains("missing"),
        "{e}"
    );

    let mut w = tiny("granite");
    w.add_metadata("granite.logit_scale", Value::F32(8.0))
        .add_metadata("granite.embedding_scale", Value::F32(12.0))
        .add_metadata("granite.residual_scale", Value::F32(0.22))
        .add_metadata("granite.attention.scale", Value::F32(0.015625));
    let c = config(w);
    assert_eq!(
        (c.logit_mul, c.embed_scale, c.residual_scale, c.attn_scale),
        (0.125, 12.0, 0.22, 0.015625)
    );
    assert!(c.nope_layers.iter().all(|&n| !n));

    // Unset multipliers (or 0, llama.cpp's "unset") leave the plain block.
    let mut w = tiny("granite");
    w.add_metadata("granite.logit_scale", Value::F32(1.0))
        .add_metadata("granite.residual_scale", Value::F32(0.0))
        .add_metadata("granite.rope.scaling.finetuned", Value::Bool(false));
    let c = config(w);
    assert_eq!((c.embed_scale, c.residual_scale), (1.0, 1.0));
    assert_eq!(c.attn_scale, 0.25);
    assert!(c.nope_layers.iter().all(|&n| n));

    let mut w = tiny("granite");
    w.add_metadata("granite.logit_scale", Value::F32(f32::NAN));
    let e = refusal(w);
    assert!(e.contains("granite.logit_scale"), "{e}");
}

/// Output biases llama.cpp's granite would add are refused by name, not ignored.
#[test]
fn granite_output_bias_is_refused() {
    let mut w = tiny("granite");
    w.add_metadata("granite.logit_scale", Value::F32(8.0));
    w.add_tensor_f32("blk.1.attn_output.bias", &[64], GgmlType::F32, &[0.0; 64])
        .expect("f32");
    let e = refusal(w);
    assert!(e.contains("blk.1.attn_output.bias"), "{e}");
}

/// OLMo 2: no pre-norms, Q/K norms over the whole projection; a missing or per-head-sized
/// Q norm is refused by name.
#[test]
fn olmo2_needs_whole_projection_qk_norms() {
    let e = refusal(tiny("olmo2"));
    assert!(
        e.contains("blk.0.attn_q_norm.weight") && e.contains("missing"),
        "{e}"
    );

    let add_norms = |w: &mut GgufWriter, q: usize| {
        for l in 0..SHAPE.layers {
            let v = |n: usize| vec![1.0f32; n];
            for (name, n) in [
                ("attn_q_norm", q),
                ("attn_k_norm", SHAPE.kv_heads * SHAPE.hd),
                ("post_attention_norm", SHAPE.d),
                ("post_ffw_norm", SHAPE.d),
            ] {
                w.add_tensor_f32(
                    &format!("blk.{l}.{name}.weight"),
                    &[n as u64],
                    GgmlType::F32,
                    &v(n),
                )
                .expect("f32");
            }
        }
    };
    let mut w = tiny("olmo2");
    add_norms(&mut w, SHAPE.hd);
    let e = refusal(w);
    assert!(
        e.contains("blk.0.attn_q_norm.weight") && e.contains("expected 64"),
        "{e}"
    );

    let mut w = tiny("olmo2");
    add_norms(&mut w, SHAPE.heads * SHAPE.hd);
    let m = load(w).expect("loads");
    assert!(m.config.arch.rope_neox() && m.config.arch.qk_norm_whole());
    assert!(m
        .weights
        .layers
        .iter()
        .all(|l| l.attn_norm.is_empty() && l.ffn_norm.is_empty()));
    assert_eq!(m.weights.layers[0].q_norm.len(), 64);
}

/// Mistral 3: YaRN's magnitude with `rope.scaling.yarn_log_multiplier` (llama-context.cpp:
/// get_mscale(f, 1) / get_mscale(f, log_mul), then the in-kernel correction cancelled), and
/// Llama 4's temperature stepping every original context length.
#[test]
fn mistral3_yarn_log_multiplier_and_temperature() {
    let mut w = tiny("mistral3");
    w.add_metadata("mistral3.rope.scaling.type", Value::String("yarn".into()))
        .add_metadata("mistral3.rope.scaling.factor", Value::F32(4.0))
        .add_metadata(
            "mistral3.rope.scaling.original_context_length",
            Value::U32(16),
        )
        .add_metadata("mistral3.rope.scaling.yarn_log_multiplier", Value::F32(1.0))
        .add_metadata("mistral3.attention.temperature_scale", Value::F32(0.1));
    let c = config(w);
    let want = 1.0 / (1.0 + 0.1 * 4f32.ln());
    assert!(
        (c.rope_yarn.attn_factor - want).abs() < 1e-6,
        "{:?}",
        c.rope_yarn
    );
    let t = c.attn_temp.expect("temperature");
    assert_eq!(t.floor, 16);
    assert_eq!(t.factor(0), 1.0);
    assert_eq!(t.factor(15), 1.0);
    assert!((t.factor(16) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-7);
    assert!((t.factor(47) - (1.0 + 0.1 * 3f32.ln())).abs() < 1e-7);

    // Without the multiplier the magnitude is get_mscale(4) / (1 + 0.1 ln 4) = 1; without
    // the temperature key there is none.
    let mut w = tiny("mistral3");
    w.add_metadata("mistral3.rope.scaling.type", Value::String("yarn".into()))
        .add_metadata("mistral3.rope.scaling.factor", Value::F32(4.0));
    let c = config(w);
    assert!((c.rope_yarn.attn_factor - 1.0).abs() < 1e-6);
    assert_eq!(c.attn_temp, None);

    let mut w = tiny("mistral3");
    w.add_metadata("mistral3.attention.temperature_scale", Value::F32(-1.0));
    let e = refusal(w);
    assert!(e.contains("mistral3.attention.temperature_scale"), "{e}");
}

/// ERNIE 4.5 dense: llama's block with llama's pairing.
#[test]
fn ernie4_5_is_the_llama_block() {
    let c = config(tiny("ernie4_5"));
    assert!(!c.arch.rope_neox() && !c.arch.qk_norm());
    assert!(c.nope_layers.iter().all(|&n| !n));
}
