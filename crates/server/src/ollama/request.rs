//! An Ollama `/api/chat` or `/api/generate` body in folio's chat (or completions) form, so
//! that `generate::start` validates, tokenizes and runs it exactly as a
//! `/v1/chat/completions` request: `messages` pass (Ollama's `tool_name` becomes `name`,
//! `thinking` of earlier turns is dropped), `prompt` + `system` become messages (`raw`: the
//! prompt as is, a completions request), `options` map through [`super::options`],
//! `format` becomes `response_format`, `tools` pass, `think` sets the template's
//! `enable_thinking` and the reasoning split.
//!
//! folio serves text models: `images` are a 400, as are `template` (folio renders the
//! model's own chat template), `suffix` (no fill-in-the-middle) and `context` (send the
//! conversation as /api/chat messages).

use super::options;
use crate::api::Api;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Which Ollama endpoint a body came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Generate,
}

/// What folio runs for one Ollama request.
#[derive(Debug)]
pub struct Ask {
    /// Chat, or completions for a `raw` generate.
    pub api: Api,
    /// The body `generate::start` reads.
    pub body: Map<String, Value>,
    pub model: Option<String>,
    pub stream: bool,
    /// `think`: Some(true) splits `<think>` text into `thinking`.
    pub think: Option<bool>,
    /// `keep_alive`: the model's idle lifetime from now on (`Duration::MAX`: forever).
    pub keep_alive: Option<Duration>,
    /// No messages or prompt: Ollama's "load the model" (or, with `keep_alive: 0`,
    /// "unload it") request.
    pub empty: bool,
}

/// Top-level fields of /api/chat.
const CHAT: &[&str] = &[
    "model",
    "messages",
    "tools",
    "format",
    "options",
    "stream",
    "keep_alive",
    "think",
    "logprobs",
    "top_logprobs",
    "tool_choice",
];

/// Top-level fields of /api/generate.
const GENERATE: &[&str] = &[
    "model",
    "prompt",
    "system",
    "raw",
    "format",
    "options",
    "stream",
    "keep_alive",
    "think",
    "logprobs",
    "top_logprobs",
    "images",
    "template",
    "suffix",
    "context",
];

/// Accepted on both and ignored: Ollama's `truncate` and `shift` say what to do with a
/// prompt that does not fit; folio refuses it with a 400 naming its length.
const IGNORED: &[&str] = &["truncate", "shift"];

/// Fields folio does not have, accepted at their neutral value (image generation).
const NEUTRAL_NULL: &[&str] = &["width", "height", "steps"];

/// Reads an Ollama body.
pub fn read(endpoint: Endpoint, body: &Map<String, Value>) -> Result<Ask, ApiError> {
    let own = match endpoint {
        Endpoint::Chat => CHAT,
        Endpoint::Generate => GENERATE,
    };
    for (k, v) in body {
        if own.contains(&k.as_str()) || IGNORED.contains(&k.as_str()) {
            continue;
        }
        if NEUTRAL_NULL.contains(&k.as_str()) && (v.is_null() || v == &json!(0)) {
            continue;
        }
        return Err(ApiError::param(
            k.as_str(),
            format!(
                "unknown field, got {}; this endpoint reads {}",
                show(v),
                own.join(", ")
            ),
        ));
    }
    let f = Fields::new(body);
    let mut chat = Map::new();
    let model = f.str("model")?.map(str::to_string);
    if let Some(m) = &model {
        chat.insert("model".into(), json!(m));
    }
    let stream = f.bool("stream", true)?;
    chat.insert("stream".into(), json!(stream));
    options::apply(f.get("options"), &mut chat)?;
    if let Some(rf) = format(f.get("format"))? {
        chat.insert("response_format".into(), rf);
    }
    let think = match f.get("think") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        // gpt-oss's levels: thinking on.
        Some(Value::String(s)) if ["high", "medium", "low"].contains(&s.as_str()) => Some(true),
        Some(v) => {
            return Err(ApiError::param(
                "think",
                format!(
                    "must be a boolean or one of high, medium, low; got {}",
                    show(v)
                ),
            ))
        }
    };
    match f.get("logprobs") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            chat.insert("logprobs".into(), json!(true));
            if let Some(n) = f.get("top_logprobs") {
                chat.insert("top_logprobs".into(), n.clone());
            }
        }
        Some(v) => {
            return Err(ApiError::param(
                "logprobs",
                format!("must be a boolean, got {}", show(v)),
            ))
        }
    }
    let keep_alive = keep_alive(f.get("keep_alive"))?;
    let (api, empty) = match endpoint {
        Endpoint::Chat => {
            let messages = messages(f.get("messages"))?;
            let empty = messages.is_empty();
            chat.insert("messages".into(), Value::Array(messages));
            match f.get("tools") {
                Some(Value::Array(t)) if t.is_empty() => {}
                Some(t) => {
                    chat.insert("tools".into(), t.clone());
                }
                None => {}
            }
            if let Some(c) = f.get("tool_choice") {
                chat.insert("tool_choice".into(), c.clone());
            }
            (Api::Chat, empty)
        }
        Endpoint::Generate => generate_prompt(&f, &mut chat)?,
    };
    if api == Api::Chat {
        if let Some(t) = think {
            chat.insert("chat_template_kwargs".into(), json!({"enable_thinking": t}));
        }
    }
    Ok(Ask {
        api,
        body: chat,
        model,
        stream,
        think,
        keep_alive,
        empty,
    })
}

