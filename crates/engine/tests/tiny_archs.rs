//! Every architecture (llama, qwen2, qwen3, gemma3, gemma2, phi3, qwen3moe, qwen2moe, mixtral)
//! under the engine: a tiny synthetic model of each (random weights, a byte-level vocabulary) gives each request the same greedy tokens alone and under
//! continuous batching x16, chunked prefill, the prefix cache (prompts sharing a prefix),
//! preemption by recompute (a pool too small for all), and speculation (n-gram and
//! self-draft). Gemma 3's 5-token window is far shorter than the prompts, so its window
//! layers are exercised across chunk and block boundaries.

mod common;

use folio_testkit::tiny;

use common::{collect, greedy};
use folio_core::sched::BatchPolicy;
use folio_engine::{spawn_engine, EngineConfig, EngineHandle, SpecMethod};
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
        ..TokenizerSpec::default()
    })
    .expect("tiny tokenizer")
}

/// Experts of a tiny MoE: (experts, used per token, expert FFN width, shared expert width).
type Experts = Option<(usize, usize, usize, usize)>;

/// One tiny model of each architecture: (label, arch, experts).
const MODELS: &[(&str, &str, Experts)] = &[
    ("llama", "llama", None),
    ("qwen2", "qwen2", None),
    ("qwen3", "qwen3", None),
    ("gemma3", "gemma3", None),
    ("gemma2", "gemma2", None),
    ("phi3", "phi3", None),
    ("qwen3moe", "qwen3moe", Some((8, 2, 128, 0))),
    ("qwen2moe", "qwen2moe", Some((8, 2, 64, 128))),
    ("mixtral", "llama", Some((4, 2, 128, 0))),
];

fn model(arch: &str, experts: Experts) -> Model {
    let sh = Shape {
        d: 128,
        heads: 4,
        kv_heads: 2,
        hd: 32,
        ffn: 256,
        vocab: VOCAB,
        layers: 2,
        ctx: 512,
    };
    let moe = experts.map(|(e, k, f, shared)| MoeShape::new(e, k, f, shared));
    let bytes = build_moe_with(&sh, arch, moe.as_ref(), &|_| GgmlType::Q8_0, 11);
    let f = GgufFile::from_bytes(bytes).expect("tiny gguf");
    Model::from_gguf(&f).expect("tiny model")
}

/// KV bytes of one token in the tiny models: 2 layers x 2 KV heads x 32 x (K + V) x f16.
const KV_BYTES_PER_TOKEN: usize = 2 * 2 * 32 * 2 * 2;

fn engine(arch: &str, experts: Experts, cfg: EngineConfig) -> EngineHandle {
    let path = std::path::Path::new("tiny.gguf");
    spawn_engine(model(arch, experts), Arc::new(tokenizer()), path, cfg).expect("engine")
}

/// 16 prompts of 3..70 tokens; every fourth shares a 40-token prefix with the one before
/// (so the prefix cache has something to reuse).
fn prompts() -> Vec<Vec<u32>> {
    let shared = prompt(900, 40, VOCAB);
    (0..16u64)
        .map(|i| {
            if i % 4 == 3 {
                let mut p = shared.clone();
                p.extend(prompt(700 + i, 5 + i as usize, VOCAB));
                p
            } else {
                prompt(500 + i, 3 + (i as usize * 11) % 67, VOCAB)
            }
        })
        .collect()
}

fn run(h: &EngineHandle, ps: &[Vec<u32>], concurrent: bool) -> Vec<Vec<u32>> {
    if !concurrent {
        return ps
            .iter()
            .map(|p| collect(h.submit(greedy(p, MAX)).expect("submit")).ids)
            .collect();
    }
    let streams: Vec<_> = ps
        .iter()
        .map(|p| h.submit(greedy(p, MAX)).expect("submit"))
        .collect();
    streams.into_iter().map(|s| collect(s).ids).collect()
}

#[test]
fn every_architecture_is_batching_and_speculation_invariant() {
    let ps = prompts();
    let base = EngineConfig {
        prefix_cache: false,
        kv_cache_bytes: 8 << 20,
        ..EngineConfig::default()
    };
    for &(label, arch, experts) in MODELS {
        let h = engine(
            arch,
            experts,
            EngineConfig {
                policy: BatchPolicy::Serial,
                ..base.clone()
            },
        );
        let alone = run(&h, &ps, false);
        h.shutdown();
        for (i, a) in alone.iter().enumerate() {
            assert_eq!(a.len(), MAX, "{label}: request {i}");
        }
        // Different prompts, different continuations: the model is not degenerate.
        let distinct: std::collections::HashSet<_> = alone.iter().collect();
        assert!(
            distinct.len() > 8,
            "{label}: {} distinct outputs of 16",
            distinct.len()
        );
        let spec = |method, k| EngineConfig {
            spec: method,
            spec_tokens: Some(k),
            spec_max_tokens: k,
            spec_draft_layers: 1,
            ..base.clone()
        };
        let cases = [
            ("continuous x16", base.clone()),
            (
                "chunk 8",
                EngineConfig {
                    max_chunk: 8,
                    token_budget: 24,
                    ..base.clone()
                },
            ),
            (
                "prefix cache",
                EngineConfig {
                    prefix_cache: true,
                    ..base.clone()
                },
            ),
            (
                // Room for ~10 of the 16 requests' final lengths: the rest wait or are
                // preempted and recomputed. Every layer's KV kept (`swa_full`), so window
                // models take as much room as the others.
                "small pool",
                EngineConfig {
                    kv_cache_bytes: KV_BYTES_PER_TOKEN * 16 * 40,
                    swa_full: true,
                    ..base.clone()
                },
            ),
            (
                // Window models release their window layers' KV behind the window, so the
                // same pressure needs half the bytes (only run for them).
                "small pool, window KV",
                EngineConfig {
                    kv_cache_bytes: KV_BYTES_PER_TOKEN * 16 * 40 / 2,
                    ..base.clone()
                },
            ),
            ("n-gram k=3", spec(SpecMethod::Ngram, 3)),
            ("self-draft k=2", spec(SpecMethod::SelfDraft, 2)),
        ];
        for (name, cfg) in cases {
            let windowed = matches!(arch, "gemma3" | "gemma2");
            if name == "small pool, window KV" && !windowed {
                continue;
            }
            let small = name.starts_with("small pool");
            let prefix = cfg.prefix_cache;
            let releases = windowed && !cfg.swa_full;
            let h = engine(arch, experts, cfg);
            // The prefix cache reuses across requests in turn; everything else runs 16 at once.
            let got = run(&h, &ps, !prefix);
            let m = &h.metrics;
            let load =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            if small {
                assert!(
                    load(&m.preemptions) > 0,
                    "{label} {name}: the small pool should have preempted"
                );
            }
            // Gemma's 5-token window is far behind every prompt's end: its window layers'
            // blocks go back to the pool while the requests run.
            assert_eq!(
                load(&m.kv_window_released_blocks) > 0,
                releases,
                "{label} {name}: window blocks released"
            );
            if name.starts_with("self-draft") {
                let drafted = m.spec.lock().expect("spec stats").drafted;
                assert!(drafted > 0, "{label} {name}: nothing was drafted");
            }
            if prefix {
                assert!(
                    load(&m.prefix_hits_tokens) >= 3 * 32,
                    "{label} {name}: the shared prefix was not reused"
                );
            }
            h.shutdown();
            for (i, (a, b)) in alone.iter().zip(&got).enumerate() {
                assert_eq!(
                    a, b,
                    "{label} {name}: request {i} differs from running alone"
                );
            }
        }
    }
}
