//! The field policy on the real model: every accepted-and-ignored field answers 200 with
//! the `Warning` header naming it; llama-server's sampling fields are read (seeded
//! requests repeat); context overflows in OpenAI's words; `continuous_usage_stats`.

use folio_testkit::http as common;

use common::{get, post, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

/// The accepted-and-ignored fields (the README's "Field policy" table), with a value a
/// client sends.
fn ignored() -> Vec<(&'static str, Value)> {
    vec![
        ("metadata", json!({"k": "v"})),
        ("store", json!(true)),
        ("service_tier", json!("auto")),
        ("priority", json!(1)),
        ("request_id", json!("r-1")),
        ("prediction", json!({"type": "content", "content": "x"})),
        ("modalities", json!(["text"])),
        ("verbosity", json!("low")),
        ("prompt_cache_key", json!("k")),
        ("safety_identifier", json!("u")),
        ("cache_prompt", json!(true)),
        ("id_slot", json!(-1)),
        ("t_max_predict_ms", json!(1000)),
        ("timings_per_token", json!(true)),
        ("return_tokens", json!(true)),
        ("post_sampling_probs", json!(true)),
        ("reasoning_format", json!("auto")),
        ("return_progress", json!(false)),
        ("penalize_nl", json!(false)),
    ]
}

fn chat(extra: &[(&str, Value)]) -> Value {
    let mut b =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0});
    for (k, v) in extra {
        b[*k] = v.clone();
    }
    b
}

fn completion(extra: &[(&str, Value)]) -> Value {
    let mut b = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0});
    for (k, v) in extra {
        b[*k] = v.clone();
    }
    b
}

#[test]
fn each_ignored_field_is_200_with_the_warning() {
    let Some(s) = server() else { return };
    for (name, v) in ignored() {
        let want = format!("299 folio \"ignored fields: {name}\"");
        for (path, body) in [
            ("/v1/chat/completions", chat(&[(name, v.clone())])),
            ("/v1/completions", completion(&[(name, v.clone())])),
        ] {
            let r = post(s.addr, path, &body);
            assert_eq!(r.status, 200, "{path} {name}: {}", r.text());
            assert_eq!(r.header("warning"), Some(want.as_str()), "{path} {name}");
        }
    }
    // Several at once: one header, names sorted; streams carry it too.
    let mut b = chat(&[("verbosity", json!("low")), ("metadata", json!({}))]);
    b["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &b);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("warning"),
        Some("299 folio \"ignored fields: metadata, verbosity\"")
    );
    // SmolLM2's template takes no reasoning effort: ignored, with the warning.
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &chat(&[("reasoning_effort", json!("low"))]),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("warning"),
        Some("299 folio \"ignored fields: reasoning_effort\"")
    );
    // A request of read fields only: no warning.
    let r = post(s.addr, "/v1/completions", &completion(&[]));
    assert_eq!(r.header("warning"), None);
}

