//! Chat tool calling over HTTP: tools rendered into the prompt, calls parsed out of the
//! text (whole and streamed), follow-up turns with tool results. The default model
//! (SmolLM2-135M, whose template knows no tools) checks the plumbing; Qwen2.5-Coder-1.5B
//! (Hermes `<tool_call>` template), when downloaded, checks a real call.

use folio_testkit::http as common;

use common::{post, Server};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

fn chat(s: &Server, body: Value) -> Value {
    common::post_ok(s.addr, "/v1/chat/completions", &body)
}

/// Every choice is either a text answer or tool calls with `finish_reason: tool_calls`.
fn check_shape(v: &Value) {
    for ch in v["choices"].as_array().unwrap() {
        let m = &ch["message"];
        match ch["finish_reason"].as_str().unwrap() {
            "tool_calls" => {
                let calls = m["tool_calls"].as_array().unwrap();
                assert!(!calls.is_empty(), "{v}");
                for c in calls {
                    assert_eq!(c["type"], "function");
                    assert!(c["id"].as_str().unwrap().starts_with("call_"));
                    let args = c["function"]["arguments"].as_str().unwrap();
                    let _: Value = serde_json::from_str(args).unwrap_or(Value::Null);
                }
            }
            _ => assert!(
                m["content"].is_string() && m.get("tool_calls").is_none(),
                "{v}"
            ),
        }
    }
}

#[test]
fn tools_requests_and_follow_up_turns_are_served() {
    let Some(s) = server() else { return };
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    for choice in [
        json!("auto"),
        json!("required"),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    ] {
        let v = chat(
            s,
            json!({"messages": ask, "tools": [weather_tool()], "tool_choice": choice, "max_tokens": 24, "temperature": 0}),
        );
        check_shape(&v);
    }
    // The turn after a call: the assistant's call (arguments as a JSON string, as OpenAI
    // sends them) and the tool's result.
    let v = chat(
        s,
        json!({"messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees and sunny"}],
            "tools": [weather_tool()], "max_tokens": 16, "temperature": 0}),
    );
    check_shape(&v);
    // Streamed: well-formed chunks, one finish reason, [DONE].
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": [weather_tool()], "max_tokens": 24, "temperature": 0, "stream": true}),
    );
    assert_eq!(r.status, 200);
    let (chunks, done) = r.sse();
    assert!(done);
    let finishes: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finishes.len(), 1, "{chunks:?}");
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": [weather_tool()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
    );
    assert_eq!(e.status, 400);
    assert_eq!(
        e.json()["error"]["message"],
        "tool_choice: names function \"nope\", which is not in tools"
    );
}

/// `tool_choice` `required` and a named function are enforced by constrained decoding: even
/// SmolLM2-135M, which never calls tools by itself, answers with exactly one call whose
/// arguments validate against the function's parameters, whole and streamed.
#[test]
fn required_and_named_tool_choices_are_enforced() {
    let Some(s) = server() else { return };
    let clock = json!({"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object",
        "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}});
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    for (choice, want) in [
        (json!("required"), None),
        (
            json!({"type": "function", "function": {"name": "get_time"}}),
            Some("get_time"),
        ),
        (
            json!({"type": "function", "function": {"name": "get_weather"}}),
            Some("get_weather"),
        ),
    ] {
        let v = chat(
            s,
            json!({"messages": ask, "tools": [weather_tool(), clock], "tool_choice": choice,
                   "max_tokens": 48, "temperature": 0}),
        );
        let ch = &v["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{v}");
        let calls = ch["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{v}");
        let name = calls[0]["function"]["name"].as_str().unwrap();
        if let Some(w) = want {
            assert_eq!(name, w, "{v}");
        }
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        match name {
            "get_weather" => assert!(args["city"].is_string(), "{args}"),
            "get_time" => assert!(
                matches!(args["zone"].as_str(), Some("UTC" | "CET")),
                "{args}"
            ),
            other => panic!("called {other}"),
        }
    }
    // Streamed: the call arrives as a tool_calls delta that reassembles to the same call.
    let body = json!({"messages": ask, "tools": [weather_tool()], "tool_choice": "required",
                      "max_tokens": 48, "temperature": 0});
    let whole = chat(s, body.clone());
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &streamed);
    let (chunks, done) = r.sse();
    assert!(done);
    let (mut name, mut args) = (String::new(), String::new());
    for c in &chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            name.push_str(tc["function"]["name"].as_str().unwrap_or(""));
            args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    let call = &whole["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(name, call["name"].as_str().unwrap());
    assert_eq!(args, call["arguments"].as_str().unwrap());
    // A forced call cannot also carry another constraint.
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": [weather_tool()], "tool_choice": "required",
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(e.status, 400, "{}", e.text());
    assert!(e.text().contains("tool_choice"), "{}", e.text());
}

/// Qwen2.5-Coder-1.5B-Instruct, if downloaded (`folio models` fetches it).
fn qwen() -> Option<&'static Server> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    S.get_or_init(|| {
        let entry = folio_fetch::catalog::find("qwen2.5-coder-1.5b")?;
        if folio_fetch::state(entry) == folio_fetch::State::Missing {
            eprintln!("SKIPPED: qwen2.5-coder-1.5b is not downloaded");
            return None;
        }
        let path = folio_fetch::model_path(entry);
        let f = folio_gguf::GgufFile::open(&path).expect("model file opens");
        let model = folio_model::Model::from_gguf(&f).expect("model loads");
        let tok = Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer"));
        let cfg = folio_engine::EngineConfig {
            kv_cache_bytes: 256 << 20,
            ..Default::default()
        };
        let e = folio_engine::spawn_engine(model, tok, &path, cfg).expect("engine starts");
        Some(common::start(e, folio_server::ServerOptions::default()))
    })
    .as_ref()
}

