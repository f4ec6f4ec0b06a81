//! Ollama's `/api/chat` and `/api/generate` over real HTTP on the real model: the same
//! greedy text as `/v1/chat/completions` (and a raw generate as `/v1/completions`), NDJSON
//! framing with Ollama's exact fields on every line and on the `done` line, `format` as a
//! schema giving JSON that validates, the tool-call shape (`arguments` an object), and
//! errors as `{"error": "…"}` naming the field.

use folio_testkit::http as common;

use common::{post, post_ok, Server};
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn server() -> Option<&'static Server> {
    common::shared()
}

fn name(s: &Server) -> String {
    s.engine.info.model_name.clone()
}

/// The fields of the last (done) object, chat or generate.
fn done_keys(output: &str) -> BTreeSet<String> {
    [
        "model",
        "created_at",
        output,
        "done",
        "done_reason",
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The NDJSON lines of a streamed answer (each must be one JSON object).
fn lines(r: &common::Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let text = r.text();
    assert!(text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect()
}

const ASK: &str = "What is the capital of France? Answer in one sentence.";

/// The OpenAI answer to the same messages: text, finish reason, usage.
fn openai(s: &Server, messages: &Value, max: u64) -> (String, String, Value) {
    let v = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "temperature": 0, "max_tokens": max}),
    );
    let c = &v["choices"][0];
    (
        c["message"]["content"].as_str().unwrap().to_string(),
        c["finish_reason"].as_str().unwrap().to_string(),
        v["usage"].clone(),
    )
}

fn check_done(v: &Value, output: &str, finish: &str, usage: &Value, model: &str) {
    assert_eq!(keys(v), done_keys(output), "{v}");
    assert_eq!(v["done"], true);
    assert_eq!(v["model"], model);
    assert_eq!(v["done_reason"], finish);
    assert_eq!(v["prompt_eval_count"], usage["prompt_tokens"]);
    assert_eq!(v["eval_count"], usage["completion_tokens"]);
    let ns = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(
        ns("total_duration")
            >= ns("load_duration") + ns("prompt_eval_duration") + ns("eval_duration"),
        "{v}"
    );
    let t = v["created_at"].as_str().unwrap();
    assert!(
        t.len() == 30 && t.ends_with('Z') && &t[10..11] == "T",
        "{t}"
    );
}

