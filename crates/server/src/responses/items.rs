//! Responses input items as chat messages: `message` items (any role's text), a
//! `function_call` (an earlier call sent back) as the assistant's `tool_calls`, and a
//! `function_call_output` as a `tool` message answering its `call_id`. `reasoning` items
//! sent back are dropped, as chat templates drop earlier thoughts. Earlier output items
//! (a stored response's, or the client's copy of them) read the same way, so a
//! continuation is the conversation in chat form.

use crate::api::random_id;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::prompt::MAX_MESSAGES;
use serde_json::{json, Map, Value};

/// The item types folio reads.
const TYPES: &str = "message, function_call, function_call_output, reasoning";

/// `input` as a list of items: a string is one user message item. Items keep what was
/// sent; each gets a `type` and an `id` when it has none (what `input_items` lists).
pub fn normalize(v: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match v {
        None => return Err(ApiError::param("input", "required, got nothing")),
        Some(Value::String(s)) => {
            return Ok(vec![
                json!({"type": "message", "id": random_id("msg_"), "role": "user",
                                  "content": [{"type": "input_text", "text": s}]}),
            ])
        }
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_MESSAGES => a,
        Some(v) => {
            return Err(ApiError::param(
                "input",
                format!(
                    "must be a string or a list of 1 to {MAX_MESSAGES} items, got {}",
                    show(v)
                ),
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let Value::Object(o) = v else {
                return Err(ApiError::param(
                    format!("input[{i}]"),
                    format!("must be an item object, got {}", show(v)),
                ));
            };
            let mut o = o.clone();
            let kind = match o.get("type") {
                None | Some(Value::Null) => "message".to_string(),
                Some(Value::String(t)) => t.clone(),
                Some(t) => {
                    return Err(ApiError::param(
                        format!("input[{i}].type"),
                        format!("must be a string, got {}", show(t)),
                    ))
                }
            };
            let prefix = match kind.as_str() {
                "function_call" => "fc_",
                "function_call_output" => "fco_",
                "reasoning" => "rs_",
                _ => "msg_",
            };
            if o.get("id").is_none_or(Value::is_null) {
                o.insert("id".into(), json!(random_id(prefix)));
            }
            o.insert("type".into(), Value::String(kind));
            Ok(Value::Object(o))
        })
        .collect()
}

/// Chat messages of `items`; a field at fault is named `{base}[i]…`.
pub fn messages(items: &[Value], base: &str) -> Result<Vec<Value>, ApiError> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        let at = format!("{base}[{i}]");
        let Value::Object(o) = v else {
            return Err(ApiError::param(
                at,
                format!("must be an item object, got {}", show(v)),
            ));
        };
        let f = Fields::new(o);
        match f.get("type").and_then(Value::as_str).unwrap_or("message") {
            "message" => out.push(message(&at, &f)?),
            "function_call" => {
                let call = json!({"id": string(&at, &f, "call_id")?, "type": "function",
                    "function": {"name": string(&at, &f, "name")?, "arguments": arguments(&f)}});
                // Calls join the assistant turn they follow (the text before them, or the
                // calls before them), as one chat assistant message.
                match out.last_mut() {
                    Some(m) if m["role"] == "assistant" => {
                        let calls = m.as_object_mut().expect("a message object");
                        match calls.get_mut("tool_calls").and_then(Value::as_array_mut) {
                            Some(list) => list.push(call),
                            None => {
                                calls.insert("tool_calls".into(), json!([call]));
                            }
                        }
                    }
                    _ => {
                        out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}))
                    }
                }
            }
            "function_call_output" => {
                let output = match f.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => text_parts(&format!("{at}.output"), parts)?,
                    Some(v) => {
                        return Err(ApiError::param(
                            format!("{at}.output"),
                            format!(
                                "must be a string or a list of input_text parts, got {}",
                                show(v)
                            ),
                        ))
                    }
                    None => {
                        return Err(ApiError::param(
                            format!("{at}.output"),
                            "required, got nothing",
                        ))
                    }
                };
                out.push(
                    json!({"role": "tool", "tool_call_id": string(&at, &f, "call_id")?,
                                "content": output}),
                );
            }
            "reasoning" => {}
            other => {
                return Err(ApiError::param(
                    format!("{at}.type"),
                    format!("must be one of {TYPES}; got {}", show(&json!(other))),
                ))
            }
        }
    }
    Ok(out)
}

