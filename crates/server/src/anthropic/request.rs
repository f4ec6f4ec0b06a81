//! A /v1/messages body in chat form: `system` becomes the system message, content blocks
//! become chat messages (`tool_use` blocks an assistant's `tool_calls`, `tool_result`
//! blocks `tool` messages), `tools` / `tool_choice` / `stop_sequences` / `thinking` their
//! chat equivalents, and the sampling fields pass through. The chat path then validates,
//! renders the template and runs it; its errors are renamed back to Anthropic's fields.

use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::params::{MAX_STOP, MAX_STOP_LEN};
use crate::prompt::MAX_MESSAGES;
use serde_json::{json, Map, Value};

/// Fields /v1/messages reads under its own names.
const OWN: &[&str] = &[
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "output_format",
];

/// Fields that keep their name and meaning on the chat path (Anthropic's sampling fields,
/// then folio's and vLLM's extensions as on /v1/chat/completions).
const PASS: &[&str] = &[
    "model",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "min_tokens",
    "ignore_eos",
    "lora",
    "speculative",
    "num_speculative_tokens",
    "deadline_ms",
    "structured_outputs",
    "chat_template_kwargs",
];

/// Accepted and ignored: what the `anthropic` SDKs and Claude Code send that cannot
/// change the answer.
const IGNORED: &[(&str, &str)] = &[
    ("metadata", "user_id is for Anthropic's abuse tracking"),
    ("service_tier", "one tier"),
    ("container", "no code-execution containers"),
    ("mcp_servers", "folio connects to no MCP servers"),
    ("context_management", "folio never edits the context"),
    ("cache_control", "folio's prefix cache needs no breakpoints"),
    (
        "diagnostics",
        "folio's prefix cache reports no miss reasons",
    ),
    ("inference_geo", "folio runs where it is started"),
    ("speed", "one speed"),
    ("user_profile_id", "folio keeps no per-user records"),
    ("workspace_id", "no workspaces"),
];

/// What the answer needs to know of the request.
#[derive(Clone, Debug, Default)]
pub struct Asked {
    /// `thinking.type`: `Some(true)` enabled, `Some(false)` disabled, `None` not sent
    /// (the chat template's default).
    pub thinking: Option<bool>,
    /// `stop_sequences`, to tell which one ended the answer.
    pub stop_sequences: Vec<String>,
}

/// Which endpoint the body came to: `max_tokens` is required only to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Messages,
    CountTokens,
}

/// The chat body of a /v1/messages body, and what the answer needs of it.
pub fn to_chat(
    body: &Map<String, Value>,
    route: Route,
) -> Result<(Map<String, Value>, Asked), ApiError> {
    check_fields(body)?;
    let f = Fields::new(body);
    let mut chat = Map::new();
    for name in PASS {
        if let Some(v) = f.get(name) {
            chat.insert(name.to_string(), v.clone());
        }
    }
    if route == Route::CountTokens {
        chat.remove("stream");
    }
    let mut messages = Vec::new();
    if let Some(s) = system(f.get("system"))? {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.extend(conversation(f.get("messages"))?);
    chat.insert("messages".into(), Value::Array(messages));
    match f.get("max_tokens") {
        Some(m) => {
            chat.insert("max_tokens".into(), m.clone());
        }
        None if route == Route::Messages => {
            return Err(ApiError::param("max_tokens", "required, got nothing"))
        }
        None => {}
    }
    let stop_sequences = f.strings("stop_sequences", MAX_STOP, MAX_STOP_LEN)?;
    if let Some(v) = f.get("stop_sequences") {
        chat.insert("stop".into(), v.clone());
    }
    if let Some(t) = f.get("tools") {
        chat.insert("tools".into(), tools(t)?);
    }
    if let Some(c) = f.get("tool_choice") {
        let (choice, parallel) = tool_choice(c)?;
        chat.insert("tool_choice".into(), choice);
        if let Some(p) = parallel {
            chat.insert("parallel_tool_calls".into(), json!(p));
        }
    }
    if let Some(rf) = output_format(f.get("output_config"), f.get("output_format"))? {
        chat.insert("response_format".into(), rf);
    }
    let thinking = thinking(f.get("thinking"))?;
    if let Some(on) = thinking {
        // Qwen3's and similar templates read `enable_thinking`; others ignore it.
        let kwargs = chat
            .entry("chat_template_kwargs")
            .or_insert_with(|| json!({}));
        if let Value::Object(k) = kwargs {
            k.entry("enable_thinking").or_insert(json!(on));
        }
    }
    Ok((
        chat,
        Asked {
            thinking,
            stop_sequences,
        },
    ))
}

/// Rejects the first field folio neither reads nor may ignore (null counts as absent).
fn check_fields(body: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, v) in body {
        let n = name.as_str();
        if v.is_null()
            || OWN.contains(&n)
            || PASS.contains(&n)
            || IGNORED.iter().any(|(i, _)| *i == n)
        {
            continue;
        }
        return Err(ApiError::param(
            n,
            format!(
                "unknown field for /v1/messages: folio does not implement it, got {}",
                show(v)
            ),
        ));
    }
    Ok(())
}

