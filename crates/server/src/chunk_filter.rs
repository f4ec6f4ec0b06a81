//! What happens to a streamed chat chunk between the engine's text and the wire: the
//! reasoning split first (`<think>` text becomes `delta.reasoning_content`), then the tool
//! filter on what is left as content (calls become `tool_calls` deltas). Both hold text
//! back across chunks, so the finish chunk (stop, length, timeout or abort) flushes them.

use crate::reasoning::{Parser, Split};
use crate::tools::{ToolCalling, ToolStream};
use serde_json::{json, Value};

/// The filters of every choice of one streamed chat request.
pub struct ChunkFilter {
    reasoning: Option<Vec<Split>>,
    tools: Option<Vec<ToolStream>>,
}

impl ChunkFilter {
    pub fn new(choices: usize, reasoning: Option<Parser>, tools: Option<ToolCalling>) -> Self {
        ChunkFilter {
            reasoning: reasoning.map(|p| vec![Split::new(p); choices]),
            tools: tools.map(|tc| vec![ToolStream::new(tc); choices]),
        }
    }

    /// The chunks to send for `chunk` of choice `i` (possibly none while text is held).
    pub fn apply(&mut self, i: usize, chunk: Value) -> Vec<Value> {
        let split = match self.reasoning.as_mut() {
            Some(r) => split_chunk(&mut r[i], chunk),
            None => vec![chunk],
        };
        let Some(tools) = self.tools.as_mut() else {
            return split;
        };
        split
            .into_iter()
            .flat_map(|c| {
                if c["choices"][0]["delta"].get("reasoning_content").is_some() {
                    vec![c]
                } else {
                    tools[i].filter(c)
                }
            })
            .collect()
    }
}

/// Splits one chat chunk's `delta.content` into a `reasoning_content` chunk and a
/// `content` chunk (each only when non-empty; reasoning first); a finish chunk first
/// flushes what the split held back. The chunk's logprobs ride on the first chunk sent.
pub fn split_chunk(s: &mut Split, chunk: Value) -> Vec<Value> {
    let c = &chunk["choices"][0];
    let text = c["delta"]["content"].as_str().unwrap_or("");
    let finish = !c["finish_reason"].is_null();
    let mut parts = s.push(text);
    if finish {
        let rest = s.finish();
        parts.reasoning.push_str(&rest.reasoning);
        parts.content.push_str(&rest.content);
    }
    let mut logprobs = c["logprobs"].clone();
    let mut out = Vec::new();
    let mut piece = |delta: Value, finish_reason: &Value, logprobs: &mut Value| {
        let mut d = chunk.clone();
        d["choices"][0]["delta"] = delta;
        d["choices"][0]["finish_reason"] = finish_reason.clone();
        d["choices"][0]["logprobs"] = std::mem::take(logprobs);
        out.push(d);
    };
    if !parts.reasoning.is_empty() {
        piece(
            json!({"reasoning_content": parts.reasoning}),
            &Value::Null,
            &mut logprobs,
        );
    }
    if !parts.content.is_empty() || (!finish && parts.reasoning.is_empty() && !logprobs.is_null()) {
        piece(
            json!({"content": parts.content}),
            &Value::Null,
            &mut logprobs,
        );
    }
    if finish {
        piece(json!({}), &c["finish_reason"], &mut logprobs);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_parse;

    fn chunk(text: &str, finish: Option<&str>) -> Value {
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": finish}]})
    }

    fn deltas(out: &[Value], key: &str) -> String {
        out.iter()
            .filter_map(|c| c["choices"][0]["delta"][key].as_str())
            .collect()
    }

    #[test]
    fn reasoning_then_content_with_the_finish_last() {
        let mut f = ChunkFilter::new(2, Some(Parser::DeepSeekR1), None);
        let mut out = Vec::new();
        for t in ["Think", "ing</th", "ink>\n\nAns", "wer <"] {
            out.extend(f.apply(1, chunk(t, None)));
        }
        // Nothing is sent for a chunk that only holds back a partial tag.
        assert!(f.apply(1, chunk("", None)).is_empty());
        out.extend(f.apply(1, chunk("", Some("length"))));
        assert_eq!(deltas(&out, "reasoning_content"), "Thinking");
        assert_eq!(deltas(&out, "content"), "\n\nAnswer <");
        let last = out.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert!(out[..out.len() - 1]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null()));
        // A chunk with both kinds of text becomes two chunks, reasoning first, and its
        // logprobs ride on the first one.
        let mut s = Split::new(Parser::Qwen3);
        let mut c = chunk("<think>a</think>b", None);
        c["choices"][0]["logprobs"] = json!({"content": [1]});
        let out = split_chunk(&mut s, c);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0]["choices"][0]["delta"],
            json!({"reasoning_content": "a"})
        );
        assert_eq!(out[0]["choices"][0]["logprobs"], json!({"content": [1]}));
        assert_eq!(out[1]["choices"][0]["delta"], json!({"content": "b"}));
        assert!(out[1]["choices"][0]["logprobs"].is_null());
    }

    #[test]
    fn tool_calls_are_read_from_the_content_only() {
        let tc = ToolCalling {
            parser: tool_parse::Parser::Hermes,
            parallel: true,
        };
        let mut f = ChunkFilter::new(1, Some(Parser::Qwen3), Some(tc));
        let mut out = Vec::new();
        for t in [
            "<think>I should call f",
            "</think>",
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        ] {
            out.extend(f.apply(0, chunk(t, None)));
        }
        out.extend(f.apply(0, chunk("", Some("stop"))));
        assert_eq!(deltas(&out, "reasoning_content"), "I should call f");
        assert_eq!(deltas(&out, "content"), "");
        assert!(out
            .iter()
            .any(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"));
        assert_eq!(
            out.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );
    }
}
