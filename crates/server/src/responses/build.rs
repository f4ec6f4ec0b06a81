//! A Responses API answer built from the engine's text as it arrives: the stream events
//! (`response.created` … `response.completed`, each with its `sequence_number`) and the
//! final `response` object come from the same state, so a streamed and a non-streaming
//! answer are the same response.
//!
//! Output items follow the text: with a reasoning parser, `<think>` text is a `reasoning`
//! item (`reasoning_text` content, `response.reasoning_text.*` events) and the rest a
//! `message` item (`output_text`, `response.output_text.*`); an item closes when text of
//! the other kind starts. With tools offered, the content goes through the chat path's
//! tool filter (`chunk_filter`), and each tool call it reports becomes a `function_call`
//! item (`response.function_call_arguments.*` events, one delta per argument fragment
//! the filter sends). An answer without text or calls still gets an empty message item.

use super::request::Asked;
use crate::api::random_id;
use crate::chunk_filter::ChunkFilter;
use crate::reasoning::{Parser, Split};
use crate::tools::ToolCalling;
use serde_json::{json, Value};

/// What an output item is.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Reasoning,
    Message,
    /// A function call: `text` holds its arguments.
    Call {
        call_id: String,
        name: String,
    },
}

/// One output item so far.
#[derive(Clone, Debug)]
struct Item {
    kind: Kind,
    id: String,
    text: String,
}

/// How a response ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    Completed,
    /// `incomplete_details.reason`: `max_output_tokens`, `timeout` (`--request-timeout-s`),
    /// `deadline` (`deadline_ms`), `abort`.
    Incomplete(&'static str),
    /// The engine failed: the message.
    Failed(String),
}

impl End {
    /// From a chat finish reason.
    pub fn of(finish_reason: &str, error: Option<String>) -> End {
        match finish_reason {
            "stop" => End::Completed,
            "length" => End::Incomplete("max_output_tokens"),
            crate::choice_state::TIMEOUT => End::Incomplete("timeout"),
            crate::choice_state::DEADLINE => End::Incomplete("deadline"),
            crate::choice_state::SLOW_READER => End::Incomplete("slow_reader"),
            "error" => End::Failed(error.unwrap_or_else(|| "generation failed".into())),
            _ => End::Incomplete("abort"),
        }
    }

    fn status(&self) -> &'static str {
        match self {
            End::Completed => "completed",
            End::Incomplete(_) => "incomplete",
            End::Failed(_) => "failed",
        }
    }
}

/// Token counts of the answer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tokens {
    pub input: usize,
    pub cached: usize,
    pub output: usize,
}

/// One response in progress.
pub struct Build {
    id: String,
    created_at: u64,
    model: String,
    asked: Asked,
    split: Option<Split>,
    /// The chat path's tool-call filter over the content (when tools are offered).
    tools: Option<ChunkFilter>,
    items: Vec<Item>,
    /// Whether the last item is still open (receiving text).
    open: bool,
    /// Tokens generated while the text was inside the thought.
    reasoning_tokens: usize,
    seq: u64,
    /// The last event went out.
    done: bool,
}

