//! The model's tool calls read back out of its text, in the formats chat templates teach,
//! each selected from the template's text as llama.cpp's `common/chat.cpp` does:
//! - Hermes / Qwen 2.5: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`;
//! - Llama 3: bare JSON `{"name": …, "parameters": {…}}` (after an optional
//!   `<|python_tag|>`, several separated by `;`);
//! - Mistral: `[TOOL_CALLS] [{"name": …, "arguments": {…}}]`;
//! - Qwen3-Coder: `<tool_call><function=name><parameter=p>v</parameter></function></tool_call>`;
//! - GLM 4.5: `<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value></tool_call>`;
//! - DeepSeek V3: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{…}\n```<｜tool▁call▁end｜>…`
//!   (and V3.1's `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`);
//! - Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…`;
//! - GPT-OSS harmony (`<|channel|>commentary to=functions.name <|constrain|>json<|message|>{…}<|call|>`),
//!   whose channels also carry reasoning and content: see [`crate::tool_harmony`].
//!
//! Every format is read by one function ([`read`]) that also reads a call still being
//! generated, so a stream's argument fragments ([`crate::tool_stream`]) and a whole
//! answer's calls come from the same code. Arguments are the model's JSON with blanks
//! outside strings dropped ([`crate::tool_json`]); the XML formats' parameters become a
//! JSON object in their order, each value JSON when it parses as a non-string JSON value
//! and a string otherwise.

use crate::tool_json::{array_elements, scan_call, scan_value, CallScan};
use serde_json::Value;

/// A tool-call output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    Hermes,
    Llama3Json,
    Mistral,
    Qwen3Coder,
    Glm45,
    DeepSeekV3,
    KimiK2,
    Harmony,
}

/// The names `--tool-call-parser` accepts.
pub const NAMES: &str =
    "hermes, llama3_json, mistral, qwen3_coder, glm45, deepseek_v3, kimi_k2, openai";

const DS_CALLS: &str = "<｜tool▁calls▁begin｜>";
const DS_CALL: &str = "<｜tool▁call▁begin｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";
const DS_END: &str = "<｜tool▁call▁end｜>";
const KIMI_CALLS: &str = "<|tool_calls_section_begin|>";
const KIMI_CALL: &str = "<|tool_call_begin|>";
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";
const KIMI_END: &str = "<|tool_call_end|>";

impl Parser {
    /// `--tool-call-parser` names (vLLM's).
    pub fn from_name(name: &str) -> Option<Parser> {
        match name {
            "hermes" | "qwen" | "qwen2_5" => Some(Parser::Hermes),
            "llama3_json" | "llama3" | "llama4_json" => Some(Parser::Llama3Json),
            "mistral" => Some(Parser::Mistral),
            "qwen3_coder" | "qwen3_xml" => Some(Parser::Qwen3Coder),
            "glm45" | "glm4_moe" => Some(Parser::Glm45),
            "deepseek_v3" | "deepseek_v31" => Some(Parser::DeepSeekV3),
            "kimi_k2" => Some(Parser::KimiK2),
            "openai" | "harmony" | "gpt_oss" => Some(Parser::Harmony),
            _ => None,
        }
    }

    /// The format a chat template teaches, from its text (most specific marker first);
    /// Hermes when it shows none (folio then describes the tools itself in Hermes style,
    /// see `tools::render_into`).
    pub fn for_template(source: &str) -> Parser {
        let has = |m: &str| source.contains(m);
        if has("<|channel|>") && has("<|message|>") {
            Parser::Harmony
        } else if has(DS_CALLS) || has("tool▁calls▁begin") {
            Parser::DeepSeekV3
        } else if has(KIMI_CALLS) {
            Parser::KimiK2
        } else if has("<arg_key>") {
            Parser::Glm45
        } else if has("<function=") && has("<parameter=") {
            Parser::Qwen3Coder
        } else if has("[TOOL_CALLS]") {
            Parser::Mistral
        } else if has("<tool_call>") {
            Parser::Hermes
        } else if has("<|python_tag|>") || has("ipython") {
            Parser::Llama3Json
        } else {
            Parser::Hermes
        }
    }