/// `system`: a string or a list of text blocks (joined by newlines).
fn system(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(blocks)) => {
            let texts = blocks
                .iter()
                .enumerate()
                .map(|(j, b)| text_block(&format!("system[{j}]"), b))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(texts.join("\n")))
        }
        Some(v) => Err(ApiError::param(
            "system",
            format!("must be a string or a list of text blocks, got {}", show(v)),
        )),
    }
}

/// A `{"type": "text", "text": …}` block's text.
fn text_block(field: &str, b: &Value) -> Result<String, ApiError> {
    match (b.get("type").and_then(Value::as_str), b.get("text")) {
        (Some("text"), Some(Value::String(t))) => Ok(t.clone()),
        _ => Err(ApiError::param(
            field,
            format!(
                "must be a {{\"type\": \"text\", \"text\": …}} block, got {}",
                show(b)
            ),
        )),
    }
}

/// `messages` → chat messages (one Anthropic message may become several: tool results
/// are `tool` messages).
fn conversation(v: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match v {
        None => return Err(ApiError::param("messages", "required, got nothing")),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_MESSAGES => a,
        Some(v) => {
            return Err(ApiError::param(
                "messages",
                format!(
                    "must be a list of 1 to {MAX_MESSAGES} messages, got {}",
                    show(v)
                ),
            ))
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        message(i, m, &mut out)?;
    }
    Ok(out)
}

fn message(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let name = |field: &str| format!("messages[{i}].{field}");
    let role = match m.get("role") {
        Some(Value::String(r)) if r == "user" || r == "assistant" => r.as_str(),
        other => {
            return Err(ApiError::param(
                name("role"),
                format!(
                    "must be user or assistant, got {}",
                    other.map_or("nothing".into(), show)
                ),
            ))
        }
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        other => {
            return Err(ApiError::param(
                name("content"),
                format!(
                    "must be a string or a list of content blocks, got {}",
                    other.map_or("nothing".into(), show)
                ),
            ))
        }
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let field = format!("messages[{i}].content[{j}]");
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, role) {
            ("text", _) => texts.push(text_block(&field, b)?),
            ("tool_use", "assistant") => calls.push(tool_use(&field, b)?),
            ("tool_result", "user") => results.push(tool_result(&field, b)?),
            // Earlier thoughts are not sent back to the model (chat templates drop them).
            ("thinking" | "redacted_thinking", "assistant") => {}
            _ => {
                return Err(ApiError::param(
                    format!("{field}.type"),
                    format!(
                        "folio reads text, tool_use (assistant) and tool_result (user) blocks; got {} in a {role} message",
                        b.get("type").map_or("nothing".into(), show)
                    ),
                ))
            }
        }
    }
    // Tool results answer the previous turn's calls: they come before the user's text.
    out.extend(results);
    if role == "assistant" {
        let mut msg = json!({"role": "assistant", "content": texts.join("\n")});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        out.push(msg);
    } else if !texts.is_empty() {
        out.push(json!({"role": "user", "content": texts.join("\n")}));
    }
    Ok(())
}

/// A `tool_use` block → an OpenAI tool call (arguments as an object, which the chat path
/// passes to templates as is).
fn tool_use(field: &str, b: &Value) -> Result<Value, ApiError> {
    let (Some(id), Some(name)) = (
        b.get("id").and_then(Value::as_str),
        b.get("name").and_then(Value::as_str),
    ) else {
        return Err(ApiError::param(
            field,
            format!("a tool_use block needs string id and name, got {}", show(b)),
        ));
    };
    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
    Ok(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}))
}

