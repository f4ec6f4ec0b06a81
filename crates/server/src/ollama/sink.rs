//! Ollama's output: newline-delimited JSON, one object per line (`{"model", "created_at",
//! "message": {…}, "done": false}` per piece of text, then one `"done": true` line with
//! `done_reason`, the token counts and the durations in nanoseconds), or that last object
//! alone with the whole text when `"stream": false`.
//!
//! The text arrives as the chat path's chunks, so the reasoning split (`thinking`) and the
//! tool-call filter (`tool_calls`, arguments as an object) are the chat path's
//! (`chunk_filter`; `reasoning::split_response` and `tools::rewrite_response` when not
//! streamed); this sink only renames.

use super::request::Endpoint;
use crate::api::Api;
use crate::choice_state::{usage_sum, ChoiceState};
use crate::chunk_filter::ChunkFilter;
use crate::error::ApiError;
use crate::openai::Job;
use crate::sink::{Sink, Update};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use folio_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// The NDJSON sink of one /api/chat or /api/generate request (one choice).
pub struct NdjsonSink {
    endpoint: Endpoint,
    /// A streamed chat's reasoning split and tool calls.
    filter: Option<ChunkFilter>,
    /// When the last token arrived (the end of `eval_duration`).
    last_at: Option<Instant>,
    /// How long the request waited for its model (`load_duration`), from its arrival.
    load: Duration,
    /// Held while the request runs, so the model is never unloaded under it.
    _lease: Option<crate::models::Lease>,
    /// Tool calls being streamed, sent whole before the `done` line.
    calls: Calls,
}

/// One NDJSON line.
fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn concat(lines: Vec<Bytes>) -> Bytes {
    Bytes::from(lines.iter().flat_map(|b| b.to_vec()).collect::<Vec<u8>>())
}

/// An OpenAI tool call → Ollama's `{"function": {"name", "arguments": {…}}}`.
fn tool_call(c: &Value) -> Value {
    let args = match &c["function"]["arguments"] {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Value::Null => json!({}),
        v => v.clone(),
    };
    json!({"function": {"name": c["function"]["name"], "arguments": args}})
}

