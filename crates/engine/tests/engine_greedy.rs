//! Greedy outputs on the real model do not depend on how requests are batched: alone,
//! 16 at once under continuous batching, under fixed batching, with chunked prefill at
//! chunk sizes 32 and 512, with the prefix cache on, and after preemption by recompute.

mod common;
use common::*;
use folio_core::sched::{BatchPolicy, KvReservation};
use folio_engine::{EngineConfig, EngineHandle, FinishReason};

const N: usize = 16;
const MAX: usize = 24;

/// Greedy outputs of `ps` submitted all at once (one batch).
fn all_at_once(h: &folio_engine::EngineHandle, ps: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let streams: Vec<_> = ps
        .iter()
        .map(|p| h.submit(greedy(p, MAX)).expect("submit"))
        .collect();
    streams.into_iter().map(|s| collect(s).ids).collect()
}

fn run_all(cfg: EngineConfig, prompts_n: usize, concurrent: bool) -> (Vec<Vec<u32>>, u64, u64) {
    let h = engine(cfg);
    let ps = prompts(&h, prompts_n);
    let outs: Vec<Vec<u32>> = if concurrent {
        all_at_once(&h, &ps)
    } else {
        ps.iter()
            .map(|p| collect(h.submit(greedy(p, MAX)).expect("submit")).ids)
            .collect()
    };
    let m = &h.metrics;
    let pre = m.preemptions.load(std::sync::atomic::Ordering::Relaxed);
    let rec = m
        .recomputed_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    h.shutdown();
    (outs, pre, rec)
}

#[test]
fn greedy_is_batching_invariant() {
    let base = EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    };
    let (alone, _, _) = run_all(
        EngineConfig {
            policy: BatchPolicy::Serial,
            ..base.clone()
        },
        N,
        false,
    );
    for o in &alone {
        assert_eq!(o.len(), MAX);
    }
    let cases = [
        ("continuous x16", EngineConfig { ..base.clone() }),
        (
            "fixed",
            EngineConfig {
                policy: BatchPolicy::Fixed,
                max_running: 8,
                ..base.clone()
            },
        ),
        (
            "chunk 32",
            EngineConfig {
                max_chunk: 32,
                token_budget: 96,
                ..base.clone()
            },
        ),
        (
            "chunk 512",
            EngineConfig {
                max_chunk: 512,
                ..base.clone()
            },
        ),
        (
            // The budget follows measured step costs, so chunk sizes vary step to step.
            "max ITL 20 ms",
            EngineConfig {
                max_itl_ms: Some(20.0),
                ..base.clone()
            },
        ),
        (
            "prefix cache on",
            EngineConfig {
                prefix_cache: true,
                ..base.clone()
            },
        ),
        (
            "reserve-final",
            EngineConfig {
                reservation: KvReservation::ReserveFinal,
                ..base.clone()
            },
        ),
    ];
    for (name, cfg) in cases {
        let (got, _, _) = run_all(cfg, N, true);
        for (i, (a, b)) in alone.iter().zip(&got).enumerate() {
            assert_eq!(a, b, "{name}: request {i} differs from running alone");
        }
    }
    // A pool too small for 16 requests at once forces preemption by recompute.
    let small = EngineConfig {
        kv_cache_bytes: 23_040 * 16 * 40,
        ..base.clone()
    };
    let (got, preemptions, recomputed) = run_all(small, N, true);
    assert!(preemptions > 0, "the small pool should have preempted");
    assert!(recomputed > 0);
    for (i, (a, b)) in alone.iter().zip(&got).enumerate() {
        assert_eq!(
            a, b,
            "preempted run: request {i} differs from running alone"
        );
    }
}

