//! Multi-head latent attention (`deepseek2`) on the oracle's tiny fixtures
//! (testdata/arch/deepseek2*.gguf, see scripts/arch_oracle/deepseek2.py): the latent
//! cache's size and blocks, the fused `attn_kv_b` of older files, and load errors.

use folio_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};
use std::path::PathBuf;

fn fixture(name: &str) -> GgufFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/arch")
        .join(format!("{name}.gguf"));
    GgufFile::open(&p).expect("fixture")
}

/// The file rewritten: metadata through `meta` (None drops a key), tensors through `tensor`
/// (an empty list drops one, several replace it).
fn rewrite(
    f: &GgufFile,
    meta: impl Fn(&str, &Value) -> Option<Value>,
    tensor: impl Fn(&str) -> Option<Vec<(String, Vec<u64>, Vec<f32>)>>,
) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if let Some(v) = meta(k, v) {
            w.add_metadata(k, v);
        }
    }
    for t in f.tensors() {
        match tensor(&t.name) {
            None => {
                w.add_tensor(&t.name, &t.dims, t.ggml_type, f.tensor_data(t).to_vec());
            }
            Some(parts) => {
                for (name, dims, values) in parts {
                    w.add_tensor_f32(&name, &dims, GgmlType::F32, &values)
                        .expect("tensor");
                }
            }
        }
    }
    GgufFile::from_bytes(w.to_bytes()).expect("rewritten file")
}

