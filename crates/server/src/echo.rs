//! Completions `echo`: the prompt in front of each choice's text, and with `logprobs` the
//! prompt tokens' scores in front of the generated ones, in OpenAI's completions shape
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`; the first prompt token has
//! no logprob and no alternatives: null). This is what lm-evaluation-harness's
//! `local-completions` model reads for loglikelihood tasks (`echo`, `logprobs: 1`,
//! `max_tokens` 0 or 1).

use crate::api::EchoPrompt;
use crate::openai::completion_logprobs;
use folio_engine::TokenLogprob;
use folio_tokenizer::Tokenizer;
use serde_json::{json, Value};

/// The echoed text of a choice.
pub fn text(p: &EchoPrompt, completion: &str) -> String {
    format!("{}{completion}", p.text)
}

/// The logprobs of a choice with the prompt's in front: `scores` are the engine's scores of
/// prompt tokens 1.., `generated` those of the completion.
pub fn logprobs(
    tok: &Tokenizer,
    p: &EchoPrompt,
    scores: &[TokenLogprob],
    generated: &[TokenLogprob],
) -> Value {
    let mut offset = 0usize;
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top_logprobs = Vec::new();
    let mut text_offset = Vec::new();
    if let Some(&first) = p.ids.first() {
        let t = tok.decode(&[first], false);
        tokens.push(json!(t));
        token_logprobs.push(Value::Null);
        top_logprobs.push(Value::Null);
        text_offset.push(json!(0));
        offset = t.chars().count();
    }
    let mut append = |v: Value| {
        for (key, out) in [
            ("tokens", &mut tokens),
            ("token_logprobs", &mut token_logprobs),
            ("top_logprobs", &mut top_logprobs),
            ("text_offset", &mut text_offset),
        ] {
            if let Some(Value::Array(a)) = v.get(key) {
                out.extend(a.iter().cloned());
            }
        }
    };
    append(completion_logprobs(tok, scores, &mut offset));
    append(completion_logprobs(tok, generated, &mut offset));
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": text_offset})
}