    /// Where a tool call starts in `text`, if one does; `whole` when `text` is the answer
    /// from its beginning. A call may also be the whole answer as bare JSON (Llama 3's
    /// format, what a forced call is constrained to, and what models taught another format
    /// often write instead, fenced or not): that starts only at the answer's first
    /// non-blank character.
    pub fn start(self, text: &str, whole: bool) -> Option<usize> {
        let marked = self.markers().iter().filter_map(|m| text.find(m)).min();
        if marked.is_some() || !whole || self == Parser::Harmony {
            return marked;
        }
        let lead = text.len() - text.trim_start().len();
        let rest = &text[lead..];
        (rest.starts_with('{') || rest.starts_with("```") || rest.starts_with("<|python_tag|>"))
            .then_some(lead)
    }

    /// The tags a call is wrapped in when its body is one `{"name", "arguments"}` JSON
    /// object (what [`crate::tools::Tools::lazy_calls`] can constrain).
    pub fn call_tags(self) -> Option<(&'static str, &'static str)> {
        match self {
            Parser::Hermes => Some(("<tool_call>", "</tool_call>")),
            _ => None,
        }
    }

    /// Whether the format's markers may be special tokens, whose text the output then
    /// needs (GGUF files mark GPT-OSS's, Kimi K2's and DeepSeek's as control tokens).
    pub fn special_markers(self) -> bool {
        matches!(self, Parser::Harmony | Parser::KimiK2 | Parser::DeepSeekV3)
    }

    /// Markers whose prefix a stream must hold back until it is known not to start a call.
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            Parser::Hermes | Parser::Glm45 => &["<tool_call>"],
            Parser::Mistral => &["[TOOL_CALLS]"],
            Parser::Qwen3Coder => &["<tool_call>", "<function="],
            Parser::DeepSeekV3 => &[DS_CALLS, DS_CALL],
            Parser::KimiK2 => &[KIMI_CALLS, KIMI_CALL],
            Parser::Llama3Json | Parser::Harmony => &[],
        }
    }
}

/// One parsed call: the function's name and its arguments as a JSON string (OpenAI's form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// A call as far as it has been generated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialCall {
    /// The function name, once it is complete.
    pub name: Option<String>,
    /// The arguments so far: always a prefix of the finished call's arguments.
    pub args: String,
    /// Some of the arguments have been seen (a bare JSON answer is a call only then).
    pub args_started: bool,
    /// The call is complete.
    pub complete: bool,
}

impl PartialCall {
    fn from_scan(s: CallScan) -> PartialCall {
        let args_started = s.args_done || s.args_in_string || !s.args.is_empty();
        PartialCall {
            args: if s.args_in_string && !s.args_done {
                String::new()
            } else {
                s.args
            },
            args_started,
            complete: s.end.is_some(),
            name: s.name,
        }
    }

    /// The finished call, if this one is complete with valid JSON arguments.
    pub fn finished(self) -> Option<ParsedCall> {
        let name = self.name.filter(|_| self.complete)?;
        let arguments = if self.args.is_empty() {
            "{}".to_string()
        } else {
            self.args
        };
        serde_json::from_str::<Value>(&arguments).ok()?;
        Some(ParsedCall { name, arguments })
    }
}

/// Splits `text` into the content before the calls (None when blank) and the calls. Text
/// whose calls do not parse is all content, no calls.
pub fn parse(parser: Parser, text: &str) -> (Option<String>, Vec<ParsedCall>) {
    let none = || (Some(text.to_string()), Vec::new());
    let Some(start) = parser.start(text, true) else {
        return none();
    };
    match finished(parser, &text[start..]) {
        Some(c) if !c.is_empty() => {
            let before = text[..start].trim();
            ((!before.is_empty()).then(|| before.to_string()), c)
        }
        _ => none(),
    }
}

