//! Generation parameters shared by /v1/completions and /v1/chat/completions, validated
//! once into [`Params`] (OpenAI and vLLM names, OpenAI ranges).

use crate::api::Api;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::logit_fields::{self, LogitFields};
use folio_engine::SamplingParams;
use serde_json::Value;

/// Bounds that depend on the served model and the server's options.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub context_length: usize,
    pub vocab_size: usize,
    pub max_n: usize,
}

/// Most stop strings per request (OpenAI allows 4; vLLM any number).
pub const MAX_STOP: usize = 16;
/// Longest stop string in bytes.
pub const MAX_STOP_LEN: usize = 256;
/// Most extra stop token ids per request.
pub const MAX_STOP_TOKEN_IDS: usize = 64;
/// Most top alternatives per token (OpenAI's limit).
pub const MAX_LOGPROBS: i64 = 20;

/// A validated request, apart from its prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub sampling: SamplingParams,
    /// What the client asked for; `None` means "the rest of the context, capped".
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    /// Choices per prompt.
    pub n: usize,
    pub ignore_eos: bool,
    /// Top alternatives per token, when logprobs were asked for.
    pub logprobs: Option<usize>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with usage and no choices.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (vLLM): usage so far on every chunk.
    pub continuous_usage: bool,
    /// DRY's `dry_sequence_breakers`, turned into token ids once the tokenizer is at hand.
    pub dry_breakers: crate::sampler_fields::DryBreakers,
    pub user: Option<String>,
    /// folio extension: `speculative` = "off" | "ngram" | "self" overrides the server's
    /// proposer for this request; `num_speculative_tokens` fixes its draft length.
    pub spec: Option<folio_engine::SpecMethod>,
    pub spec_tokens: Option<usize>,
    /// folio extension: `deadline_ms` from arrival; admission control rejects (429) a
    /// request that cannot finish in time, and one still running when it passes ends
    /// with finish reason `deadline` (see `generate::Cutoff`).
    pub deadline_ms: Option<u64>,
    /// Structured output (`response_format`, `structured_outputs`, `guided_*`, `grammar`,
    /// `json_schema`): see [`crate::constraint`].
    pub constraint: Option<crate::constraint::Structured>,
    /// `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`.
    pub logit: LogitFields,
    /// Completions `echo`: the prompt comes back in front of the completion (with its
    /// logprobs when `logprobs` is set).
    pub echo: bool,
    /// Chat `tools`, `tool_choice`, `parallel_tool_calls`.
    pub tools: Option<crate::tools::Tools>,
}

impl Params {
    /// The sampling settings of choice `j`: seeds are offset so that n seeded choices differ
    /// but the request as a whole stays reproducible.
    pub fn sampling_for(&self, j: usize) -> SamplingParams {
        let mut s = self.sampling.clone();
        s.seed = s.seed.map(|seed| seed.wrapping_add(j as u64));
        s
    }
}

