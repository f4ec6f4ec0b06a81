//! Chat `tools`, `tool_choice` and `parallel_tool_calls`, read and checked.

use crate::error::ApiError;
use crate::fields::{show, Fields};
use serde_json::Value;

/// Most tools per request.
pub const MAX_TOOLS: usize = 128;

/// OpenAI's `tool_choice`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    /// Never call a tool: the tools are not offered to the model.
    None,
    /// The model decides.
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must call this function.
    Named(String),
}

/// The tool fields of one chat request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    /// The `tools` array as sent (each `{"type": "function", "function": {...}}`).
    pub tools: Vec<Value>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

impl Tools {
    /// Tools the chat template should see (none when `tool_choice` is `none`).
    pub fn offered(&self) -> &[Value] {
        match self.choice {
            ToolChoice::None => &[],
            _ => &self.tools,
        }
    }
}

/// Reads the fields. Without `tools`, `tool_choice` may only be `none` or `auto`.
pub fn parse(f: &Fields) -> Result<Tools, ApiError> {
    let tools = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_TOOLS => {
            for (i, t) in a.iter().enumerate() {
                check_tool(i, t)?;
            }
            a.clone()
        }
        Some(v) => {
            return Err(ApiError::param(
                "tools",
                format!(
                    "must be an array of at most {MAX_TOOLS} tools, got {}",
                    show(v)
                ),
            ))
        }
    };
    let choice = match f.get("tool_choice") {
        None if tools.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::param(
                    "tool_choice",
                    format!("must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": …}}}}, got {other:?}"),
                ))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => {
                if !tools.iter().any(|t| tool_name(t) == Some(name)) {
                    return Err(ApiError::param(
                        "tool_choice",
                        format!("names function {name:?}, which is not in tools"),
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
            _ => {
                return Err(ApiError::param(
                    "tool_choice",
                    format!("must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": …}}}}, got {}", show(v)),
                ))
            }
        },
    };
    if tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::param(
            "tool_choice",
            "requires tools, got no tools",
        ));
    }
    Ok(Tools {
        tools,
        choice,
        parallel: f.bool("parallel_tool_calls", true)?,
    })
}

/// The function name of a tool.
pub fn tool_name(t: &Value) -> Option<&str> {
    t.pointer("/function/name").and_then(Value::as_str)
}

fn check_tool(i: usize, t: &Value) -> Result<(), ApiError> {
    let field = format!("tools[{i}]");
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::param(
            field,
            format!(
                "must be {{\"type\": \"function\", \"function\": …}}, got {}",
                show(t)
            ),
        ));
    }
    match tool_name(t) {
        Some(n) if !n.is_empty() && n.len() <= 64 => {}
        _ => {
            return Err(ApiError::param(
                format!("{field}.function.name"),
                format!(
                    "must be a name of 1 to 64 bytes, got {}",
                    t.pointer("/function/name").map_or("nothing".into(), show)
                ),
            ))
        }
    }
    match t.pointer("/function/parameters") {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(v) => Err(ApiError::param(
            format!("{field}.function.parameters"),
            format!("must be a JSON Schema object, got {}", show(v)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value) -> Result<Tools, String> {
        let o = v.as_object().unwrap().clone();
        parse(&Fields::new(&o)).map_err(|e| e.message)
    }

    #[test]
    fn choices_and_errors() {
        let f = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}});
        assert_eq!(run(json!({})).unwrap().choice, ToolChoice::None);
        let t = run(json!({"tools": [f]})).unwrap();
        assert_eq!((t.choice.clone(), t.parallel), (ToolChoice::Auto, true));
        assert_eq!(t.offered().len(), 1);
        let t = run(json!({"tools": [f], "tool_choice": "none"})).unwrap();
        assert!(t.offered().is_empty());
        assert_eq!(
            run(json!({"tools": [f], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}))
                .unwrap()
                .choice,
            ToolChoice::Named("get_weather".into())
        );
        let cases = [
            (json!({"tool_choice": "required"}), "tool_choice: requires tools, got no tools"),
            (json!({"tools": [f], "tool_choice": "maybe"}), "tool_choice: must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}, got \"maybe\""),
            (json!({"tools": [f], "tool_choice": {"type": "function", "function": {"name": "x"}}}), "tool_choice: names function \"x\", which is not in tools"),
            (json!({"tools": [{"type": "code"}]}), "tools[0]: must be {\"type\": \"function\", \"function\": …}, got an object with 1 keys"),
            (json!({"tools": [{"type": "function", "function": {}}]}), "tools[0].function.name: must be a name of 1 to 64 bytes, got nothing"),
            (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}), "tools[0].function.parameters: must be a JSON Schema object, got 3"),
        ];
        for (body, msg) in cases {
            assert_eq!(run(body).unwrap_err(), msg);
        }
    }
}
