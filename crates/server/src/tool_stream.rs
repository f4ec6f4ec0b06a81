//! A choice's generated text turned into content and tool-call events as it arrives, for
//! any API's stream: OpenAI's `tool_calls` deltas (`tools::ToolStream`) and Anthropic's
//! `tool_use` blocks with `input_json_delta`s read the same [`Piece`]s.
//!
//! Content passes through until a call starts (text that may still become a call marker
//! is held back). From there the calls are read again from their start with each
//! increment ([`tool_parse::read`]): a call is announced once its name is complete (a bare
//! JSON answer only once it has arguments too), and its arguments go out as they grow,
//! each fragment the new tail of the call's arguments so far. At the end the finished
//! calls are read from the same text, so the fragments of a call concatenate to the
//! arguments a non-streamed answer carries. GPT-OSS's harmony completions are read whole
//! each time ([`tool_harmony::read`]) and also give reasoning.

use crate::tool_harmony;
use crate::tool_parse::{self, ParsedCall, Parser, PartialCall};

/// How a request's output is read for tool calls (set when tools are offered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolCalling {
    pub parser: Parser,
    /// `parallel_tool_calls`: false keeps the first call only.
    pub parallel: bool,
}

/// One thing to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    /// Harmony's `analysis` channel.
    Reasoning(String),
    /// A call begins: its index among the choice's calls, a fresh id, the function name.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s arguments.
    CallArgs {
        index: usize,
        fragment: String,
    },
}

/// A call announced so far.
#[derive(Clone, Debug)]
struct Sent {
    args: String,
}

/// One choice's text on its way to tool-call events.
#[derive(Clone, Debug)]
pub struct ToolText {
    tc: ToolCalling,
    /// Text not yet sent that may start a call.
    pending: String,
    /// Text from the start of a call on (harmony: the whole completion).
    call: Option<String>,
    /// Whether content went out (a bare JSON call starts only at the beginning).
    sent_content: bool,
    calls: Vec<Sent>,
    /// Harmony: how much reasoning and content went out.
    harmony_sent: (usize, usize),
}

impl ToolText {
    pub fn new(tc: ToolCalling) -> ToolText {
        ToolText {
            tc,
            pending: String::new(),
            call: (tc.parser == Parser::Harmony).then(String::new),
            sent_content: false,
            calls: Vec::new(),
            harmony_sent: (0, 0),
        }
    }

    /// Whether any call was announced.
    pub fn called(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The pieces for the next increment of text.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        if self.tc.parser == Parser::Harmony {
            let call = self.call.get_or_insert_with(String::new);
            call.push_str(text);
            let h = tool_harmony::read(call, false);
            return self.harmony(h);
        }
        let mut out = Vec::new();
        let content = self.take_content(text);
        if !content.is_empty() {
            self.sent_content = true;
            out.push(Piece::Content(content));
        }
        if let Some(call) = &self.call {
            let partial = tool_parse::read(self.tc.parser, call);
            self.announce(&partial, &mut out);
        }
        out
    }

    /// The last pieces once generation ended; `stopped` when it ended on its own (a call
    /// cut by a limit is not completed). Text that held no call goes out as content.
    pub fn finish(&mut self, stopped: bool) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.tc.parser == Parser::Harmony {
            let h = tool_harmony::read(self.call.as_deref().unwrap_or(""), true);
            return self.harmony(h);
        }
        let rest = std::mem::take(&mut self.pending);
        let Some(call) = self.call.take() else {
            if !rest.is_empty() {
                out.push(Piece::Content(rest));
            }
            return out;
        };
        let finished = tool_parse::finished(self.tc.parser, &call)
            .filter(|c| !c.is_empty() && stopped)
            .map(|c| self.keep(c));
        match finished {
            Some(calls) => {
                let partial: Vec<PartialCall> = calls
                    .into_iter()
                    .map(|ParsedCall { name, arguments }| PartialCall {
                        name: Some(name),
                        args: arguments,
                        args_started: true,
                        complete: true,
                    })
                    .collect();
                self.announce(&partial, &mut out);
            }
            // Nothing went out as a call: it was text after all.
            None if !self.called() => out.push(Piece::Content(call)),
            None => {}
        }
        out
    }

    fn keep(&self, mut calls: Vec<ParsedCall>) -> Vec<ParsedCall> {
        if !self.tc.parallel {
            calls.truncate(1);
        }
        calls
    }

    /// Announces new calls and sends the new tails of their arguments.
    fn announce(&mut self, partial: &[PartialCall], out: &mut Vec<Piece>) {
        for (index, p) in partial.iter().enumerate() {
            if index > 0 && !self.tc.parallel {
                break;
            }
            if index == self.calls.len() {
                match &p.name {
                    Some(name) if p.args_started || p.complete => {
                        out.push(Piece::CallStart {
                            index,
                            id: call_id(),
                            name: name.clone(),
                        });
                        self.calls.push(Sent {
                            args: String::new(),
                        });
                    }
                    _ => break,
                }
            }
            let sent = &mut self.calls[index];
            if p.args.len() > sent.args.len() && p.args.starts_with(&sent.args) {
                out.push(Piece::CallArgs {
                    index,
                    fragment: p.args[sent.args.len()..].to_string(),
                });
                sent.args = p.args.clone();
            } else if !p.args.starts_with(&sent.args) {
                tracing::warn!(
                    "tool call {index}: arguments {:?} do not continue the streamed {:?}",
                    p.args,
                    sent.args
                );
            }
        }
    }

    fn harmony(&mut self, h: tool_harmony::Harmony) -> Vec<Piece> {
        let mut out = Vec::new();
        let (r, c) = self.harmony_sent;
        if h.reasoning.len() > r {
            out.push(Piece::Reasoning(h.reasoning[r..].to_string()));
        }
        if h.content.len() > c {
            out.push(Piece::Content(h.content[c..].to_string()));
        }
        self.harmony_sent = (h.reasoning.len().max(r), h.content.len().max(c));
        self.announce(&h.calls, &mut out);
        out
    }

    /// Adds `text` and returns what can go out as content now.
    fn take_content(&mut self, text: &str) -> String {
        if let Some(call) = self.call.as_mut() {
            call.push_str(text);
            return String::new();
        }
        self.pending.push_str(text);
        let start = self.tc.parser.start(&self.pending, !self.sent_content);
        if let Some(i) = start {
            let before = self.pending[..i].to_string();
            self.call = Some(self.pending[i..].to_string());
            self.pending.clear();
            return before;
        }
        // Hold back what could still grow into a marker.
        let head = self.pending.trim_start();
        let hold = if !self.sent_content && (head.is_empty() || "```".starts_with(head)) {
            // The answer's start may still become bare JSON or a fence.
            self.pending.len()
        } else {
            self.tc
                .parser
                .markers()
                .iter()
                .flat_map(|m| {
                    (1..m.len())
                        .filter(|&k| m.is_char_boundary(k) && self.pending.ends_with(&m[..k]))
                        .max()
                })
                .max()
                .unwrap_or(0)
        };
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        out
    }
}