/// One stream event: its `type` (also the SSE event name) and payload.
pub type Ev = (&'static str, Value);

impl Build {
    pub fn new(
        model: String,
        asked: Asked,
        parser: Option<Parser>,
        tools: Option<ToolCalling>,
    ) -> Build {
        Build {
            id: random_id("resp_"),
            created_at: crate::api::unix_now(),
            model,
            asked,
            split: parser.map(Split::new),
            tools: tools.map(|tc| ChunkFilter::new(1, None, Some(tc))),
            items: Vec::new(),
            open: false,
            reasoning_tokens: 0,
            seq: 0,
            done: false,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn event(&mut self, kind: &'static str, mut body: Value) -> Ev {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        self.seq += 1;
        (kind, body)
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Ev> {
        let r = self.object("in_progress", None, None);
        vec![
            self.event("response.created", json!({"response": r})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    /// New text of `tokens` generated tokens.
    pub fn text(&mut self, text: &str, tokens: usize) -> Vec<Ev> {
        let pieces = match self.split.as_mut() {
            Some(s) => {
                if s.in_reasoning() {
                    self.reasoning_tokens += tokens;
                }
                s.pieces(text)
            }
            None if text.is_empty() => Vec::new(),
            None => vec![(false, text.to_string())],
        };
        let mut out = Vec::new();
        for (reasoning, t) in pieces {
            match reasoning {
                true => self.append(Kind::Reasoning, &t, &mut out),
                false => self.content(&t, None, &mut out),
            }
        }
        out
    }

    /// Content text (not reasoning): a message's text, or through the tool filter when
    /// tools are offered; `finish` (a chat finish reason) flushes what the filter held.
    fn content(&mut self, text: &str, finish: Option<&str>, out: &mut Vec<Ev>) {
        let Some(filter) = self.tools.as_mut() else {
            if !text.is_empty() {
                self.append(Kind::Message, text, out);
            }
            return;
        };
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": text},
                                        "logprobs": null, "finish_reason": finish}]});
        for c in filter.apply(0, chunk) {
            let delta = &c["choices"][0]["delta"];
            if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.append(Kind::Message, t, out);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                self.call_delta(call, out);
            }
        }
    }

    /// One chat `tool_calls` delta entry: a call's start (it carries the call's `id`) and
    /// its arguments, or more arguments of the open call.
    fn call_delta(&mut self, call: &Value, out: &mut Vec<Ev>) {
        let open_call = self.open
            && matches!(self.items.last(), Some(i) if matches!(i.kind, Kind::Call { .. }));
        if call.get("id").is_some() || !open_call {
            if self.open {
                out.extend(self.close("completed"));
            }
            let kind = Kind::Call {
                call_id: call["id"]
                    .as_str()
                    .map_or_else(|| random_id("call_"), str::to_string),
                name: call["function"]["name"].as_str().unwrap_or("").to_string(),
            };
            out.extend(self.open_item(kind));
        }
        let args = call["function"]["arguments"].as_str().unwrap_or("");
        if args.is_empty() {
            return;
        }
        let index = self.items.len() - 1;
        let item = &mut self.items[index];
        item.text.push_str(args);
        let id = item.id.clone();
        out.push(self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": args}),
        ));
    }

    fn append(&mut self, kind: Kind, text: &str, out: &mut Vec<Ev>) {
        if !(self.open && self.items.last().is_some_and(|i| i.kind == kind)) {
            if self.open {
                out.extend(self.close("completed"));
            }
            out.extend(self.open_item(kind.clone()));
        }
        let reasoning = kind == Kind::Reasoning;
        let index = self.items.len() - 1;
        let item = &mut self.items[index];
        item.text.push_str(text);
        let id = item.id.clone();
        let kind = match reasoning {
            true => "response.reasoning_text.delta",
            false => "response.output_text.delta",
        };
        let mut body =
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text});
        if !reasoning {
            body["logprobs"] = json!([]);
        }
        out.push(self.event(kind, body));
    }

    fn open_item(&mut self, kind: Kind) -> Vec<Ev> {
        let id = random_id(match kind {
            Kind::Reasoning => "rs_",
            Kind::Message => "msg_",
            Kind::Call { .. } => "fc_",
        });
        let reasoning = kind == Kind::Reasoning;
        let call = matches!(kind, Kind::Call { .. });
        self.items.push(Item {
            kind,
            id: id.clone(),
            text: String::new(),
        });
        self.open = true;
        let index = self.items.len() - 1;
        let mut item = item_json(&self.items[index], "in_progress");
        if call {
            return vec![self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            )];
        }
        item["content"] = json!([]);
        let part = part_json(reasoning, "");
        vec![
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ),
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            ),
        ]
    }

    /// The done events of the open item.
    fn close(&mut self, status: &str) -> Vec<Ev> {
        self.open = false;
        let index = self.items.len() - 1;
        let it = self.items[index].clone();
        if let Kind::Call { name, .. } = &it.kind {
            return vec![
                self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": it.id, "output_index": index, "name": name, "arguments": it.text}),
                ),
                self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item_json(&it, status)}),
                ),
            ];
        }
        let reasoning = it.kind == Kind::Reasoning;
        let text_done = match reasoning {
            true => "response.reasoning_text.done",
            false => "response.output_text.done",
        };
        let mut done =
            json!({"item_id": it.id, "output_index": index, "content_index": 0, "text": it.text});
        if !reasoning {
            done["logprobs"] = json!([]);
        }
        vec![
            self.event(text_done, done),
            self.event(
                "response.content_part.done",
                json!({"item_id": it.id, "output_index": index, "content_index": 0,
                       "part": part_json(reasoning, &it.text)}),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": item_json(&it, status)}),
            ),
        ]
    }

    /// The last events: held-back text, the open item closed, then `response.completed`,
    /// `response.incomplete` or `response.failed` with the whole response.
    pub fn finish(&mut self, end: &End, tokens: Tokens) -> Vec<Ev> {
        if std::mem::replace(&mut self.done, true) {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(s) = self.split.as_mut() {
            for (reasoning, t) in s.finish_pieces() {
                match reasoning {
                    true => self.append(Kind::Reasoning, &t, &mut out),
                    false => self.content(&t, None, &mut out),
                }
            }
        }
        if self.tools.is_some() {
            // Calls are read only from an answer that ended on its own (as on chat).
            let reason = match end {
                End::Completed => "stop",
                _ => "length",
            };
            self.content("", Some(reason), &mut out);
        }
        if self.items.is_empty() {
            out.extend(self.open_item(Kind::Message));
        }
        if self.open {
            let status = match end {
                End::Completed => "completed",
                _ => "incomplete",
            };
            out.extend(self.close(status));
        }
        let r = self.response(end, tokens);
        let kind = match end {
            End::Completed => "response.completed",
            End::Incomplete(_) => "response.incomplete",
            End::Failed(_) => "response.failed",
        };
        out.push(self.event(kind, json!({"response": r})));
        out
    }

    /// `response.failed` for a request the engine refused before its first token (a
    /// stream whose headers were already out).
    pub fn refuse(&mut self, code: &str, message: &str) -> Vec<Ev> {
        self.done = true;
        let mut r = self.object("failed", None, None);
        r["error"] = json!({"code": code, "message": message});
        vec![self.event("response.failed", json!({"response": r}))]
    }

    /// The final response object (after [`Build::finish`]).
    pub fn response(&self, end: &End, tokens: Tokens) -> Value {
        let last = self.items.len().saturating_sub(1);
        let output: Vec<Value> = self
            .items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let status = match (i == last, end) {
                    (false, _) | (true, End::Completed) => "completed",
                    _ => "incomplete",
                };
                item_json(it, status)
            })
            .collect();
        let usage = json!({
            "input_tokens": tokens.input,
            "input_tokens_details": {"cached_tokens": tokens.cached},
            "output_tokens": tokens.output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": tokens.input + tokens.output,
        });
        let mut r = self.object(end.status(), Some(output), Some(usage));
        match end {
            End::Incomplete(reason) => r["incomplete_details"] = json!({"reason": reason}),
            End::Failed(m) => r["error"] = json!({"code": "server_error", "message": m}),
            End::Completed => {}
        }
        r
    }

    fn object(&self, status: &str, output: Option<Vec<Value>>, usage: Option<Value>) -> Value {
        let a = &self.asked;
        let or = |v: &Value, d: Value| if v.is_null() { d } else { v.clone() };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": a.instructions,
            "max_output_tokens": a.max_output_tokens,
            "model": self.model,
            "output": output.unwrap_or_default(),
            "parallel_tool_calls": a.parallel_tool_calls,
            "previous_response_id": a.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": a.store,
            "temperature": or(&a.temperature, json!(1.0)),
            "text": {"format": a.format},
            "tool_choice": a.tool_choice,
            "tools": a.tools,
            "top_p": or(&a.top_p, json!(1.0)),
            "truncation": "disabled",
            "usage": usage,
            "user": a.user,
            "metadata": a.metadata,
        })
    }
}