/// Reads and checks every generation parameter of `f`.
pub fn parse(f: &Fields, api: Api, lim: Limits) -> Result<Params, ApiError> {
    let ctx = lim.context_length as i64;
    let max_tokens = match api {
        Api::Chat => match f.int("max_completion_tokens", 1, ctx)? {
            Some(m) => Some(m),
            None => f.int("max_tokens", 1, ctx)?,
        },
        // 0 is OpenAI's "score or echo the prompt, generate nothing".
        Api::Completions => f.int("max_tokens", 0, ctx)?,
    };
    // llama-server's name; -1 is "until the context ends".
    let max_tokens = match (max_tokens, f.int("n_predict", -1, ctx)?) {
        (Some(m), _) => Some(m),
        (None, Some(0)) if api == Api::Chat => {
            return Err(ApiError::param(
                "n_predict",
                format!("must be -1 or an integer in [1, {ctx}], got 0"),
            ))
        }
        (None, Some(n)) if n >= 0 => Some(n),
        (None, _) => None,
    };
    let top_k = f.int("top_k", -1, lim.vocab_size as i64)?.unwrap_or(0);
    let mut sampling = SamplingParams {
        temperature: f.number("temperature", 0.0, 2.0, false)?.unwrap_or(1.0) as f32,
        top_k: top_k.max(0) as usize,
        top_p: f.number("top_p", 0.0, 1.0, true)?.unwrap_or(1.0) as f32,
        min_p: f.number("min_p", 0.0, 1.0, false)?.unwrap_or(0.0) as f32,
        presence_penalty: f
            .number("presence_penalty", -2.0, 2.0, false)?
            .unwrap_or(0.0) as f32,
        frequency_penalty: f
            .number("frequency_penalty", -2.0, 2.0, false)?
            .unwrap_or(0.0) as f32,
        repetition_penalty: f
            .number("repetition_penalty", 0.0, 10.0, true)?
            .unwrap_or(1.0) as f32,
        // NOTE: negative seeds are accepted (Python clients send any int) and reinterpreted.
        seed: f.int("seed", i64::MIN, i64::MAX)?.map(|s| s as u64),
        ..Default::default()
    };
    let dry_breakers = crate::sampler_fields::parse(f, &mut sampling, ctx)?;
    let n = f.int("n", 1, lim.max_n as i64)?.unwrap_or(1) as usize;
    if let Some(b) = f.int("best_of", 1, lim.max_n as i64)? {
        if b as usize != n {
            return Err(ApiError::param(
                "best_of",
                format!("only best_of == n is supported (n = {n}), got {b}"),
            ));
        }
    }
    // llama-server's `n_probs`: top alternatives per token, when `logprobs` is not given.
    let n_probs = f.int("n_probs", 0, MAX_LOGPROBS)?;
    let logprobs = match api {
        Api::Completions => f
            .int("logprobs", 0, MAX_LOGPROBS)?
            .or(n_probs)
            .map(|k| k as usize),
        Api::Chat if f.get("logprobs").is_none() && n_probs.unwrap_or(0) > 0 => {
            n_probs.map(|k| k as usize)
        }
        Api::Chat => {
            let on = f.bool("logprobs", false)?;
            let top = f.int("top_logprobs", 0, MAX_LOGPROBS)?;
            match (on, top) {
                (false, Some(t)) if t > 0 => {
                    return Err(ApiError::param(
                        "top_logprobs",
                        format!("requires logprobs to be true, got {t} with logprobs false"),
                    ))
                }
                (true, t) => Some(t.unwrap_or(0) as usize),
                (false, _) => None,
            }
        }
    };
    let stream = f.bool("stream", false)?;
    let (include_usage, continuous_usage) = match f.get("stream_options") {
        None => (false, false),
        Some(_) if !stream => {
            return Err(ApiError::param(
                "stream_options",
                "only allowed when stream is true, got stream false",
            ))
        }
        Some(Value::Object(o)) => {
            let inner = Fields::new(o);
            let flag = |name: &str| {
                inner
                    .bool(name, false)
                    .map_err(|e| ApiError::param(format!("stream_options.{name}"), strip(&e)))
            };
            (flag("include_usage")?, flag("continuous_usage_stats")?)
        }
        Some(v) => {
            return Err(ApiError::param(
                "stream_options",
                format!("must be an object, got {}", show(v)),
            ))
        }
    };
    let stop_token_ids = match f.get("stop_token_ids") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_STOP_TOKEN_IDS => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_u64() {
                Some(t) if (t as usize) < lim.vocab_size => Ok(t as u32),
                _ => Err(ApiError::param(
                    format!("stop_token_ids[{i}]"),
                    format!(
                        "must be a token id in [0, {}), got {}",
                        lim.vocab_size,
                        show(v)
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::param(
                "stop_token_ids",
                format!(
                    "must be an array of at most {MAX_STOP_TOKEN_IDS} token ids, got {}",
                    show(v)
                ),
            ))
        }
    };
    let logit = logit_fields::parse(f, lim.vocab_size, max_tokens)?;
    let mut echo = false;
    let mut tools = None;
    match api {
        Api::Completions => {
            echo = f.bool("echo", false)?;
            match f.get("suffix") {
                None => {}
                Some(Value::String(s)) if s.is_empty() => {}
                Some(v) => {
                    return Err(ApiError::param(
                        "suffix",
                        format!(
                            "not supported by folio (insertion needs a fill-in-the-middle prompt format folio does not build), got {}",
                            show(v)
                        ),
                    ))
                }
            }
        }
        Api::Chat => {
            tools = Some(crate::tools::parse(f)?);
        }
    }
    Ok(Params {
        sampling,
        max_tokens: max_tokens.map(|m| m as usize),
        stop: f.strings("stop", MAX_STOP, MAX_STOP_LEN)?,
        stop_token_ids,
        n,
        ignore_eos: f.bool("ignore_eos", false)?,
        logprobs,
        stream,
        include_usage,
        continuous_usage,
        dry_breakers,
        user: f.str("user")?.map(str::to_string),
        spec: match f.str("speculative")? {
            None => None,
            Some(m) => Some(folio_engine::SpecMethod::parse(m).ok_or_else(|| {
                ApiError::param(
                    "speculative",
                    format!("must be one of off, ngram, self; got {m:?}"),
                )
            })?),
        },
        spec_tokens: f.int("num_speculative_tokens", 0, 32)?.map(|k| k as usize),
        deadline_ms: f.int("deadline_ms", 1, 86_400_000)?.map(|d| d as u64),
        constraint: crate::constraint::parse(f)?,
        logit,
        echo,
        tools,
    })
}

/// The detail of a field error, without its "field: " prefix.
fn strip(e: &ApiError) -> String {
    e.message
        .split_once(": ")
        .map_or(e.message.clone(), |(_, d)| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIM: Limits = Limits {
        context_length: 8192,
        vocab_size: 49152,
        max_n: 8,
    };

    fn parse_json(v: Value, api: Api) -> Result<Params, ApiError> {
        let o = v.as_object().unwrap().clone();
        parse(&Fields::new(&o), api, LIM)
    }

    #[test]
    fn defaults_follow_openai() {
        let p = parse_json(json!({"prompt": "x"}), Api::Completions).unwrap();
        assert_eq!(p.sampling.temperature, 1.0);
        assert_eq!(p.sampling.top_p, 1.0);
        assert_eq!(
            (p.n, p.max_tokens, p.logprobs, p.stream, p.include_usage),
            (1, None, None, false, false)
        );
    }

    #[test]
    fn all_fields_are_read() {
        let p = parse_json(
            json!({"max_completion_tokens": 7, "max_tokens": 9, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
                   "min_p": 0.1, "seed": -1, "stop": ["\n", "END"], "n": 3, "logprobs": true, "top_logprobs": 2,
                   "presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.1, "ignore_eos": true,
                   "user": "u", "stream": true, "stream_options": {"include_usage": true}, "stop_token_ids": [2]}),
            Api::Chat,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(p.sampling.top_k, 0);
        assert_eq!(p.sampling.seed, Some(u64::MAX));
        assert_eq!(p.sampling_for(2).seed, Some(1));
        assert_eq!(p.stop, vec!["\n", "END"]);
        assert_eq!(
            (p.n, p.logprobs, p.include_usage, p.ignore_eos),
            (3, Some(2), true, true)
        );
        assert_eq!(p.stop_token_ids, vec![2]);
        assert_eq!(p.user.as_deref(), Some("u"));
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let cases = [
            (json!({"n": 9}), "n: must be an integer in [1, 8], got 9"),
            (
                json!({"max_tokens": -1}),
                "max_tokens: must be an integer in [0, 8192], got -1",
            ),
            (
                json!({"max_tokens": "5"}),
                "max_tokens: must be an integer in [0, 8192], got string \"5\"",
            ),
            (
                json!({"logprobs": 21}),
                "logprobs: must be an integer in [0, 20], got 21",
            ),
            (
                json!({"presence_penalty": -3}),
                "presence_penalty: must be in [-2, 2], got -3",
            ),
            (
                json!({"top_k": 50000}),
                "top_k: must be an integer in [-1, 49152], got 50000",
            ),
            (
                json!({"stream_options": {"include_usage": true}}),
                "stream_options: only allowed when stream is true, got stream false",
            ),
            (
                json!({"stream": true, "stream_options": {"include_usage": 1}}),
                "stream_options.include_usage: must be a boolean, got 1",
            ),
            (
                json!({"stop_token_ids": [49152]}),
                "stop_token_ids[0]: must be a token id in [0, 49152), got 49152",
            ),
            (
                json!({"best_of": 2}),
                "best_of: only best_of == n is supported (n = 1), got 2",
            ),
            (
                json!({"suffix": "x"}),
                "suffix: not supported by folio (insertion needs a fill-in-the-middle prompt format folio does not build), got string \"x\"",
            ),
        ];
        for (body, msg) in cases {
            assert_eq!(parse_json(body, Api::Completions).unwrap_err().message, msg);
        }
        let e = parse_json(json!({"top_logprobs": 3}), Api::Chat).unwrap_err();
        assert_eq!(
            e.message,
            "top_logprobs: requires logprobs to be true, got 3 with logprobs false"
        );
        assert!(parse_json(json!({"echo": false, "logit_bias": {}}), Api::Completions).is_ok());
        let e = parse_json(json!({"max_tokens": 0}), Api::Chat).unwrap_err();
        assert_eq!(
            e.message,
            "max_tokens: must be an integer in [1, 8192], got 0"
        );
    }
}
