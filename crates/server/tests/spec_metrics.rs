//! `/metrics` under speculation: token counters count tokens (a verified draft step emits
//! several), so `vllm:generation_tokens_total` is the sum of the finished requests'
//! `completion_tokens`.

use common::{engine_with, get, metric, post_ok, start};
use folio_testkit::http as common;
use serde_json::json;

#[test]
fn generation_tokens_total_equals_the_completion_tokens_under_speculation() {
    let cfg = folio_engine::EngineConfig {
        spec: folio_engine::SpecMethod::Ngram,
        ..folio_engine::EngineConfig::default()
    };
    let Some(engine) = engine_with(cfg, None) else {
        eprintln!("SKIPPED: no test model");
        return;
    };
    let s = start(engine, folio_server::ServerOptions::default());
    // Repetitive prompts: the n-gram proposer finds drafts and the verifier accepts some.
    let prompts = [
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
        "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
        "def f(x):\n    return x\n\ndef f(x):\n    return x\n\ndef f(x):\n",
    ];
    let mut completion = 0u64;
    for (i, p) in prompts.iter().enumerate() {
        for seed in 0..2 {
            let mut body = json!({"prompt": p, "max_tokens": 40, "seed": seed});
            if seed == 0 {
                body["temperature"] = json!(0.0);
            }
            let v = post_ok(s.addr, "/v1/completions", &body);
            completion += v["usage"]["completion_tokens"].as_u64().unwrap();
            assert!(
                v["usage"]["completion_tokens"].as_u64().unwrap() > 0,
                "prompt {i}"
            );
        }
    }
    let m = get(s.addr, "/metrics").text();
    let model = s.engine.info.model_name.clone();
    let generated = metric(
        &m,
        &format!("vllm:generation_tokens_total{{model_name=\"{model}\"}}"),
    )
    .expect("vllm:generation_tokens_total exported");
    let drafted = metric(&m, "folio_spec_draft_tokens_total").expect("drafts counted");
    let accepted = metric(&m, "folio_spec_accepted_tokens_total").expect("acceptances");
    assert!(
        accepted > 0.0,
        "speculation accepted drafts ({accepted} of {drafted})"
    );
    assert_eq!(generated as u64, completion, "{m}");
    assert_eq!(
        metric(&m, "folio_generation_tokens_total").unwrap() as u64,
        completion
    );
}