/// A call's `arguments` as a JSON string (OpenAI sends a string; an object is written
/// out; none is no arguments).
fn arguments(f: &Fields) -> String {
    match f.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "{}".into(),
        Some(v) => v.to_string(),
    }
}

/// A required string field of an item.
fn string(at: &str, f: &Fields, name: &str) -> Result<String, ApiError> {
    match f.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        v => Err(ApiError::param(
            format!("{at}.{name}"),
            format!(
                "must be a non-empty string, got {}",
                v.map_or("nothing".into(), show)
            ),
        )),
    }
}

/// A message item: `{"role", "content"}` with text content.
fn message(at: &str, f: &Fields) -> Result<Value, ApiError> {
    let role = match f.get("role") {
        Some(Value::String(r)) => match r.as_str() {
            "user" | "system" | "assistant" => r.clone(),
            // The chat templates know no developer role; OpenAI treats it as system.
            "developer" => "system".into(),
            _ => {
                return Err(ApiError::param(
                    format!("{at}.role"),
                    format!(
                        "must be one of user, system, developer, assistant; got {}",
                        show(&Value::String(r.clone()))
                    ),
                ))
            }
        },
        Some(r) => {
            return Err(ApiError::param(
                format!("{at}.role"),
                format!("must be a string, got {}", show(r)),
            ))
        }
        None => {
            return Err(ApiError::param(
                format!("{at}.role"),
                "required, got nothing",
            ))
        }
    };
    let content = match f.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => text_parts(&format!("{at}.content"), parts)?,
        Some(v) => {
            return Err(ApiError::param(
                format!("{at}.content"),
                format!(
                    "must be a string or a list of input_text parts, got {}",
                    show(v)
                ),
            ))
        }
        None => {
            return Err(ApiError::param(
                format!("{at}.content"),
                "required, got nothing",
            ))
        }
    };
    let mut m = Map::new();
    m.insert("role".into(), Value::String(role));
    m.insert("content".into(), Value::String(content));
    Ok(Value::Object(m))
}

/// Text parts joined by newlines, as the chat path joins text parts. `output_text` (an
/// earlier answer sent back) and `refusal` read as text too.
fn text_parts(at: &str, parts: &[Value]) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let kind = p.get("type").and_then(Value::as_str);
        let text = match kind {
            Some("refusal") => p.get("refusal").and_then(Value::as_str),
            _ => p.get("text").and_then(Value::as_str),
        };
        match (kind, text) {
            (Some("input_text" | "output_text" | "refusal"), Some(t)) => texts.push(t),
            _ => {
                return Err(ApiError::param(
                    format!("{at}[{j}]"),
                    format!(
                    "only {{\"type\": \"input_text\", \"text\": …}} parts are supported, got {}",
                    show(p)
                ),
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_outputs_become_tool_turns() {
        let items = normalize(Some(&json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "reasoning", "summary": []},
            {"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
        ])))
        .unwrap();
        assert!(items
            .iter()
            .all(|i| i["id"].is_string() && i["type"].is_string()));
        assert_eq!(items[2]["id"], "fc_1");
        assert!(items[5]["id"].as_str().unwrap().starts_with("fco_"));
        assert_eq!(
            messages(&items, "input").unwrap(),
            vec![
                json!({"role": "user", "content": "Weather in Paris?"}),
                json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": "call_1", "content": "22 C"}),
                json!({"role": "tool", "tool_call_id": "call_2", "content": "noon"}),
            ]
        );
        // A call with no assistant text before it is a turn of its own.
        let m = messages(
            &[json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"})],
            "input",
        )
        .unwrap();
        assert_eq!(m[0]["content"], "");
        assert_eq!(m[0]["tool_calls"][0]["id"], "c");
    }

    #[test]
    fn bad_items_name_the_field() {
        let run = |v: Value| {
            messages(v.as_array().unwrap(), "input")
                .unwrap_err()
                .message
        };
        assert_eq!(
            run(json!([{"type": "function_call_output", "output": "x"}])),
            "input[0].call_id: must be a non-empty string, got nothing"
        );
        assert_eq!(
            run(json!([{"type": "function_call", "call_id": "c"}])),
            "input[0].name: must be a non-empty string, got nothing"
        );
        assert_eq!(
            run(json!([{"type": "item_reference", "id": "x"}])),
            "input[0].type: must be one of message, function_call, function_call_output, reasoning; got string \"item_reference\""
        );
        assert_eq!(
            run(json!([{"type": "function_call_output", "call_id": "c", "output": 3}])),
            "input[0].output: must be a string or a list of input_text parts, got 3"
        );
    }
}
