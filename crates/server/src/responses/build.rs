//! A Responses API answer built from the engine's text as it arrives: the stream events
//! (`response.created` … `response.completed`, each with its `sequence_number`) and the
//! final `response` object come from the same state, so a streamed and a non-streaming
//! answer are the same response.
//!
//! Output items follow the text: with a reasoning parser, `<think>` text is a `reasoning`
//! item (`reasoning_text` content, `response.reasoning_text.*` events) and the rest a
//! `message` item (`output_text`, `response.output_text.*`); an item closes when text of
//! the other kind starts. An answer without text still gets an empty message item.

use super::request::Asked;
use crate::api::random_id;
use crate::reasoning::{Parser, Split};
use serde_json::{json, Value};

/// One output item so far.
#[derive(Clone, Debug)]
struct Item {
    reasoning: bool,
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
    pub fn new(model: String, asked: Asked, parser: Option<Parser>) -> Build {
        Build {
            id: random_id("resp_"),
            created_at: crate::api::unix_now(),
            model,
            asked,
            split: parser.map(Split::new),
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
            self.append(reasoning, &t, &mut out);
        }
        out
    }

    fn append(&mut self, reasoning: bool, text: &str, out: &mut Vec<Ev>) {
        if !(self.open && self.items.last().is_some_and(|i| i.reasoning == reasoning)) {
            if self.open {
                out.extend(self.close("completed"));
            }
            out.extend(self.open_item(reasoning));
        }
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

    fn open_item(&mut self, reasoning: bool) -> Vec<Ev> {
        let id = random_id(if reasoning { "rs_" } else { "msg_" });
        self.items.push(Item {
            reasoning,
            id: id.clone(),
            text: String::new(),
        });
        self.open = true;
        let index = self.items.len() - 1;
        let mut item = item_json(&self.items[index], "in_progress");
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
        let text_done = match it.reasoning {
            true => "response.reasoning_text.done",
            false => "response.output_text.done",
        };
        let mut done =
            json!({"item_id": it.id, "output_index": index, "content_index": 0, "text": it.text});
        if !it.reasoning {
            done["logprobs"] = json!([]);
        }
        vec![
            self.event(text_done, done),
            self.event(
                "response.content_part.done",
                json!({"item_id": it.id, "output_index": index, "content_index": 0,
                       "part": part_json(it.reasoning, &it.text)}),
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
                self.append(reasoning, &t, &mut out);
            }
        }
        if self.items.is_empty() {
            out.extend(self.open_item(false));
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
            "parallel_tool_calls": false,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": or(&a.temperature, json!(1.0)),
            "text": {"format": a.format},
            "tool_choice": "none",
            "tools": [],
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
    let content = vec![part_json(it.reasoning, &it.text)];
    match it.reasoning {
        true => {
            json!({"id": it.id, "type": "reasoning", "summary": [], "content": content, "status": status})
        }
        false => {
            json!({"id": it.id, "type": "message", "status": status, "role": "assistant", "content": content})
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
        let mut b = Build::new("m".into(), Asked::default(), None);
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
        let mut b = Build::new("m".into(), Asked::default(), Some(Parser::DeepSeekR1));
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
    fn empty_answer_still_has_a_message() {
        let mut b = Build::new("m".into(), Asked::default(), None);
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
