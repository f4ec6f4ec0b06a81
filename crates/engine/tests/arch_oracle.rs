//! Every architecture against llama.cpp on a tiny random model of it: the files
//! testdata/arch/<arch>.gguf (written with llama.cpp's gguf-py, its converter's tensor names
//! and metadata) and testdata/arch/<arch>.json (llama.cpp's greedy ids and top-5
//! log-probabilities on them), both made by scripts/arch_oracle/<arch>.py.
//!
//! Per architecture: (a) straight on the model, folio's greedy ids equal llama.cpp's, and at
//! every step llama.cpp's top-5 log-probabilities relative to its top-1 equal folio's within
//! [`TOLERANCE`] (a parting at a llama.cpp near-tie, top-1/top-2 gap < [`NEAR_TIE`], is
//! printed, not failed); (b) through the engine, every prompt gives the same tokens alone,
//! batched with the others (each prompt twice) and in 4-token prefill chunks. The engine
//! builds the hybrid window KV itself for architectures with window layers.

mod common;
mod greedy_ref;

use common::collect;
use folio_engine::{spawn_engine, EngineConfig, EngineHandle, GenerateRequest};
use folio_gguf::GgufFile;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use greedy_ref::{greedy, ids, NEAR_TIE};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// How far a relative log-probability may be from llama.cpp's. Both keep K/V in f16 and
/// round queries to f16 (llama.cpp run without flash attention, see common.py), but sum in
/// other orders (the matmuls, the softmax's exp): a tiny model's log-probabilities then
/// agree to ~1e-4. A wrong norm, scale or RoPE moves them by far more than this.
const TOLERANCE: f64 = 1e-3;

fn fixture(arch: &str) -> (PathBuf, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/arch");
    let json = std::fs::read_to_string(dir.join(format!("{arch}.json")))
        .unwrap_or_else(|e| panic!("testdata/arch/{arch}.json: {e}"));
    (
        dir.join(format!("{arch}.gguf")),
        serde_json::from_str(&json).expect("fixture json"),
    )
}

fn top5(step: &Value) -> Vec<(usize, f64)> {
    step.as_array()
        .expect("top5 row")
        .iter()
        .map(|e| {
            (
                e[0].as_u64().expect("id") as usize,
                e[1].as_f64().expect("lp"),
            )
        })
        .collect()
}

/// (a): the model alone against llama.cpp's ids and log-probabilities.
fn against_llama(arch: &str, model: &Model, eog: &[u32], data: &Value) -> Vec<String> {
    let mut failures = Vec::new();
    for p in data["prompts"].as_array().expect("prompts") {
        let name = p["name"].as_str().expect("name");
        let prompt = ids(&p["prompt_token_ids"]);
        let want = ids(&p["output_token_ids"]);
        let (got, lps) = greedy(model, &prompt, want.len(), eog, true);
        let steps = p["top5_logprobs_per_step"].as_array().expect("steps");
        let parted = (0..want.len()).find(|&i| got.get(i) != want.get(i));
        let mut dev = 0f64;
        for (s, step) in steps
            .iter()
            .enumerate()
            .take(parted.map_or(want.len(), |p| p + 1))
        {
            let top = top5(step);
            let (id0, lp0) = top[0];
            for &(id, lp) in &top[1..] {
                let d = ((lps[s][id] - lps[s][id0]) - (lp - lp0)).abs();
                dev = dev.max(d);
                if d > TOLERANCE && parted.is_none_or(|p| s < p) {
                    failures.push(format!(
                        "{arch} {name}: step {s} token {id}: folio {:.5} vs llama.cpp {:.5} (relative to the top-1)",
                        lps[s][id] - lps[s][id0],
                        lp - lp0
                    ));
                }
            }
        }
        match parted {
            None => eprintln!(
                "{arch} {name}: all {} tokens equal llama.cpp's (top-5 deviation <= {dev:.5})",
                want.len()
            ),
            Some(s) => {
                let top = top5(&steps[s]);
                let gap = top[0].1 - top[1].1;
                let line = format!(
                    "{arch} {name}: parts from llama.cpp at step {s} (folio {:?}, llama.cpp {}), llama.cpp's top-1/top-2 gap {gap:.4}",
                    got.get(s),
                    want[s]
                );
                eprintln!("{line}");
                if gap >= NEAR_TIE {
                    failures.push(line);
                }
            }
        }
    }
    failures
}

