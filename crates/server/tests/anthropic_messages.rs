//! `/v1/messages` and `/v1/messages/count_tokens` over real HTTP: the chat path's answer in
//! Anthropic's shapes (the same greedy text, usage that adds up to the chat prompt),
//! Anthropic's exact stream event order, stop sequences, forced tool use and a tool round
//! trip, Anthropic's error shape, and `x-api-key`.

use folio_testkit::http as common;

use common::{post, post_ok, request_with, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn text_of(m: &Value) -> String {
    m["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

fn chat_for(body: &Value) -> Value {
    let mut messages = vec![json!({"role": "system", "content": body["system"]})];
    messages.extend(body["messages"].as_array().unwrap().iter().cloned());
    let mut c = json!({"messages": messages, "max_tokens": body["max_tokens"], "temperature": 0});
    if let Some(s) = body.get("stop_sequences") {
        c["stop"] = s.clone();
    }
    c
}

const WEATHER: &str = "get_weather";

fn weather_tool() -> Value {
    json!({"name": WEATHER, "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                            "required": ["city"]}})
}

#[test]
fn message_is_the_chat_answer() {
    let Some(s) = server() else { return };
    let body = json!({"model": s.engine.info.model_name, "max_tokens": 24, "temperature": 0,
                      "system": "Answer briefly.", "metadata": {"user_id": "u1"},
                      "messages": [{"role": "user", "content": "What is the capital of France?"}]});
    let m = post_ok(s.addr, "/v1/messages", &body);
    let chat = post_ok(s.addr, "/v1/chat/completions", &chat_for(&body));
    let c = &chat["choices"][0];
    assert!(m["id"].as_str().unwrap().starts_with("msg_"), "{m}");
    assert_eq!(
        (m["type"].as_str(), m["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(m["model"], chat["model"]);
    assert_eq!(text_of(&m), c["message"]["content"].as_str().unwrap());
    assert_eq!(m["content"].as_array().unwrap().len(), 1);
    let want = match c["finish_reason"].as_str().unwrap() {
        "stop" => "end_turn",
        _ => "max_tokens",
    };
    assert_eq!(
        (m["stop_reason"].as_str(), &m["stop_sequence"]),
        (Some(want), &Value::Null)
    );
    let u = &m["usage"];
    assert_eq!(
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap(),
        chat["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    assert_eq!(u["output_tokens"], chat["usage"]["completion_tokens"]);
    assert_eq!(u["cache_creation_input_tokens"], 0);

    // System as text blocks, content as text blocks: the same prompt, the same answer.
    let blocks = json!({"max_tokens": 24, "temperature": 0,
                        "system": [{"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral"}}],
                        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}]});
    let m2 = post_ok(s.addr, "/v1/messages", &blocks);
    assert_eq!(text_of(&m2), text_of(&m));

    // count_tokens: the chat prompt's token count.
    let n = post_ok(s.addr, "/v1/messages/count_tokens", &blocks);
    assert_eq!(n, json!({"input_tokens": chat["usage"]["prompt_tokens"]}));
    // max_tokens ends it as max_tokens.
    let mut short = body.clone();
    short["max_tokens"] = json!(2);
    let m = post_ok(s.addr, "/v1/messages", &short);
    assert_eq!(
        (
            m["stop_reason"].as_str(),
            m["usage"]["output_tokens"].as_u64()
        ),
        (Some("max_tokens"), Some(2))
    );
}

#[test]
fn stream_sends_anthropics_events_in_order() {
    let Some(s) = server() else { return };
    let body = json!({"max_tokens": 16, "temperature": 0,
                      "messages": [{"role": "user", "content": "Say hello."}]});
    let whole = post_ok(s.addr, "/v1/messages", &body);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let r = request_with(
        s.addr,
        "POST",
        "/v1/messages",
        &[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "fine-grained-tool-streaming-2025-05-14"),
        ],
        sbody.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(!r.text().contains("[DONE]"));
    let evs = r.events();
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    for (n, v) in &evs {
        assert_eq!(v["type"], n.as_str());
    }
    let deltas = names.len() - 6;
    assert!(deltas > 1, "{names:?}");
    let want: Vec<&str> = ["message_start", "content_block_start", "ping"]
        .into_iter()
        .chain(std::iter::repeat_n("content_block_delta", deltas))
        .chain(["content_block_stop", "message_delta", "message_stop"])
        .collect();
    assert_eq!(names, want);
    let start = &evs[0].1["message"];
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(
        evs[1].1,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    let text: String = evs[3..3 + deltas]
        .iter()
        .map(|(_, v)| {
            assert_eq!(
                (v["index"].as_u64(), v["delta"]["type"].as_str()),
                (Some(0), Some("text_delta"))
            );
            v["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, text_of(&whole));
    assert_eq!(
        evs[3 + deltas].1,
        json!({"type": "content_block_stop", "index": 0})
    );
    let md = &evs[4 + deltas].1;
    assert_eq!(md["delta"]["stop_reason"], whole["stop_reason"]);
    assert_eq!(md["delta"]["stop_sequence"], Value::Null);
    assert_eq!(
        md["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
    let u = &md["usage"];
    assert_eq!(
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap(),
        start["usage"]["input_tokens"].as_u64().unwrap()
    );
}

#[test]
fn stop_sequence_is_named() {
    let Some(s) = server() else { return };
    let mut body = json!({"max_tokens": 32, "temperature": 0, "system": "You are helpful.",
                          "messages": [{"role": "user", "content": "Describe the sea in two sentences."}]});
    let free = text_of(&post_ok(s.addr, "/v1/messages", &body));
    // A word from the middle of the greedy answer: the answer stops right before it.
    let word = free
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.len() >= 3)
        .nth(2)
        .unwrap_or_else(|| panic!("no third word in {free:?}"))
        .to_string();
    let at = free.find(word.as_str()).unwrap();
    body["stop_sequences"] = json!(["qqqzzz", word]);
    let m = post_ok(s.addr, "/v1/messages", &body);
    assert_eq!(
        (m["stop_reason"].as_str(), m["stop_sequence"].as_str()),
        (Some("stop_sequence"), Some(word.as_str())),
        "{m}"
    );
    assert_eq!(text_of(&m), &free[..at]);
    let chat = post_ok(s.addr, "/v1/chat/completions", &chat_for(&body));
    assert_eq!(
        text_of(&m),
        chat["choices"][0]["message"]["content"].as_str().unwrap()
    );
    body["stream"] = json!(true);
    let evs = post(s.addr, "/v1/messages", &body).events();
    let md = &evs.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(
        md["delta"],
        json!({"stop_reason": "stop_sequence", "stop_sequence": word})
    );
    // Ended by the model itself: end_turn, no sequence.
    body["stream"] = json!(false);
    body["max_tokens"] = json!(200);
    body["stop_sequences"] = json!(["qqqzzz"]);
    let m = post_ok(s.addr, "/v1/messages", &body);
    if m["stop_reason"] != "max_tokens" {
        assert_eq!(
            (m["stop_reason"].as_str(), &m["stop_sequence"]),
            (Some("end_turn"), &Value::Null)
        );
    }
}

#[test]
fn forced_tool_use_and_a_round_trip() {
    let Some(s) = server() else { return };
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let body = json!({"max_tokens": 64, "temperature": 0, "tools": [weather_tool()],
                      "tool_choice": {"type": "tool", "name": WEATHER}, "messages": [user]});
    let m = post_ok(s.addr, "/v1/messages", &body);
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let call = m["content"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (call["type"].as_str(), call["name"].as_str()),
        (Some("tool_use"), Some(WEATHER))
    );
    let id = call["id"].as_str().unwrap();
    assert!(id.starts_with("toolu_"), "{call}");
    let city = call["input"]["city"].as_str().unwrap();
    assert!(["Paris", "London"].contains(&city), "{call}");

    // Streamed: a tool_use block whose input_json_deltas make the same input.
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let evs = post(s.addr, "/v1/messages", &sbody).events();
    let start = evs
        .iter()
        .find(|(n, v)| n == "content_block_start" && v["content_block"]["type"] == "tool_use")
        .unwrap_or_else(|| panic!("{evs:?}"));
    assert_eq!(start.1["content_block"]["name"], WEATHER);
    assert_eq!(start.1["content_block"]["input"], json!({}));
    let partial: String = evs
        .iter()
        .filter(|(_, v)| v["delta"]["type"] == "input_json_delta")
        .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        call["input"]
    );
    let md = &evs.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(md["delta"]["stop_reason"], "tool_use");

    // The result goes back as a tool_result block; the answer is text.
    let round = json!({"max_tokens": 24, "temperature": 0, "tools": [weather_tool()], "messages": [
        user, {"role": "assistant", "content": m["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "Sunny, 24 C"}]}]});
    let mut no_tools = round.clone();
    no_tools["tool_choice"] = json!({"type": "none"});
    let a = post_ok(s.addr, "/v1/messages", &no_tools);
    assert!(
        ["end_turn", "max_tokens"].contains(&a["stop_reason"].as_str().unwrap()),
        "{a}"
    );
    assert!(!text_of(&a).is_empty(), "{a}");
    let n = post_ok(s.addr, "/v1/messages/count_tokens", &round)["input_tokens"]
        .as_u64()
        .unwrap();
    let n_none = post_ok(s.addr, "/v1/messages/count_tokens", &no_tools)["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        n > n_none,
        "tools offered must be in the prompt: {n} vs {n_none}"
    );
    assert_eq!(
        a["usage"]["input_tokens"].as_u64().unwrap()
            + a["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        n_none
    );
}

fn anthropic_error(r: &common::Resp, status: u16, kind: &str) -> String {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    v["error"]["message"].as_str().unwrap().to_string()
}

#[test]
fn errors_have_anthropics_shape() {
    let Some(s) = server() else { return };
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let r = post(s.addr, "/v1/messages", &json!({"messages": msgs}));
    assert_eq!(
        anthropic_error(&r, 400, "invalid_request_error"),
        "max_tokens: required, got nothing"
    );
    let r = post(
        s.addr,
        "/v1/messages",
        &json!({"messages": msgs, "max_tokens": 4, "model": "claude-sonnet-4-5"}),
    );
    let msg = anthropic_error(&r, 404, "not_found_error");
    assert!(msg.contains("claude-sonnet-4-5"), "{msg}");
    let r = post(
        s.addr,
        "/v1/messages",
        &json!({"messages": msgs, "max_tokens": 4, "stop_sequences": "x".repeat(300)}),
    );
    let msg = anthropic_error(&r, 400, "invalid_request_error");
    assert!(msg.starts_with("stop_sequences: "), "{msg}");
    let r = post(
        s.addr,
        "/v1/messages",
        &json!({"messages": msgs, "max_tokens": 4, "temperature": "hot"}),
    );
    assert!(anthropic_error(&r, 400, "invalid_request_error").starts_with("temperature: "));
    let r = common::request(s.addr, "POST", "/v1/messages", b"{not json");
    anthropic_error(&r, 400, "invalid_request_error");
    let r = post(
        s.addr,
        "/v1/messages/count_tokens",
        &json!({"messages": [{"role": "user", "content": [{"type": "image"}]}]}),
    );
    assert_eq!(
        anthropic_error(&r, 400, "invalid_request_error"),
        "messages[0].content[0].type: folio reads text, tool_use (assistant) and tool_result (user) blocks; got string \"image\" in a user message"
    );
}

#[test]
fn x_api_key_is_accepted() {
    let Some(engine) = common::engine() else {
        return;
    };
    let s = common::start(
        engine,
        folio_server::ServerOptions {
            api_key: Some("sk-ant-test".into()),
            ..Default::default()
        },
    );
    let body =
        json!({"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}).to_string();
    let send =
        |h: &[(&str, &str)]| request_with(s.addr, "POST", "/v1/messages", h, body.as_bytes());
    let msg = anthropic_error(&send(&[]), 401, "authentication_error");
    assert!(msg.contains("x-api-key"), "{msg}");
    anthropic_error(
        &send(&[("x-api-key", "sk-ant-tesT")]),
        401,
        "authentication_error",
    );
    for h in [
        ("x-api-key", "sk-ant-test"),
        ("Authorization", "Bearer sk-ant-test"),
    ] {
        let r = send(&[h, ("anthropic-version", "2023-06-01")]);
        assert_eq!(r.status, 200, "{h:?}: {}", r.text());
    }
    // Other routes take x-api-key too, and keep OpenAI's error shape.
    let r = request_with(
        s.addr,
        "GET",
        "/v1/models",
        &[("x-api-key", "sk-ant-test")],
        b"",
    );
    assert_eq!(r.status, 200);
    let r = request_with(s.addr, "GET", "/v1/models", &[], b"");
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );
}

/// A template that opens the thought when `enable_thinking` is set (as DeepSeek-R1's and
/// Qwen3's do), served with `--reasoning-parser deepseek_r1`.
const THINKING_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}";

#[test]
fn thinking_blocks_from_a_reasoning_template() {
    let Some(engine) = common::engine_with(
        folio_engine::EngineConfig::default(),
        Some(THINKING_TEMPLATE),
    ) else {
        return;
    };
    let s = common::start(
        engine,
        folio_server::ServerOptions {
            reasoning_parser: Some("deepseek_r1".into()),
            ..Default::default()
        },
    );
    let body = |t: &str| {
        json!({"max_tokens": 8, "temperature": 0, "thinking": {"type": t, "budget_tokens": 1024},
               "messages": [{"role": "user", "content": "Is 7 prime?"}]})
    };
    // enable_thinking reaches the template: the prompt grows by `<think>\n`.
    let on = post_ok(s.addr, "/v1/messages/count_tokens", &body("enabled"))["input_tokens"]
        .as_u64()
        .unwrap();
    let off = post_ok(s.addr, "/v1/messages/count_tokens", &body("disabled"))["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(on > off, "{on} vs {off}");
    // The output starts inside the thought: the first block is thinking.
    let m = post_ok(s.addr, "/v1/messages", &body("enabled"));
    let b = &m["content"][0];
    assert_eq!(
        (b["type"].as_str(), b["signature"].as_str()),
        (Some("thinking"), Some("")),
        "{m}"
    );
    assert!(!b["thinking"].as_str().unwrap().is_empty(), "{m}");
    let mut sbody = body("enabled");
    sbody["stream"] = json!(true);
    let evs = post(s.addr, "/v1/messages", &sbody).events();
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(
        evs[1].1["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    let sig = evs
        .iter()
        .position(|(_, v)| v["delta"]["type"] == "signature_delta")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert!(sig > 3, "{names:?}");
    let thought: String = evs[3..sig]
        .iter()
        .map(|(_, v)| v["delta"]["thinking"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(thought, b["thinking"].as_str().unwrap());
    assert_eq!(
        evs[sig].1,
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ""}})
    );
    assert_eq!(
        evs[sig + 1].1,
        json!({"type": "content_block_stop", "index": 0})
    );
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        evs[names.len() - 2].1["delta"]["stop_reason"],
        m["stop_reason"]
    );
}