#[test]
fn stop_strings_eos_and_cancel() {
    let h = engine(EngineConfig::default());
    let p = h
        .tokenizer
        .encode(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            true,
        )
        .unwrap();
    // Natural stop at the end-of-turn token.
    let mut r = common::greedy(&p, 64);
    r.ignore_eos = false;
    let o = collect(h.submit(r).unwrap());
    assert_eq!(o.text, "The capital of France is Paris.");
    assert_eq!(o.reason, FinishReason::Stop);
    assert_eq!(o.usage.prompt_tokens, 16);
    assert_eq!(o.usage.completion_tokens, 8, "7 text tokens + <|im_end|>");
    // A stop string ends generation and is not emitted.
    let mut r = common::greedy(&p, 64);
    r.stop = vec![" Paris".into()];
    let o = collect(h.submit(r).unwrap());
    assert_eq!(o.text, "The capital of France is");
    assert_eq!(o.reason, FinishReason::Stop);
    // max_tokens.
    let o = collect(h.submit(common::greedy(&p, 3)).unwrap());
    assert_eq!(o.ids.len(), 3);
    assert_eq!(o.reason, FinishReason::Length);
    // Dropping the stream cancels; the engine frees its blocks.
    let s = h.submit(common::greedy(&p, 4000)).unwrap();
    drop(s);
    let t = std::time::Instant::now();
    while h
        .metrics
        .num_running
        .load(std::sync::atomic::Ordering::Relaxed)
        > 0
        && t.elapsed().as_secs() < 20
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Run one more request so the metrics reflect a step after the cancel.
    let _ = collect(h.submit(common::greedy(&p, 1)).unwrap());
    assert_eq!(
        h.metrics
            .num_running
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        h.metrics
            .kv_blocks_used
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Speculative decoding never changes greedy outputs: each proposer, several draft
/// lengths (and adaptive), alone and in a batch of 16.
#[test]
fn speculation_keeps_greedy_outputs() {
    use folio_engine::SpecMethod;
    let base = EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    };
    // A prompt that invites copying, plus the varied ones.
    let (plain, _, _) = run_all(base.clone(), N, true);
    let cases = [
        (SpecMethod::Ngram, Some(1)),
        (SpecMethod::Ngram, Some(4)),
        (SpecMethod::Ngram, None),
        (SpecMethod::SelfDraft, Some(2)),
        (SpecMethod::SelfDraft, None),
    ];
    for (method, k) in cases {
        let cfg = EngineConfig {
            spec: method,
            spec_tokens: k,
            spec_max_tokens: k.unwrap_or(8),
            ..base.clone()
        };
        let h = engine(cfg.clone());
        let ps = prompts(&h, N);
        // Alone.
        let mut completion_tokens = 0;
        for (i, p) in ps.iter().take(3).enumerate() {
            let o = collect(h.submit(greedy(p, MAX)).unwrap());
            assert_eq!(
                o.ids, plain[i],
                "{method:?} k={k:?}: request {i} alone differs from no speculation"
            );
            assert_eq!(o.usage.completion_tokens, o.ids.len());
            completion_tokens += o.usage.completion_tokens;
        }
        // Batch of 16.
        for (i, o) in all_at_once(&h, &ps).into_iter().enumerate() {
            assert_eq!(
                o, plain[i],
                "{method:?} k={k:?}: request {i} in a batch of 16 differs"
            );
            completion_tokens += o.len();
        }
        let st = h.metrics.spec.lock().unwrap().clone();
        assert!(st.drafted > 0, "{method:?} k={k:?}: nothing was drafted");
        // The generation counter (`vllm:generation_tokens_total`) counts tokens, several
        // per verified step, not sampling steps.
        assert_eq!(
            h.metrics
                .generation_tokens
                .load(std::sync::atomic::Ordering::Relaxed),
            completion_tokens as u64,
            "{method:?} k={k:?}: generation_tokens"
        );
        h.shutdown();
    }
}

/// A seeded sampled request gives the same tokens with n-gram speculation (fixed or adaptive
/// draft lengths, alone or in a batch) as without: each output position draws with its own
/// uniform, and a point-mass draft is accepted iff it is that position's token.
#[test]
fn seeded_sampling_is_the_same_with_and_without_ngram_speculation() {
    use folio_engine::{SamplingParams, SpecMethod};
    let runs = |spec: SpecMethod, k: Option<usize>| {
        let h = engine(EngineConfig {
            prefix_cache: false,
            spec,
            spec_tokens: k,
            ..EngineConfig::default()
        });
        let ps = prompts(&h, 8);
        let req = |i: usize| {
            let mut r = greedy(&ps[i], MAX);
            r.params = SamplingParams {
                temperature: 0.7,
                seed: Some(100 + i as u64),
                ..Default::default()
            };
            r
        };
        let alone: Vec<Vec<u32>> = (0..ps.len())
            .map(|i| collect(h.submit(req(i)).unwrap()).ids)
            .collect();
        let streams: Vec<_> = (0..ps.len()).map(|i| h.submit(req(i)).unwrap()).collect();
        let batched: Vec<Vec<u32>> = streams.into_iter().map(|s| collect(s).ids).collect();
        let drafted = h.metrics.spec.lock().unwrap().drafted;
        h.shutdown();
        (alone, batched, drafted)
    };
    let (want, want_batched, _) = runs(SpecMethod::Off, None);
    assert_eq!(want, want_batched);
    for k in [Some(4), None] {
        let (alone, batched, drafted) = runs(SpecMethod::Ngram, k);
        assert!(drafted > 0, "k={k:?}: nothing was drafted");
        assert_eq!(
            alone, want,
            "k={k:?}: seeded samples differ with speculation"
        );
        assert_eq!(batched, want, "k={k:?}: seeded samples differ in a batch");
    }
}

/// n samples of one prompt compute the prompt once: the others are forked from the first
/// and share its KV (copy-on-write). Seeded samples repeat; each equals the same seed run
/// alone; greedy samples are all identical to a single greedy run.
#[test]
fn n_samples_fork_and_match_independent_runs() {
    use folio_engine::SamplingParams;
    let h = engine(EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    });
    let p = prompts(&h, 1).remove(0);
    let seeded = |seed: u64| SamplingParams {
        temperature: 0.9,
        seed: Some(seed),
        ..Default::default()
    };
    let alone: Vec<Vec<u32>> = (0..3u64)
        .map(|j| {
            let mut r = greedy(&p, MAX);
            r.params = seeded(40 + j);
            collect(h.submit(r).unwrap()).ids
        })
        .collect();
    let prompt_before = h.metrics.steps.load(std::sync::atomic::Ordering::Relaxed);
    let streams = h
        .submit_n(greedy(&p, MAX), (0..3u64).map(|j| seeded(40 + j)).collect())
        .unwrap();
    let together: Vec<Vec<u32>> = streams.into_iter().map(|s| collect(s).ids).collect();
    assert_eq!(
        together, alone,
        "forked samples differ from the same seeds run alone"
    );
    assert!(
        h.metrics
            .cow_copies
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "the shared tail block is copied on write"
    );
    assert!(h.metrics.steps.load(std::sync::atomic::Ordering::Relaxed) > prompt_before);
    let g = collect(h.submit(greedy(&p, MAX)).unwrap()).ids;
    let many = h
        .submit_n(greedy(&p, MAX), vec![SamplingParams::default(); 4])
        .unwrap();
    for s in many {
        assert_eq!(collect(s).ids, g);
    }
    h.shutdown();
}