fn engine(path: &std::path::Path, cfg: EngineConfig) -> EngineHandle {
    let f = GgufFile::open(path).expect("open fixture");
    let model = Model::from_gguf(&f).expect("load fixture");
    let tok = Arc::new(Tokenizer::from_gguf(&f).expect("fixture tokenizer"));
    spawn_engine(model, tok, path, cfg).expect("engine")
}

fn request(prompt: &[u32], n: usize) -> GenerateRequest {
    let mut r = GenerateRequest::new(prompt.to_vec(), n);
    r.ignore_eos = true;
    r
}

/// (b): the engine gives each prompt the same tokens alone, batched and chunked.
fn engine_invariance(arch: &str, path: &std::path::Path, data: &Value) {
    let prompts: Vec<Vec<u32>> = data["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| ids(&p["prompt_token_ids"]))
        .collect();
    let n = data["n_predict"].as_u64().expect("n_predict") as usize;
    let base = EngineConfig {
        prefix_cache: false,
        kv_cache_bytes: 16 << 20,
        ..EngineConfig::default()
    };
    let alone: Vec<Vec<u32>> = {
        let h = engine(path, base.clone());
        prompts
            .iter()
            .map(|p| collect(h.submit(request(p, n)).expect("submit")).ids)
            .collect()
    };
    let batched: Vec<Vec<u32>> = {
        let h = engine(path, base.clone());
        let streams: Vec<_> = prompts
            .iter()
            .chain(prompts.iter())
            .map(|p| h.submit(request(p, n)).expect("submit"))
            .collect();
        streams.into_iter().map(|s| collect(s).ids).collect()
    };
    let chunked: Vec<Vec<u32>> = {
        let h = engine(
            path,
            EngineConfig {
                max_chunk: 4,
                ..base.clone()
            },
        );
        let streams: Vec<_> = prompts
            .iter()
            .map(|p| h.submit(request(p, n)).expect("submit"))
            .collect();
        streams.into_iter().map(|s| collect(s).ids).collect()
    };
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(&batched[i], a, "{arch} p{i}: batched differs from alone");
        assert_eq!(
            &batched[i + prompts.len()],
            a,
            "{arch} p{i}: batched (second copy) differs from alone"
        );
        assert_eq!(
            &chunked[i], a,
            "{arch} p{i}: chunked prefill differs from alone"
        );
    }
}

fn check(arch: &str) {
    let (path, data) = fixture(arch);
    let f = GgufFile::open(&path).expect("open fixture");
    let model = Model::from_gguf(&f).expect("load fixture");
    // `ignore_eos`: llama.cpp puts -inf on every end-of-generation token, so mask them too.
    let eog = Tokenizer::from_gguf(&f)
        .expect("fixture tokenizer")
        .eog_ids()
        .to_vec();
    let failures = against_llama(arch, &model, &eog, &data);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    engine_invariance(arch, &path, &data);
}

#[test]
fn llama() {
    check("llama")
}

#[test]
fn smollm3() {
    check("smollm3")
}

#[test]
fn granite() {
    check("granite")
}

#[test]
fn olmo2() {
    check("olmo2")
}

#[test]
fn ernie4_5() {
    check("ernie4_5")
}

#[test]
fn mistral3() {
    check("mistral3")
}

#[test]
fn olmo2_swa() {
    check("olmo2_swa")
}

#[test]
fn glm4() {
    check("glm4")
}

/// GLM-4V's text model: multimodal RoPE sections (NeoX rotation on text).
#[test]
fn glm4_mrope() {
    check("glm4_mrope")
}

#[test]
fn cohere2() {
    check("cohere2")
}

#[test]
fn deepseek2() {
    check("deepseek2")
}

#[test]
fn deepseek2_v3() {
    check("deepseek2_v3")
}

#[test]
fn gpt_oss() {
    check("gpt-oss")
}
