//! A LoRA adapter on the real model against llama.cpp's `--lora` on the same file:
//! testdata/llamacpp-greedy-lora.json holds llama-server's greedy tokens for the 5 prompts
//! of testdata/llamacpp-greedy.json under the rank-8 adapter `folio lora random --rank 8
//! --seed 1` writes for SmolLM2 (alpha 16, B spread 0.15, every q/k/v/o/FFN projection;
//! it changes 4 of the 5 outputs). See testdata/llamacpp-greedy-lora.README.md.

use folio_engine::{spawn_engine, EngineConfig, Event, GenerateRequest};
use folio_gguf::GgufFile;
use folio_kernels::matmul::Sums;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use serde_json::Value;

mod greedy_ref;
use greedy_ref::{check_model, greedy_with, ids};

const REFERENCE: &str = include_str!("../../../testdata/llamacpp-greedy-lora.json");

/// FNV-1a of the adapter file llama.cpp read: the generator must keep writing exactly
/// these bytes, or the reference must be produced again.
const ADAPTER_FNV: u64 = 16995216242810225199;

/// The model under `--numerics llama` and the oracle's adapter (written to a file).
fn setup() -> (GgufFile, Model, std::path::PathBuf, std::path::PathBuf) {
    let path = folio_fetch::test_model().expect("the default model (fetched on first use)");
    let f = GgufFile::open(&path).expect("open model");
    let mut model = Model::from_gguf(&f).expect("load model");
    model.set_sums(Sums::Ggml);
    let targets = folio_model::lora::default_targets(&model.config);
    let bytes = folio_model::lora::random_adapter(&model.config, &targets, 8, 16.0, 0.15, 1)
        .expect("adapter")
        .to_bytes();
    assert_eq!(
        folio_core::kv::fnv1a(&bytes),
        ADAPTER_FNV,
        "the random adapter's bytes changed: produce testdata/llamacpp-greedy-lora.json again"
    );
    let file = std::env::temp_dir().join(format!(
        "folio-lora-oracle-{}-{:?}.gguf",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&file, &bytes).unwrap();
    (f, model, path, file)
}

/// Every prompt's greedy tokens are llama.cpp's, except where they part at a step that is
/// a near-tie in llama.cpp's own log-probabilities (the rule of every llama.cpp comparison
/// here; with the adapter at zero, this CPU's llama.cpp build parts from folio's llama
/// numerics at near-ties just as often: its arithmetic differs by ISA).
#[test]
fn adapter_greedy_matches_llama_cpp_lora() {
    let (f, model, _, file) = setup();
    let reg = folio_engine::LoraRegistry::new(model.config.clone(), "base", 1, 16);
    let adapter = reg.read("r8", &file).expect("adapter loads");
    let set = folio_model::LoraSet::new(vec![(std::sync::Arc::new(adapter), 1.0)]);
    check_model("SmolLM2+lora", REFERENCE, &f, &model, Some(&set));
    let _ = std::fs::remove_file(&file);
}

/// Through the engine, the 5 prompts batched together under the adapter (chunked prefill,
/// n-gram speculation) give exactly the tokens of the adapter decoding each alone.
#[test]
fn engine_batched_with_adapter_equals_alone() {
    let (f, model, path, file) = setup();
    let tok = std::sync::Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer"));
    let eog = tok.eog_ids().to_vec();
    let data: Value = serde_json::from_str(REFERENCE).expect("json");
    let prompts: Vec<Vec<u32>> = data["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| ids(&p["prompt_token_ids"]))
        .collect();
    let cfg = EngineConfig {
        lora: vec![("r8".into(), file.clone())],
        max_chunk: 7,
        spec: folio_engine::SpecMethod::Ngram,
        spec_tokens: Some(3),
        ..EngineConfig::default()
    };
    let alone_model = {
        let mut m = Model::from_gguf(&f).expect("load model");
        m.set_sums(Sums::Ggml);
        m
    };
    let h = spawn_engine(model, tok, &path, cfg).expect("engine");
    let set = h.lora_set(&[("r8".into(), 1.0)]).expect("loaded");
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            let mut r = GenerateRequest::new(p.clone(), 32);
            r.ignore_eos = true;
            r.lora = Some(set.clone());
            h.submit(r).expect("submit")
        })
        .collect();
    for (p, mut s) in prompts.iter().zip(streams) {
        let mut got = Vec::new();
        while let Some(ev) = s.next_blocking() {
            if let Event::Tokens { ids, .. } = ev {
                got.extend(ids);
            }
        }
        let (want, _) = greedy_with(&alone_model, p, 32, &eog, true, Some(&set));
        assert_eq!(got, want, "batched under the adapter differs from alone");
    }
    let _ = std::fs::remove_file(&file);
}