/// `prompt`, `system`, `raw` → chat `messages` or a completions `prompt`.
fn generate_prompt(f: &Fields, chat: &mut Map<String, Value>) -> Result<(Api, bool), ApiError> {
    if let Some(Value::Array(images)) = f.get("images") {
        if !images.is_empty() {
            return Err(images_error("images", images.len()));
        }
    }
    for (name, why) in [
        ("template", "folio renders the model's own chat template"),
        ("suffix", "folio does no fill-in-the-middle"),
    ] {
        if let Some(s) = f.str(name)? {
            if !s.is_empty() {
                return Err(ApiError::param(
                    name,
                    format!("not supported: {why}; got {}", show(&json!(s))),
                ));
            }
        }
    }
    if let Some(Value::Array(c)) = f.get("context") {
        if !c.is_empty() {
            return Err(ApiError::param(
                "context",
                format!("not supported (deprecated in Ollama): send the conversation as /api/chat messages; got an array of {} tokens", c.len()),
            ));
        }
    }
    let prompt = f.str("prompt")?.unwrap_or("");
    let system = f.str("system")?.filter(|s| !s.is_empty());
    if f.bool("raw", false)? {
        if system.is_some() {
            return Err(ApiError::param(
                "system",
                "not applied with raw: true (the prompt is sent as is); put it into the prompt",
            ));
        }
        chat.insert("prompt".into(), json!(prompt));
        return Ok((Api::Completions, prompt.is_empty()));
    }
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": prompt}));
    chat.insert("messages".into(), Value::Array(messages));
    Ok((Api::Chat, prompt.is_empty()))
}

fn images_error(field: &str, n: usize) -> ApiError {
    ApiError::param(
        field,
        format!("images are not supported: folio serves text-only models; got {n} image(s)"),
    )
}

/// Ollama messages → chat messages.
fn messages(v: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::param(
                "messages",
                format!("must be an array of messages, got {}", show(v)),
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let Value::Object(o) = m else {
                return Err(ApiError::param(
                    format!("messages[{i}]"),
                    format!("must be an object, got {}", show(m)),
                ));
            };
            let mut out = Map::new();
            for (k, v) in o {
                match k.as_str() {
                    "images" => match v {
                        Value::Null => {}
                        Value::Array(a) if a.is_empty() => {}
                        Value::Array(a) => {
                            return Err(images_error(&format!("messages[{i}].images"), a.len()))
                        }
                        v => {
                            return Err(images_error(
                                &format!("messages[{i}].images"),
                                usize::from(!v.is_null()),
                            ))
                        }
                    },
                    // An earlier turn's thought: templates drop it, so does folio.
                    "thinking" => {}
                    "tool_name" => {
                        out.insert("name".into(), v.clone());
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Ok(Value::Object(out))
        })
        .collect()
}

/// `format`: `""` none, `"json"` any JSON object, an object a JSON schema.
fn format(v: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "json_object"}))),
        Some(Value::Object(schema)) => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "format", "schema": schema},
        }))),
        Some(v) => Err(ApiError::param(
            "format",
            format!("must be \"json\" or a JSON schema object, got {}", show(v)),
        )),
    }
}

/// Ollama's `keep_alive`: seconds as a number, a Go duration (`"5m"`, `"1h30m"`, `"0"`),
/// negative for forever.
pub fn keep_alive(v: Option<&Value>) -> Result<Option<Duration>, ApiError> {
    let bad = |v: &Value| {
        ApiError::param(
            "keep_alive",
            format!(
                "must be seconds or a duration such as \"5m\", \"1h30m\", \"0\" or \"-1\", got {}",
                show(v)
            ),
        )
    };
    let secs = match v {
        None => return Ok(None),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| bad(v.unwrap()))?,
        Some(Value::String(s)) => go_duration(s).ok_or_else(|| bad(v.unwrap()))?,
        Some(v) => return Err(bad(v)),
    };
    if secs < 0.0 {
        return Ok(Some(Duration::MAX));
    }
    Duration::try_from_secs_f64(secs)
        .map(Some)
        .map_err(|_| bad(v.unwrap()))
}