#[test]
fn llama_server_sampling_fields_are_read_and_seeded_results_repeat() {
    let Some(s) = server() else { return };
    let fields = [
        ("temperature", json!(1.0)),
        ("seed", json!(42)),
        ("max_tokens", Value::Null),
        ("n_predict", json!(12)),
        ("ignore_eos", json!(true)),
        ("typical_p", json!(0.9)),
        ("top_n_sigma", json!(2.0)),
        ("xtc_probability", json!(0.5)),
        ("xtc_threshold", json!(0.1)),
        ("repeat_penalty", json!(1.1)),
        ("repeat_last_n", json!(64)),
        ("dry_multiplier", json!(0.8)),
        ("dry_base", json!(1.75)),
        ("dry_allowed_length", json!(2)),
        ("dry_penalty_last_n", json!(-1)),
        ("dry_sequence_breakers", json!(["\n", ":"])),
        (
            "samplers",
            json!([
                "penalties",
                "dry",
                "top_n_sigma",
                "top_k",
                "typ_p",
                "top_p",
                "min_p",
                "xtc",
                "temperature"
            ]),
        ),
        ("dynatemp_range", json!(0)),
        ("min_keep", json!(0)),
    ];
    let mut mirostat = fields.to_vec();
    mirostat.extend([
        ("mirostat", json!(2)),
        ("mirostat_tau", json!(4.0)),
        ("mirostat_eta", json!(0.2)),
        ("samplers", json!("edkypmxt")),
    ]);
    for set in [&fields[..], &mirostat[..]] {
        for (path, body) in [
            ("/v1/completions", completion(set)),
            ("/v1/chat/completions", chat(set)),
        ] {
            let a = post(s.addr, path, &body);
            assert_eq!(a.status, 200, "{path}: {}", a.text());
            assert_eq!(a.header("warning"), None, "{path}");
            let b = post(s.addr, path, &body).json();
            let a = a.json();
            assert_eq!(a["choices"], b["choices"], "{path}: the same seed differs");
            assert_eq!(a["usage"]["completion_tokens"], 12, "{path}: n_predict");
        }
    }
    // n_probs: top alternatives per token.
    let v = common::post_ok(
        s.addr,
        "/v1/completions",
        &completion(&[("n_probs", json!(3))]),
    );
    assert_eq!(
        v["choices"][0]["logprobs"]["top_logprobs"][0]
            .as_object()
            .unwrap()
            .len(),
        3
    );
    let v = common::post_ok(
        s.addr,
        "/v1/chat/completions",
        &chat(&[("n_probs", json!(2))]),
    );
    assert_eq!(
        v["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let r = post(
        s.addr,
        "/v1/completions",
        &completion(&[("mirostat", json!(1))]),
    );
    common::assert_error(
        &r,
        400,
        "invalid_parameter",
        &["mirostat: only 0 (off) and 2 (Mirostat 2) are implemented by folio, got 1"],
    );
}

fn context(s: &Server) -> u64 {
    get(s.addr, "/v1/models").json()["data"][0]["max_model_len"]
        .as_u64()
        .unwrap()
}

#[test]
fn every_overflow_has_openais_wording_and_code() {
    let Some(s) = server() else { return };
    let n = context(s);
    let head =
        format!(". This model's maximum context length is {n} tokens. However, you requested ");
    // A prompt past the context (token ids: an exact count).
    let ids: Vec<u32> = vec![314; n as usize + 5];
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 1}),
    );
    let want = format!(
        "{head}{} tokens ({} in the prompt, 0 in the completion). Please reduce the length of the prompt or completion.",
        n + 5,
        n + 5
    );
    common::assert_error(&r, 400, "context_length_exceeded", &[&want]);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!("prompt: {} tokens, but ", n + 5)),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!(" prompt tokens fit){want}")),
        "{msg}"
    );
    assert_eq!(r.json()["error"]["param"], "prompt");
    // max_tokens past what is left.
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": [314, 314], "max_tokens": n}),
    );
    let want = format!(
        "{head}{} tokens (2 in the prompt, {n} in the completion). Please reduce the length of the prompt or completion.",
        n + 2
    );
    common::assert_error(&r, 400, "context_length_exceeded", &[&want]);
    assert_eq!(r.json()["error"]["param"], "max_tokens");
    // Chat: messages too long, and max_tokens past the context.
    let long = "hi ".repeat(n as usize + 10);
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}], "max_tokens": 1}),
    );
    common::assert_error(
        &r,
        400,
        "context_length_exceeded",
        &[&head, " in the messages, 0 in the completion). Please reduce the length of the messages or completion."],
    );
    assert_eq!(r.json()["error"]["param"], "messages");
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": n}),
    );
    common::assert_error(
        &r,
        400,
        "context_length_exceeded",
        &[&head, &format!(" in the messages, {n} in the completion). Please reduce the length of the messages or completion.")],
    );
    assert_eq!(r.json()["error"]["param"], "max_tokens");
}

#[test]
fn continuous_usage_stats_put_usage_on_every_chunk() {
    let Some(s) = server() else { return };
    for (path, mut body) in [
        ("/v1/chat/completions", chat(&[])),
        ("/v1/completions", completion(&[])),
    ] {
        body["max_tokens"] = json!(5);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
        let r = post(s.addr, path, &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let (chunks, done) = r.sse();
        assert!(done);
        let last = chunks.last().unwrap();
        assert_eq!(last["usage"]["completion_tokens"], 5, "{path}: {last}");
        let prompt = last["usage"]["prompt_tokens"].as_u64().unwrap();
        let mut seen = 0;
        for c in &chunks {
            let u = &c["usage"];
            assert!(u.is_object(), "{path}: a chunk without usage: {c}");
            assert_eq!(u["prompt_tokens"].as_u64(), Some(prompt), "{path}: {c}");
            let done = u["completion_tokens"].as_u64().unwrap();
            assert!(done >= seen, "{path}: usage went back: {c}");
            assert_eq!(u["total_tokens"].as_u64(), Some(prompt + done));
            seen = done;
        }
        // Without the option: null until the last chunk, as OpenAI sends.
        body["stream_options"] = json!({"include_usage": true});
        let (chunks, _) = post(s.addr, path, &body).sse();
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["usage"].is_null()));
    }
}