#[test]
fn a_hermes_model_calls_the_tool() {
    let Some(s) = qwen() else { return };
    let body = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                      "tools": [weather_tool()], "max_tokens": 48, "temperature": 0});
    let v = chat(s, body.clone());
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    // Streamed: the same call as one tool_calls delta, no <tool_call> text.
    let mut sb = body;
    sb["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &sb);
    let (chunks, done) = r.sse();
    assert!(done);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    // The name first, then the arguments as they were generated.
    assert!(deltas.len() > 1, "{chunks:?}");
    assert_eq!(deltas[0][0]["function"]["name"], "get_weather");
    let streamed: String = deltas
        .iter()
        .filter_map(|d| d[0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(streamed, call["arguments"].as_str().unwrap());
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.contains("<tool_call>"), "{text:?}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    // The follow-up turn with the tool's result is served (what a 1.5B coder model answers
    // is its own business: it may call again).
    let v = chat(
        s,
        json!({"messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees and sunny"}],
            "tools": [weather_tool()], "max_tokens": 32, "temperature": 0}),
    );
    check_shape(&v);
}

/// The `tool_calls` deltas of a stream: (index, id, name, argument fragments) per call.
fn streamed_calls(chunks: &[Value]) -> Vec<(Option<String>, Vec<String>)> {
    let mut calls: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for c in chunks {
        let Some(tc) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in tc {
            let i = d["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                // OpenAI's first delta of a call: id, type, name and empty arguments.
                assert!(d["id"].as_str().unwrap().starts_with("call_"), "{d}");
                assert_eq!(d["type"], "function", "{d}");
                assert_eq!(d["function"]["arguments"], "", "{d}");
                calls.push((
                    d["function"]["name"].as_str().map(str::to_string),
                    Vec::new(),
                ));
            } else {
                assert!(d.get("id").is_none(), "{d}");
                calls[i]
                    .1
                    .push(d["function"]["arguments"].as_str().unwrap().to_string());
            }
        }
    }
    calls
}

#[test]
fn a_streamed_forced_call_arrives_in_argument_fragments() {
    let Some(s) = server() else { return };
    let body = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                      "tools": [weather_tool()], "max_tokens": 48, "temperature": 0,
                      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}});
    let v = chat(s, body.clone());
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let whole = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sb = body;
    sb["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &sb);
    let (chunks, done) = r.sse();
    assert!(done);
    let calls = streamed_calls(&chunks);
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0].0.as_deref(), Some("get_weather"));
    println!(
        "forced call: {} argument fragments: {:?}",
        calls[0].1.len(),
        calls[0].1
    );
    assert!(calls[0].1.len() > 1, "{:?}", calls[0].1);
    assert_eq!(calls[0].1.concat(), whole);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[test]
fn a_strict_tool_under_auto_gets_no_extra_argument_keys() {
    let Some(s) = server() else { return };
    let made = strict_tool_under_auto(s, "Call get_weather for Paris.");
    println!("SmolLM2, strict tool under auto: {made} calls of 16 answers, none with extra keys");
}

/// Qwen2.5-Coder-1.5B writes its calls as fenced JSON rather than `<tool_call>`: the
/// lazy grammar holds that form to the schema too (unconstrained, it answered
/// `{"city": ["Tokyo", "Berlin"], "metadatas": {…}}` to this question).
#[test]
fn a_strict_tool_under_auto_gets_no_extra_argument_keys_from_qwen() {
    let Some(s) = qwen() else { return };
    let made = strict_tool_under_auto(
        s,
        "Weather in Tokyo and Berlin, with units in celsius and a 3 day forecast please",
    );
    println!("Qwen2.5-Coder-1.5B, strict tool under auto: {made} calls of 16 answers, none with extra keys");
    assert!(made > 0);
}

/// Asks `question` 16 times (8 seeds at temperature 1, whole and streamed) with a strict
/// tool under `auto`; every call's arguments have exactly the schema's key. Returns how
/// many calls were made.
fn strict_tool_under_auto(s: &Server, question: &str) -> usize {
    let tool = json!({"type": "function", "function": {
        "name": "get_weather", "strict": true,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": false}}});
    let mut made = 0;
    for seed in 0..8 {
        for stream in [false, true] {
            let body = json!({"messages": [{"role": "user", "content": question}],
                              "tools": [tool], "tool_choice": "auto", "max_tokens": 64,
                              "temperature": 1, "seed": seed, "stream": stream});
            let r = post(s.addr, "/v1/chat/completions", &body);
            assert_eq!(r.status, 200, "{}", r.text());
            let args: Vec<String> = if stream {
                let (chunks, done) = r.sse();
                assert!(done);
                streamed_calls(&chunks)
                    .into_iter()
                    .map(|(_, f)| f.concat())
                    .collect()
            } else {
                let v = r.json();
                check_shape(&v);
                v["choices"][0]["message"]["tool_calls"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|c| c["function"]["arguments"].as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for a in args {
                made += 1;
                let v: Value = serde_json::from_str(&a).unwrap_or_else(|e| panic!("{a}: {e}"));
                let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
                assert_eq!(keys, vec!["city"], "{a}");
            }
        }
    }
    made
}
