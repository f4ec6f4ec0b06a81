//! `--reasoning-parser` over real HTTP. The default model does not think, so a regex
//! constraint makes it write `<think>…</think>` and then an answer: real generation, whose
//! text the split must move into `reasoning_content`, non-streaming and streamed (where
//! the tags arrive cut into several tokens), and the same as the raw text of a server with
//! the parser off.

use folio_testkit::http as common;

use common::{post, post_ok, Server};
use folio_server::ServerOptions;
use serde_json::{json, Value};

/// The shared server (parser off) and one with `parser` on the same engine.
fn servers(parser: &str) -> Option<(&'static Server, Server)> {
    let off = common::shared()?;
    let on = common::start(
        off.engine.clone(),
        ServerOptions {
            reasoning_parser: Some(parser.into()),
            ..Default::default()
        },
    );
    Some((off, on))
}

fn body(stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Think about the sky, then name its colour."}],
        "max_tokens": 80,
        "temperature": 0,
        "stream": stream,
        "structured_outputs": {"regex": "<think>[a-z ]{5,40}</think>[A-Za-z ]{3,30}"},
    })
}

/// (reasoning, content) of a streamed chat answer, and how many chunks carried reasoning.
fn streamed(s: &Server) -> (String, String, usize) {
    let r = post(s.addr, "/v1/chat/completions", &body(true));
    assert_eq!(r.status, 200, "{}", r.text());
    let (chunks, done) = r.sse();
    assert!(done);
    let (mut reasoning, mut content, mut n) = (String::new(), String::new(), 0);
    for c in &chunks {
        let d = &c["choices"][0]["delta"];
        if let Some(t) = d["reasoning_content"].as_str() {
            reasoning.push_str(t);
            n += 1;
        }
        content.push_str(d["content"].as_str().unwrap_or(""));
    }
    let last = &chunks.last().unwrap()["choices"][0];
    assert_eq!(last["finish_reason"], "stop", "{last}");
    (reasoning, content, n)
}

#[test]
fn think_text_goes_to_reasoning_content() {
    let Some((off, on)) = servers("qwen3") else {
        return;
    };
    let raw = post_ok(off.addr, "/v1/chat/completions", &body(false));
    let raw = raw["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (thought, answer) = raw
        .strip_prefix("<think>")
        .and_then(|r| r.split_once("</think>"))
        .unwrap_or_else(|| panic!("the constraint forces the tags: {raw:?}"));
    // The tags are several tokens each: streamed, they arrive cut across events.
    let ids = post_ok(off.addr, "/tokenize", &json!({"prompt": "</think>"}));
    assert!(ids["count"].as_u64().unwrap() > 1, "{ids}");

    let v = post_ok(on.addr, "/v1/chat/completions", &body(false));
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], thought, "{v}");
    assert_eq!(msg["content"], answer, "{v}");

    let (reasoning, content, n) = streamed(&on);
    assert_eq!((reasoning.as_str(), content.as_str()), (thought, answer));
    assert!(n > 1, "the thought came in {n} chunks");
    // Off, the stream keeps the raw text.
    let (reasoning, content, _) = streamed(off);
    assert_eq!((reasoning.as_str(), content.as_str()), ("", raw.as_str()));
}

#[test]
fn deepseek_r1_drops_the_leading_tag_and_a_bad_name_is_refused() {
    let Some((_, on)) = servers("deepseek_r1") else {
        return;
    };
    let v = post_ok(on.addr, "/v1/chat/completions", &body(false));
    let msg = &v["choices"][0]["message"];
    let thought = msg["reasoning_content"].as_str().unwrap();
    assert!(!thought.is_empty() && !thought.contains("think>"), "{v}");
    assert!(!msg["content"].as_str().unwrap().contains("think>"), "{v}");
    // Completions are never split.
    let c = post(
        on.addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 20, "temperature": 0,
                "structured_outputs": {"regex": "<think>[a-z]{2,5}</think>"}}),
    );
    assert!(c.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("<think>"));
    let e = ServerOptions {
        reasoning_parser: Some("r1".into()),
        ..Default::default()
    }
    .check()
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--reasoning-parser: must be one of deepseek_r1, qwen3; got \"r1\""
    );
}

#[test]
fn responses_give_the_thought_as_a_reasoning_item() {
    let Some((_, on)) = servers("qwen3") else {
        return;
    };
    let chat = post_ok(on.addr, "/v1/chat/completions", &body(false));
    let msg = &chat["choices"][0]["message"];
    let mut req = json!({
        "input": "Think about the sky, then name its colour.",
        "max_output_tokens": 80,
        "temperature": 0,
        "structured_outputs": {"regex": "<think>[a-z ]{5,40}</think>[A-Za-z ]{3,30}"},
    });
    let r = post_ok(on.addr, "/v1/responses", &req);
    let out = r["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{r}");
    assert_eq!(out[0]["type"], "reasoning");
    assert!(out[0]["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(out[0]["content"][0]["type"], "reasoning_text");
    assert_eq!(out[0]["content"][0]["text"], msg["reasoning_content"]);
    assert_eq!(out[1]["type"], "message");
    assert_eq!(out[1]["content"][0]["text"], msg["content"]);
    let reasoning_tokens = r["usage"]["output_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        reasoning_tokens > 0 && reasoning_tokens < r["usage"]["output_tokens"].as_u64().unwrap(),
        "{r}"
    );

    req["stream"] = json!(true);
    let evs = post(on.addr, "/v1/responses", &req).events();
    let text = |kind: &str| -> String {
        evs.iter()
            .filter(|(n, _)| n == kind)
            .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        text("response.reasoning_text.delta"),
        out[0]["content"][0]["text"].as_str().unwrap()
    );
    assert_eq!(
        text("response.output_text.delta"),
        out[1]["content"][0]["text"].as_str().unwrap()
    );
    // The reasoning item is done before the message item is added.
    let pos = |kind: &str, index: u64| {
        evs.iter()
            .position(|(n, v)| n == kind && v["output_index"] == index)
            .unwrap()
    };
    assert!(pos("response.output_item.done", 0) < pos("response.output_item.added", 1));
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["output"][0]["content"], out[0]["content"]);
    assert_eq!(last["output"][1]["content"], out[1]["content"]);
}
