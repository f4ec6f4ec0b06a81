//! Structured output over HTTP on the real model: `response_format` (json_schema,
//! json_object), vLLM's `structured_outputs` and `guided_*`, llama-server's `grammar`, and
//! the 400s for conflicting or uncompilable constraints. Skips without the model.

use folio_testkit::http as common;

use common::{metric, post, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn ok(s: &Server, path: &str, body: Value) -> Value {
    common::post_ok(s.addr, path, &body)
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pets": {"type": "array", "maxItems": 2, "items": {"enum": ["cat", "dog"]}}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    })
}

#[test]
fn response_format_json_schema_returns_valid_json() {
    let Some(s) = server() else { return };
    for stream in [false, true] {
        let body = json!({
            "messages": [{"role": "user", "content": "Describe a person as JSON."}],
            "max_tokens": 96,
            "temperature": 0,
            "stream": stream,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": schema(), "strict": true}},
        });
        let r = post(s.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let (text, finish) = if stream {
            let (chunks, done) = r.sse();
            assert!(done);
            let mut text = String::new();
            let mut finish = None;
            for c in &chunks {
                if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
                    text.push_str(t);
                }
                if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
                    finish = Some(f.to_string());
                }
            }
            (text, finish.unwrap())
        } else {
            let v = r.json();
            let c = &v["choices"][0];
            (
                c["message"]["content"].as_str().unwrap().to_string(),
                c["finish_reason"].as_str().unwrap().to_string(),
            )
        };
        assert_eq!(finish, "stop", "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(jsonschema::is_valid(&schema(), &v), "{text}");
    }
    // Masks were computed and counted.
    let m = common::get(s.addr, "/metrics").text();
    assert!(metric(&m, "folio_constraint_masks_total").unwrap_or(0.0) > 0.0);
}

#[test]
fn every_constraint_field_on_both_endpoints() {
    let Some(s) = server() else { return };
    let v = ok(
        s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Give the name and age of a cat as a JSON object."}],
               "max_tokens": 200, "temperature": 0,
               "response_format": {"type": "json_object"}}),
    );
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let parsed = serde_json::from_str::<Value>(text);
    assert!(parsed.is_ok_and(|p| p.is_object()), "{text:?}");
    let completions = [
        (json!({"guided_regex": "[0-9]{3}-[0-9]{4}"}), "regex"),
        (
            json!({"structured_outputs": {"regex": "(yes|no)"}}),
            "yes-no",
        ),
        (json!({"guided_choice": ["alpha", "beta"]}), "choice"),
        (
            json!({"structured_outputs": {"choice": ["up", "down"]}}),
            "choice2",
        ),
        (json!({"grammar": "root ::= \"x\" [0-9] [0-9]"}), "gbnf"),
        (json!({"guided_grammar": "start: \"v\" /[a-c]{2}/"}), "lark"),
        (json!({"guided_json": schema()}), "json"),
        (json!({"json_schema": schema()}), "json2"),
        (
            json!({"structured_outputs": {"json": schema().to_string()}}),
            "json3",
        ),
    ];
    for (fields, what) in completions {
        let mut body = json!({"prompt": "The answer:", "max_tokens": 96, "temperature": 0});
        for (k, x) in fields.as_object().unwrap() {
            body[k] = x.clone();
        }
        let v = ok(s, "/v1/completions", body);
        let c = &v["choices"][0];
        let text = c["text"].as_str().unwrap();
        assert_eq!(c["finish_reason"], "stop", "{what}: {text:?}");
        let good = match what {
            "regex" => {
                text.len() == 8
                    && text.chars().enumerate().all(|(i, ch)| {
                        if i == 3 {
                            ch == '-'
                        } else {
                            ch.is_ascii_digit()
                        }
                    })
            }
            "yes-no" => text == "yes" || text == "no",
            "choice" => text == "alpha" || text == "beta",
            "choice2" => text == "up" || text == "down",
            "gbnf" => text.len() == 3 && text.starts_with('x'),
            "lark" => text.len() == 3 && text.starts_with('v'),
            _ => serde_json::from_str::<Value>(text)
                .map(|v| jsonschema::is_valid(&schema(), &v))
                .unwrap_or(false),
        };
        assert!(good, "{what}: {text:?}");
    }
}

#[test]
fn conflicting_or_bad_constraints_are_400s_naming_the_field() {
    let Some(s) = server() else { return };
    let cases = [
        (
            json!({"response_format": {"type": "json_object"}, "guided_regex": "a+"}),
            "guided_regex",
            "response_format and guided_regex",
        ),
        (
            json!({"grammar": "root ::= \"a\"", "json_schema": {"type": "object"}}),
            "json_schema",
            "grammar and json_schema",
        ),
        (
            json!({"response_format": {"type": "yaml"}}),
            "response_format.type",
            "json_schema",
        ),
        (
            json!({"guided_json": {"type": "object", "properties": {"a": {"type": "wat"}}}}),
            "guided_json",
            "cannot be compiled",
        ),
        (
            json!({"guided_regex": "(unclosed"}),
            "guided_regex",
            "cannot be compiled",
        ),
        (
            json!({"guided_grammar": "start: nowhere"}),
            "guided_grammar",
            "cannot be compiled",
        ),
    ];
    for (fields, param, msg) in cases {
        for path in ["/v1/completions", "/v1/chat/completions"] {
            let mut body = json!({"prompt": "x", "messages": [{"role": "user", "content": "x"}],
                                  "max_tokens": 4});
            body.as_object_mut()
                .unwrap()
                .remove(if path == "/v1/completions" {
                    "messages"
                } else {
                    "prompt"
                });
            for (k, x) in fields.as_object().unwrap() {
                body[k] = x.clone();
            }
            let r = post(s.addr, path, &body);
            assert_eq!(r.status, 400, "{path} {fields}: {}", r.text());
            let e = &r.json()["error"];
            assert_eq!(e["param"], param, "{e}");
            assert!(e["message"].as_str().unwrap().contains(msg), "{e}");
        }
    }
    // `{"type": "text"}` is no constraint at all.
    let v = ok(
        s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
               "response_format": {"type": "text"}}),
    );
    assert!(v["choices"][0]["message"]["content"].is_string());
}
