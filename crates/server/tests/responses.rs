//! `/v1/responses` over real HTTP: the same answer as the chat path (it is the chat path),
//! the `response` object, the named stream events with their sequence numbers, and 400s
//! that name the Responses field folio lacks. Tools: `responses_tools.rs`; stored
//! responses: `responses_store.rs`.

use folio_testkit::http as common;

use common::{get, post, post_ok, Server};
use serde_json::json;

fn server() -> Option<&'static Server> {
    common::shared()
}

#[test]
fn response_object_matches_the_chat_answer() {
    let Some(s) = server() else { return };
    let r = post_ok(
        s.addr,
        "/v1/responses",
        &json!({"input": "Name a colour.", "instructions": "Answer in one word.",
                "max_output_tokens": 12, "temperature": 0, "metadata": {"k": "v"}}),
    );
    let chat = post_ok(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "system", "content": "Answer in one word."},
                             {"role": "user", "content": "Name a colour."}],
                "max_tokens": 12, "temperature": 0}),
    );
    let c = &chat["choices"][0];
    assert!(r["id"].as_str().unwrap().starts_with("resp_"), "{r}");
    assert_eq!(r["object"], "response");
    assert!(r["created_at"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(r["model"], chat["model"]);
    assert_eq!(
        (r["instructions"].as_str(), r["max_output_tokens"].as_u64()),
        (Some("Answer in one word."), Some(12))
    );
    assert_eq!(r["metadata"], json!({"k": "v"}));
    let item = &r["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["annotations"], json!([]));
    assert_eq!(
        common::responses_output_text(&r),
        c["message"]["content"].as_str().unwrap()
    );
    let status = match c["finish_reason"].as_str().unwrap() {
        "stop" => "completed",
        _ => "incomplete",
    };
    assert_eq!(r["status"], status, "{r}");
    let u = &r["usage"];
    assert_eq!(u["input_tokens"], chat["usage"]["prompt_tokens"]);
    assert_eq!(u["output_tokens"], chat["usage"]["completion_tokens"]);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap())
    );

    // Message items (content as parts, developer = system) give the same prompt.
    let r2 = post_ok(
        s.addr,
        "/v1/responses",
        &json!({"input": [{"role": "developer", "content": "Answer in one word."},
                          {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}],
                "max_output_tokens": 12, "temperature": 0}),
    );
    assert_eq!(
        common::responses_output_text(&r2),
        common::responses_output_text(&r)
    );
    assert_eq!(r2["usage"]["input_tokens"], r["usage"]["input_tokens"]);

    // Cut by max_output_tokens: incomplete, with the reason.
    let r = post_ok(
        s.addr,
        "/v1/responses",
        &json!({"input": "Write a long story about the sea.", "max_output_tokens": 3, "temperature": 0}),
    );
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(r["output"][0]["status"], "incomplete");
    assert_eq!(r["usage"]["output_tokens"], 3);
}

#[test]
fn stream_sends_the_named_events_in_order() {
    let Some(s) = server() else { return };
    let body = json!({"input": "Say hello.", "max_output_tokens": 16, "temperature": 0});
    let whole = post_ok(s.addr, "/v1/responses", &body);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let resp = post(s.addr, "/v1/responses", &sbody);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    assert!(!resp.text().contains("[DONE]"));
    let names = common::responses_event_names(&resp);
    let evs = resp.events();
    let deltas = names
        .iter()
        .filter(|n| **n == "response.output_text.delta")
        .count();
    assert!(deltas > 1, "{names:?}");
    let end = if whole["status"] == "completed" {
        "response.completed"
    } else {
        "response.incomplete"
    };
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        end,
    ]);
    assert_eq!(names, want);
    let created = &evs[0].1["response"];
    assert_eq!(
        (
            created["status"].as_str(),
            created["output"].as_array().map(Vec::len)
        ),
        (Some("in_progress"), Some(0))
    );
    let text: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, common::responses_output_text(&whole));
    let item_id = evs[2].1["item"]["id"].clone();
    assert!(evs[3..evs.len() - 1]
        .iter()
        .all(|(n, v)| n == "response.output_item.done" || v["item_id"] == item_id));
    assert_eq!(evs[evs.len() - 4].1["text"], text.as_str());
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["id"], created["id"]);
    assert_eq!(common::responses_output_text(last), text);
    assert_eq!(last["output"][0]["id"], item_id);
    // The same tokens (the second run's prompt comes from the prefix cache).
    for k in ["input_tokens", "output_tokens", "total_tokens"] {
        assert_eq!(last["usage"][k], whole["usage"][k], "{k}");
    }
    assert!(
        last["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn features_folio_lacks_are_400s_naming_the_field() {
    let Some(s) = server() else { return };
    let cases = [
        (
            json!({"input": "x", "tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (json!({"input": "x", "frobnicate": 1}), "frobnicate"),
        (json!({"max_output_tokens": 5}), "input"),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}),
            "input[0].content[0]",
        ),
        (json!({"input": "x", "temperature": 5}), "temperature"),
        (
            json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "nope"}}}}),
            "text.format",
        ),
    ];
    for (body, param) in cases {
        let r = post(s.addr, "/v1/responses", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{body}: {e}");
        assert!(e["message"].as_str().unwrap().starts_with(param), "{e}");
    }
    // Too long an input names the context length, in Responses words.
    let long = "word ".repeat(9000);
    let r = post(s.addr, "/v1/responses", &json!({"input": long}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(
        (e["param"].as_str(), e["code"].as_str()),
        (Some("input"), Some("context_length_exceeded")),
        "{e}"
    );
    // An id never stored is a 404 (stored responses: tests/responses_store.rs).
    assert_eq!(get(s.addr, "/v1/responses/resp_0123").status, 404);
}