/// The calls of `call_text` (from a call's start on) if all of them are complete and valid.
pub fn finished(parser: Parser, call_text: &str) -> Option<Vec<ParsedCall>> {
    read(parser, call_text)
        .into_iter()
        .map(PartialCall::finished)
        .collect()
}

/// The calls in `text`, which starts where [`Parser::start`] found a call, as far as each
/// has been generated.
pub fn read(parser: Parser, text: &str) -> Vec<PartialCall> {
    let marked = |m: &str| text.starts_with(m);
    match parser {
        Parser::Hermes if marked("<tool_call>") => blocks(text, "<tool_call>", "</tool_call>")
            .map(|(b, _)| PartialCall::from_scan(scan_call(b)))
            .collect(),
        Parser::Mistral if marked("[TOOL_CALLS]") => json_calls(&text["[TOOL_CALLS]".len()..]),
        Parser::Qwen3Coder if marked("<tool_call>") || marked("<function=") => {
            blocks(text, "<function=", "</function>")
                .map(|(b, closed)| qwen3_coder(b, closed))
                .collect()
        }
        Parser::Glm45 if marked("<tool_call>") => blocks(text, "<tool_call>", "</tool_call>")
            .map(|(b, closed)| glm45(b, closed))
            .collect(),
        Parser::DeepSeekV3 if marked(DS_CALLS) || marked(DS_CALL) => blocks(text, DS_CALL, DS_END)
            .map(|(b, _)| deepseek(b))
            .collect(),
        Parser::KimiK2 if marked(KIMI_CALLS) || marked(KIMI_CALL) => {
            blocks(text, KIMI_CALL, KIMI_END)
                .map(|(b, _)| kimi(b))
                .collect()
        }
        _ => bare(text),
    }
}

/// The text of each `open … close` block of `text` (the last one maybe unclosed), and
/// whether it was closed.
fn blocks<'a>(
    text: &'a str,
    open: &'a str,
    close: &'a str,
) -> impl Iterator<Item = (&'a str, bool)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let i = rest.find(open)?;
        let body = &rest[i + open.len()..];
        Some(match body.find(close) {
            Some(j) => {
                rest = &body[j + close.len()..];
                (&body[..j], true)
            }
            None => {
                rest = "";
                (body, false)
            }
        })
    })
}

/// Call objects: one, or an array of them.
fn json_calls(text: &str) -> Vec<PartialCall> {
    match array_elements(text) {
        Some(items) => items
            .into_iter()
            .map(|t| PartialCall::from_scan(scan_call(t)))
            .collect(),
        None => vec![PartialCall::from_scan(scan_call(text))],
    }
}

/// A whole answer that is calls as JSON: one object, an array, or (Llama 3) objects
/// separated by ';', maybe after `<|python_tag|>` or in a ```json fence. A call needs
/// `arguments` or `parameters`, so that JSON answers are not taken for calls.
fn bare(text: &str) -> Vec<PartialCall> {
    let mut text = text.trim_start();
    text = text
        .strip_prefix("<|python_tag|>")
        .unwrap_or(text)
        .trim_start();
    if let Some(t) = text.strip_prefix("```") {
        if !t.contains('\n') && "json".starts_with(t.trim()) {
            return Vec::new();
        }
        text = t.trim_start_matches("json").trim_start();
    }
    let strict = |mut c: PartialCall| {
        if c.complete && !c.args_started {
            c.name = None;
        }
        c
    };
    if text.starts_with('[') {
        return json_calls(text).into_iter().map(strict).collect();
    }
    let mut out = Vec::new();
    loop {
        let s = scan_call(text);
        let end = s.end;
        out.push(strict(PartialCall::from_scan(s)));
        let Some(e) = end else { break };
        let after = text[e..].trim_start();
        let Some(next) = after.strip_prefix(';') else {
            // Only a closing fence may follow.
            let tail = after.trim();
            if !tail.is_empty() && !"```".starts_with(tail) {
                out.push(PartialCall::default());
            }
            break;
        };
        text = next.trim_start();
    }
    out
}