#[test]
fn chat_gives_the_openai_greedy_text_streamed_and_not() {
    let Some(s) = server() else { return };
    let messages = json!([{"role": "user", "content": ASK}]);
    let (text, finish, usage) = openai(s, &messages, 24);
    assert!(!text.is_empty());
    let body = json!({"model": name(s), "messages": messages,
                      "options": {"temperature": 0, "num_predict": 24}});
    let mut one = body.clone();
    one["stream"] = json!(false);
    let v = post_ok(s.addr, "/api/chat", &one);
    check_done(&v, "message", &finish, &usage, &name(s));
    assert_eq!(v["message"], json!({"role": "assistant", "content": text}));

    let r = post(s.addr, "/api/chat", &body);
    let ls = lines(&r);
    let (last, pieces) = ls.split_last().unwrap();
    assert!(!pieces.is_empty());
    for p in pieces {
        assert_eq!(
            keys(p),
            ["created_at", "done", "message", "model"]
                .map(String::from)
                .into(),
            "{p}"
        );
        assert_eq!(
            (p["done"].clone(), p["message"]["role"].clone()),
            (json!(false), json!("assistant"))
        );
    }
    let streamed: String = pieces
        .iter()
        .map(|p| p["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text);
    check_done(last, "message", &finish, &usage, &name(s));
    assert_eq!(last["message"], json!({"role": "assistant", "content": ""}));
    // `:latest` finds the untagged name; `think: false` changes nothing for a model
    // without thinking.
    one["model"] = json!(format!("{}:latest", name(s)));
    one["think"] = json!(false);
    let v = post_ok(s.addr, "/api/chat", &one);
    assert_eq!(v["message"]["content"], text.as_str());
}

#[test]
fn generate_is_a_one_message_chat_and_raw_is_a_completion() {
    let Some(s) = server() else { return };
    let (text, finish, usage) = openai(s, &json!([{"role": "user", "content": ASK}]), 16);
    let body = json!({"model": name(s), "prompt": ASK, "stream": false,
                      "options": {"temperature": 0, "num_predict": 16}});
    let v = post_ok(s.addr, "/api/generate", &body);
    check_done(&v, "response", &finish, &usage, &name(s));
    assert_eq!(v["response"], text.as_str());
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let ls = lines(&post(s.addr, "/api/generate", &streamed));
    let (last, pieces) = ls.split_last().unwrap();
    let joined: String = pieces
        .iter()
        .map(|p| p["response"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);
    assert_eq!(last["response"], "");
    check_done(last, "response", &finish, &usage, &name(s));

    let raw = "The capital of France is";
    let c = post_ok(
        s.addr,
        "/v1/completions",
        &json!({"prompt": raw, "temperature": 0, "max_tokens": 8}),
    );
    let v = post_ok(
        s.addr,
        "/api/generate",
        &json!({"model": name(s), "prompt": raw, "raw": true, "stream": false,
                "options": {"temperature": 0, "num_predict": 8}}),
    );
    assert_eq!(v["response"], c["choices"][0]["text"]);
    assert_eq!(v["eval_count"], c["usage"]["completion_tokens"]);
}

#[test]
fn format_schema_output_parses_and_validates() {
    let Some(s) = server() else { return };
    let schema = json!({"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
        "required": ["city", "population"], "additionalProperties": false});
    let v = post_ok(
        s.addr,
        "/api/chat",
        &json!({"model": name(s), "stream": false, "format": schema,
                "messages": [{"role": "user", "content": "Name a large city and its population as JSON."}],
                "options": {"temperature": 0, "num_predict": 64}}),
    );
    let out: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap()).unwrap();
    assert!(jsonschema::is_valid(&schema, &out), "{out}");
    assert_eq!(v["done_reason"], "stop");
    let v = post_ok(
        s.addr,
        "/api/generate",
        &json!({"model": name(s), "stream": false, "format": "json", "prompt": "A JSON object about Paris:",
                "options": {"temperature": 0, "num_predict": 48}}),
    );
    if v["done_reason"] == "stop" {
        let out: Value = serde_json::from_str(v["response"].as_str().unwrap()).unwrap();
        assert!(out.is_object(), "{out}");
    }
}

#[test]
fn a_tool_call_has_ollamas_shape() {
    let Some(s) = server() else { return };
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    // `tool_choice` (a folio extension; Ollama has none) forces the call.
    let body = json!({"model": name(s), "stream": false, "tools": [tool], "tool_choice": "required",
                      "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                      "options": {"temperature": 0, "num_predict": 64}});
    let v = post_ok(s.addr, "/api/chat", &body);
    let m = &v["message"];
    assert_eq!(v["done_reason"], "stop", "{v}");
    assert_eq!(m["content"], "");
    let calls = m["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(keys(&calls[0]), ["function"].map(String::from).into());
    assert_eq!(
        keys(&calls[0]["function"]),
        ["arguments", "name"].map(String::from).into()
    );
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert!(calls[0]["function"]["arguments"]["city"].is_string(), "{v}");
    // Streamed: the same call on one line, then the done line.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let ls = lines(&post(s.addr, "/api/chat", &streamed));
    let with_calls: Vec<&Value> = ls
        .iter()
        .filter(|l| l["message"].get("tool_calls").is_some())
        .collect();
    assert_eq!(with_calls.len(), 1, "{ls:?}");
    assert_eq!(with_calls[0]["message"]["tool_calls"], m["tool_calls"]);
    assert_eq!(ls.last().unwrap()["done_reason"], "stop");
    // A follow-up turn with the call and its result as Ollama clients send them.
    let follow = json!({"model": name(s), "stream": false, "tools": [tool],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"},
                     {"role": "assistant", "content": "", "tool_calls": m["tool_calls"]},
                     {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"}],
        "options": {"temperature": 0, "num_predict": 8}});
    let v = post_ok(s.addr, "/api/chat", &follow);
    assert_eq!(v["done"], true);
}

#[test]
fn load_requests_and_errors_in_ollamas_shape() {
    let Some(s) = server() else { return };
    let v = post_ok(
        s.addr,
        "/api/chat",
        &json!({"model": name(s), "messages": []}),
    );
    assert_eq!(
        keys(&v),
        ["created_at", "done", "done_reason", "message", "model"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        (v["done"].clone(), v["done_reason"].clone()),
        (json!(true), json!("load"))
    );
    let v = post_ok(
        s.addr,
        "/api/generate",
        &json!({"model": name(s), "keep_alive": 0}),
    );
    assert_eq!(
        (v["response"].clone(), v["done_reason"].clone()),
        (json!(""), json!("unload"))
    );

    let cases = [
        (
            "/api/generate",
            json!({"model": name(s), "prompt": "hi", "images": ["aGk="]}),
            400,
            "images: images are not supported: folio serves text-only models; got 1 image(s)"
                .to_string(),
        ),
        (
            "/api/chat",
            json!({"model": "nope:7b", "messages": [{"role": "user", "content": "hi"}]}),
            404,
            format!(
                "The model `nope:7b` does not exist; this server serves `{}`.",
                name(s)
            ),
        ),
        (
            "/api/chat",
            json!({"model": name(s), "messages": [{"role": "user", "content": "hi"}], "options": {"top_k": 50000}}),
            400,
            "options.top_k: must be an integer in [-1, 49152], got 50000".to_string(),
        ),
        (
            "/api/chat",
            json!({"model": name(s), "messages": [{"role": "user", "content": "hi"}], "options": {"tfs_z": 0.5}}),
            400,
            "options.tfs_z: folio has no such sampler; only 1 (off) is accepted, got 0.5"
                .to_string(),
        ),
    ];
    let long = "word ".repeat(20_000);
    let r = post(
        s.addr,
        "/api/generate",
        &json!({"model": name(s), "prompt": long}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let count = post_ok(
        s.addr,
        "/tokenize",
        &json!({"messages": [{"role": "user", "content": long}]}),
    )["count"]
        .clone();
    let ctx = s.engine.info.context_length;
    assert_eq!(
        r.json(),
        json!({"error": format!("prompt: {count} tokens, but the context length is {ctx} tokens (at most {} prompt tokens fit). This model's maximum context length is {ctx} tokens. However, you requested {count} tokens ({count} in the messages, 0 in the completion). Please reduce the length of the messages or completion.", ctx - 1)})
    );
    for (path, body, status, msg) in cases {
        let r = post(s.addr, path, &body);
        assert_eq!(r.status, status, "{}", r.text());
        assert_eq!(r.json(), json!({"error": msg}));
    }
}

/// `think: true` splits `<think>…</think>` into `message.thinking`, streamed and not, and
/// a stream sends only JSON lines even when keep-alives fall due between tokens (1 ms
/// here: chat streams would send `: keep-alive` comments). The model does not think, so a
/// schema (one string) makes it write the tags, cut into several tokens.
#[test]
fn think_splits_thinking_and_streams_only_json_lines() {
    let Some(shared) = server() else { return };
    let s = common::start(
        shared.engine.clone(),
        folio_server::ServerOptions {
            keep_alive: std::time::Duration::from_millis(1),
            ..Default::default()
        },
    );
    let schema = json!({"enum": ["<think>the sky is clear today</think>Blue"]});
    let messages =
        json!([{"role": "user", "content": "Think about the sky, then name its colour."}]);
    let raw = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "temperature": 0, "max_tokens": 80,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}),
    );
    let raw = raw["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (before, rest) = raw
        .split_once("<think>")
        .unwrap_or_else(|| panic!("{raw:?}"));
    let (thought, after) = rest.split_once("</think>").unwrap();
    assert_eq!(
        (before, thought, after),
        ("\"", "the sky is clear today", "Blue\"")
    );
    let content = format!("{before}{after}");
    let body = json!({"model": name(&s), "messages": messages, "think": true, "stream": false,
                      "format": schema, "options": {"temperature": 0, "num_predict": 80}});
    let v = post_ok(s.addr, "/api/chat", &body);
    assert_eq!(
        v["message"],
        json!({"role": "assistant", "content": content, "thinking": thought})
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let ls = lines(&post(s.addr, "/api/chat", &streamed));
    let joined =
        |k: &str| -> String { ls.iter().filter_map(|l| l["message"][k].as_str()).collect() };
    assert_eq!(
        (joined("thinking"), joined("content")),
        (thought.to_string(), content.clone())
    );
    assert_eq!(ls.last().unwrap()["done"], true);
    // `think: false`: the text as the model wrote it.
    let mut off = body.clone();
    off["think"] = json!(false);
    let v = post_ok(s.addr, "/api/chat", &off);
    assert_eq!(v["message"], json!({"role": "assistant", "content": raw}));
}

/// `logprobs` / `top_logprobs`: the chat path's entries (`token`, `logprob`, `bytes`,
/// `top_logprobs`), one per generated token, streamed on the line of their text.
#[test]
fn logprobs_are_the_chat_paths() {
    let Some(s) = server() else { return };
    let messages = json!([{"role": "user", "content": ASK}]);
    let v1 = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "temperature": 0, "max_tokens": 6, "logprobs": true, "top_logprobs": 2}),
    );
    let want = &v1["choices"][0]["logprobs"]["content"];
    assert_eq!(want.as_array().unwrap().len(), 6);
    let body = json!({"model": name(s), "messages": messages, "stream": false, "logprobs": true,
                      "top_logprobs": 2, "options": {"temperature": 0, "num_predict": 6}});
    let v = post_ok(s.addr, "/api/chat", &body);
    assert_eq!(&v["logprobs"], want);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let ls = lines(&post(s.addr, "/api/chat", &streamed));
    let got: Vec<Value> = ls
        .iter()
        .flat_map(|l| l["logprobs"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(&Value::Array(got), want);
}
