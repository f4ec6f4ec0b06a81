//! The logit-editing request fields, read into the engine's [`LogitRules`]:
//! `logit_bias` (OpenAI), `min_tokens`, `allowed_token_ids`, `bad_words` (vLLM).

use crate::error::ApiError;
use crate::fields::{show, Fields};
use folio_engine::LogitRules;
use folio_tokenizer::Tokenizer;
use serde_json::Value;

/// Most `logit_bias` entries (OpenAI documents no limit; 1024 is far past any real use).
pub const MAX_LOGIT_BIAS: usize = 1024;
/// Most `bad_words` strings.
pub const MAX_BAD_WORDS: usize = 64;
/// Longest bad word in bytes.
pub const MAX_BAD_WORD_LEN: usize = 256;

/// The fields as read; `bad_words` still text (they need the tokenizer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogitFields {
    pub bias: Vec<(u32, f32)>,
    pub min_tokens: usize,
    pub allowed: Option<Vec<u32>>,
    pub bad_words: Vec<String>,
}

/// Reads the fields; `max_tokens` (when given) bounds `min_tokens`.
pub fn parse(f: &Fields, vocab: usize, max_tokens: Option<i64>) -> Result<LogitFields, ApiError> {
    let bias = match f.get("logit_bias") {
        None => Vec::new(),
        Some(Value::Object(o)) if o.len() <= MAX_LOGIT_BIAS => {
            let mut out = Vec::with_capacity(o.len());
            for (k, v) in o {
                let field = format!("logit_bias[{k:?}]");
                let id = match k.parse::<u64>() {
                    Ok(t) if (t as usize) < vocab => t as u32,
                    _ => {
                        return Err(ApiError::param(
                            field,
                            format!("keys must be token ids in [0, {vocab}), got {k:?}"),
                        ))
                    }
                };
                match v.as_f64() {
                    Some(b) if (-100.0..=100.0).contains(&b) => out.push((id, b as f32)),
                    _ => {
                        return Err(ApiError::param(
                            field,
                            format!("must be a number in [-100, 100], got {}", show(v)),
                        ))
                    }
                }
            }
            out
        }
        Some(v) => {
            return Err(ApiError::param(
                "logit_bias",
                format!(
                    "must be an object of at most {MAX_LOGIT_BIAS} token id → bias entries, got {}",
                    show(v)
                ),
            ))
        }
    };
    let min_tokens = f.int("min_tokens", 0, i64::from(u32::MAX))?.unwrap_or(0);
    if let Some(m) = max_tokens.filter(|&m| min_tokens > m) {
        return Err(ApiError::param(
            "min_tokens",
            format!("must be at most max_tokens ({m}), got {min_tokens}"),
        ));
    }
    let allowed = match f.get("allowed_token_ids") {
        None => None,
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= vocab => {
            let mut ids = a
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_u64() {
                    Some(t) if (t as usize) < vocab => Ok(t as u32),
                    _ => Err(ApiError::param(
                        format!("allowed_token_ids[{i}]"),
                        format!("must be a token id in [0, {vocab}), got {}", show(v)),
                    )),
                })
                .collect::<Result<Vec<u32>, _>>()?;
            ids.sort_unstable();
            ids.dedup();
            Some(ids)
        }
        Some(v) => {
            return Err(ApiError::param(
                "allowed_token_ids",
                format!(
                    "must be an array of 1 to {vocab} token ids, got {}",
                    show(v)
                ),
            ))
        }
    };
    Ok(LogitFields {
        bias,
        min_tokens: min_tokens as usize,
        allowed,
        bad_words: f.strings("bad_words", MAX_BAD_WORDS, MAX_BAD_WORD_LEN)?,
    })
}

impl LogitFields {
    /// The engine's rules. Each bad word is banned as it would start a text and after a
    /// space (vLLM tokenizes it both ways), without special tokens.
    pub fn rules(&self, tok: &Tokenizer) -> Result<LogitRules, ApiError> {
        let mut bad_words: Vec<Vec<u32>> = Vec::new();
        for (i, w) in self.bad_words.iter().enumerate() {
            for text in [w.clone(), format!(" {}", w.trim_start())] {
                let mut ids = tok.encode(&text, false).map_err(|e| {
                    ApiError::param(format!("bad_words[{i}]"), format!("cannot tokenize: {e}"))
                })?;
                if tok.add_bos() && ids.first() == tok.bos_id().as_ref() {
                    ids.remove(0);
                }
                if !ids.is_empty() && !bad_words.contains(&ids) {
                    bad_words.push(ids);
                }
            }
        }
        Ok(LogitRules {
            bias: self.bias.clone(),
            min_tokens: self.min_tokens,
            allowed: self.allowed.clone(),
            bad_words,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value, max: Option<i64>) -> Result<LogitFields, String> {
        let o = v.as_object().unwrap().clone();
        parse(&Fields::new(&o), 100, max).map_err(|e| e.message)
    }

    #[test]
    fn fields_are_read_and_bounded() {
        let l = run(
            json!({"logit_bias": {"5": -100, "7": 2.5}, "min_tokens": 3,
                   "allowed_token_ids": [9, 1, 9], "bad_words": ["x y"]}),
            Some(10),
        )
        .unwrap();
        assert_eq!(l.bias, vec![(5, -100.0), (7, 2.5)]);
        assert_eq!((l.min_tokens, l.allowed), (3, Some(vec![1, 9])));
        assert_eq!(l.bad_words, vec!["x y"]);
        let cases = [
            (json!({"logit_bias": {"100": 1}}), "logit_bias[\"100\"]: keys must be token ids in [0, 100), got \"100\""),
            (json!({"logit_bias": {"a": 1}}), "logit_bias[\"a\"]: keys must be token ids in [0, 100), got \"a\""),
            (json!({"logit_bias": {"1": 101}}), "logit_bias[\"1\"]: must be a number in [-100, 100], got 101"),
            (json!({"logit_bias": [1]}), "logit_bias: must be an object of at most 1024 token id → bias entries, got an array of 1 items"),
            (json!({"min_tokens": 11}), "min_tokens: must be at most max_tokens (10), got 11"),
            (json!({"min_tokens": -1}), "min_tokens: must be an integer in [0, 4294967295], got -1"),
            (json!({"allowed_token_ids": []}), "allowed_token_ids: must be an array of 1 to 100 token ids, got an array of 0 items"),
            (json!({"allowed_token_ids": [3, 100]}), "allowed_token_ids[1]: must be a token id in [0, 100), got 100"),
            (json!({"bad_words": [""]}), "bad_words[0]: must not be empty"),
        ];
        for (body, msg) in cases {
            assert_eq!(run(body, Some(10)).unwrap_err(), msg);
        }
    }
}