/// `call_…`: a fresh tool-call id.
pub fn call_id() -> String {
    let id = crate::api::new_id(crate::api::Api::Completions);
    format!("call_{}", id.trim_start_matches("cmpl-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` fed `step` characters at a time, then finished.
    fn stream(tc: ToolCalling, text: &str, step: usize) -> Vec<Piece> {
        let chars: Vec<char> = text.chars().collect();
        let mut t = ToolText::new(tc);
        let mut out = Vec::new();
        for part in chars.chunks(step) {
            out.extend(t.push(&part.iter().collect::<String>()));
        }
        out.extend(t.finish(true));
        out
    }

    /// Content, (name, argument fragments) per call.
    fn collect(pieces: &[Piece]) -> (String, String, Vec<(String, Vec<String>)>) {
        let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        for p in pieces {
            match p {
                Piece::Content(s) => content.push_str(s),
                Piece::Reasoning(s) => reasoning.push_str(s),
                Piece::CallStart { index, id, name } => {
                    assert_eq!(*index, calls.len());
                    assert!(id.starts_with("call_"));
                    calls.push((name.clone(), Vec::new()));
                }
                Piece::CallArgs { index, fragment } => calls[*index].1.push(fragment.clone()),
            }
        }
        (content, reasoning, calls)
    }

    fn tc(parser: Parser) -> ToolCalling {
        ToolCalling {
            parser,
            parallel: true,
        }
    }

    #[test]
    fn arguments_stream_in_fragments_that_add_up_to_the_parsed_call() {
        let mut cases = crate::tool_parse::tests::new_formats();
        cases.push((
            Parser::Hermes,
            "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
            Some("Sure."),
            vec![ParsedCall { name: "get_weather".into(), arguments: "{\"city\":\"Paris\",\"days\":3}".into() }],
        ));
        // A forced call: bare JSON.
        cases.push((
            Parser::Hermes,
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
            None,
            vec![ParsedCall {
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }],
        ));
        for (p, text, content, calls) in cases {
            for step in [1, 3, 7, 1000] {
                let (got_content, _, got) = collect(&stream(tc(p), text, step));
                assert_eq!(got_content.trim(), content.unwrap_or(""), "{p:?} {step}");
                assert_eq!(got.len(), calls.len(), "{p:?} {step}: {got:?}");
                for ((name, frags), want) in got.iter().zip(&calls) {
                    assert_eq!(name, &want.name);
                    assert_eq!(frags.concat(), want.arguments, "{p:?} {step}");
                    if step == 1 && want.arguments.len() > 2 {
                        assert!(frags.len() > 1, "{p:?}: {frags:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn harmony_streams_reasoning_content_and_calls() {
        let text = "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
        for step in [1, 4, 1000] {
            let (content, reasoning, calls) = collect(&stream(tc(Parser::Harmony), text, step));
            assert_eq!(
                (content.as_str(), reasoning.as_str()),
                ("", "User wants weather.")
            );
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].0, "get_weather");
            assert_eq!(calls[0].1.concat(), "{\"city\":\"Paris\"}");
        }
        let (content, reasoning, calls) = collect(&stream(
            tc(Parser::Harmony),
            "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hello <|there",
            2,
        ));
        assert_eq!(
            (content.as_str(), reasoning.as_str()),
            ("Hello <|there", "Hm.")
        );
        assert!(calls.is_empty());
    }

    #[test]
    fn text_that_is_no_call_is_content_and_one_call_is_kept_when_not_parallel() {
        let (content, _, calls) =
            collect(&stream(tc(Parser::Hermes), "{\"name\": \"just data\"}", 2));
        assert_eq!(content, "{\"name\": \"just data\"}");
        assert!(calls.is_empty());
        let one = ToolCalling {
            parser: Parser::KimiK2,
            parallel: false,
        };
        let text = crate::tool_parse::tests::new_formats()[4].1;
        let (_, _, calls) = collect(&stream(one, text, 5));
        assert_eq!(calls.len(), 1);
    }
}