/// Seconds of a Go duration string (`1h2m3.5s`, `300ms`, `-1`, a bare number of seconds).
fn go_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(x) = s.parse::<f64>() {
        return Some(x);
    }
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let x: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += x * scale;
        rest = &rest[unit_end..];
    }
    Some(if neg { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_json(e: Endpoint, v: Value) -> Result<Ask, String> {
        read(e, v.as_object().unwrap()).map_err(|e| e.message)
    }

    #[test]
    fn chat_body_becomes_a_chat_request() {
        let a = read_json(
            Endpoint::Chat,
            json!({"model": "m", "messages": [
                {"role": "user", "content": "hi", "images": []},
                {"role": "assistant", "content": "", "thinking": "hm",
                 "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                {"role": "tool", "content": "3", "tool_name": "f"}],
              "tools": [], "format": "json", "options": {"num_predict": 4}, "think": false,
              "keep_alive": "5m"}),
        )
        .unwrap();
        assert_eq!(
            (a.api, a.stream, a.think, a.empty),
            (Api::Chat, true, Some(false), false)
        );
        assert_eq!(a.keep_alive, Some(Duration::from_secs(300)));
        assert_eq!(
            Value::Object(a.body),
            json!({"model": "m", "stream": true, "max_tokens": 4,
                   "response_format": {"type": "json_object"},
                   "messages": [
                       {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "",
                        "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                       {"role": "tool", "content": "3", "name": "f"}],
                   "chat_template_kwargs": {"enable_thinking": false}})
        );
    }

    #[test]
    fn generate_body_becomes_chat_or_raw_completions() {
        let a = read_json(
            Endpoint::Generate,
            json!({"model": "m", "prompt": "Why?", "system": "Be brief.", "stream": false,
                   "format": {"type": "object"}}),
        )
        .unwrap();
        assert_eq!((a.api, a.stream, a.empty), (Api::Chat, false, false));
        assert_eq!(
            Value::Object(a.body),
            json!({"model": "m", "stream": false,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": {"type": "object"}}},
                   "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]})
        );
        let a = read_json(
            Endpoint::Generate,
            json!({"model": "m", "prompt": "Once", "raw": true}),
        )
        .unwrap();
        assert_eq!(a.api, Api::Completions);
        assert_eq!(a.body["prompt"], "Once");
        let a = read_json(Endpoint::Generate, json!({"model": "m"})).unwrap();
        assert!(a.empty);
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (Endpoint::Generate, json!({"prompt": "x", "images": ["aGk="]}), "images: images are not supported: folio serves text-only models; got 1 image(s)"),
            (Endpoint::Chat, json!({"messages": [{"role": "user", "content": "x", "images": ["aGk=", "aGk="]}]}), "messages[0].images: images are not supported: folio serves text-only models; got 2 image(s)"),
            (Endpoint::Generate, json!({"prompt": "x", "context": [1, 2]}), "context: not supported (deprecated in Ollama): send the conversation as /api/chat messages; got an array of 2 tokens"),
            (Endpoint::Chat, json!({"messages": [], "format": 3}), "format: must be \"json\" or a JSON schema object, got 3"),
            (Endpoint::Chat, json!({"messages": [], "keep_alive": "soon"}), "keep_alive: must be seconds or a duration such as \"5m\", \"1h30m\", \"0\" or \"-1\", got string \"soon\""),
            (Endpoint::Chat, json!({"messages": [], "think": "max"}), "think: must be a boolean or one of high, medium, low; got string \"max\""),
        ];
        for (e, body, msg) in cases {
            assert_eq!(read_json(e, body).unwrap_err(), msg);
        }
        assert!(
            read_json(Endpoint::Chat, json!({"messages": [], "prompt": "x"}))
                .unwrap_err()
                .starts_with(
                    "prompt: unknown field, got string \"x\"; this endpoint reads model, messages,"
                )
        );
    }

    #[test]
    fn keep_alive_durations() {
        let k = |v: Value| keep_alive(Some(&v)).unwrap();
        assert_eq!(k(json!(0)), Some(Duration::ZERO));
        assert_eq!(k(json!("0")), Some(Duration::ZERO));
        assert_eq!(k(json!("1h30m")), Some(Duration::from_secs(5400)));
        assert_eq!(k(json!("300ms")), Some(Duration::from_millis(300)));
        assert_eq!(k(json!(-1)), Some(Duration::MAX));
        assert_eq!(k(json!("-1m")), Some(Duration::MAX));
        assert_eq!(k(json!(2.5)), Some(Duration::from_millis(2500)));
    }
}
