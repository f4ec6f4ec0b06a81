//! OpenAI response shapes: full responses, stream chunks, usage and logprobs for
//! /v1/completions (`text_completion`) and /v1/chat/completions (`chat.completion`,
//! `chat.completion.chunk`).

use crate::api::Api;
use folio_engine::TokenLogprob;
use folio_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// The identity and shape of one HTTP generation request.
#[derive(Clone, Debug)]
pub struct Job {
    pub api: Api,
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// Choices per prompt; choice `i * n + j` is choice j of prompt i.
    pub n: usize,
    pub prompt_lens: Vec<usize>,
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: every chunk carries its choice's usage so
    /// far (as vLLM sends it).
    pub continuous_usage: bool,
    /// When the request reached the server (TTFT and e2e latency start here).
    pub arrival: Instant,
    /// Completions `echo`: one entry per prompt (empty without echo).
    pub echo: Vec<crate::api::EchoPrompt>,
    /// Chat with tools offered: how calls are read from the text.
    pub tools: Option<crate::tools::ToolCalling>,
    /// Chat with `--reasoning-parser`: `<think>` text goes to `reasoning_content`.
    pub reasoning: Option<crate::reasoning::Parser>,
}

/// Token counts summed over a request's choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageSum {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

impl UsageSum {
    pub fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

/// A logprob as JSON; -inf (a token the filters excluded) becomes -9999 as in vLLM.
fn lp(x: f32) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(-9999.0)
    }
}

/// The text of one token for logprobs (lossy for tokens that split a UTF-8 sequence).
fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false)
}

/// Completions-style logprobs for `lps`; `offset` is the char offset of the first token in
/// the choice's text and is advanced past them.
pub fn completion_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], offset: &mut usize) -> Value {
    let mut tokens = Vec::with_capacity(lps.len());
    let mut token_logprobs = Vec::with_capacity(lps.len());
    let mut top_logprobs = Vec::with_capacity(lps.len());
    let mut text_offset = Vec::with_capacity(lps.len());
    for t in lps {
        let text = token_text(tok, t.token);
        let mut top = Map::new();
        if t.top.is_empty() {
            top.insert(text.clone(), lp(t.logprob));
        }
        for &(id, l) in &t.top {
            top.entry(token_text(tok, id)).or_insert(lp(l));
        }
        text_offset.push(*offset);
        *offset += text.chars().count();
        tokens.push(Value::String(text));
        token_logprobs.push(lp(t.logprob));
        top_logprobs.push(Value::Object(top));
    }
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": text_offset})
}

/// Chat-style logprobs entries (`logprobs.content`) for `lps`.
pub fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Vec<Value> {
    let entry = |id: u32, l: f32| json!({"token": token_text(tok, id), "logprob": lp(l), "bytes": tok.token_bytes_ref(id)});
    lps.iter()
        .map(|t| {
            let mut e = entry(t.token, t.logprob);
            e["top_logprobs"] = Value::Array(t.top.iter().map(|&(id, l)| entry(id, l)).collect());
            e
        })
        .collect()
}

impl Job {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if chunk && self.include_usage {
            // OpenAI: with include_usage every chunk carries `usage`, null until the last.
            v["usage"] = Value::Null;
        }
        v
    }

    /// A stream chunk for choice `index`: new text (chat: `content`), its logprobs, and the
    /// finish reason on the last one.
    pub fn chunk(
        &self,
        index: usize,
        text: &str,
        logprobs: Option<Value>,
        finish: Option<&str>,
    ) -> Value {
        let choice = match self.api {
            Api::Completions => {
                json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
            }
            Api::Chat => {
                let delta = if finish.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                let logprobs = logprobs.map(|c| json!({"content": c}));
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
        };
        self.envelope(true, vec![choice])
    }

    /// The first chat chunk of a choice: the assistant role, empty content.
    pub fn role_chunk(&self, index: usize) -> Value {
        let choice = json!({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
        self.envelope(true, vec![choice])
    }

    /// Puts choice `index`'s usage so far (`generated` tokens) on `chunk`
    /// (`continuous_usage_stats`).
    pub fn with_usage(&self, chunk: &mut Value, index: usize, generated: usize) {
        if !self.continuous_usage {
            return;
        }
        let prompt = self
            .prompt_lens
            .get(index / self.n.max(1))
            .copied()
            .unwrap_or(0);
        chunk["usage"] = json!({
            "prompt_tokens": prompt,
            "completion_tokens": generated,
            "total_tokens": prompt + generated,
        });
    }

    /// The last chunk when `stream_options.include_usage`: usage, no choices.
    pub fn usage_chunk(&self, usage: UsageSum) -> Value {
        let mut v = self.envelope(true, Vec::new());
        v["usage"] = usage.to_json();
        v
    }

    /// A non-streaming response. `choices[i]` = (text, logprobs, finish reason).
    pub fn response(&self, choices: Vec<(String, Option<Value>, &str)>, usage: UsageSum) -> Value {
        let choices = choices
            .into_iter()
            .enumerate()
            .map(|(index, (text, logprobs, finish))| match self.api {
                Api::Completions => json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}),
                Api::Chat => json!({
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs.map(|c| json!({"content": c})),
                    "finish_reason": finish,
                }),
            })
            .collect();
        let mut v = self.envelope(false, choices);
        v["usage"] = usage.to_json();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(api: Api, include_usage: bool) -> Job {
        Job {
            api,
            id: "x-1".into(),
            created: 7,
            model: "m".into(),
            n: 1,
            prompt_lens: vec![3],
            logprobs: None,
            stream: true,
            include_usage,
            continuous_usage: false,
            arrival: Instant::now(),
            echo: Vec::new(),
            tools: None,
            reasoning: None,
        }
    }

    #[test]
    fn completion_shapes() {
        let j = job(Api::Completions, false);
        assert_eq!(
            j.chunk(0, "hi", None, None),
            json!({"id": "x-1", "object": "text_completion", "created": 7, "model": "m",
                   "choices": [{"index": 0, "text": "hi", "logprobs": null, "finish_reason": null}]})
        );
        let u = UsageSum {
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 1,
        };
        assert_eq!(
            j.response(vec![("hi".into(), None, "length")], u),
            json!({"id": "x-1", "object": "text_completion", "created": 7, "model": "m",
                   "choices": [{"index": 0, "text": "hi", "logprobs": null, "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                             "prompt_tokens_details": {"cached_tokens": 1}}})
        );
    }

    #[test]
    fn chat_shapes() {
        let j = job(Api::Chat, true);
        assert_eq!(
            j.role_chunk(1),
            json!({"id": "x-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "usage": null,
                   "choices": [{"index": 1, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]})
        );
        assert_eq!(
            j.chunk(0, "a", None, None)["choices"][0]["delta"],
            json!({"content": "a"})
        );
        assert_eq!(
            j.chunk(0, "", None, Some("stop"))["choices"][0]["delta"],
            json!({})
        );
        let u = j.usage_chunk(UsageSum {
            prompt_tokens: 1,
            completion_tokens: 1,
            cached_tokens: 0,
        });
        assert_eq!(u["choices"], json!([]));
        assert_eq!(u["usage"]["total_tokens"], json!(2));
        let r = j.response(
            vec![("ok".into(), Some(json!([])), "stop")],
            UsageSum::default(),
        );
        assert_eq!(r["object"], "chat.completion");
        assert_eq!(
            r["choices"][0]["message"],
            json!({"role": "assistant", "content": "ok"})
        );
        assert_eq!(r["choices"][0]["logprobs"], json!({"content": []}));
    }
}
