//! LoRA adapters: logits equal the plain f32 reference of the merged weights, a batch
//! mixing adapters equals each sequence alone, and bad adapter files are named errors.

use folio_testkit::tiny as common;

use common::build;
use common::reference::{prompt, reference, D, FFN, HD, KV_HEADS, SHAPE, VOCAB};
use common::rel_err;
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

/// `base` with every pair of `adapter` merged in at `scale`: `W + scale·(alpha/rank)·B·A`,
/// all tensors copied, merged ones written as F32.
fn merged(base: &GgufFile, adapter: &GgufFile, scale: f32) -> Vec<u8> {
    let mut w = folio_gguf::GgufWriter::new();
    for (k, v) in base.metadata() {
        w.add_metadata(k, v.clone());
    }
    let alpha = adapter.get_f32("adapter.lora.alpha").unwrap_or(0.0);
    for t in base.tensors() {
        let a_name = format!("{}.lora_a", t.name);
        if adapter.tensor(&a_name).is_none() {
            w.add_tensor(&t.name, &t.dims, t.ggml_type, base.tensor_data(t).to_vec());
            continue;
        }
        let (cols, rows) = (t.cols(), t.rows());
        let mut wm = base.tensor_f32(&t.name).unwrap();
        let a = adapter.tensor_f32(&a_name).unwrap();
        let b = adapter.tensor_f32(&format!("{}.lora_b", t.name)).unwrap();
        let rank = a.len() / cols;
        let s = scale
            * if alpha != 0.0 {
                alpha / rank as f32
            } else {
                1.0
            };
        for r in 0..rows {
            for c in 0..cols {
                let d: f64 = (0..rank)
                    .map(|k| b[r * rank + k] as f64 * a[k * cols + c] as f64)
                    .sum();
                wm[r * cols + c] += s * d as f32;
            }
        }
        w.add_tensor_f32(&t.name, &t.dims, GgmlType::F32, &wm)
            .unwrap();
    }
    w.to_bytes()
}

fn lora_of(
    model: &Model,
    seed: u64,
    rank: usize,
    alpha: f32,
) -> (GgufFile, folio_model::LoraAdapter) {
    let cfg = &model.config;
    let targets = folio_model::lora::default_targets(cfg);
    let bytes = folio_model::lora::random_adapter(cfg, &targets, rank, alpha, 0.05, seed)
        .unwrap()
        .to_bytes();
    let f = GgufFile::from_bytes(bytes).unwrap();
    let a = folio_model::LoraAdapter::from_gguf(&f, cfg, 64, seed).expect("adapter loads");
    (f, a)
}

/// Logits of `toks` through `model` (prefill 12, a 5-token chunk, then single tokens),
/// every position, under `lora`.
fn run_positions(model: &Model, toks: &[u32], lora: Option<folio_model::LoraSet>) -> Vec<Vec<f32>> {
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let pool = ThreadPool::global();
    let (mut pos, mut out) = (0, Vec::new());
    for len in [12usize, 5, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, vec![7, 2, 5, 0, 1, 3], len);
        b.seqs[0].lora = lora.clone();
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        out.extend(logits.chunks_exact(VOCAB).map(|r| r.to_vec()));
        pos += len;
    }
    out
}

/// With an adapter, folio's logits equal the plain f32 reference of the merged weights
/// `W + scale·B·A` (and differ clearly from the base model's), on llama (separate q/k/v,
/// gate/up) and phi3 (fused qkv and gate-up).
#[test]
fn lora_equals_merged_weights_reference() {
    for (arch, alpha, scale) in [
        ("llama", 16.0, 1.0),
        ("llama", 0.0, 0.5),
        ("phi3", 8.0, 2.0),
    ] {
        let f = GgufFile::from_bytes(build(&SHAPE, arch, GgmlType::F32, 42)).unwrap();
        let model = Model::from_gguf(&f).unwrap();
        let (af, adapter) = lora_of(&model, 9, 8, alpha);
        let set = folio_model::LoraSet::new(vec![(std::sync::Arc::new(adapter), scale)]);
        let toks = prompt(1, 19);
        let got = run_positions(&model, &toks, Some(set));
        let merged = GgufFile::from_bytes(merged(&f, &af, scale)).unwrap();
        let want = reference(&merged, arch, &toks);
        let base = reference(&f, arch, &toks);
        for (p, (g, w)) in got.iter().zip(&want).enumerate() {
            let e = rel_err(g, w);
            assert!(
                e < 2e-3,
                "{arch} alpha {alpha}: position {p} off the merged reference by {e}"
            );
            let moved = rel_err(w, &base[p]);
            assert!(
                moved > 0.05,
                "{arch}: the adapter barely moves position {p} ({moved})"
            );
        }
    }
}

