//! Chat `tools`, `tool_choice` and `parallel_tool_calls`, read and checked.

use crate::api::PromptInput;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::tool_parse::{self, ParsedCall, Parser};
pub use crate::tool_stream::ToolCalling;
use crate::tool_stream::{call_id, Piece, ToolText};
use folio_engine::{Constraint, GrammarLimits};
use serde_json::{json, Value};

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

    /// For `required` and a named function: the JSON schema the whole answer must match,
    /// one call `{"name", "arguments"}` whose arguments validate against the function's
    /// `parameters` (the answer format `tool_parse` reads as a call). Constrained decoding
    /// enforces it; `auto` and `none` constrain nothing here (see [`Tools::lazy_calls`]).
    pub fn forced_call_schema(&self) -> Option<Value> {
        match &self.choice {
            ToolChoice::None | ToolChoice::Auto => None,
            ToolChoice::Required => Some(self.any_call_schema()),
            ToolChoice::Named(n) => self
                .tools
                .iter()
                .find(|t| t["function"]["name"] == n.as_str())
                .map(call_schema),
        }
    }

    /// For `auto` with a strict tool, in a format whose calls open with a marker (Hermes'
    /// `<tool_call>`): a grammar that leaves the answer free until the model opens a call
    /// and from there holds the call to `{"name": one of the tools, "arguments": that
    /// tool's parameters}` until it closes. Without a strict tool the model's calls stay
    /// unconstrained, as OpenAI's are.
    pub fn lazy_calls(&self, parser: Parser) -> Result<Option<Constraint>, ApiError> {
        let strict = self.tools.iter().any(|t| t["function"]["strict"] == true);
        let Some((open, close)) = parser.call_tags() else {
            return Ok(None);
        };
        if self.choice != ToolChoice::Auto || !strict {
            return Ok(None);
        }
        let schema = self.any_call_schema();
        // The schemas sit inside a Lark grammar, where only its size is checked.
        GrammarLimits::default()
            .check_schema(&schema)
            .map_err(|e| ApiError::param("tools", e))?;
        Ok(Some(Constraint::Lark(
            folio_engine::tool_grammar::lazy_calls(open, close, &schema),
        )))
    }

    fn any_call_schema(&self) -> Value {
        json!({"anyOf": self.tools.iter().map(call_schema).collect::<Vec<_>>()})
    }
}

