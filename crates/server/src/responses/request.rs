//! A /v1/responses body in chat form: `instructions`, the continued response's items and
//! `input` become `messages` (`items`), `max_output_tokens` becomes `max_tokens`,
//! `text.format` becomes `response_format`, `tools` and `tool_choice` take chat's shape
//! (`tool_fields`), and the sampling fields pass through. The chat path then validates,
//! tokenizes (the model's chat template) and runs it; its errors come back under the
//! Responses names by their `param` (one table, [`RENAMED`]).

use super::{items, tool_fields};
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::known_fields::RESPONSES_PASS;
use serde_json::{json, Map, Value};

/// What the response object reports back of the request (OpenAI echoes these).
#[derive(Clone, Debug)]
pub struct Asked {
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub temperature: Value,
    pub top_p: Value,
    pub metadata: Value,
    pub user: Value,
    /// `text.format` as sent (`{"type": "text"}` when absent).
    pub format: Value,
    /// `tools` as sent (Responses form).
    pub tools: Value,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    /// Whether the response is kept (OpenAI's default: true).
    pub store: bool,
    pub previous_response_id: Value,
}

impl Default for Asked {
    fn default() -> Asked {
        Asked {
            instructions: Value::Null,
            max_output_tokens: Value::Null,
            temperature: Value::Null,
            top_p: Value::Null,
            metadata: json!({}),
            user: Value::Null,
            format: json!({"type": "text"}),
            tools: json!([]),
            tool_choice: json!("auto"),
            parallel_tool_calls: true,
            store: true,
            previous_response_id: Value::Null,
        }
    }
}

/// A Responses body in chat form.
pub struct ChatRequest {
    /// The chat body `generate::start` runs.
    pub body: Map<String, Value>,
    pub asked: Asked,
    /// The input items the model sees: the continued response's context and output,
    /// then this request's `input` (each with a `type` and an `id`).
    pub context: Vec<Value>,
}

/// Responses fields that have another name on the chat path (the chat name is a prefix
/// of the chat error's `param`); errors are renamed back by the same table.
const RENAMED: [(&str, &str); 4] = [
    ("input", "messages"),
    ("max_output_tokens", "max_tokens"),
    ("text.format", "response_format.json_schema"),
    ("text.format", "response_format"),
];

/// The one mapping of a (field-checked) Responses body to a chat body; `history`: the
/// items of the response it continues (`previous_response_id`), none otherwise.
pub fn to_chat(body: &Map<String, Value>, history: Vec<Value>) -> Result<ChatRequest, ApiError> {
    let f = Fields::new(body);
    let mut chat = Map::new();
    for name in RESPONSES_PASS {
        if let Some(v) = f.get(name) {
            chat.insert(name.to_string(), v.clone());
        }
    }
    let mut context = history;
    let own = context.len();
    context.extend(items::normalize(f.get("input"))?);
    let mut messages = Vec::new();
    if let Some(i) = f.str("instructions")? {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(items::messages(&context[..own], "previous_response_id")?);
    messages.extend(items::messages(&context[own..], "input")?);
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(m) = f.get("max_output_tokens") {
        chat.insert("max_tokens".into(), m.clone());
    }
    let format = text_format(f.get("text"))?;
    if let Some(rf) = response_format(&format)? {
        chat.insert("response_format".into(), rf);
    }
    if let Some(t) = f.get("tools") {
        chat.insert("tools".into(), tool_fields::chat_tools(t)?);
    }
    if let Some(c) = f.get("tool_choice") {
        chat.insert("tool_choice".into(), tool_fields::chat_tool_choice(c)?);
    }
    if let Some(p) = f.get("parallel_tool_calls") {
        chat.insert("parallel_tool_calls".into(), p.clone());
    }
    let echo = |name: &str| f.get(name).cloned().unwrap_or(Value::Null);
    let d = Asked::default();
    let asked = Asked {
        instructions: echo("instructions"),
        max_output_tokens: echo("max_output_tokens"),
        temperature: echo("temperature"),
        top_p: echo("top_p"),
        metadata: f.get("metadata").cloned().unwrap_or(d.metadata),
        user: echo("user"),
        format,
        tools: f.get("tools").cloned().unwrap_or(d.tools),
        tool_choice: f.get("tool_choice").cloned().unwrap_or(d.tool_choice),
        parallel_tool_calls: f.bool("parallel_tool_calls", true)?,
        store: f.bool("store", true)?,
        previous_response_id: echo("previous_response_id"),
    };
    Ok(ChatRequest {
        body: chat,
        asked,
        context,
    })
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

/// A chat-path error under the Responses name of its field: the `param` (and the
/// message, which starts with it) renamed by [`RENAMED`]; status and code unchanged.
pub fn renamed(e: ApiError) -> ApiError {
    e.renamed(RENAMED.iter().map(|(ours, chat)| (*chat, *ours)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> Result<Map<String, Value>, String> {
        to_chat(v.as_object().unwrap(), Vec::new())
            .map(|c| c.body)
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
                "input: must be a string or a list of 1 to 1024 items, got an array of 0 items",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type: must be one of message, function_call, function_call_output, reasoning; got string \"item_reference\"",
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
