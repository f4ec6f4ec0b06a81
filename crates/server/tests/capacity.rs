//! Capacity honesty over real HTTP, on an engine whose KV pool (4 MB) holds far less
//! than the model's context: /v1/models says what can really run, a request that can never
//! fit the pool is a 400 naming the limit (not a 429 "retry later"), and a request without
//! `max_tokens` gets what fits.

use folio_testkit::http as common;

use common::{get, post};
use serde_json::json;

#[test]
fn a_pool_smaller_than_the_context_is_reported_and_enforced_with_400s() {
    let cfg = folio_engine::EngineConfig {
        kv_cache_bytes: 4 << 20,
        ..Default::default()
    };
    let Some(engine) = common::engine_with(cfg, None) else {
        return;
    };
    let info = engine.info.clone();
    let (ctx, pool) = (info.context_length, info.kv_capacity_tokens);
    assert!(
        pool < ctx,
        "the test needs a pool smaller than the context: {info:?}"
    );
    let s = common::start(engine, Default::default());

    // What can really run, and no file path.
    let m = get(s.addr, "/v1/models").json();
    assert_eq!(m["data"][0]["max_model_len"], pool, "{m}");
    assert!(!m.to_string().contains('/'), "a path in /v1/models: {m}");
    let t = post(s.addr, "/tokenize", &json!({"prompt": "hi"})).json();
    assert_eq!(t["max_model_len"], pool, "{t}");
    let card = get(s.addr, &format!("/v1/models/{}", info.model_name)).json();
    assert_eq!(card["max_model_len"], pool, "{card}");

    // No max_tokens: the default shrinks to what fits the pool, and the request runs
    // (before: 429, since the default exceeded the pool).
    let v = common::post_ok(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "ignore_eos": true, "temperature": 0}),
    );
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(
        v["usage"]["completion_tokens"].as_u64().unwrap() as usize,
        pool - prompt,
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");

    // max_tokens past the pool: 400 naming the field, the limit and the value.
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": pool + 10}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.json()["error"].clone();
    assert_eq!(e["param"], "max_tokens", "{e}");
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("max_tokens: {} + ", pool + 10))
            && msg.contains(&format!("what one request can use, {pool} tokens"))
            && msg.contains(&format!("the context length of {ctx}")),
        "{msg}"
    );

    // A prompt longer than the pool holds (but inside the context): 400, not 429.
    for (path, body, field) in [
        (
            "/v1/completions",
            json!({"prompt": vec![100; pool + 50], "max_tokens": 1}),
            "prompt",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello ".repeat(pool + 50)}], "max_tokens": 1}),
            "messages",
        ),
    ] {
        let r = post(s.addr, path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        let e = r.json()["error"].clone();
        assert_eq!(e["param"], field, "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("one request can use at most {pool} tokens"))
                && msg.contains("--kv-cache-bytes"),
            "{msg}"
        );
    }
    // Text that must be more tokens than fit is refused from its length, unencoded:
    // for generation against the pool, for /tokenize (which runs nothing) the context.
    let m = s.engine.tokenizer.max_token_bytes().unwrap();
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "a".repeat(m * pool + 1), "max_tokens": 1}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!(
            "prompt: {} bytes of text, at least {} tokens",
            m * pool + 1,
            pool + 1
        )) && msg.contains(&format!("one request can use at most {pool} tokens")),
        "{msg}"
    );
    let t = post(
        s.addr,
        "/tokenize",
        &json!({"prompt": "a".repeat(m * pool + 1)}),
    );
    assert_eq!(t.status, 200, "{}", t.text());
    let r = post(
        s.addr,
        "/tokenize",
        &json!({"prompt": "a".repeat(m * ctx + 1)}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains(&format!("the context length is {ctx} tokens")),
        "{msg}"
    );

    // What fits still runs.
    let v = common::post_ok(
        s.addr,
        "/v1/completions",
        &json!({"prompt": vec![100; pool - 4], "max_tokens": 4, "ignore_eos": true}),
    );
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
}