/// Logits of every position of `tokens` in one prefill.
fn logits(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let blocks = tokens.len().div_ceil(16);
    let mut kv = model.new_kv_cache(16, blocks, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(tokens, 0, (0..blocks as u32).collect(), tokens.len());
    model
        .forward(&b, &mut kv, ThreadPool::global())
        .expect("forward")
}

const TOKENS: [u32; 21] = [
    5, 77, 200, 13, 42, 99, 150, 7, 8, 250, 33, 61, 120, 190, 4, 18, 260, 71, 88, 3, 140,
];

#[test]
fn the_cache_holds_one_latent_row_per_token_per_layer() {
    let model = Model::from_gguf(&fixture("deepseek2")).expect("load");
    let c = &model.config;
    let m = c.mla.as_ref().expect("mla");
    assert_eq!(
        (
            m.q_lora_rank,
            m.kv_lora_rank,
            m.qk_nope,
            m.qk_rope,
            m.v_head_dim
        ),
        (0, 32, 16, 16, 16)
    );
    assert_eq!((c.n_kv_heads, c.head_dim), (1, 48));
    // 3 layers × (32 + 16) f16 values, against 3 layers × 4 heads × (32 + 16) for the
    // decompressed K (16 + 16) and V (16).
    assert_eq!(c.kv_bytes_per_token(2.0), 288.0);
    assert_eq!(c.kv_bytes_per_token_uncompressed(2.0), 1152.0);
    let kv = model.new_kv_cache(16, 4, KvFormat::F16);
    assert!(kv.is_latent());
    assert_eq!(kv.bytes_per_token(), 288);
    assert_eq!(kv.block_payload_bytes(), 288 * 16);
    let v3 = Model::from_gguf(&fixture("deepseek2_v3")).expect("load v3");
    let m3 = v3.config.mla.as_ref().expect("mla");
    assert_eq!((m3.q_lora_rank, m3.kv_lora_rank), (32, 48));
    assert_eq!(v3.config.kv_bytes_per_token(2.0), 3.0 * 64.0 * 2.0);
}

#[test]
fn latent_blocks_export_import_and_copy_exactly() {
    let model = Model::from_gguf(&fixture("deepseek2")).expect("load");
    let mut kv = model.new_kv_cache(16, 3, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&TOKENS, 0, vec![0, 1], 1);
    let pool = ThreadPool::global();
    let whole = model.forward(&b, &mut kv, pool).expect("forward");
    let payload = kv.export_block(1);
    assert_eq!(payload.len(), kv.block_payload_bytes());
    let mut other = model.new_kv_cache(16, 3, KvFormat::F16);
    other.import_block(0, &kv.export_block(0)).expect("import");
    other.import_block(2, &payload).expect("import");
    assert_eq!(other.export_block(2), payload);
    // The imported blocks serve the next token exactly as the originals.
    let mut next = ForwardBatch::new();
    next.push(&[9], TOKENS.len(), vec![0, 1], 1);
    let a = model.forward(&next, &mut kv, pool).expect("decode");
    let mut next = ForwardBatch::new();
    next.push(&[9], TOKENS.len(), vec![0, 2], 1);
    let b2 = model.forward(&next, &mut other, pool).expect("decode");
    assert_eq!(a, b2);
    kv.copy_block(1, 2, 16);
    assert_eq!(kv.export_block(2), kv.export_block(1));
    assert!(!whole.is_empty());
}

/// Older files: `attn_kv_b` fused (per head, the K rows then the V rows, each of
/// kv_lora_rank) and no key/value_length_mla; split at load, the same logits bit for bit.
#[test]
fn a_fused_kv_b_gives_the_split_files_logits() {
    let f = fixture("deepseek2");
    let (h, r, nope, v) = (4usize, 32usize, 16usize, 16usize);
    let fused = rewrite(
        &f,
        |k, val| match k {
            "deepseek2.attention.key_length_mla" | "deepseek2.attention.value_length_mla" => None,
            "deepseek2.attention.key_length" => Some(Value::U32((nope + 16) as u32)),
            "deepseek2.attention.value_length" => Some(Value::U32(v as u32)),
            "deepseek2.attention.head_count_kv" => Some(Value::U32(h as u32)),
            _ => Some(val.clone()),
        },
        |name| {
            if name.ends_with("attn_v_b.weight") {
                return Some(Vec::new());
            }
            let prefix = name.strip_suffix("attn_k_b.weight")?;
            let kb = f.tensor_f32(name).expect("k_b"); // [h][r][nope]
            let vb = f
                .tensor_f32(&format!("{prefix}attn_v_b.weight"))
                .expect("v_b"); // [h][v][r]
            let mut out = Vec::new();
            for hd in 0..h {
                for j in 0..nope {
                    out.extend((0..r).map(|c| kb[(hd * r + c) * nope + j]));
                }
                out.extend_from_slice(&vb[hd * v * r..(hd + 1) * v * r]);
            }
            Some(vec![(
                format!("{prefix}attn_kv_b.weight"),
                vec![r as u64, (h * (nope + v)) as u64],
                out,
            )])
        },
    );
    assert!(fused.tensor("blk.0.attn_k_b.weight").is_none());
    let split = Model::from_gguf(&f).expect("split");
    let legacy = Model::from_gguf(&fused).expect("fused");
    assert_eq!(legacy.config.head_dim, 48);
    assert_eq!(logits(&legacy, &TOKENS), logits(&split, &TOKENS));
}

#[test]
fn load_errors_name_the_key_and_the_tensor() {
    let f = fixture("deepseek2");
    let no_rank = rewrite(
        &f,
        |k, v| (k != "deepseek2.attention.kv_lora_rank").then(|| v.clone()),
        |_| None,
    );
    let e = Model::from_gguf(&no_rank).err().expect("error").to_string();
    assert!(e.contains("deepseek2.attention.kv_lora_rank"), "{e}");
    let no_kv_a = rewrite(
        &f,
        |_, v| Some(v.clone()),
        |n| (n == "blk.1.attn_kv_a_mqa.weight").then(Vec::new),
    );
    let e = Model::from_gguf(&no_kv_a).err().expect("error").to_string();
    assert!(e.contains("blk.1.attn_kv_a_mqa.weight"), "{e}");
    let bad_rank = rewrite(
        &f,
        |k, v| match k {
            "deepseek2.attention.kv_lora_rank" => Some(Value::U32(40)),
            _ => Some(v.clone()),
        },
        |_| None,
    );
    let e = Model::from_gguf(&bad_rank)
        .err()
        .expect("error")
        .to_string();
    assert!(e.contains("deepseek2.attention.key_length"), "{e}");
}

/// An adapter on an MLA model's attention (which has no LoRA step) or on its MoE FFN is
/// refused at load, the error naming the tensor and why; none is skipped silently.
#[test]
fn lora_on_mla_attention_is_refused_naming_the_tensor() {
    use folio_model::LoraAdapter;
    let model = Model::from_gguf(&fixture("deepseek2")).expect("model");
    let adapter = |kind: &str| {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", Value::String("deepseek2".into()));
        w.add_metadata("general.type", Value::String("adapter".into()));
        w.add_metadata("adapter.type", Value::String("lora".into()));
        w.add_metadata("adapter.lora.alpha", Value::F32(16.0));
        let base = format!("blk.1.{kind}.weight");
        let d = model.config.d_model as u64;
        w.add_tensor_f32(
            &format!("{base}.lora_a"),
            &[d, 4],
            GgmlType::F32,
            &vec![0.01; 4 * d as usize],
        )
        .expect("lora_a");
        w.add_tensor_f32(
            &format!("{base}.lora_b"),
            &[4, d],
            GgmlType::F32,
            &vec![0.01; 4 * d as usize],
        )
        .expect("lora_b");
        GgufFile::from_bytes(w.to_bytes()).expect("adapter")
    };
    for kind in [
        "attn_q",
        "attn_q_a",
        "attn_q_b",
        "attn_kv_a_mqa",
        "attn_kv_b",
        "attn_k",
        "attn_v",
        "attn_output",
    ] {
        let e = LoraAdapter::from_gguf(&adapter(kind), &model.config, 64, 0)
            .map(|_| ())
            .expect_err("refused")
            .to_string();
        assert!(e.contains(&format!("blk.1.{kind}.weight.lora_a")), "{e}");
        assert!(e.contains("multi-head latent attention"), "{e}");
        assert!(e.contains("attn_kv_a_mqa"), "{e}");
    }
    let e = LoraAdapter::from_gguf(&adapter("ffn_up"), &model.config, 64, 0)
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(e.contains("blk.1.ffn_up.weight.lora_a"), "{e}");
    assert!(e.contains("mixture of experts"), "{e}");
}
