//! Request fields on the real model: logit_bias, min_tokens, allowed_token_ids, bad_words,
//! completions echo and prompt scoring (what lm-evaluation-harness sends), unknown fields.

use folio_testkit::http as common;

use common::{post, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn ok(s: &Server, path: &str, body: Value) -> Value {
    common::post_ok(s.addr, path, &body)
}

fn tokens(s: &Server, text: &str) -> Vec<u64> {
    ok(s, "/tokenize", json!({ "prompt": text }))["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn detok(s: &Server, ids: &[u64]) -> String {
    ok(s, "/detokenize", json!({ "tokens": ids }))["prompt"]
        .as_str()
        .unwrap()
        .to_string()
}

const PROMPT: &str = "The capital of France is";

fn greedy(s: &Server, extra: Value) -> Value {
    let mut body = json!({"prompt": PROMPT, "max_tokens": 4, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    ok(s, "/v1/completions", body)
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn logit_bias_and_allowed_token_ids_steer_greedy_decoding() {
    let Some(s) = server() else { return };
    // +100 on one token makes it every token; allowed_token_ids of one token likewise.
    let forced = detok(s, &[314, 314, 314, 314]);
    assert_eq!(
        text(&greedy(s, json!({"logit_bias": {"314": 100}}))),
        forced
    );
    assert_eq!(
        text(&greedy(s, json!({"allowed_token_ids": [314]}))),
        forced
    );
    // -100 on the greedy first token: another first token.
    let base = text(&greedy(s, json!({})));
    let first = tokens(s, &format!("{PROMPT}{base}"))[tokens(s, PROMPT).len()];
    let banned = text(&greedy(s, json!({"logit_bias": {first.to_string(): -100}})));
    assert_ne!(banned, base);
    assert!(
        !banned.starts_with(&detok(s, &[first])),
        "{banned:?} starts with the banned token {first}"
    );
}

#[test]
fn min_tokens_holds_off_end_of_generation() {
    let Some(s) = server() else { return };
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 64, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        ok(s, "/v1/chat/completions", body)
    };
    let base = chat(json!({}));
    assert_eq!(base["choices"][0]["finish_reason"], "stop", "{base}");
    let k = base["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(k < 40, "{base}");
    let longer = chat(json!({"min_tokens": k + 8}));
    let k2 = longer["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(
        k2 >= k + 8,
        "min_tokens {}: got {k2} tokens: {longer}",
        k + 8
    );
}

#[test]
fn bad_words_are_never_generated() {
    let Some(s) = server() else { return };
    let base = text(&greedy(s, json!({"max_tokens": 8})));
    let word = base.split_whitespace().next().expect("a word").to_string();
    let got = text(&greedy(
        s,
        json!({"max_tokens": 8, "bad_words": [word.clone()]}),
    ));
    assert_ne!(got, base);
    assert!(!got.contains(&word), "{got:?} contains bad word {word:?}");
}

/// The completions logprobs object of choice `i`.
fn lp(v: &Value, i: usize) -> &Value {
    &v["choices"][i]["logprobs"]
}

#[test]
fn echo_with_logprobs_scores_the_prompt_like_generation_does() {
    let Some(s) = server() else { return };
    let n_prompt = tokens(s, PROMPT).len();
    // One generated token, with the prompt's scores in front (lm-eval's request shape).
    let r1 = greedy(s, json!({"echo": true, "logprobs": 1, "max_tokens": 1}));
    let l1 = lp(&r1, 0);
    let full = text(&r1);
    assert!(
        full.starts_with(PROMPT) && full.len() > PROMPT.len(),
        "{r1}"
    );
    let toks1 = l1["tokens"].as_array().unwrap();
    assert_eq!(toks1.len(), n_prompt + 1, "{l1}");
    assert_eq!(l1["token_logprobs"][0], Value::Null);
    assert_eq!(l1["top_logprobs"][0], Value::Null);
    let joined: String = toks1.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, full);
    // text_offset: where each token starts in the echoed text.
    let offsets: Vec<u64> = l1["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let mut at = 0;
    for (t, &o) in toks1.iter().zip(&offsets) {
        assert_eq!(o, at);
        at += t.as_str().unwrap().chars().count() as u64;
    }
    // Greedy: the generated token is its own top alternative.
    let last = l1["token_logprobs"][n_prompt].as_f64().unwrap();
    let top: Vec<f64> = l1["top_logprobs"][n_prompt]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(top, vec![last]);

    // Scoring prompt + that token generates nothing and gives the same numbers.
    let score = |prompt: &str| {
        ok(
            s,
            "/v1/completions",
            json!({"prompt": prompt, "echo": true, "logprobs": 1, "max_tokens": 0, "temperature": 0}),
        )
    };
    let r2 = score(&full);
    assert_eq!(text(&r2), full);
    assert_eq!(r2["usage"]["completion_tokens"], 0);
    assert_eq!(r2["choices"][0]["finish_reason"], "length");
    let l2 = lp(&r2, 0);
    assert_eq!(l2["tokens"], l1["tokens"]);
    assert_eq!(l2["token_logprobs"][0], Value::Null);
    for i in 1..=n_prompt {
        let (a, b) = (
            l1["token_logprobs"][i].as_f64().unwrap(),
            l2["token_logprobs"][i].as_f64().unwrap(),
        );
        assert!(a <= 0.0 && (a - b).abs() < 1e-3, "position {i}: {a} vs {b}");
    }
    // Again: the prompt is now in the prefix cache, which scoring must not skip.
    let r3 = score(&full);
    assert_eq!(lp(&r3, 0), l2);
}

#[test]
fn scoring_long_prompts_batches_and_samples() {
    let Some(s) = server() else { return };
    // Longer than one prefill chunk (512 tokens).
    let long = "one two three four five six seven eight nine ten ".repeat(70);
    let n = tokens(s, &long).len();
    assert!(n > 600, "{n}");
    let r = ok(
        s,
        "/v1/completions",
        json!({"prompt": [long, PROMPT], "echo": true, "logprobs": 2, "max_tokens": 0, "n": 2, "temperature": 1.0, "seed": 3}),
    );
    let ch = r["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 4);
    let l0 = lp(&r, 0);
    let lps = l0["token_logprobs"].as_array().unwrap();
    assert_eq!(lps.len(), n);
    assert!(lps[1..].iter().all(|v| v.as_f64().unwrap() <= 0.0));
    assert_eq!(l0["top_logprobs"][n - 1].as_object().unwrap().len(), 2);
    // The repeated text is easy to predict once seen.
    let at = |i: usize| lps[i].as_f64().unwrap();
    let mean = (100..300).map(at).sum::<f64>() / 200.0;
    assert!(mean > -0.2, "mean logprob of positions 100..300: {mean}");
    // n = 2 of one prompt: the same scores.
    assert_eq!(lp(&r, 1), l0);
    assert_eq!(lp(&r, 3), lp(&r, 2));
    assert_eq!(r["usage"]["completion_tokens"], 0);
}

#[test]
fn echo_without_logprobs_and_max_tokens_zero() {
    let Some(s) = server() else { return };
    let r = greedy(s, json!({"echo": true}));
    let base = text(&greedy(s, json!({})));
    assert_eq!(text(&r), format!("{PROMPT}{base}"));
    assert_eq!(r["choices"][0]["logprobs"], Value::Null);
    let z = greedy(s, json!({"max_tokens": 0}));
    assert_eq!(
        (text(&z), z["choices"][0]["finish_reason"].clone()),
        (String::new(), json!("length"))
    );
    assert_eq!(z["usage"]["completion_tokens"], 0);
    assert_eq!(
        z["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        tokens(s, PROMPT).len()
    );
    // Token-id prompts echo their decoded text.
    let ids = tokens(s, PROMPT);
    let t = ok(
        s,
        "/v1/completions",
        json!({"prompt": ids, "echo": true, "max_tokens": 0}),
    );
    assert_eq!(text(&t), detok(s, &ids));
}

fn error(s: &Server, path: &str, body: Value) -> String {
    let r = post(s.addr, path, &body);
    assert_eq!(r.status, 400, "{}", r.text());
    r.json()["error"]["message"].as_str().unwrap().to_string()
}

#[test]
fn unknown_and_unsupported_fields_are_400_naming_them() {
    let Some(s) = server() else { return };
    let c = "/v1/completions";
    assert_eq!(
        error(s, c, json!({"prompt": "x", "suffix": "y"})),
        "suffix: not supported by folio (insertion needs a fill-in-the-middle prompt format folio does not build), got string \"y\""
    );
    assert_eq!(
        error(s, c, json!({"prompt": "x", "best_of_luck": 1})),
        "best_of_luck: unknown field for /v1/completions: folio does not implement it, got 1"
    );
    assert_eq!(
        error(s, c, json!({"prompt": "x", "logit_bias": {"1": 200}})),
        "logit_bias[\"1\"]: must be a number in [-100, 100], got 200"
    );
    assert_eq!(
        error(
            s,
            c,
            json!({"prompt": "x", "max_tokens": 2, "min_tokens": 3})
        ),
        "min_tokens: must be at most max_tokens (2), got 3"
    );
    // Harmless fields are accepted.
    ok(
        s,
        c,
        json!({"prompt": "x", "max_tokens": 1, "metadata": {"k": "v"}, "store": false, "use_beam_search": false}),
    );
    // tools with tool_choice none: the tools are not offered, a plain answer comes back.
    let r = ok(
        s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
               "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
               "tool_choice": "none"}),
    );
    assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
}

#[test]
fn echo_streams_the_prompt_first() {
    let Some(s) = server() else { return };
    let body =
        json!({"prompt": PROMPT, "echo": true, "logprobs": 1, "max_tokens": 3, "temperature": 0});
    let whole = ok(s, "/v1/completions", body.clone());
    let mut sb = body;
    sb["stream"] = json!(true);
    let r = post(s.addr, "/v1/completions", &sb);
    assert_eq!(r.status, 200, "{}", r.text());
    let (chunks, done) = r.sse();
    assert!(done);
    let first = &chunks[0]["choices"][0];
    assert!(
        first["text"].as_str().unwrap().starts_with(PROMPT),
        "{first}"
    );
    let mut text = String::new();
    let mut lps: Vec<Value> = Vec::new();
    let mut offsets: Vec<Value> = Vec::new();
    for c in &chunks {
        let ch = &c["choices"][0];
        text.push_str(ch["text"].as_str().unwrap_or(""));
        if let Some(l) = ch["logprobs"].as_object() {
            lps.extend(l["token_logprobs"].as_array().unwrap().iter().cloned());
            offsets.extend(l["text_offset"].as_array().unwrap().iter().cloned());
        }
    }
    assert_eq!(text, self::text(&whole));
    let w = lp(&whole, 0);
    assert_eq!(&lps, w["token_logprobs"].as_array().unwrap());
    assert_eq!(&offsets, w["text_offset"].as_array().unwrap());
}