/// The schema of one call of tool `t`: `{"name": its name, "arguments": its parameters}`,
/// a strict tool's parameters read as OpenAI's strict mode reads them.
fn call_schema(t: &Value) -> Value {
    let f = &t["function"];
    let params = match f.get("parameters") {
        Some(p) if p.is_object() => p.clone(),
        _ => json!({"type": "object"}),
    };
    let params = if f["strict"] == true {
        crate::strict_schema::strict(params)
    } else {
        params
    };
    json!({
        "type": "object",
        "properties": {"name": {"const": f["name"]}, "arguments": params},
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
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

/// An assistant message's `tool_calls` in the form chat templates expect: OpenAI sends
/// `function.arguments` as a JSON string, Hugging Face templates read an object (vLLM
/// converts the same way). Arguments that are not JSON stay a string.
pub fn message_tool_calls(i: usize, v: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let Value::Array(calls) = v else {
        return Err(ApiError::param(
            format!("messages[{i}].tool_calls"),
            format!("must be an array of tool calls, got {}", show(v)),
        ));
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let field = format!("messages[{i}].tool_calls[{j}]");
        let Some(name) = c.pointer("/function/name").and_then(Value::as_str) else {
            return Err(ApiError::param(
                format!("{field}.function.name"),
                format!(
                    "required, got {}",
                    c.pointer("/function/name").map_or("nothing".into(), show)
                ),
            ));
        };
        let args = match c.pointer("/function/arguments") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
            Some(o) => o.clone(),
        };
        let mut call =
            serde_json::json!({"type": "function", "function": {"name": name, "arguments": args}});
        if let Some(id) = c.get("id") {
            call["id"] = id.clone();
        }
        out.push(call);
    }
    Ok(Some(Value::Array(out)))
}

/// Puts the offered tools into a chat prompt. A template that reads `tools` gets them as
/// the `tools` variable (Hugging Face's `apply_chat_template(tools=…)`); for one that does
/// not, folio describes them in a system message in the Hermes format (as llama.cpp's
/// generic tool format does) and writes earlier calls into the assistant turns' text.
pub fn render_into(input: &mut PromptInput, t: &Tools, template: Option<&str>) {
    let PromptInput::Chat {
        messages, kwargs, ..
    } = input
    else {
        return;
    };
    let offered = t.offered();
    let src = template.unwrap_or("");
    if !offered.is_empty() && src.contains("tools") {
        kwargs.insert("tools".into(), Value::Array(offered.to_vec()));
    } else if !offered.is_empty() {
        let list: Vec<String> = offered
            .iter()
            .map(|t| t.get("function").unwrap_or(t).to_string())
            .collect();
        let text = format!(
            "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions.\n<tools>\n{}\n</tools>\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
            list.join("\n")
        );
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
            _ => messages.insert(0, folio_tokenizer::ChatMessage::new("system", text)),
        }
    }
    if !src.contains("tool_calls") {
        for m in messages.iter_mut() {
            let Some(Value::Array(calls)) = &m.tool_calls else {
                continue;
            };
            for c in calls {
                let f = c.get("function").unwrap_or(c);
                m.content
                    .push_str(&format!("\n<tool_call>\n{f}\n</tool_call>"));
            }
            m.content = m.content.trim_start().to_string();
        }
    }
}

/// How a chat answer without offered tools is read: a harmony model (GPT-OSS, its
/// template's `<|channel|>`/`<|message|>` or `--tool-call-parser harmony`) answers in
/// channels whatever the tools, so its `analysis` goes to `reasoning_content`, `final` to
/// `content` and a `commentary` call to `tool_calls`, as llama.cpp's GPT-OSS chat parser
/// reads it; other formats' text is left as it is. Completions stay raw text.
pub(crate) fn harmony_chat(api: crate::api::Api, parser: Parser) -> Option<ToolCalling> {
    (api == crate::api::Api::Chat && parser == Parser::Harmony).then_some(ToolCalling {
        parser,
        parallel: true,
    })
}

/// Rewrites a non-streaming chat response: a choice that stopped on its own and whose
/// text holds tool calls gets `message.tool_calls`, the text before them as `content`
/// (null when blank) and `finish_reason: "tool_calls"`. A harmony completion's
/// `analysis` channel becomes `reasoning_content` whatever the finish.
pub fn rewrite_response(v: &mut Value, tc: ToolCalling) {
    let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) else {
        return;
    };
    for ch in choices {
        let text = ch["message"]["content"].as_str().unwrap_or("").to_string();
        let stopped = ch["finish_reason"] == "stop";
        let (content, calls) = if tc.parser == Parser::Harmony {
            let h = crate::tool_harmony::read(&text, true);
            if !h.reasoning.is_empty() {
                ch["message"]["reasoning_content"] = json!(h.reasoning);
            }
            let calls: Option<Vec<ParsedCall>> = h
                .calls
                .into_iter()
                .map(tool_parse::PartialCall::finished)
                .collect();
            ch["message"]["content"] = json!(h.content);
            (
                (!h.content.trim().is_empty()).then(|| h.content.clone()),
                calls.unwrap_or_default(),
            )
        } else {
            tool_parse::parse(tc.parser, &text)
        };
        let calls = keep(tc, calls);
        if calls.is_empty() || !stopped {
            continue;
        }
        ch["message"]["content"] = content.map_or(Value::Null, Value::String);
        ch["message"]["tool_calls"] = calls.iter().map(call_json).collect();
        ch["finish_reason"] = json!("tool_calls");
    }
}

