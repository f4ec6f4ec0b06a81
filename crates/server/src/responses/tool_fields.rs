//! The Responses API's `tools` and `tool_choice` in chat form. A Responses function tool
//! is flat (`{"type": "function", "name", "description", "parameters", "strict"}`) where
//! chat nests it under `function`; a named `tool_choice` is `{"type": "function",
//! "name"}` where chat's is `{"type": "function", "function": {"name"}}`. The chat path
//! (`crate::tools`) then checks, renders and constrains them as for any chat request.

use crate::error::ApiError;
use crate::fields::show;
use serde_json::{json, Map, Value};

/// `tools` in chat form. Only function tools: OpenAI's hosted tools (web search, file
/// search, computer use, …) need services folio does not have.
pub fn chat_tools(v: &Value) -> Result<Value, ApiError> {
    let Value::Array(tools) = v else {
        return Err(ApiError::param(
            "tools",
            format!("must be an array of function tools, got {}", show(v)),
        ));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Value::Object(o) = t else {
            return Err(ApiError::param(
                at,
                format!("must be a function tool object, got {}", show(t)),
            ));
        };
        match o.get("type").and_then(Value::as_str) {
            Some("function") => {}
            _ => {
                return Err(ApiError::param(
                    format!("{at}.type"),
                    format!(
                        "folio serves only function tools ({{\"type\": \"function\", \"name\", \"parameters\"}}), got {}",
                        o.get("type").map_or("nothing".into(), show)
                    ),
                ))
            }
        }
        match o.get("name") {
            Some(Value::String(n)) if !n.is_empty() && n.len() <= 64 => {}
            v => {
                return Err(ApiError::param(
                    format!("{at}.name"),
                    format!(
                        "must be a name of 1 to 64 bytes, got {}",
                        v.map_or("nothing".into(), show)
                    ),
                ))
            }
        }
        match o.get("parameters") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(v) => {
                return Err(ApiError::param(
                    format!("{at}.parameters"),
                    format!("must be a JSON Schema object, got {}", show(v)),
                ))
            }
        }
        let function: Map<String, Value> = o
            .iter()
            .filter(|(k, v)| *k != "type" && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` in chat form: `none`, `auto`, `required` as they are; a named function.
pub fn chat_tool_choice(v: &Value) -> Result<Value, ApiError> {
    match v {
        Value::String(_) => Ok(v.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
                None => Err(ApiError::param(
                    "tool_choice.name",
                    format!(
                        "required, got {}",
                        o.get("name").map_or("nothing".into(), show)
                    ),
                )),
            }
        }
        _ => Err(ApiError::param(
            "tool_choice",
            format!(
                "must be none, auto, required or {{\"type\": \"function\", \"name\": …}}, got {}",
                show(v)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_tools_nest_as_chat_tools() {
        let t = json!([{"type": "function", "name": "get_weather", "description": "d",
                        "parameters": {"type": "object"}, "strict": true}]);
        assert_eq!(
            chat_tools(&t).unwrap(),
            json!([{"type": "function", "function": {"name": "get_weather", "description": "d",
                    "parameters": {"type": "object"}, "strict": true}}])
        );
        assert_eq!(
            chat_tool_choice(&json!({"type": "function", "name": "f"})).unwrap(),
            json!({"type": "function", "function": {"name": "f"}})
        );
        assert_eq!(
            chat_tool_choice(&json!("required")).unwrap(),
            json!("required")
        );
        let e = |r: Result<Value, ApiError>| r.unwrap_err().message;
        assert_eq!(
            e(chat_tools(&json!([{"type": "web_search"}]))),
            "tools[0].type: folio serves only function tools ({\"type\": \"function\", \"name\", \"parameters\"}), got string \"web_search\""
        );
        assert_eq!(
            e(chat_tools(&json!([{"type": "function"}]))),
            "tools[0].name: must be a name of 1 to 64 bytes, got nothing"
        );
        assert_eq!(
            e(chat_tool_choice(&json!({"type": "file_search"}))),
            "tool_choice: must be none, auto, required or {\"type\": \"function\", \"name\": …}, got an object with 1 keys"
        );
    }
}
