//! llama.cpp's samplers through the engine: each changes what a seeded request draws, the
//! same seed draws the same tokens again, n-gram speculation (point-mass drafts verified
//! position by position) gives exactly the tokens decoding without it gives, and a draft
//! model's rejection sampling repeats under the same seed. History-dependent samplers
//! (penalties, DRY, Mirostat's `mu`) see only the accepted tokens.

mod common;
use common::*;
use folio_engine::sampler::{dry, Dry, Mirostat, Stage};
use folio_engine::{EngineConfig, EngineHandle, SamplingParams, SpecMethod};

const MAX: usize = 24;

/// One setting per sampler, strong enough to change a temperature-1 sample.
fn settings(h: &EngineHandle) -> Vec<(&'static str, SamplingParams)> {
    let base = SamplingParams {
        temperature: 1.0,
        ..Default::default()
    };
    let breakers = dry::breaker_tokens(
        &h.tokenizer,
        &dry::DEFAULT_BREAKERS
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    );
    vec![
        ("plain", base.clone()),
        (
            "typical_p",
            SamplingParams {
                typical_p: 0.3,
                ..base.clone()
            },
        ),
        (
            "top_n_sigma",
            SamplingParams {
                top_n_sigma: 0.5,
                ..base.clone()
            },
        ),
        (
            "xtc",
            SamplingParams {
                xtc_probability: 1.0,
                xtc_threshold: 0.05,
                ..base.clone()
            },
        ),
        (
            "dry",
            SamplingParams {
                dry: Some(Dry {
                    multiplier: 3.0,
                    base: 1.75,
                    allowed_length: 1,
                    penalty_last_n: None,
                    breakers,
                }),
                ..base.clone()
            },
        ),
        (
            "repeat",
            SamplingParams {
                repetition_penalty: 1.8,
                repeat_last_n: Some(8),
                ..base.clone()
            },
        ),
        (
            "mirostat",
            SamplingParams {
                mirostat: Some(Mirostat { tau: 3.0, eta: 0.1 }),
                ..base.clone()
            },
        ),
        (
            "order",
            SamplingParams {
                min_p: 0.2,
                temperature: 1.8,
                order: Some(vec![Stage::MinP, Stage::Temperature]),
                ..base.clone()
            },
        ),
    ]
}

/// Every setting's outputs over the prompts, seeded.
fn run(h: &EngineHandle) -> Vec<(&'static str, Vec<Vec<u32>>)> {
    let ps = prompts(h, 4);
    settings(h)
        .into_iter()
        .map(|(name, params)| {
            let outs = ps
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut r = greedy(p, MAX);
                    r.params = SamplingParams {
                        seed: Some(500 + i as u64),
                        ..params.clone()
                    };
                    collect(h.submit(r).expect("submit")).ids
                })
                .collect();
            (name, outs)
        })
        .collect()
}

fn cfg(spec: SpecMethod, k: Option<usize>) -> EngineConfig {
    EngineConfig {
        prefix_cache: false,
        spec,
        spec_tokens: k,
        ..EngineConfig::default()
    }
}

#[test]
fn seeded_samplers_repeat_and_keep_their_tokens_under_speculation() {
    let h = engine(cfg(SpecMethod::Off, None));
    let want = run(&h);
    assert_eq!(run(&h), want, "the same seeds drew other tokens");
    h.shutdown();
    let plain = &want[0].1;
    for (name, outs) in &want[1..] {
        assert_ne!(outs, plain, "{name} changed nothing");
    }
    for k in [Some(4), None] {
        let h = engine(cfg(SpecMethod::Ngram, k));
        let got = run(&h);
        let drafted = h.metrics.spec.lock().unwrap().drafted;
        h.shutdown();
        assert!(drafted > 0, "k={k:?}: nothing was drafted");
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            assert_eq!(
                g, w,
                "{name}, k={k:?}: n-gram speculation changed the tokens"
            );
        }
    }
}

/// A draft model (the target's own file): drafts drawn from the draft's distribution and
/// verified by rejection sampling; the same seeds give the same tokens run after run.
#[test]
fn seeded_samplers_repeat_with_a_draft_model() {
    use folio_engine::spawn_engine_with_draft;
    let path = folio_fetch::test_model().expect("the default model");
    let f = folio_gguf::GgufFile::open(&path).expect("open model");
    let load = || folio_model::Model::from_gguf(&f).expect("load model");
    let tok = std::sync::Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer"));
    let h = spawn_engine_with_draft(
        load(),
        Some(load()),
        tok,
        &path,
        cfg(SpecMethod::SelfDraft, Some(3)),
    )
    .expect("engine");
    let first = run(&h);
    let second = run(&h);
    let drafted = h.metrics.spec.lock().unwrap().drafted;
    h.shutdown();
    assert!(drafted > 0, "nothing was drafted");
    for ((name, a), (_, b)) in first.iter().zip(&second) {
        assert_eq!(
            a, b,
            "{name}: the same seeds drew other tokens with a draft model"
        );
        assert!(a.iter().all(|o| o.len() == MAX), "{name}: {a:?}");
    }
}