/// `name>` then `<parameter=k>v</parameter>`s (the text after `<function=`).
fn qwen3_coder(body: &str, closed: bool) -> PartialCall {
    let Some(gt) = body.find('>') else {
        return PartialCall::default();
    };
    let name = body[..gt].trim().to_string();
    let params = xml_pairs(&body[gt + 1..], "<parameter=", ">", "</parameter>", true);
    xml_call(name, params, closed)
}

/// `name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>…` (the text after `<tool_call>`).
fn glm45(body: &str, closed: bool) -> PartialCall {
    let end = [body.find('\n'), body.find("<arg_key>")]
        .into_iter()
        .flatten()
        .min();
    let Some(end) = end.or(closed.then_some(body.len())) else {
        return PartialCall::default();
    };
    let name = body[..end].trim().to_string();
    let mut pairs = Vec::new();
    let mut rest = &body[end..];
    while let Some(i) = rest.find("<arg_key>") {
        let after = &rest[i + "<arg_key>".len()..];
        let Some(k) = after.find("</arg_key>") else {
            break;
        };
        let key = after[..k].trim().to_string();
        let after = &after[k + "</arg_key>".len()..];
        let Some(v) = after.find("<arg_value>") else {
            break;
        };
        let after = &after[v + "<arg_value>".len()..];
        let Some(e) = after.find("</arg_value>") else {
            break;
        };
        pairs.push((key, after[..e].to_string()));
        rest = &after[e + "</arg_value>".len()..];
    }
    xml_call(name, pairs, closed)
}

/// The complete `open key sep value close` pairs of `text`; `trim_newline` drops one
/// newline on each side of a value (Qwen3-Coder writes values on lines of their own).
fn xml_pairs(
    text: &str,
    open: &str,
    sep: &str,
    close: &str,
    trim_newline: bool,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let Some(k) = after.find(sep) else { break };
        let key = after[..k].trim().to_string();
        let after = &after[k + sep.len()..];
        let Some(e) = after.find(close) else { break };
        let mut v = &after[..e];
        if trim_newline {
            v = v.strip_prefix('\n').unwrap_or(v);
            v = v.strip_suffix('\n').unwrap_or(v);
        }
        out.push((key, v.to_string()));
        rest = &after[e + close.len()..];
    }
    out
}

/// A call of the XML formats: `{"k":v,…` growing a pair at a time, `}` once closed.
fn xml_call(name: String, pairs: Vec<(String, String)>, closed: bool) -> PartialCall {
    let mut args = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            args.push(',');
        }
        args.push_str(&Value::String(k.clone()).to_string());
        args.push(':');
        args.push_str(&xml_value(v));
    }
    if closed {
        args.push('}');
    }
    PartialCall {
        name: (!name.is_empty()).then_some(name),
        args,
        args_started: true,
        complete: closed,
    }
}

/// A parameter's text as JSON: the value when it is a non-string JSON value (numbers,
/// booleans, null, objects, arrays), else the text as a string.
fn xml_value(v: &str) -> String {
    match serde_json::from_str::<Value>(v.trim()) {
        Ok(Value::String(_)) | Err(_) => Value::String(v.to_string()).to_string(),
        Ok(j) => j.to_string(),
    }
}

/// `function<｜tool▁sep｜>name\n```json\n{…}\n```` or V3.1's `name<｜tool▁sep｜>{…}`.
fn deepseek(body: &str) -> PartialCall {
    let (name, args) = if let Some(rest) = body
        .strip_prefix("function")
        .and_then(|r| r.strip_prefix(DS_SEP))
    {
        let Some(nl) = rest.find('\n') else {
            return PartialCall::default();
        };
        let args = rest[nl + 1..].trim_start();
        // The fence may still be arriving.
        if "```json".starts_with(args) {
            return PartialCall {
                name: Some(rest[..nl].trim().to_string()),
                ..PartialCall::default()
            };
        }
        let args = args
            .strip_prefix("```json")
            .or_else(|| args.strip_prefix("```"))
            .unwrap_or(args);
        (rest[..nl].trim(), args)
    } else {
        let Some(sep) = body.find(DS_SEP) else {
            return PartialCall::default();
        };
        (body[..sep].trim(), &body[sep + DS_SEP.len()..])
    };
    json_args(name, args)
}