fn call_json(c: &ParsedCall) -> Value {
    json!({"id": call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

fn keep(tc: ToolCalling, mut calls: Vec<ParsedCall>) -> Vec<ParsedCall> {
    if !tc.parallel {
        calls.truncate(1);
    }
    calls
}

/// One streamed choice's chat chunks filtered for tool calls ([`ToolText`]): content
/// passes through until a call starts; a call goes out as OpenAI's `tool_calls` deltas
/// while it is generated, the first with `index`, `id`, `type` and `function.name` (and
/// `arguments: ""`), then `function.arguments` fragments; a choice that stopped after
/// calling finishes with `finish_reason: "tool_calls"`. Text that does not parse as calls
/// goes out as content.
#[derive(Clone, Debug)]
pub struct ToolStream {
    text: ToolText,
}

impl ToolStream {
    pub fn new(tc: ToolCalling) -> ToolStream {
        ToolStream {
            text: ToolText::new(tc),
        }
    }

    /// The chunks to send for `chunk` (a chat chunk of one choice).
    pub fn filter(&mut self, chunk: Value) -> Vec<Value> {
        let c0 = &chunk["choices"][0];
        let text = c0["delta"]["content"].as_str().unwrap_or("").to_string();
        let finish = c0["finish_reason"].as_str().map(str::to_string);
        let mut logprobs = c0["logprobs"].clone();
        let mut pieces = self.text.push(&text);
        if let Some(r) = &finish {
            pieces.extend(self.text.finish(r == "stop"));
        }
        let piece = |delta: Value, logprobs: &mut Value| {
            let mut c = chunk.clone();
            c["choices"][0]["delta"] = delta;
            c["choices"][0]["finish_reason"] = Value::Null;
            c["choices"][0]["logprobs"] = std::mem::take(logprobs);
            c
        };
        let mut out: Vec<Value> = pieces
            .into_iter()
            .map(|p| piece(delta(p), &mut logprobs))
            .collect();
        // A token whose text is held back still has its logprobs sent.
        if out.is_empty() && finish.is_none() && !logprobs.is_null() {
            out.push(piece(json!({"content": ""}), &mut logprobs));
        }
        if let Some(r) = finish {
            let mut fin = piece(json!({}), &mut Value::Null);
            let reason = if r == "stop" && self.text.called() {
                "tool_calls".to_string()
            } else {
                r
            };
            fin["choices"][0]["finish_reason"] = json!(reason);
            out.push(fin);
        }
        out
    }
}

/// The chat delta of one piece.
fn delta(p: Piece) -> Value {
    match p {
        Piece::Content(s) => json!({"content": s}),
        Piece::Reasoning(s) => json!({"reasoning_content": s}),
        Piece::CallStart { index, id, name } => json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
        Piece::CallArgs { index, fragment } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;

    /// GPT-OSS's answer as the engine streams it, one token's text per chunk: the header
    /// markers are always-rendered tokens, and `<|return|>` / `<|call|>` end generation
    /// without text.
    const HARMONY_FINAL: &[&str] = &[
        "<|channel|>",
        "analysis",
        "<|message|>",
        "The",
        " user",
        " says",
        " hi",
        ".",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "final",
        "<|message|>",
        "Hello",
        "!",
        " How",
        " can",
        " I",
        " help",
        "?",
    ];
    const HARMONY_CALL: &[&str] = &[
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Need",
        " weather",
        ".",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "commentary",
        " to",
        "=functions",
        ".get",
        "_weather",
        " <|constrain|>",
        "json",
        "<|message|>",
        "{\"",
        "city",
        "\":",
        " \"",
        "Paris",
        "\"}",
    ];

    /// Every chunk a streamed harmony answer goes out as, call ids made fixed.
    fn harmony_stream(tokens: &[&str]) -> Vec<Value> {
        let tc = harmony_chat(crate::api::Api::Chat, Parser::Harmony).expect("harmony chat");
        let mut s = ToolStream::new(tc);
        let mut out = Vec::new();
        for t in tokens {
            out.extend(s.filter(chunk(t, None)));
        }
        out.extend(s.filter(chunk("", Some("stop"))));
        for c in &mut out {
            if let Some(id) = c.pointer_mut("/choices/0/delta/tool_calls/0/id") {
                *id = json!("call_X");
            }
        }
        out
    }

    fn harmony_response(tokens: &[&str]) -> Value {
        let tc = harmony_chat(crate::api::Api::Chat, Parser::Harmony).expect("harmony chat");
        let mut v = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": tokens.concat()}, "logprobs": null, "finish_reason": "stop"}]});
        rewrite_response(&mut v, tc);
        if let Some(id) = v.pointer_mut("/choices/0/message/tool_calls/0/id") {
            *id = json!("call_X");
        }
        v
    }

    #[test]
    fn harmony_chat_is_read_whatever_the_tools_in_chat_only() {
        use crate::api::Api;
        assert_eq!(
            harmony_chat(Api::Chat, Parser::Harmony),
            Some(ToolCalling {
                parser: Parser::Harmony,
                parallel: true
            })
        );
        assert_eq!(harmony_chat(Api::Completions, Parser::Harmony), None);
        assert_eq!(harmony_chat(Api::Chat, Parser::Hermes), None);
    }

    /// `analysis` → `reasoning_content`, `final` → `content`: the exact response and the
    /// exact chunks (each streamed delta as soon as its text can no longer be a marker).
    #[test]
    fn harmony_analysis_and_final_pinned() {
        assert_eq!(
            harmony_response(HARMONY_FINAL)["choices"][0],
            json!({"index": 0, "message": {"role": "assistant", "content": "Hello! How can I help?",
                "reasoning_content": "The user says hi."}, "logprobs": null, "finish_reason": "stop"})
        );
        let deltas: Vec<Value> = harmony_stream(HARMONY_FINAL)
            .iter()
            .map(|c| json!([c["choices"][0]["delta"], c["choices"][0]["finish_reason"]]))
            .collect();
        let r = |s: &str| json!([{"reasoning_content": s}, null]);
        let c = |s: &str| json!([{"content": s}, null]);
        assert_eq!(
            deltas,
            vec![
                r("The"),
                r(" user"),
                r(" says"),
                r(" hi"),
                r("."),
                c("Hello"),
                c("!"),
                c(" How"),
                c(" can"),
                c(" I"),
                c(" help"),
                c("?"),
                json!([{}, "stop"]),
            ]
        );
    }

    /// A `commentary` message to `functions.F` → `tool_calls` with `finish_reason:
    /// "tool_calls"`, the analysis still `reasoning_content`: exact response and chunks.
    #[test]
    fn harmony_commentary_call_pinned() {
        assert_eq!(
            harmony_response(HARMONY_CALL)["choices"][0],
            json!({"index": 0, "message": {"role": "assistant", "content": null,
                "reasoning_content": "Need weather.",
                "tool_calls": [{"id": "call_X", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                "logprobs": null, "finish_reason": "tool_calls"})
        );
        let deltas: Vec<Value> = harmony_stream(HARMONY_CALL)
            .iter()
            .map(|c| json!([c["choices"][0]["delta"], c["choices"][0]["finish_reason"]]))
            .collect();
        let r = |s: &str| json!([{"reasoning_content": s}, null]);
        let a =
            |s: &str| json!([{"tool_calls": [{"index": 0, "function": {"arguments": s}}]}, null]);
        // The arguments as generated, compacted (`": "` loses its space), then the finish.
        assert_eq!(
            deltas,
            vec![
                r("Need"),
                r(" weather"),
                r("."),
                json!([{"tool_calls": [{"index": 0, "id": "call_X", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}, null]),
                a("{\""),
                a("city"),
                a("\":"),
                a("\""),
                a("Paris"),
                a("\"}"),
                json!([{}, "tool_calls"]),
            ]
        );
    }

    fn chunk(text: &str, finish: Option<&str>) -> Value {
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": finish}]})
    }

    #[test]
    fn calls_stream_as_tool_call_deltas() {
        let tc = ToolCalling {
            parser: Parser::Hermes,
            parallel: true,
        };
        let mut s = ToolStream::new(tc);
        let mut out = Vec::new();
        for t in [
            "Sure.",
            " <tool",
            "_call>{\"name\": \"f\", ",
            "\"arguments\": {\"a\": 1}}</tool_call>",
        ] {
            out.extend(s.filter(chunk(t, None)));
        }
        out.extend(s.filter(chunk("", Some("stop"))));
        let content: String = out
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, "Sure. ");
        let calls: Vec<&Value> = out
            .iter()
            .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
            .collect();
        // OpenAI's shape: the call's id, type and name with empty arguments, then the
        // arguments as they were generated.
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0][0]["function"],
            json!({"name": "f", "arguments": ""})
        );
        assert_eq!(calls[0][0]["index"], 0);
        assert_eq!(calls[0][0]["type"], "function");
        assert!(calls[0][0]["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(
            calls[1][0],
            json!({"index": 0, "function": {"arguments": "{\"a\":1}"}})
        );
        assert_eq!(
            out.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );

        // A held-back "<" that turns out to be text goes out.
        let mut s = ToolStream::new(tc);
        let mut text = String::new();
        for c in [
            s.filter(chunk("a <", None)),
            s.filter(chunk("b", None)),
            s.filter(chunk("", Some("stop"))),
        ] {
            for x in c {
                text.push_str(x["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(text, "a <b");

        let mut v = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"}, "finish_reason": "stop"}]});
        rewrite_response(
            &mut v,
            ToolCalling {
                parallel: false,
                ..tc
            },
        );
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