/// One batch mixing rows of four adapters, two adapters at once, and none gives every
/// sequence exactly the logits it gets alone.
#[test]
fn mixed_adapter_batch_equals_each_alone() {
    let f = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::Q4_1, 3)).unwrap();
    let model = Model::from_gguf(&f).unwrap();
    let pool = ThreadPool::global();
    let adapters: Vec<_> = (0..4)
        .map(|i| std::sync::Arc::new(lora_of(&model, 100 + i, 4 + 2 * i as usize, 8.0).1))
        .collect();
    let set = |items: &[(usize, f32)]| {
        folio_model::LoraSet::new(
            items
                .iter()
                .map(|&(i, s)| (adapters[i].clone(), s))
                .collect(),
        )
    };
    let sets: Vec<Option<folio_model::LoraSet>> = vec![
        Some(set(&[(2, 1.0)])),
        None,
        Some(set(&[(0, 1.0)])),
        Some(set(&[(3, 0.5)])),
        Some(set(&[(1, 1.0), (2, 0.25)])),
        Some(set(&[(0, 1.0)])),
        None,
    ];
    let lens = [9usize, 1, 23, 4, 7, 2, 5];
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(10 + i as u64, n))
        .collect();
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .zip(&sets)
        .map(|(p, s)| {
            let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
            let mut b = ForwardBatch::new();
            b.push(p, 0, (0..8).collect(), p.len());
            b.seqs[0].lora = s.clone();
            model.forward(&b, &mut kv, pool).expect("forward")
        })
        .collect();
    let mut kv = model.new_kv_cache(4, 8 * lens.len(), KvFormat::F16);
    let mut b = ForwardBatch::new();
    for (i, (p, s)) in prompts.iter().zip(&sets).enumerate() {
        b.push(p, 0, (i as u32 * 8..(i as u32 + 1) * 8).collect(), p.len());
        b.seqs[i].lora = s.clone();
    }
    let together = model.forward(&b, &mut kv, pool).expect("forward");
    let mut at = 0;
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(
            &together[at..at + a.len()],
            &a[..],
            "sequence {i} differs when batched"
        );
        at += a.len();
    }
    // The adapters matter: sequence 5 (adapter 0) alone without it is another result.
    let mut kv1 = model.new_kv_cache(4, 8, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&prompts[5], 0, (0..8).collect(), prompts[5].len());
    let plain = model.forward(&b, &mut kv1, pool).unwrap();
    assert!(rel_err(&plain, &alone[5]) > 0.05);
}

/// Bad adapter files are errors naming the tensor or key, the expected and the found value.
#[test]
fn bad_adapters_are_named_errors() {
    let f = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, 42)).unwrap();
    let model = Model::from_gguf(&f).unwrap();
    let cfg = &model.config;
    let load = |w: folio_gguf::GgufWriter, max_rank: usize| {
        let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
        folio_model::LoraAdapter::from_gguf(&f, cfg, max_rank, 1)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let good = || {
        folio_model::lora::random_adapter(cfg, &["attn_q", "ffn_down"], 8, 16.0, 0.05, 1).unwrap()
    };
    // A base model is not an adapter.
    let e = folio_model::LoraAdapter::from_gguf(&f, cfg, 64, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("general.type") && e.contains("adapter"), "{e}");
    // Rank above --max-lora-rank.
    let e = load(good(), 4);
    assert!(
        e.contains("blk.0.attn_q.weight.lora_a") && e.contains("rank 8, expected 1..=4"),
        "{e}"
    );
    // Another architecture.
    let mut w = good();
    w.add_metadata(
        "general.architecture",
        folio_gguf::Value::String("qwen2".into()),
    );
    let e = load(w, 64);
    assert!(
        e.contains("general.architecture") && e.contains("qwen2"),
        "{e}"
    );
    // A zero tensor of ggml dims `dims` named `name`.
    let zeros = |w: &mut folio_gguf::GgufWriter, name: &str, dims: [usize; 2]| {
        let n = dims[0] * dims[1];
        w.add_tensor_f32(name, &dims.map(|d| d as u64), GgmlType::F32, &vec![0.0; n])
            .unwrap();
    };
    // A shape that does not fit the base tensor (A built for ffn_down's input on attn_k).
    let mut w = good();
    zeros(&mut w, "blk.1.attn_k.weight.lora_a", [FFN, 8]);
    zeros(&mut w, "blk.1.attn_k.weight.lora_b", [8, KV_HEADS * HD]);
    let e = load(w, 64);
    assert!(
        e.contains("blk.1.attn_k.weight")
            && e.contains(&format!("[{FFN}, 8]"))
            && e.contains(&format!("expected [{D}, rank]")),
        "{e}"
    );
    // A target folio does not support, and a lone lora_a.
    let mut w = good();
    zeros(&mut w, "output.weight.lora_a", [D, 8]);
    zeros(&mut w, "output.weight.lora_b", [8, VOCAB]);
    let e = load(w, 64);
    assert!(
        e.contains("output.weight.lora_a") && e.contains("unsupported LoRA target"),
        "{e}"
    );
    let mut w = good();
    zeros(&mut w, "blk.1.attn_v.weight.lora_a", [D, 8]);
    let e = load(w, 64);
    assert!(
        e.contains("blk.1.attn_v.weight.lora_a") && e.contains("no matching"),
        "{e}"
    );
}
