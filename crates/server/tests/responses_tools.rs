//! `/v1/responses` with function tools over real HTTP on the default model (SmolLM2,
//! whose template knows no tools: folio describes them, and a forced choice constrains
//! the answer to one call): `function_call` output items with JSON arguments, the
//! streamed function-call events in order, and a `function_call_output` turn answered
//! exactly as the same conversation on /v1/chat/completions.

use folio_testkit::http as common;

use common::{post, post_ok, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": false},
           "strict": true})
}

fn ask(choice: Value) -> Value {
    json!({"input": "What is the weather in Paris?", "tools": [weather_tool()],
           "tool_choice": choice, "max_output_tokens": 40, "temperature": 0, "store": false})
}

/// The one function_call item of `r`, checked: its arguments are a JSON object with a
/// string `city` and nothing else.
fn the_call(r: &Value) -> &Value {
    let out = r["output"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{r}");
    let c = &out[0];
    assert_eq!(
        (c["type"].as_str(), c["name"].as_str(), c["status"].as_str()),
        (
            Some("function_call"),
            Some("get_weather"),
            Some("completed")
        ),
        "{r}"
    );
    assert!(c["id"].as_str().unwrap().starts_with("fc_"), "{c}");
    assert!(c["call_id"].as_str().unwrap().starts_with("call_"), "{c}");
    let args: Value = serde_json::from_str(c["arguments"].as_str().unwrap()).unwrap();
    let keys: Vec<&String> = args.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["city"], "{args}");
    assert!(args["city"].is_string(), "{args}");
    assert_eq!(r["status"], "completed", "{r}");
    c
}

#[test]
fn forced_tool_choice_yields_a_function_call_item() {
    let Some(s) = server() else { return };
    let required = post_ok(s.addr, "/v1/responses", &ask(json!("required")));
    let call = the_call(&required);
    let named = post_ok(
        s.addr,
        "/v1/responses",
        &ask(json!({"type": "function", "name": "get_weather"})),
    );
    // Same prompt, same constraint: the same call.
    assert_eq!(the_call(&named)["arguments"], call["arguments"]);
    // The request's tool fields are echoed back.
    assert_eq!(required["tools"], json!([weather_tool()]));
    assert_eq!(required["tool_choice"], "required");
    assert_eq!(required["parallel_tool_calls"], true);
    assert_eq!(
        named["tool_choice"],
        json!({"type": "function", "name": "get_weather"})
    );
    // The chat path makes the same call of the same prompt.
    let chat = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Get the current weather in a city",
                    "parameters": weather_tool()["parameters"], "strict": true}}],
                "tool_choice": "required", "max_tokens": 40, "temperature": 0}),
    );
    let cc = &chat["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(cc["arguments"], call["arguments"], "{chat}");
    assert_eq!(
        required["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    // Errors name the Responses field.
    for (body, param) in [
        (
            json!({"input": "x", "tools": [{"type": "function"}]}),
            "tools[0].name",
        ),
        (
            json!({"input": "x", "tools": [weather_tool()], "tool_choice": {"type": "function", "name": "nope"}}),
            "tool_choice",
        ),
        (
            json!({"input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0].call_id",
        ),
    ] {
        let r = post(s.addr, "/v1/responses", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{}", r.text());
    }
}

#[test]
fn function_call_events_stream_in_order() {
    let Some(s) = server() else { return };
    let whole = post_ok(s.addr, "/v1/responses", &ask(json!("required")));
    let mut body = ask(json!("required"));
    body["stream"] = json!(true);
    let r = post(s.addr, "/v1/responses", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let names = common::responses_event_names(&r);
    let evs = r.events();
    let deltas = names
        .iter()
        .filter(|n| **n == "response.function_call_arguments.delta")
        .count();
    assert!(deltas >= 1, "{names:?}");
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ];
    want.extend(std::iter::repeat_n(
        "response.function_call_arguments.delta",
        deltas,
    ));
    want.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, want);
    let added = &evs[2].1;
    assert_eq!(added["output_index"], 0);
    assert_eq!(
        (
            added["item"]["type"].as_str(),
            added["item"]["name"].as_str(),
            added["item"]["arguments"].as_str(),
            added["item"]["status"].as_str()
        ),
        (
            Some("function_call"),
            Some("get_weather"),
            Some(""),
            Some("in_progress")
        )
    );
    let item_id = &added["item"]["id"];
    let args: String = evs[3..3 + deltas]
        .iter()
        .map(|(_, v)| {
            assert_eq!(&v["item_id"], item_id);
            v["delta"].as_str().unwrap()
        })
        .collect();
    let done = &evs[3 + deltas].1;
    assert_eq!(
        (&done["item_id"], done["arguments"].as_str()),
        (item_id, Some(args.as_str()))
    );
    let last = &evs.last().unwrap().1["response"];
    let call = the_call(last);
    assert_eq!(evs[4 + deltas].1["item"], *call);
    assert_eq!(call["arguments"], args.as_str());
    assert_eq!(call["arguments"], the_call(&whole)["arguments"]);
}

#[test]
fn a_function_call_output_turn_is_answered_as_on_chat() {
    let Some(s) = server() else { return };
    let first = post_ok(s.addr, "/v1/responses", &ask(json!("required")));
    let call = the_call(&first).clone();
    let r = post_ok(
        s.addr,
        "/v1/responses",
        &json!({"input": [
            {"role": "user", "content": "What is the weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "22 degrees and sunny"}],
            "tools": [weather_tool()], "tool_choice": "none", "max_output_tokens": 24,
            "temperature": 0, "store": false}),
    );
    let chat = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": call["call_id"], "type": "function",
                "function": {"name": "get_weather", "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["call_id"], "content": "22 degrees and sunny"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Get the current weather in a city",
                "parameters": weather_tool()["parameters"], "strict": true}}],
            "tool_choice": "none", "max_tokens": 24, "temperature": 0}),
    );
    let msg = &r["output"][0];
    assert_eq!(msg["type"], "message", "{r}");
    let text = msg["content"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{r}");
    assert_eq!(
        text,
        chat["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(r["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    // The call and the tool's output are in the prompt: more tokens than the question
    // alone.
    let alone = post_ok(
        s.addr,
        "/v1/responses",
        &json!({"input": "What is the weather in Paris?", "tools": [weather_tool()],
                "tool_choice": "none", "max_output_tokens": 1, "store": false}),
    );
    assert!(
        r["usage"]["input_tokens"].as_u64().unwrap()
            > alone["usage"]["input_tokens"].as_u64().unwrap() + 10,
        "{r} {alone}"
    );
}
