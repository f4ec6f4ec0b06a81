//! A /v1/responses body in chat form: `instructions` and `input` become `messages`,
//! `max_output_tokens` becomes `max_tokens`, `text.format` becomes `response_format`, and
//! the sampling fields pass through. The chat path then validates, tokenizes (the model's
//! chat template) and runs it; its errors are renamed back to the Responses fields.

use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::known_fields::RESPONSES_PASS;
use crate::prompt::MAX_MESSAGES;
use serde_json::{json, Map, Value};

/// What the response object reports back of the request (OpenAI echoes these).
#[derive(Clone, Debug, Default)]
pub struct Asked {
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub temperature: Value,
    pub top_p: Value,
    pub metadata: Value,
    pub user: Value,
    /// `text.format` as sent (`{"type": "text"}` when absent).
    pub format: Value,
}

/// The chat body of a (field-checked) Responses body, and what to echo back.
pub fn to_chat(body: &Map<String, Value>) -> Result<(Map<String, Value>, Asked), ApiError> {
    let f = Fields::new(body);
    let mut chat = Map::new();
    for name in RESPONSES_PASS {
        if let Some(v) = f.get(name) {
            chat.insert(name.to_string(), v.clone());
        }
    }
    let mut messages = Vec::new();
    if let Some(i) = f.str("instructions")? {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(input(f.get("input"))?);
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(m) = f.get("max_output_tokens") {
        chat.insert("max_tokens".into(), m.clone());
    }
    let format = text_format(f.get("text"))?;
    if let Some(rf) = response_format(&format)? {
        chat.insert("response_format".into(), rf);
    }
    let echo = |name: &str| f.get(name).cloned().unwrap_or(Value::Null);
    let asked = Asked {
        instructions: echo("instructions"),
        max_output_tokens: echo("max_output_tokens"),
        temperature: echo("temperature"),
        top_p: echo("top_p"),
        metadata: f.get("metadata").cloned().unwrap_or_else(|| json!({})),
        user: echo("user"),
        format,
    };
    Ok((chat, asked))
}

/// `input`: a string (one user message) or a list of message items.
fn input(v: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match v {
        None => return Err(ApiError::param("input", "required, got nothing")),
        Some(Value::String(s)) => return Ok(vec![json!({"role": "user", "content": s})]),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_MESSAGES => a,
        Some(v) => {
            return Err(ApiError::param(
                "input",
                format!(
                    "must be a string or a list of 1 to {MAX_MESSAGES} message items, got {}",
                    show(v)
                ),
            ))
        }
    };
    items.iter().enumerate().map(|(i, m)| item(i, m)).collect()
}

/// One input item: `{"type": "message"?, "role", "content"}` → a chat message.
fn item(i: usize, v: &Value) -> Result<Value, ApiError> {
    let name = |field: &str| format!("input[{i}].{field}");
    let Value::Object(o) = v else {
        return Err(ApiError::param(
            format!("input[{i}]"),
            format!("must be a message item object, got {}", show(v)),
        ));
    };
    let f = Fields::new(o);
    match f.get("type") {
        None => {}
        Some(t) if t == "message" => {}
        Some(t) => {
            return Err(ApiError::param(
                name("type"),
                format!(
                    "folio reads only message items (role and text content), got {}",
                    show(t)
                ),
            ))
        }
    }
    let role = match f.get("role") {
        Some(Value::String(r)) => match r.as_str() {
            "user" | "system" | "assistant" => r.clone(),
            // The chat templates know no developer role; OpenAI treats it as system.
            "developer" => "system".into(),
            _ => {
                return Err(ApiError::param(
                    name("role"),
                    format!(
                        "must be one of user, system, developer, assistant; got {}",
                        show(&Value::String(r.clone()))
                    ),
                ))
            }
        },
        Some(r) => {
            return Err(ApiError::param(
                name("role"),
                format!("must be a string, got {}", show(r)),
            ))
        }
        None => return Err(ApiError::param(name("role"), "required, got nothing")),
    };
    let content = match f.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str);
                match (kind, p.get("text").and_then(Value::as_str)) {
                    // output_text: an earlier answer sent back as history.
                    (Some("input_text" | "output_text"), Some(t)) => texts.push(t),
                    _ => {
                        return Err(ApiError::param(
                            format!("input[{i}].content[{j}]"),
                            format!(
                                "only {{\"type\": \"input_text\", \"text\": …}} parts are supported, got {}",
                                show(p)
                            ),
                        ))
                    }
                }
            }
            // Parts are joined by newlines, as the chat path joins text parts.
            texts.join("\n")
        }
        Some(v) => {
            return Err(ApiError::param(
                name("content"),
                format!(
                    "must be a string or a list of input_text parts, got {}",
                    show(v)
                ),
            ))
        }
        None => return Err(ApiError::param(name("content"), "required, got nothing")),
    };
    Ok(json!({"role": role, "content": content}))
}