fn part_json(reasoning: bool, text: &str) -> Value {
    match reasoning {
        true => json!({"type": "reasoning_text", "text": text}),
        false => json!({"type": "output_text", "text": text, "annotations": []}),
    }
}

fn item_json(it: &Item, status: &str) -> Value {
    match &it.kind {
        Kind::Reasoning => {
            let content = vec![part_json(true, &it.text)];
            json!({"id": it.id, "type": "reasoning", "summary": [], "content": content, "status": status})
        }
        Kind::Message => {
            let content = vec![part_json(false, &it.text)];
            json!({"id": it.id, "type": "message", "status": status, "role": "assistant", "content": content})
        }
        Kind::Call { call_id, name } => {
            json!({"id": it.id, "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": it.text})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of a message item that got two pieces of text.
    const MESSAGE_OF_TWO_DELTAS: [&str; 7] = [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ];

    fn types(evs: &[Ev]) -> Vec<&'static str> {
        evs.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn plain_text_stream_and_object() {
        let mut b = Build::new("m".into(), Asked::default(), None, None);
        let mut evs = b.start();
        evs.extend(b.text("Hel", 1));
        evs.extend(b.text("", 1));
        evs.extend(b.text("lo", 1));
        let t = Tokens {
            input: 5,
            cached: 0,
            output: 3,
        };
        evs.extend(b.finish(&End::Completed, t));
        let want = [
            &["response.created", "response.in_progress"][..],
            &MESSAGE_OF_TWO_DELTAS,
            &["response.completed"],
        ];
        assert_eq!(types(&evs), want.concat());
        for (i, (t, e)) in evs.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
            assert_eq!(e["type"], *t);
        }
        let r = b.response(&End::Completed, t);
        assert_eq!(evs.last().unwrap().1["response"], r);
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(r["output"][0]["role"], "assistant");
        assert_eq!(
            r["usage"],
            json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8})
        );
        assert_eq!(evs[6].1["text"], "Hello");
        assert_eq!(evs[2].1["item"]["id"], r["output"][0]["id"]);
    }

    #[test]
    fn reasoning_is_its_own_item_and_length_is_incomplete() {
        let mut b = Build::new("m".into(), Asked::default(), Some(Parser::DeepSeekR1), None);
        let mut evs = b.start();
        for (t, n) in [("why", 1), ("</thi", 1), ("nk>Be", 1), ("cause", 1)] {
            evs.extend(b.text(t, n));
        }
        let t = Tokens {
            input: 1,
            cached: 0,
            output: 4,
        };
        evs.extend(b.finish(&End::Incomplete("max_output_tokens"), t));
        let reasoning = [
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ];
        let want = [
            &reasoning[..],
            &MESSAGE_OF_TWO_DELTAS,
            &["response.incomplete"],
        ];
        assert_eq!(types(&evs)[2..], want.concat());
        let r = b.response(&End::Incomplete("max_output_tokens"), t);
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(r["output"][0]["type"], "reasoning");
        assert_eq!(r["output"][0]["content"][0]["text"], "why");
        assert_eq!(r["output"][0]["status"], "completed");
        assert_eq!(r["output"][1]["content"][0]["text"], "Because");
        assert_eq!(r["output"][1]["status"], "incomplete");
        // Tokens that arrive before the thought has closed, the tag's included.
        assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
    }

    #[test]
    fn a_tool_call_is_a_function_call_item() {
        let tc = ToolCalling {
            parser: crate::tool_parse::Parser::Hermes,
            parallel: true,
        };
        let mut b = Build::new("m".into(), Asked::default(), None, Some(tc));
        let mut evs = b.start();
        for t in [
            "{\"name\": \"get_",
            "weather\", \"arguments\": {\"city\"",
            ": \"Paris\"}}",
        ] {
            evs.extend(b.text(t, 1));
        }
        let t = Tokens {
            input: 1,
            cached: 0,
            output: 3,
        };
        evs.extend(b.finish(&End::Completed, t));
        let names = types(&evs);
        let deltas = names
            .iter()
            .filter(|n| **n == "response.function_call_arguments.delta")
            .count();
        assert!(deltas >= 1);
        let mut want = vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
        ];
        want.extend(std::iter::repeat_n(
            "response.function_call_arguments.delta",
            deltas,
        ));
        want.extend([
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]);
        assert_eq!(names, want);
        let r = b.response(&End::Completed, t);
        let call = &r["output"][0];
        assert_eq!(r["output"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(
            (
                call["type"].as_str(),
                call["name"].as_str(),
                call["status"].as_str()
            ),
            (
                Some("function_call"),
                Some("get_weather"),
                Some("completed")
            )
        );
        assert!(call["id"].as_str().unwrap().starts_with("fc_"));
        assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
        let args: String = evs
            .iter()
            .filter(|(n, _)| *n == "response.function_call_arguments.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap())
            .collect();
        assert_eq!(call["arguments"], args.as_str());
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(parsed, json!({"city": "Paris"}));
        assert_eq!(evs[2].1["item"]["arguments"], "");
        assert_eq!(evs[2].1["item"]["status"], "in_progress");
        assert_eq!(evs[evs.len() - 3].1["arguments"], args.as_str());
        assert_eq!(evs[evs.len() - 2].1["item"], *call);

        // Text that is not a call stays a message.
        let mut b = Build::new("m".into(), Asked::default(), None, Some(tc));
        b.start();
        b.text("Hello", 1);
        b.finish(&End::Completed, t);
        let r = b.response(&End::Completed, t);
        assert_eq!(r["output"][0]["type"], "message");
        assert_eq!(r["output"][0]["content"][0]["text"], "Hello");
    }

    #[test]
    fn empty_answer_still_has_a_message() {
        let mut b = Build::new("m".into(), Asked::default(), None, None);
        b.start();
        let evs = b.finish(&End::Failed("boom".into()), Tokens::default());
        assert_eq!(evs.last().unwrap().0, "response.failed");
        let r = b.response(&End::Failed("boom".into()), Tokens::default());
        assert_eq!(r["output"][0]["content"][0]["text"], "");
        assert_eq!(r["error"]["message"], "boom");
        assert_eq!(
            End::of("length", None),
            End::Incomplete("max_output_tokens")
        );
        assert_eq!(End::of("timeout", None), End::Incomplete("timeout"));
    }
}
