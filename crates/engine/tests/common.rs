//! Shared by the engine's real-model tests.
#![allow(dead_code)]

use folio_engine::{
    spawn_engine, EngineConfig, EngineHandle, Event, FinishReason, GenerateRequest, Usage,
};
use folio_gguf::GgufFile;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use std::sync::Arc;

pub fn engine(cfg: EngineConfig) -> EngineHandle {
    let path = folio_fetch::test_model().expect("the default model (fetched on first use)");
    let f = GgufFile::open(&path).expect("open model");
    let model = Model::from_gguf(&f).expect("load model");
    let tok = Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer"));
    spawn_engine(model, tok, &path, cfg).expect("engine")
}

/// Everything a finished request produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub ids: Vec<u32>,
    pub text: String,
    pub reason: FinishReason,
    pub usage: Usage,
}

pub fn collect(mut s: folio_engine::RequestStream) -> Outcome {
    let mut ids = Vec::new();
    let mut text = String::new();
    while let Some(ev) = s.next_blocking() {
        match ev {
            Event::Tokens {
                ids: t, text: x, ..
            } => {
                ids.extend(t);
                text.push_str(&x);
            }
            // Generation streams carry no embedding.
            Event::Embedding { .. } => {}
            Event::Finished { reason, usage, .. } => {
                return Outcome {
                    ids,
                    text,
                    reason,
                    usage,
                }
            }
        }
    }
    panic!("stream ended without Finished");
}

/// Distinct prompts of varied lengths (5 to ~300 tokens).
pub fn prompts(h: &EngineHandle, n: usize) -> Vec<Vec<u32>> {
    let topics = [
        "the sea",
        "a fox",
        "prime numbers",
        "Rust traits",
        "the moon",
        "bread",
        "rivers",
        "chess",
    ];
    (0..n)
        .map(|i| {
            let mut text = format!("Tell me about {} in a few words.", topics[i % topics.len()]);
            for _ in 0..(i * 7 % 23) {
                text.push_str(" Please be precise and brief, and mention one fact.");
            }
            h.tokenizer.encode(&text, true).expect("encode")
        })
        .collect()
}

pub fn greedy(prompt: &[u32], max_tokens: usize) -> GenerateRequest {
    let mut r = GenerateRequest::new(prompt.to_vec(), max_tokens);
    r.ignore_eos = true;
    r
}
