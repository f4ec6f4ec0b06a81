//! The model's tool calls read back out of its text, in the formats chat templates teach:
//! Hermes / Qwen `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, Llama 3's bare
//! JSON `{"name": …, "parameters": {…}}` (after an optional `<|python_tag|>`), and
//! Mistral's `[TOOL_CALLS] [{"name": …, "arguments": {…}}]`.
//!
//! NOTE: this parses, it does not constrain: with `tool_choice` `required` or a named
//! function the model may still answer in prose (enforcing it needs grammar-constrained
//! decoding).

use serde_json::Value;

/// A tool-call output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    Hermes,
    Llama3Json,
    Mistral,
}

impl Parser {
    /// `--tool-call-parser` names (vLLM's).
    pub fn from_name(name: &str) -> Option<Parser> {
        match name {
            "hermes" | "qwen" | "qwen2_5" => Some(Parser::Hermes),
            "llama3_json" | "llama3" | "llama4_json" => Some(Parser::Llama3Json),
            "mistral" => Some(Parser::Mistral),
            _ => None,
        }
    }

    /// The format a chat template teaches, from its text; Hermes when it shows none (folio
    /// then describes the tools itself in Hermes style, see `tools::render_fallback`).
    pub fn for_template(source: &str) -> Parser {
        if source.contains("[TOOL_CALLS]") {
            Parser::Mistral
        } else if source.contains("<tool_call>") {
            Parser::Hermes
        } else if source.contains("<|python_tag|>") || source.contains("ipython") {
            Parser::Llama3Json
        } else {
            Parser::Hermes
        }
    }

    /// Where a tool call starts in `text`, if one does; `whole` when `text` is the answer
    /// from its beginning. A call may also be the whole answer as bare JSON (Llama 3's
    /// format, and what models taught another format often write instead, fenced or
    /// not): that starts only at the answer's first non-blank character.
    pub fn start(self, text: &str, whole: bool) -> Option<usize> {
        let marked = match self {
            Parser::Hermes => text.find("<tool_call>"),
            Parser::Mistral => text.find("[TOOL_CALLS]"),
            Parser::Llama3Json => None,
        };
        if marked.is_some() || !whole {
            return marked;
        }
        let lead = text.len() - text.trim_start().len();
        let rest = &text[lead..];
        (rest.starts_with('{') || rest.starts_with("```") || rest.starts_with("<|python_tag|>"))
            .then_some(lead)
    }

    /// Markers whose prefix a stream must hold back until it is known not to start a call.
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            Parser::Hermes => &["<tool_call>"],
            Parser::Mistral => &["[TOOL_CALLS]"],
            Parser::Llama3Json => &[],
        }
    }
}

/// One parsed call: the function's name and its arguments as a JSON string (OpenAI's form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// Splits `text` into the content before the calls (None when blank) and the calls. Text
/// whose calls do not parse is all content, no calls.
pub fn parse(parser: Parser, text: &str) -> (Option<String>, Vec<ParsedCall>) {
    let none = || (Some(text.to_string()), Vec::new());
    let Some(start) = parser.start(text, true) else {
        return none();
    };
    let rest = &text[start..];
    let calls = if rest.starts_with("<tool_call>") {
        hermes(rest)
    } else if let Some(r) = rest.strip_prefix("[TOOL_CALLS]") {
        mistral(r)
    } else {
        bare(rest)
    };
    match calls {
        Some(c) if !c.is_empty() => {
            let before = text[..start].trim();
            ((!before.is_empty()).then(|| before.to_string()), c)
        }
        _ => none(),
    }
}

/// `{"name": …, "arguments"|"parameters": …}` → a call.
fn call(v: &Value) -> Option<ParsedCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    let arguments = match args {
        // Some models put the arguments' JSON in a string already.
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(ParsedCall { name, arguments })
}

fn hermes(text: &str) -> Option<Vec<ParsedCall>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<tool_call>") {
        let body = &rest[i + "<tool_call>".len()..];
        let (inner, next) = match body.find("</tool_call>") {
            Some(j) => (&body[..j], &body[j + "</tool_call>".len()..]),
            // The end tag may be missing when generation stopped on it.
            None => (body, ""),
        };
        out.push(call(&serde_json::from_str(inner.trim()).ok()?)?);
        rest = next;
    }
    Some(out)
}

fn mistral(text: &str) -> Option<Vec<ParsedCall>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    match v {
        Value::Array(a) => a.iter().map(call).collect(),
        o => Some(vec![call(&o)?]),
    }
}

/// A whole answer that is calls as JSON: one object, an array, or (Llama 3) objects
/// separated by ';', maybe after `<|python_tag|>` or in a ```json fence. Each object needs
/// a `name` and `arguments` or `parameters`, so that JSON answers are not taken for calls.
fn bare(text: &str) -> Option<Vec<ParsedCall>> {
    let mut text = text.trim().trim_start_matches("<|python_tag|>").trim();
    if let Some(t) = text.strip_prefix("```") {
        text = t
            .trim_start_matches("json")
            .trim()
            .trim_end_matches("```")
            .trim();
    }
    let strict = |v: &Value| {
        if v.get("arguments").is_some() || v.get("parameters").is_some() {
            call(v)
        } else {
            None
        }
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(a)) => a.iter().map(strict).collect(),
        Ok(v) => Some(vec![strict(&v)?]),
        Err(_) => text
            .split(';')
            .map(|part| strict(&serde_json::from_str(part.trim()).ok()?))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, arguments: &str) -> ParsedCall {
        ParsedCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn formats_parse_to_calls() {
        let h = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"t\", \"arguments\": {}}";
        assert_eq!(
            parse(Parser::Hermes, h),
            (
                Some("Let me check.".into()),
                vec![c("get_weather", "{\"city\":\"Paris\"}"), c("t", "{}")]
            )
        );
        assert_eq!(
            parse(
                Parser::Llama3Json,
                " {\"name\": \"f\", \"parameters\": {\"x\": 1}}"
            ),
            (None, vec![c("f", "{\"x\":1}")])
        );
        assert_eq!(
            parse(
                Parser::Llama3Json,
                "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}"
            ),
            (None, vec![c("a", "{}"), c("b", "{}")])
        );
        assert_eq!(
            parse(
                Parser::Mistral,
                "[TOOL_CALLS] [{\"name\": \"m\", \"arguments\": \"{\\\"q\\\": 2}\"}]"
            ),
            (None, vec![c("m", "{\"q\": 2}")])
        );
        // A bare (fenced) JSON call where tags were taught.
        assert_eq!(
            parse(
                Parser::Hermes,
                "```json\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n```"
            ),
            (None, vec![c("w", "{\"c\":\"P\"}")])
        );
        // Not calls: all content.
        for (p, t) in [
            (Parser::Hermes, "plain answer"),
            (Parser::Hermes, "<tool_call>not json</tool_call>"),
            (Parser::Hermes, "{\"name\": \"just data\"}"),
            (Parser::Llama3Json, "Sure: {\"name\": \"f\"}"),
        ] {
            assert_eq!(parse(p, t), (Some(t.to_string()), vec![]));
        }
        assert_eq!(Parser::for_template("{{ '<tool_call>' }}"), Parser::Hermes);
        assert_eq!(Parser::for_template("[TOOL_CALLS]"), Parser::Mistral);
        assert_eq!(Parser::for_template("<|python_tag|>"), Parser::Llama3Json);
    }
}
