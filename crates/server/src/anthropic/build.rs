//! An Anthropic message built from the chat stream's own chunks as they arrive: the
//! engine's text goes through the chat path's `ChunkFilter` (reasoning split, then tool
//! calls), and each filtered delta becomes a content block event (`thinking` /
//! `text` / `tool_use` blocks). The stream events and the final `message` object come
//! from the same state, so a streamed and a non-streamed answer are the same message, and
//! its text is the chat answer's text.
//!
//! Usage follows Anthropic's split: `input_tokens` are the prompt tokens not read from
//! the prefix cache, `cache_read_input_tokens` those that were (their sum is the chat
//! path's `prompt_tokens` and `count_tokens`' answer). `message_start` carries the whole
//! prompt as `input_tokens` (the cached part is known only at the end); `message_delta`
//! carries the final split, which the SDKs copy into the message.

use crate::api::random_id;
use crate::chunk_filter::ChunkFilter;
use crate::openai::{Job, UsageSum};
use folio_tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::Arc;

/// One stream event: its `type` (also the SSE event name) and payload.
pub type Ev = (&'static str, Value);

/// One content block so far.
#[derive(Clone, Debug, PartialEq)]
enum Block {
    Text(String),
    Thinking(String),
    /// `input`: the arguments' JSON text as streamed.
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

impl Block {
    fn json(&self) -> Value {
        match self {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::Thinking(t) => json!({"type": "thinking", "thinking": t, "signature": ""}),
            Block::ToolUse { id, name, input } => {
                let input = match input.trim() {
                    "" => json!({}),
                    s => serde_json::from_str(s).unwrap_or_else(|_| Value::String(input.clone())),
                };
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        }
    }

    /// The block as `content_block_start` shows it (empty).
    fn opening(&self) -> Value {
        match self {
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::Thinking(_) => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::ToolUse { id, name, .. } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        }
    }
}

/// Why the message ended: `stop_reason` and `stop_sequence`.
#[derive(Clone, Debug, PartialEq)]
pub struct Stop {
    pub reason: String,
    pub sequence: Option<String>,
}

/// One message in progress.
pub struct Build {
    id: String,
    model: String,
    filter: ChunkFilter,
    blocks: Vec<Block>,
    /// Whether the last block is still open.
    open: bool,
    pinged: bool,
    /// Set by the finish.
    stop: Option<Stop>,
    /// `message_stop` (or an `error` event) went out.
    ended: bool,
    /// The request's `stop_sequences`, and the generated token ids to find which one
    /// ended the answer (the engine reports only that a stop happened; the text it sends
    /// leaves the stop sequence out).
    stop_sequences: Vec<String>,
    ids: Vec<u32>,
    /// Decodes `ids` (`None` in unit tests: no stop sequence is told).
    tok: Option<Arc<Tokenizer>>,
}

impl Build {
    pub fn new(job: &Job, stop_sequences: Vec<String>, tok: Option<Arc<Tokenizer>>) -> Build {
        Build {
            id: random_id("msg_"),
            model: job.model.clone(),
            filter: ChunkFilter::new(1, job.reasoning, job.tools),
            blocks: Vec::new(),
            open: false,
            pinged: false,
            stop: None,
            ended: false,
            stop_sequences,
            ids: Vec::new(),
            tok,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// `message_start`, with the prompt's length.
    pub fn start(&self, prompt_tokens: usize) -> Vec<Ev> {
        let usage = json!({"input_tokens": prompt_tokens, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 0, "output_tokens": 0});
        let mut m = self.object(Vec::new(), usage);
        m["stop_reason"] = Value::Null;
        vec![(
            "message_start",
            json!({"type": "message_start", "message": m}),
        )]
    }

    /// Token ids generated (kept to tell the stop sequence).
    pub fn tokens(&mut self, ids: &[u32]) {
        if !self.stop_sequences.is_empty() {
            self.ids.extend_from_slice(ids);
        }
    }

    /// New text, and the chat finish reason when the answer ended.
    pub fn text(&mut self, job: &Job, text: &str, finish: Option<&str>) -> Vec<Ev> {
        if self.stop.is_some() || (text.is_empty() && finish.is_none()) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for c in self.filter.apply(0, job.chunk(0, text, None, finish)) {
            let choice = &c["choices"][0];
            let d = &choice["delta"];
            if let Some(t) = d["reasoning_content"].as_str().filter(|t| !t.is_empty()) {
                self.append(Block::Thinking(String::new()), t, &mut out);
            }
            if let Some(t) = d["content"].as_str().filter(|t| !t.is_empty()) {
                self.append(Block::Text(String::new()), t, &mut out);
            }
            for call in d["tool_calls"].as_array().into_iter().flatten() {
                if let Some(id) = call["id"].as_str() {
                    let block = Block::ToolUse {
                        id: format!("toolu_{}", id.trim_start_matches("call_")),
                        name: call["function"]["name"].as_str().unwrap_or("").into(),
                        input: String::new(),
                    };
                    self.open_block(block, &mut out);
                }
                if let Some(a) = call["function"]["arguments"]
                    .as_str()
                    .filter(|a| !a.is_empty())
                {
                    self.append_args(a, &mut out);
                }
            }
            if let Some(r) = choice["finish_reason"].as_str() {
                self.close(&mut out);
                self.stop = Some(self.stop_of(r));
            }
        }
        out
    }

    /// Adds text to the open block of `kind`, opening one if the last is another kind.
    fn append(&mut self, kind: Block, text: &str, out: &mut Vec<Ev>) {
        let same = self.open
            && std::mem::discriminant(self.blocks.last().unwrap()) == std::mem::discriminant(&kind);
        if !same {
            self.open_block(kind, out);
        }
        let index = self.blocks.len() - 1;
        let delta = match self.blocks.last_mut() {
            Some(Block::Text(t)) => {
                t.push_str(text);
                json!({"type": "text_delta", "text": text})
            }
            Some(Block::Thinking(t)) => {
                t.push_str(text);
                json!({"type": "thinking_delta", "thinking": text})
            }
            _ => return,
        };
        out.push(delta_event(index, delta));
    }

    fn append_args(&mut self, args: &str, out: &mut Vec<Ev>) {
        let index = self.blocks.len().saturating_sub(1);
        if let (true, Some(Block::ToolUse { input, .. })) = (self.open, self.blocks.last_mut()) {
            input.push_str(args);
            out.push(delta_event(
                index,
                json!({"type": "input_json_delta", "partial_json": args}),
            ));
        }
    }

    fn open_block(&mut self, b: Block, out: &mut Vec<Ev>) {
        self.close(out);
        let index = self.blocks.len();
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": b.opening()}),
        ));
        self.blocks.push(b);
        self.open = true;
        self.ping(out);
    }

    /// Anthropic's `ping` follows the first block's start (or, without blocks, precedes
    /// `message_delta`).
    fn ping(&mut self, out: &mut Vec<Ev>) {
        if !std::mem::replace(&mut self.pinged, true) {
            out.push(("ping", json!({"type": "ping"})));
        }
    }

    fn close(&mut self, out: &mut Vec<Ev>) {
        if !std::mem::replace(&mut self.open, false) {
            return;
        }
        let index = self.blocks.len() - 1;
        if let Some(Block::Thinking(_)) = self.blocks.last() {
            // The SDKs expect a signature on a thought; folio signs nothing.
            out.push(delta_event(
                index,
                json!({"type": "signature_delta", "signature": ""}),
            ));
        }
        out.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }

    /// Anthropic's `stop_reason` of a chat finish reason; folio's own endings (`timeout`,
    /// `deadline`, `slow_reader`, `abort`) keep their names.
    fn stop_of(&self, finish: &str) -> Stop {
        let reason = match finish {
            "stop" => match self.stop_sequence() {
                Some(s) => {
                    return Stop {
                        reason: "stop_sequence".into(),
                        sequence: Some(s),
                    }
                }
                None => "end_turn",
            },
            "length" => "max_tokens",
            "tool_calls" => "tool_use",
            other => other,
        };
        Stop {
            reason: reason.into(),
            sequence: None,
        }
    }

    /// The stop sequence the generated tokens hold (the earliest, should two), if any:
    /// the text sent never holds one, so one in the tokens' text is where they stopped.
    fn stop_sequence(&self) -> Option<String> {
        let tok = self
            .tok
            .as_ref()
            .filter(|_| !self.stop_sequences.is_empty())?;
        let text = tok.decode(&self.ids, true);
        self.stop_sequences
            .iter()
            .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
            .map(|(_, s)| s.clone())
    }

    /// The last events: `message_delta` with the stop reason and usage, `message_stop`
    /// (none after an `error` event or when already sent).
    pub fn end(&mut self, job: &Job, usage: UsageSum) -> Vec<Ev> {
        if std::mem::replace(&mut self.ended, true) {
            return Vec::new();
        }
        let mut out = self.text(job, "", Some("abort"));
        self.ping(&mut out);
        let stop = self.stop.clone().unwrap_or(Stop {
            reason: "abort".into(),
            sequence: None,
        });
        out.push((
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop.reason, "stop_sequence": stop.sequence},
                   "usage": usage_json(usage)}),
        ));
        out.push(("message_stop", json!({"type": "message_stop"})));
        out
    }

    /// An `error` event (a refusal or a failure after the headers went out): the stream's
    /// last.
    pub fn fail(&mut self, e: &crate::error::ApiError) -> Vec<Ev> {
        if std::mem::replace(&mut self.ended, true) {
            return Vec::new();
        }
        vec![("error", super::error::body(e))]
    }

    /// The whole message (after the finish).
    pub fn message(&mut self, job: &Job, usage: UsageSum) -> Value {
        let _ = self.text(job, "", Some("abort"));
        let content = self.blocks.iter().map(Block::json).collect();
        self.object(content, usage_json(usage))
    }

    fn object(&self, content: Vec<Value>, usage: Value) -> Value {
        let stop = self.stop.as_ref();
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop.map(|s| s.reason.clone()),
            "stop_sequence": stop.and_then(|s| s.sequence.clone()),
            "usage": usage,
        })
    }
}