/// A `tool_result` block → a `tool` message; its content is a string or text blocks.
fn tool_result(field: &str, b: &Value) -> Result<Value, ApiError> {
    let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
        return Err(ApiError::param(
            format!("{field}.tool_use_id"),
            format!(
                "required string, got {}",
                b.get("tool_use_id").map_or("nothing".into(), show)
            ),
        ));
    };
    let content = match b.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| text_block(&format!("{field}.content[{k}]"), p))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n"),
        Some(v) => {
            return Err(ApiError::param(
                format!("{field}.content"),
                format!("must be a string or a list of text blocks, got {}", show(v)),
            ))
        }
    };
    Ok(json!({"role": "tool", "tool_call_id": id, "content": content}))
}

/// `tools`: custom tools `{name, description, input_schema}` → chat functions. Anthropic's
/// server tools (`bash_…`, `web_search_…`) run on Anthropic's side; folio has none.
fn tools(v: &Value) -> Result<Value, ApiError> {
    let Value::Array(list) = v else {
        return Err(ApiError::param(
            "tools",
            format!("must be a list of tools, got {}", show(v)),
        ));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match t.get("type") {
            None | Some(Value::Null) => {}
            Some(k) if k == "custom" => {}
            Some(k) => {
                return Err(ApiError::param(
                    format!("tools[{i}].type"),
                    format!(
                        "folio runs no server tools; only custom tools {{name, description, input_schema}} are accepted, got {}",
                        show(k)
                    ),
                ))
            }
        }
        let mut function = json!({"name": t.get("name").cloned().unwrap_or(Value::Null)});
        if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
            function["description"] = d.clone();
        }
        if let Some(s) = t.get("input_schema").filter(|s| !s.is_null()) {
            function["parameters"] = s.clone();
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` → chat's `tool_choice`, and `parallel_tool_calls` from
/// `disable_parallel_tool_use`.
fn tool_choice(v: &Value) -> Result<(Value, Option<bool>), ApiError> {
    let bad = || {
        ApiError::param(
            "tool_choice",
            format!(
                "must be {{\"type\": \"auto\" | \"any\" | \"none\"}} or {{\"type\": \"tool\", \"name\": …}}, got {}",
                show(v)
            ),
        )
    };
    let parallel = match v.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(d)) => Some(!d),
        Some(d) => {
            return Err(ApiError::param(
                "tool_choice.disable_parallel_tool_use",
                format!("must be a boolean, got {}", show(d)),
            ))
        }
    };
    let choice = match v.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match v.get("name").and_then(Value::as_str) {
            Some(n) => json!({"type": "function", "function": {"name": n}}),
            None => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    Ok((choice, parallel))
}

/// `output_config.format` (or the beta's top-level `output_format`):
/// `{"type": "json_schema", "schema": …}` → chat's strict `response_format`.
/// `output_config.effort` is accepted and ignored (no effort setting for local models).
fn output_format(config: Option<&Value>, beta: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let (field, format) = match (config, beta) {
        (Some(Value::Object(c)), _) if c.get("format").is_some_and(|f| !f.is_null()) => {
            ("output_config.format", &c["format"])
        }
        (Some(c), _) if !c.is_object() => {
            return Err(ApiError::param(
                "output_config",
                format!("must be an object, got {}", show(c)),
            ))
        }
        (_, Some(b)) => ("output_format", b),
        _ => return Ok(None),
    };
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(s)) if s.is_object() => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": s, "strict": true},
        }))),
        _ => Err(ApiError::param(
            field,
            format!(
                "must be {{\"type\": \"json_schema\", \"schema\": {{…}}}}, got {}",
                show(format)
            ),
        )),
    }
}

/// `thinking`: `{"type": "enabled", "budget_tokens": n}` (or `adaptive`) or
/// `{"type": "disabled"}`.
///
/// NOTE: `budget_tokens` is checked but not enforced: the thought ends when the model
/// ends it, within `max_tokens` as a whole.
fn thinking(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let on = match v.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive" | "between_tools") => true,
        Some("disabled") => false,
        _ => {
            return Err(ApiError::param(
                "thinking.type",
                format!(
                    "must be enabled, adaptive, between_tools or disabled, got {}",
                    v.get("type").map_or("nothing".into(), show)
                ),
            ))
        }
    };
    match v.get("budget_tokens") {
        None | Some(Value::Null) => {}
        Some(b) if b.as_u64().is_some() => {}
        Some(b) => {
            return Err(ApiError::param(
                "thinking.budget_tokens",
                format!("must be a non-negative integer, got {}", show(b)),
            ))
        }
    }
    Ok(Some(on))
}

/// A chat-path error in Anthropic's field names: `stop` → `stop_sequences`,
/// `tools[i].function.parameters` → `tools[i].input_schema`, `tools[i].function.name` →
/// `tools[i].name`.
pub fn renamed(e: ApiError) -> ApiError {
    let Some(param) = e.param.clone() else {
        return e;
    };
    let new = if param == "stop" || param.starts_with("stop[") {
        param.replacen("stop", "stop_sequences", 1)
    } else if param.starts_with("response_format") {
        "output_config.format".to_string()
    } else if param.starts_with("tools[") {
        param
            .replace(".function.parameters", ".input_schema")
            .replace(".function.name", ".name")
    } else {
        return e;
    };
    e.with_param(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> Result<Value, String> {
        to_chat(v.as_object().unwrap(), Route::Messages)
            .map(|(c, _)| Value::Object(c))
            .map_err(|e| e.message)
    }

    #[test]
    fn blocks_become_chat_messages() {
        let c = chat(json!({
            "model": "m", "max_tokens": 9, "stop_sequences": ["\n\n"], "top_k": 1,
            "metadata": {"user_id": "u"},
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "And?"}]},
            ],
            "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
        }))
        .unwrap();
        assert_eq!(
            c,
            json!({
                "model": "m", "max_tokens": 9, "stop": ["\n\n"], "top_k": 1,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather?"},
                    {"role": "assistant", "content": "Let me look.", "tool_calls": [
                        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                    {"role": "user", "content": "And?"},
                ],
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "parallel_tool_calls": false,
            })
        );
        let c = chat(json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                            "thinking": {"type": "enabled", "budget_tokens": 1024}, "tool_choice": {"type": "any"}}))
        .unwrap();
        assert_eq!(c["chat_template_kwargs"], json!({"enable_thinking": true}));
        assert_eq!(c["tool_choice"], "required");
        let c = chat(json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "speed": "fast",
                            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}}))
        .unwrap();
        assert_eq!(
            c["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": true}})
        );
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let m = json!([{"role": "user", "content": "x"}]);
        let cases = [
            (json!({"messages": m}), "max_tokens: required, got nothing"),
            (json!({"max_tokens": 1, "messages": m, "frobnicate": 1}), "frobnicate: unknown field for /v1/messages: folio does not implement it, got 1"),
            (json!({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]}), "messages[0].role: must be user or assistant, got string \"system\""),
            (json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
             "messages[0].content[0].type: folio reads text, tool_use (assistant) and tool_result (user) blocks; got string \"image\" in a user message"),
            (json!({"max_tokens": 1, "messages": m, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
             "tools[0].type: folio runs no server tools; only custom tools {name, description, input_schema} are accepted, got string \"web_search_20250305\""),
            (json!({"max_tokens": 1, "messages": m, "tool_choice": {"type": "sometimes"}}),
             "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": …}, got an object with 1 keys"),
            (json!({"max_tokens": 1, "messages": m, "thinking": {"type": "on"}}), "thinking.type: must be enabled, adaptive, between_tools or disabled, got string \"on\""),
        (json!({"max_tokens": 1, "messages": m, "output_format": {"type": "yaml"}}), "output_format: must be {\"type\": \"json_schema\", \"schema\": {…}}, got an object with 1 keys"),
            (json!({"max_tokens": 1, "messages": m, "stop_sequences": [3]}), "stop_sequences[0]: must be a string, got 3"),
        ];
        for (body, msg) in cases {
            assert_eq!(chat(body).unwrap_err(), msg);
        }
        let counted = to_chat(
            json!({"messages": m}).as_object().unwrap(),
            Route::CountTokens,
        );
        assert!(counted.is_ok());
    }

    #[test]
    fn chat_errors_come_back_in_anthropic_names() {
        let e = renamed(ApiError::param("stop", "at most 4 items, got 5"));
        assert_eq!(e.message, "stop_sequences: at most 4 items, got 5");
        let e = renamed(ApiError::param(
            "tools[0].function.parameters",
            "must be a JSON Schema object, got 3",
        ));
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (
                Some("tools[0].input_schema"),
                "tools[0].input_schema: must be a JSON Schema object, got 3"
            )
        );
        assert_eq!(renamed(ApiError::param("top_p", "x")).message, "top_p: x");
    }
}