/// `text`: only `format` is read (`verbosity` and the rest are refused by name).
fn text_format(v: Option<&Value>) -> Result<Value, ApiError> {
    let Some(v) = v else {
        return Ok(json!({"type": "text"}));
    };
    let Value::Object(o) = v else {
        return Err(ApiError::param(
            "text",
            format!("must be an object, got {}", show(v)),
        ));
    };
    if let Some((k, v)) = o.iter().find(|(k, v)| *k != "format" && !v.is_null()) {
        return Err(ApiError::param(
            format!("text.{k}"),
            format!(
                "not supported by folio (only text.format is), got {}",
                show(v)
            ),
        ));
    }
    Ok(o.get("format")
        .filter(|f| !f.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "text"})))
}

/// `text.format` as chat's `response_format` (whose checks then run on it): `text`,
/// `json_object`, or `json_schema` with its `name`, `schema`, `strict` at the top level.
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    let Value::Object(o) = format else {
        return Err(ApiError::param(
            "text.format",
            format!("must be an object, got {}", show(format)),
        ));
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut js = o.clone();
            js.remove("type");
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => Err(ApiError::param(
            "text.format.type",
            format!(
                "must be one of text, json_object, json_schema; got {}",
                o.get("type").map_or("nothing".into(), show)
            ),
        )),
    }
}

/// A chat-path error in the Responses vocabulary: `messages` → `input`, `max_tokens` →
/// `max_output_tokens`, `response_format` → `text.format`.
pub fn renamed(mut e: ApiError) -> ApiError {
    const NAMES: [(&str, &str); 4] = [
        ("messages", "input"),
        ("max_tokens", "max_output_tokens"),
        ("response_format.json_schema", "text.format"),
        ("response_format", "text.format"),
    ];
    let Some(param) = e.param.clone() else {
        return e;
    };
    for (chat, ours) in NAMES {
        if let Some(rest) = param.strip_prefix(chat) {
            let new = format!("{ours}{rest}");
            if let Some(m) = e.message.strip_prefix(&param) {
                e.message = format!("{new}{m}");
            }
            e.param = Some(new);
            break;
        }
    }
    // Names inside the detail ("max_tokens: 200 + 8000 prompt tokens…", "response_format
    // and structured_outputs").
    e.message = e
        .message
        .replace("max_tokens", "max_output_tokens")
        .replace("response_format", "text.format");
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> Result<Map<String, Value>, String> {
        to_chat(v.as_object().unwrap())
            .map(|(c, _)| c)
            .map_err(|e| e.message)
    }

    #[test]
    fn input_shapes_become_messages() {
        let c = chat(
            json!({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9,
                            "temperature": 0, "seed": 3}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(c),
            json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                   "max_tokens": 9, "temperature": 0, "seed": 3})
        );
        let c = chat(json!({"input": [
            {"role": "developer", "content": "Rules."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "c", "annotations": []}]},
        ], "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}}}))
        .unwrap();
        assert_eq!(
            c["messages"],
            json!([{"role": "system", "content": "Rules."}, {"role": "user", "content": "a\nb"},
                   {"role": "assistant", "content": "c"}])
        );
        assert_eq!(
            c["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": true}})
        );
    }

    #[test]
    fn bad_input_names_the_item() {
        let cases = [
            (json!({}), "input: required, got nothing"),
            (
                json!({"input": []}),
                "input: must be a string or a list of 1 to 1024 message items, got an array of 0 items",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
                "input[0].type: folio reads only message items (role and text content), got string \"function_call_output\"",
            ),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0].role: must be one of user, system, developer, assistant; got string \"tool\"",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}),
                "input[0].content[0]: only {\"type\": \"input_text\", \"text\": …} parts are supported, got an object with 2 keys",
            ),
            (
                json!({"input": "x", "text": {"verbosity": "low"}}),
                "text.verbosity: not supported by folio (only text.format is), got string \"low\"",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "yaml"}}}),
                "text.format.type: must be one of text, json_object, json_schema; got string \"yaml\"",
            ),
        ];
        for (body, msg) in cases {
            assert_eq!(chat(body).unwrap_err(), msg);
        }
    }

    #[test]
    fn chat_errors_come_back_in_responses_names() {
        let e = renamed(ApiError::param(
            "max_tokens",
            "must be an integer in [1, 8192], got 0",
        ));
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (
                Some("max_output_tokens"),
                "max_output_tokens: must be an integer in [1, 8192], got 0"
            )
        );
        let e = renamed(ApiError::param("response_format.json_schema.schema", "bad"));
        assert_eq!(e.message, "text.format.schema: bad");
        let e = renamed(ApiError::param("temperature", "x"));
        assert_eq!(e.message, "temperature: x");
    }
}