fn delta_event(index: usize, delta: Value) -> Ev {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

/// Anthropic's usage (see the module note).
pub fn usage_json(u: UsageSum) -> Value {
    json!({
        "input_tokens": u.prompt_tokens - u.cached_tokens.min(u.prompt_tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens,
        "output_tokens": u.completion_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;

    fn job(reasoning: Option<crate::reasoning::Parser>, tools: bool) -> Job {
        Job {
            api: Api::Chat,
            id: "x".into(),
            created: 0,
            model: "m".into(),
            n: 1,
            prompt_lens: vec![7],
            logprobs: None,
            stream: true,
            include_usage: false,
            continuous_usage: false,
            arrival: std::time::Instant::now(),
            echo: Vec::new(),
            tools: tools.then_some(crate::tools::ToolCalling {
                parser: crate::tool_parse::Parser::Hermes,
                parallel: true,
            }),
            reasoning,
        }
    }

    fn names(evs: &[Ev]) -> Vec<&'static str> {
        evs.iter().map(|(n, _)| *n).collect()
    }

    const USAGE: UsageSum = UsageSum {
        prompt_tokens: 7,
        completion_tokens: 3,
        cached_tokens: 2,
    };

    #[test]
    fn text_stream_and_message() {
        let j = job(None, false);
        let mut b = Build::new(&j, Vec::new(), None);
        let mut evs = b.start(7);
        evs.extend(b.text(&j, "Hel", None));
        evs.extend(b.text(&j, "", None));
        evs.extend(b.text(&j, "lo", None));
        evs.extend(b.text(&j, "", Some("length")));
        evs.extend(b.end(&j, USAGE));
        assert_eq!(
            names(&evs),
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (n, v) in &evs {
            assert_eq!(v["type"], *n);
        }
        assert_eq!(evs[0].1["message"]["usage"]["input_tokens"], 7);
        assert_eq!(
            evs[4].1["delta"],
            json!({"type": "text_delta", "text": "lo"})
        );
        assert_eq!(
            evs[6].1,
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                   "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2, "output_tokens": 3}})
        );
        let m = b.message(&j, USAGE);
        assert!(m["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(m["content"], json!([{"type": "text", "text": "Hello"}]));
        assert_eq!(
            (m["type"].as_str(), m["role"].as_str()),
            (Some("message"), Some("assistant"))
        );
        assert_eq!(m["stop_reason"], "max_tokens");
    }

    #[test]
    fn thinking_then_text() {
        let j = job(Some(crate::reasoning::Parser::Qwen3), false);
        let mut b = Build::new(&j, Vec::new(), None);
        let mut evs = Vec::new();
        for t in ["<think>Hm", "m</thi", "nk>Yes"] {
            evs.extend(b.text(&j, t, None));
        }
        evs.extend(b.text(&j, "", Some("stop")));
        evs.extend(b.end(&j, USAGE));
        assert_eq!(
            names(&evs),
            [
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            evs[0].1["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            evs[4].1["delta"],
            json!({"type": "signature_delta", "signature": ""})
        );
        assert_eq!(evs[6].1["index"], 1);
        assert_eq!(evs[9].1["delta"]["stop_reason"], "end_turn");
        assert_eq!(
            b.message(&j, USAGE)["content"],
            json!([{"type": "thinking", "thinking": "Hmm", "signature": ""}, {"type": "text", "text": "Yes"}])
        );
    }

    #[test]
    fn tool_call_is_a_tool_use_block() {
        let j = job(None, true);
        let mut b = Build::new(&j, Vec::new(), None);
        let mut evs = b.text(
            &j,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
            None,
        );
        evs.extend(b.text(&j, "\n</tool_call>", Some("stop")));
        assert_eq!(
            names(&evs),
            [
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop"
            ]
        );
        let start = &evs[0].1["content_block"];
        assert_eq!(
            (start["type"].as_str(), start["name"].as_str()),
            (Some("tool_use"), Some("f"))
        );
        assert!(start["id"].as_str().unwrap().starts_with("toolu_"));
        assert_eq!(
            evs[2].1["delta"],
            json!({"type": "input_json_delta", "partial_json": "{\"a\":1}"})
        );
        let m = b.message(&j, USAGE);
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["content"][0]["input"], json!({"a": 1}));
        assert_eq!(m["content"][0]["id"], start["id"]);
    }

    #[test]
    fn unfinished_ends_as_abort_and_error_ends_the_stream() {
        let j = job(None, false);
        let mut b = Build::new(&j, Vec::new(), None);
        let _ = b.text(&j, "x", None);
        let evs = b.end(&j, USAGE);
        assert_eq!(
            names(&evs),
            ["content_block_stop", "message_delta", "message_stop"]
        );
        assert_eq!(evs[1].1["delta"]["stop_reason"], "abort");
        let mut b = Build::new(&j, Vec::new(), None);
        let e = crate::error::ApiError::generation_failed("boom");
        assert_eq!(
            b.fail(&e),
            vec![(
                "error",
                json!({"type": "error", "error": {"type": "api_error", "message": "generation failed: boom"}})
            )]
        );
        assert!(b.end(&j, USAGE).is_empty());
    }
}