/// `functions.name:0<|tool_call_argument_begin|>{…}`.
fn kimi(body: &str) -> PartialCall {
    let Some(a) = body.find(KIMI_ARGS) else {
        return PartialCall::default();
    };
    let id = body[..a].trim();
    let id = id.strip_prefix("functions.").unwrap_or(id);
    let name = match id.rsplit_once(':') {
        Some((n, i)) if i.chars().all(|c| c.is_ascii_digit()) => n,
        _ => id,
    };
    json_args(name, &body[a + KIMI_ARGS.len()..])
}

/// A call whose arguments are a JSON value written right after its name.
pub(crate) fn json_args(name: &str, args: &str) -> PartialCall {
    let s = scan_value(args);
    PartialCall {
        name: (!name.is_empty()).then(|| name.to_string()),
        args_started: !s.minified.is_empty(),
        complete: s.end.is_some(),
        args: s.minified,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn c(name: &str, arguments: &str) -> ParsedCall {
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

    /// Each new format's text, the content before its calls and the calls.
    pub(crate) fn new_formats() -> Vec<(Parser, &'static str, Option<&'static str>, Vec<ParsedCall>)>
    {
        let w = |a: &str| c("get_weather", a);
        vec![
            (
                Parser::Qwen3Coder,
                "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
                Some("I'll check."),
                vec![w("{\"city\":\"Paris\",\"days\":3}"), c("get_time", "{}")],
            ),
            (
                Parser::Glm45,
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York</arg_value>\n<arg_key>units</arg_key>\n<arg_value>[\"c\", \"f\"]</arg_value>\n</tool_call>",
                None,
                vec![w("{\"city\":\"New York\",\"units\":[\"c\",\"f\"]}")],
            ),
            (
                Parser::DeepSeekV3,
                "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                Some("Checking."),
                vec![w("{\"city\":\"Paris\"}"), c("get_time", "{}")],
            ),
            (
                Parser::DeepSeekV3,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                None,
                vec![w("{\"city\":\"Paris\",\"days\":2}")],
            ),
            (
                Parser::KimiK2,
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"CET\"}<|tool_call_end|><|tool_calls_section_end|>",
                None,
                vec![w("{\"city\":\"Paris\"}"), c("get_time", "{\"tz\":\"CET\"}")],
            ),
        ]
    }

    #[test]
    fn agent_formats_parse_to_exact_calls() {
        for (p, text, content, calls) in new_formats() {
            assert_eq!(
                parse(p, text),
                (content.map(str::to_string), calls),
                "{p:?} {text}"
            );
        }
        // An unfinished call is no call: the text stays content.
        let cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
        assert_eq!(
            parse(Parser::Qwen3Coder, cut),
            (Some(cut.to_string()), vec![])
        );
    }

    #[test]
    fn templates_select_their_format() {
        for (src, p) in [
            ("{{- '<|start|>assistant<|channel|>final<|message|>' }}", Parser::Harmony),
            ("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'}}", Parser::DeepSeekV3),
            ("<|tool_calls_section_begin|>", Parser::KimiK2),
            ("<tool_call>{{ tc.name }}\n<arg_key>{{ k }}</arg_key>", Parser::Glm45),
            ("<tool_call>\n<function={{ name }}>\n<parameter={{ p }}>", Parser::Qwen3Coder),
            ("<tool_call>\n{\"name\": ...}", Parser::Hermes),
            ("plain", Parser::Hermes),
        ] {
            assert_eq!(Parser::for_template(src), p, "{src}");
        }
        for n in NAMES.split(", ") {
            assert!(Parser::from_name(n).is_some(), "{n}");
        }
    }
}