/// A chat choice's (or chunk's) `logprobs.content` entries, which Ollama sends as they are.
fn content_logprobs(choice: &Value) -> Vec<Value> {
    choice["logprobs"]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The parts of one piece of output.
#[derive(Default)]
struct Piece {
    content: String,
    thinking: String,
    tool_calls: Vec<Value>,
    logprobs: Vec<Value>,
}

impl Piece {
    fn is_empty(&self) -> bool {
        self.content.is_empty()
            && self.thinking.is_empty()
            && self.tool_calls.is_empty()
            && self.logprobs.is_empty()
    }

    /// The chat chunk or completion chunk `c`'s output (its finish is read elsewhere).
    fn of_chunk(c: &Value) -> Piece {
        let ch = &c["choices"][0];
        let d = &ch["delta"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let logprobs = content_logprobs(ch);
        Piece {
            content: if d.is_null() {
                text(&ch["text"])
            } else {
                text(&d["content"])
            },
            thinking: text(&d["reasoning_content"]),
            // Streamed calls come as OpenAI deltas: `Calls` gathers them.
            tool_calls: Vec::new(),
            logprobs,
        }
    }
}

/// Streamed tool calls gathered from OpenAI's deltas (name first, then argument
/// fragments): Ollama sends each call whole, with its arguments as an object.
#[derive(Default)]
struct Calls(Vec<(Value, String)>);

impl Calls {
    fn absorb(&mut self, chunk: &Value) {
        let Some(deltas) = chunk["choices"][0]["delta"]["tool_calls"].as_array() else {
            return;
        };
        for d in deltas {
            let f = &d["function"];
            let i = d["index"]
                .as_u64()
                .map_or(self.0.len().max(1) - 1, |i| i as usize);
            while self.0.len() <= i {
                self.0.push((Value::Null, String::new()));
            }
            if f["name"].is_string() {
                self.0[i].0 = f["name"].clone();
            }
            if let Some(a) = f["arguments"].as_str() {
                self.0[i].1.push_str(a);
            }
        }
    }

    /// The whole calls so far, in Ollama's shape.
    fn take(&mut self) -> Vec<Value> {
        self.0
            .drain(..)
            .map(|(name, args)| tool_call(&json!({"function": {"name": name, "arguments": args}})))
            .collect()
    }
}

impl NdjsonSink {
    pub fn new(
        endpoint: Endpoint,
        job: &Job,
        load: Duration,
        lease: Option<crate::models::Lease>,
    ) -> Self {
        NdjsonSink {
            endpoint,
            filter: (job.api == Api::Chat && job.stream)
                .then(|| ChunkFilter::new(1, job.reasoning, job.tools)),
            last_at: None,
            load,
            _lease: lease,
            calls: Calls::default(),
        }
    }

    /// `model`, `created_at`, the output fields of `p` and `done`.
    fn object(&self, job: &Job, p: Piece, done: bool) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("model".into(), json!(job.model));
        o.insert("created_at".into(), json!(super::clock::now()));
        match self.endpoint {
            Endpoint::Chat => {
                let mut m = json!({"role": "assistant", "content": p.content});
                if !p.thinking.is_empty() {
                    m["thinking"] = json!(p.thinking);
                }
                if !p.tool_calls.is_empty() {
                    m["tool_calls"] = json!(p.tool_calls);
                }
                o.insert("message".into(), m);
            }
            Endpoint::Generate => {
                o.insert("response".into(), json!(p.content));
                if !p.thinking.is_empty() {
                    o.insert("thinking".into(), json!(p.thinking));
                }
            }
        }
        if !p.logprobs.is_empty() {
            o.insert("logprobs".into(), Value::Array(p.logprobs));
        }
        o.insert("done".into(), json!(done));
        o
    }

    /// The `done` fields: why it ended, token counts, durations (ns).
    fn finish(&self, job: &Job, states: &[ChoiceState], mut o: Map<String, Value>) -> Value {
        let c = &states[0];
        let u = usage_sum(job, states);
        let ns = |d: Duration| d.as_nanos() as u64;
        let first = c.first_at.unwrap_or_else(Instant::now);
        let reason = match c.finish_reason() {
            // Ollama ends a turn with tool calls as `stop`.
            "tool_calls" => "stop",
            r => r,
        };
        o.insert("done_reason".into(), json!(reason));
        // `job.arrival` is the request's: the load (waiting for the model) is inside
        // the total and before the prompt's evaluation.
        o.insert("total_duration".into(), json!(ns(job.arrival.elapsed())));
        o.insert("load_duration".into(), json!(ns(self.load)));
        o.insert("prompt_eval_count".into(), json!(u.prompt_tokens));
        o.insert(
            "prompt_eval_duration".into(),
            json!(ns(first
                .saturating_duration_since(job.arrival)
                .saturating_sub(self.load))),
        );
        o.insert("eval_count".into(), json!(u.completion_tokens));
        o.insert(
            "eval_duration".into(),
            json!(ns(self
                .last_at
                .unwrap_or(first)
                .saturating_duration_since(first))),
        );
        Value::Object(o)
    }

    /// The lines of chunk `c` (through the chat filter when streaming a chat).
    fn lines(&mut self, job: &Job, c: Value) -> Bytes {
        let chunks = match self.filter.as_mut() {
            Some(f) => f.apply(0, c),
            None => vec![c],
        };
        for c in &chunks {
            self.calls.absorb(c);
        }
        let out = chunks
            .iter()
            .map(Piece::of_chunk)
            .filter(|p| !p.is_empty())
            .map(|p| line(&Value::Object(self.object(job, p, false))))
            .collect();
        concat(out)
    }
}

impl Sink for NdjsonSink {
    /// Ollama's clients read every line as JSON: no keep-alive lines while queued.
    fn keep_alive(&mut self) -> Bytes {
        Bytes::new()
    }

    fn refused(&mut self, e: &ApiError) -> Bytes {
        line(&json!({"error": e.message}))
    }

    fn event(&mut self, job: &Job, u: Update<'_>) -> Bytes {
        if u.tokens > 0 {
            self.last_at = Some(Instant::now());
        }
        match u.chunk {
            Some(c) => self.lines(job, c),
            None => Bytes::new(),
        }
    }

    /// Flushes the text the filter held back; the `done` line follows in `closing`.
    fn cut(&mut self, job: &Job, index: usize, reason: &'static str) -> Bytes {
        self.lines(job, job.chunk(index, "", None, Some(reason)))
    }

    fn closing(&mut self, job: &Job, states: &[ChoiceState], unfinished: &[usize]) -> Bytes {
        let mut out = Vec::new();
        for &i in unfinished {
            out.push(self.lines(job, job.chunk(i, "", None, Some("abort"))));
        }
        let tool_calls = self.calls.take();
        if !tool_calls.is_empty() {
            let p = Piece {
                tool_calls,
                ..Piece::default()
            };
            out.push(line(&Value::Object(self.object(job, p, false))));
        }
        let o = self.object(job, Piece::default(), true);
        out.push(line(&self.finish(job, states, o)));
        concat(out)
    }

    fn answer(
        self,
        job: Job,
        mut states: Vec<ChoiceState>,
        tok: &Tokenizer,
    ) -> Result<Response, ApiError> {
        let usage = usage_sum(&job, &states);
        let c = &mut states[0];
        let lp = c.final_logprobs(&job, tok);
        let text = std::mem::take(&mut c.text);
        let mut v = job.response(vec![(text, lp, c.finish_reason())], usage);
        if let Some(p) = job.reasoning {
            crate::reasoning::split_response(&mut v, p);
        }
        if let Some(tc) = job.tools {
            crate::tools::rewrite_response(&mut v, tc);
        }
        let ch = &v["choices"][0];
        let m = &ch["message"];
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let p = Piece {
            content: if job.api == Api::Chat {
                s(&m["content"])
            } else {
                s(&ch["text"])
            },
            thinking: s(&m["reasoning_content"]),
            tool_calls: m["tool_calls"]
                .as_array()
                .map(|a| a.iter().map(tool_call).collect())
                .unwrap_or_default(),
            logprobs: content_logprobs(ch),
        };
        let o = self.object(&job, p, true);
        Ok(axum::Json(self.finish(&job, &states, o)).into_response())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_get_object_arguments() {
        let c = json!({"index": 0, "id": "call_1", "type": "function",
                       "function": {"name": "f", "arguments": "{\"x\": 1}"}});
        assert_eq!(
            tool_call(&c),
            json!({"function": {"name": "f", "arguments": {"x": 1}}})
        );
    }

    #[test]
    fn pieces_of_chat_and_completion_chunks() {
        let chat = json!({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}, "logprobs": null, "finish_reason": null}]});
        let p = Piece::of_chunk(&chat);
        assert_eq!((p.content.as_str(), p.thinking.as_str()), ("", "hm"));
        let cmpl = json!({"choices": [{"index": 0, "text": "ab", "logprobs": null, "finish_reason": null}]});
        assert_eq!(Piece::of_chunk(&cmpl).content, "ab");
        let fin = json!({"choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}]});
        assert!(Piece::of_chunk(&fin).is_empty());
    }
}
