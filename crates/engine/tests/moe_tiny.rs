//! A tiny synthetic qwen3moe model (random weights, byte-level vocabulary) under the engine:
//! 16 concurrent greedy requests give the same tokens as each request alone.

mod common;
#[path = "../../model/tests/common/mod.rs"]
mod tiny;

use common::{collect, greedy};
use folio_core::sched::BatchPolicy;
use folio_engine::{spawn_engine, EngineConfig, EngineHandle};
use folio_gguf::{GgmlType, GgufFile};
use folio_model::Model;
use folio_tokenizer::{token_type, Tokenizer, TokenizerSpec};
use std::sync::Arc;
use tiny::{build_moe_with, prompt, MoeShape, Shape};

const VOCAB: usize = 300;
const MAX: usize = 16;

/// GPT-2's byte → char alphabet.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("char")
}

/// 3 control tokens, the 256 byte tokens, then fillers up to the model's vocabulary.
fn tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<|end|>".into(), "<s>".into(), "<pad>".into()];
    let mut token_types = vec![token_type::CONTROL; 3];
    for i in 0..VOCAB - 3 {
        tokens.push(match i {
            0..256 => byte_char(i as u8).to_string(),
            _ => format!("w{i}"),
        });
        token_types.push(token_type::NORMAL);
    }
    Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens,
        token_types,
        merges: Vec::new(),
        bos_id: Some(1),
        eos_id: Some(0),
        eot_id: None,
        add_bos: false,
        add_eos: false,
        chat_template: None,
    })
    .expect("tiny tokenizer")
}

fn engine(policy: BatchPolicy) -> EngineHandle {
    let sh = Shape {
        d: 128,
        heads: 4,
        kv_heads: 2,
        hd: 32,
        ffn: 256,
        vocab: VOCAB,
        layers: 2,
        ctx: 256,
    };
    let moe = MoeShape::new(8, 2, 128, 0);
    let bytes = build_moe_with(&sh, "qwen3moe", Some(&moe), &|_| GgmlType::Q8_0, 11);
    let f = GgufFile::from_bytes(bytes).expect("tiny gguf");
    let model = Model::from_gguf(&f).expect("tiny MoE model");
    let cfg = EngineConfig {
        policy,
        prefix_cache: false,
        kv_cache_bytes: 8 << 20,
        ..EngineConfig::default()
    };
    let path = std::path::Path::new("tiny-qwen3moe.gguf");
    spawn_engine(model, Arc::new(tokenizer()), path, cfg).expect("engine")
}

#[test]
fn moe_greedy_concurrent_equals_alone() {
    let prompts: Vec<Vec<u32>> = (0..16)
        .map(|i| prompt(500 + i, 3 + (i as usize * 11) % 60, VOCAB))
        .collect();
    let h = engine(BatchPolicy::Serial);
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| collect(h.submit(greedy(p, MAX)).expect("submit")).ids)
        .collect();
    h.shutdown();
    let h = engine(BatchPolicy::Continuous);
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| h.submit(greedy(p, MAX)).expect("submit"))
        .collect();
    let together: Vec<Vec<u32>> = streams.into_iter().map(|s| collect(s).ids).collect();
    h.shutdown();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), MAX, "request {i}");
        assert_eq!(a, t, "request {i}: concurrent tokens differ from alone");
    }
    // Different prompts, different continuations: the routing is not degenerate.
    let distinct: std::collections::HashSet<_> = alone.iter().collect();
    assert!(
        distinct.len() > 8,
        "{} distinct outputs of 16",
        distinct.len()
    );
}