/// `--draft-model` with the target's own file as the draft: its KV follows every step, so
/// its greedy drafts are exactly the target's next tokens: all accepted, outputs as without
/// speculation.
#[test]
fn draft_model_equal_to_the_target_drafts_exactly() {
    use folio_engine::{spawn_engine_with_draft, SpecMethod};
    let base = EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    };
    let (plain, _, _) = run_all(base.clone(), 4, true);
    let path = folio_fetch::test_model().expect("the default model");
    let f = folio_gguf::GgufFile::open(&path).expect("open model");
    let load = || folio_model::Model::from_gguf(&f).expect("load model");
    let tok = std::sync::Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer"));
    let cfg = EngineConfig {
        spec: SpecMethod::SelfDraft,
        spec_tokens: Some(3),
        ..base
    };
    let h = spawn_engine_with_draft(load(), Some(load()), tok, &path, cfg).expect("engine");
    let ps = prompts(&h, 4);
    for (i, o) in all_at_once(&h, &ps).into_iter().enumerate() {
        assert_eq!(o, plain[i], "request {i} differs from no speculation");
    }
    // Every draft made since `before` was accepted; returns the counters now.
    let all_accepted_since = |before: &folio_spec::SpecStats, what: &str| {
        let now = h.metrics.spec.lock().unwrap().clone();
        assert!(now.drafted > before.drafted, "{what}: nothing was drafted");
        assert_eq!(
            now.accepted - before.accepted,
            now.drafted - before.drafted,
            "{what}: a draft by the target itself was rejected"
        );
        now
    };
    let st = all_accepted_since(&Default::default(), "greedy");
    // Drafts see the request's own logit processing (here a repetition penalty over the
    // output and the drafts so far, and masked end tokens): still every draft accepted.
    let mut r = greedy(&ps[0], MAX);
    r.params.repetition_penalty = 1.5;
    let penalized = collect(h.submit(r).unwrap()).ids;
    assert_eq!(penalized.len(), MAX);
    let after = all_accepted_since(&st, "repetition penalty");
    // Forked samples share their prompt's partial last block and draft in the same round,
    // each from its own token: drafts go to scratch copies, never into the shared block, so
    // each sample's draft distribution equals its target's and every draft is accepted.
    let seeded = |seed: u64| folio_engine::SamplingParams {
        temperature: 0.9,
        seed: Some(seed),
        ..Default::default()
    };
    let forks = h
        .submit_n(
            greedy(&ps[1], MAX),
            (0..4u64).map(|j| seeded(70 + j)).collect(),
        )
        .unwrap();
    for f in forks {
        assert_eq!(collect(f).ids.len(), MAX);
    }
    all_accepted_since(&after, "forked samples");
    h.shutdown();
}

/// Greedy output under a JSON schema is the same alone, in a batch of 16, and with
/// n-gram and self-draft speculation (drafts cut by the grammar, rows verified under
/// their own masks, the matcher rolled back to the accepted drafts).
#[test]
fn constrained_greedy_is_invariant() {
    use folio_core::sched::BatchPolicy;
    use folio_engine::{Constraint, SpecMethod};
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "topic": {"type": "string", "maxLength": 16},
            "facts": {"type": "array", "maxItems": 2,
                      "items": {"type": "string", "maxLength": 16}},
            "rating": {"type": "integer", "minimum": 1, "maximum": 5}
        },
        "required": ["topic", "facts", "rating"],
        "additionalProperties": false
    });
    // Compiled once per engine, as the server compiles once per call.
    let req = |h: &EngineHandle, p: &Vec<u32>| {
        let mut r = folio_engine::GenerateRequest::new(p.clone(), 80);
        let c = Constraint::JsonSchema(schema.clone());
        r.constraint = Some(h.grammars.compile(&c).expect("the schema compiles"));
        r
    };
    let base = EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    };
    let run = |cfg: EngineConfig, together: bool| -> (Vec<Vec<u32>>, u64) {
        let h = engine(cfg);
        let ps = prompts(&h, N);
        let outs = if together {
            let streams: Vec<_> = ps.iter().map(|p| h.submit(req(&h, p)).unwrap()).collect();
            streams.into_iter().map(|s| collect(s).ids).collect()
        } else {
            ps.iter()
                .map(|p| collect(h.submit(req(&h, p)).unwrap()).ids)
                .collect()
        };
        let drafted = h.metrics.spec.lock().unwrap().drafted;
        h.shutdown();
        (outs, drafted)
    };
    let (alone, _) = run(
        EngineConfig {
            policy: BatchPolicy::Serial,
            ..base.clone()
        },
        false,
    );
    let h = engine(base.clone());
    for (i, o) in alone.iter().enumerate() {
        let text = h.tokenizer.decode(o, false);
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("request {i}: {text:?} is not JSON: {e}"));
    }
    h.shutdown();
    let cases = [
        ("batch of 16", SpecMethod::Off, None),
        ("ngram k=4", SpecMethod::Ngram, Some(4)),
        ("ngram adaptive", SpecMethod::Ngram, None),
        ("self k=3", SpecMethod::SelfDraft, Some(3)),
        ("self adaptive", SpecMethod::SelfDraft, None),
    ];
    for (name, spec, k) in cases {
        let cfg = EngineConfig {
            spec,
            spec_tokens: k,
            spec_max_tokens: k.unwrap_or(8),
            ..base.clone()
        };
        let (got, drafted) = run(cfg, true);
        assert!(
            spec == SpecMethod::Off || drafted > 0,
            "{name}: nothing drafted"
        );
        for (i, (a, b)) in alone.iter().zip(&got).enumerate() {
            assert_eq!(
                a, b,
                "{name}: constrained request {i} differs from running alone"
            );
        }
    }
}
