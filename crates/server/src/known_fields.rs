//! Which request fields folio reads, which it ignores because ignoring them cannot change
//! the output, and which it accepts only at their neutral value. Any other field is a 400
//! that names it: a client that sends a field expects it to do something, and silently
//! dropping it (as folio did before) returns a wrong answer that looks right.
//!
//! The README's "Request fields" table lists the same sets; keep them in step.

use crate::api::Api;
use crate::error::ApiError;
use crate::fields::show;
use serde_json::{Map, Value};

/// Fields both generation endpoints read.
const COMMON: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "best_of",
    "seed",
    "stop",
    "stop_token_ids",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "logit_bias",
    "min_tokens",
    "allowed_token_ids",
    "bad_words",
    "ignore_eos",
    "user",
    // Structured output (see `constraint.rs`).
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "grammar",
    "json_schema",
    // llama-server's per-request LoRA adapters (see `lora.rs`).
    "lora",
    // llama-server's samplers and names (see `sampler_fields.rs`).
    "repeat_penalty",
    "repeat_last_n",
    "typical_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "samplers",
    "n_predict",
    "n_probs",
    // folio extensions
    "speculative",
    "num_speculative_tokens",
    "deadline_ms",
];

/// Fields only /v1/completions reads.
const COMPLETIONS: &[&str] = &["prompt", "echo", "suffix"];

/// Fields only /v1/chat/completions reads.
const CHAT: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "add_generation_prompt",
    "chat_template_kwargs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    // A template variable; ignored (with the warning) where the template takes none.
    "reasoning_effort",
];

/// Accepted and ignored: they ask for bookkeeping, caching or scheduling hints that do not
/// change what is generated, and popular clients send them. A response to a request that
/// sent any carries the [`warning`] header naming them, and the server logs them. The
/// README's "Field policy" lists the same table.
pub const IGNORED: &[(&str, &str)] = &[
    ("metadata", "stored-completion tags; folio stores nothing"),
    (
        "store",
        "OpenAI stores completions for distillation; folio stores nothing",
    ),
    ("service_tier", "one tier"),
    (
        "priority",
        "vLLM's priority scheduling; folio schedules FCFS",
    ),
    ("request_id", "vLLM request id; folio makes its own"),
    ("prediction", "predicted outputs only make OpenAI faster"),
    (
        "modalities",
        "text only (any other modality fails elsewhere)",
    ),
    (
        "verbosity",
        "OpenAI's answer-length hint; no template takes it",
    ),
    (
        "prompt_cache_key",
        "folio's prefix cache matches prompts without a key",
    ),
    ("safety_identifier", "folio keeps no per-user records"),
    // llama-server's (its web UI and clients written for it send these).
    ("cache_prompt", "folio always reuses cached prompt prefixes"),
    ("id_slot", "folio has no slots; the prefix cache is shared"),
    ("t_max_predict_ms", "use deadline_ms"),
    ("timings_per_token", "folio sends no timings"),
    (
        "return_tokens",
        "folio returns no token ids in text responses",
    ),
    (
        "post_sampling_probs",
        "logprobs are the model's, before sampling",
    ),
    (
        "reasoning_format",
        "reasoning is separated as `folio serve --reasoning-parser` says",
    ),
    ("return_progress", "folio sends no prompt progress"),
    (
        "penalize_nl",
        "removed from llama.cpp; newlines are penalized as any token",
    ),
];

/// The response header naming the accepted-and-ignored fields a request sent:
/// `Warning: 299 folio "ignored fields: a, b"` (RFC 9111's miscellaneous persistent
/// warning), names sorted.
pub fn warning(ignored: &[&str]) -> Option<String> {
    if ignored.is_empty() {
        return None;
    }
    let mut names = ignored.to_vec();
    names.sort_unstable();
    names.dedup();
    Some(format!(
        "299 folio \"ignored fields: {}\"",
        names.join(", ")
    ))
}

/// Accepted only at the value that means "off" / the default folio implements.
pub const NEUTRAL: &[(&str, &str)] = &[
    ("use_beam_search", "false"),
    ("length_penalty", "1"),
    ("include_stop_str_in_output", "false"),
    ("skip_special_tokens", "true"),
    ("spaces_between_special_tokens", "true"),
    ("truncate_prompt_tokens", "null"),
    ("add_special_tokens", "true for completions, false for chat"),
    ("echo", "false (chat)"),
    // vllm-router re-encodes every chat request it forwards with its own defaults for
    // these (SGLang's and vLLM's names); at those values they change nothing here.
    ("no_stop_trim", "false"),
    ("continue_final_message", "false"),
    ("return_hidden_states", "false"),
    ("separate_reasoning", "true"),
    ("stream_reasoning", "true"),
    ("include_reasoning", "true"),
    // llama-server's sampler settings at their "off" values (its web UI sends them).
    ("dynatemp_range", "0"),
    ("dynatemp_exponent", "1"),
    ("min_keep", "0"),
    ("tfs_z", "1"),
];

fn neutral(api: Api, name: &str, v: &Value) -> bool {
    match name {
        "use_beam_search"
        | "include_stop_str_in_output"
        | "no_stop_trim"
        | "continue_final_message"
        | "return_hidden_states" => v == &Value::Bool(false),
        "skip_special_tokens"
        | "spaces_between_special_tokens"
        | "separate_reasoning"
        | "stream_reasoning"
        | "include_reasoning" => v == &Value::Bool(true),
        "length_penalty" | "dynatemp_exponent" | "tfs_z" => v.as_f64() == Some(1.0),
        "dynatemp_range" | "min_keep" => v.as_f64() == Some(0.0),
        "add_special_tokens" => v == &Value::Bool(api == Api::Completions),
        "echo" => api == Api::Chat && v == &Value::Bool(false),
        _ => false,
    }
}

/// Rejects the first field of `body` folio neither reads nor may ignore (null values count
/// as absent, as everywhere); returns the accepted-and-ignored ones it sent.
pub fn check(body: &Map<String, Value>, api: Api) -> Result<Vec<&'static str>, ApiError> {
    let own = match api {
        Api::Completions => COMPLETIONS,
        Api::Chat => CHAT,
    };
    let mut ignored = Vec::new();
    for (name, v) in body {
        if v.is_null() || COMMON.contains(&name.as_str()) || own.contains(&name.as_str()) {
            continue;
        }
        if let Some((n, _)) = IGNORED.iter().find(|(n, _)| n == name) {
            ignored.push(*n);
            continue;
        }
        if let Some((_, want)) = NEUTRAL.iter().find(|(n, _)| n == name) {
            if neutral(api, name, v) {
                continue;
            }
            return Err(ApiError::param(
                name.as_str(),
                format!("not supported by folio except as {want}, got {}", show(v)),
            ));
        }
        let path = match api {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        };
        return Err(unknown(path, name, v));
    }
    Ok(ignored)
}

/// Fields only /v1/responses reads (the request's own; see `responses::request`).
const RESPONSES_OWN: &[&str] = &[
    "input",
    "instructions",
    "max_output_tokens",
    "text",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "store",
    "previous_response_id",
];

/// /v1/responses fields that keep their name and meaning on the chat path: the sampling
/// extensions after `user` go through unchanged (as vLLM's Responses endpoint takes them).
pub const RESPONSES_PASS: &[&str] = &[
    "model",
    "stream",
    "temperature",
    "top_p",
    "user",
    "seed",
    "top_k",
    "min_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "min_tokens",
    "allowed_token_ids",
    "bad_words",
    "ignore_eos",
    "lora",
    "speculative",
    "num_speculative_tokens",
    "deadline_ms",
    // vLLM's structured-output field (OpenAI's is text.format).
    "structured_outputs",
];

/// /v1/responses fields accepted and ignored (they cannot change the output).
pub const RESPONSES_IGNORED: &[(&str, &str)] = &[
    ("metadata", "echoed back in the response"),
    ("service_tier", "one tier"),
    (
        "prompt_cache_key",
        "folio's prefix cache matches prompts without a key",
    ),
    ("safety_identifier", "folio keeps no per-user records"),
    (
        "stream_options",
        "include_obfuscation: folio adds no padding to stream events",
    ),
];

/// /v1/responses features folio does not implement: accepted only at the neutral value
/// (name, neutral value, why any other is refused).
pub const RESPONSES_UNSUPPORTED: &[(&str, &str, &str)] = &[
    (
        "conversation",
        "null",
        "folio keeps no conversations; send the whole conversation in input",
    ),
    (
        "background",
        "false",
        "folio answers in the request (no background responses to poll)",
    ),
    (
        "max_tool_calls",
        "null",
        "folio does not count tool calls across a response",
    ),
    ("include", "[]", "folio has no extra output data to include"),
    (
        "top_logprobs",
        "0",
        "logprobs are not supported on /v1/responses by folio; use /v1/chat/completions",
    ),
    (
        "truncation",
        "\"disabled\"",
        "folio never drops input; a too-long input is a 400",
    ),
    (
        "reasoning",
        "null",
        "folio cannot set a reasoning effort; thinking models think as their template says",
    ),
    ("prompt", "null", "folio has no stored prompt templates"),
];

fn responses_neutral(name: &str, v: &Value) -> bool {
    match name {
        "background" => v == &Value::Bool(false),
        "include" => v.as_array().is_some_and(Vec::is_empty),
        "top_logprobs" => v.as_u64() == Some(0),
        "truncation" => v == "disabled",
        _ => false,
    }
}

/// The /v1/responses fields.
const RESPONSES_TABLE: Table = Table {
    path: "/v1/responses",
    reads: &[RESPONSES_OWN, RESPONSES_PASS],
    ignored: RESPONSES_IGNORED,
    unsupported: RESPONSES_UNSUPPORTED,
    neutral: responses_neutral,
};

/// Rejects the first field of a /v1/responses body folio neither reads nor may ignore.
pub fn check_responses(body: &Map<String, Value>) -> Result<(), ApiError> {
    RESPONSES_TABLE.check(body)
}

/// Fields /v1/embeddings reads (`pooling`: a folio extension, `last` or `mean`; `lora`:
/// as on the generation endpoints).
pub const EMBEDDINGS: &[&str] = &[
    "model",
    "input",
    "encoding_format",
    "dimensions",
    "user",
    "pooling",
    "lora",
];

/// /v1/embeddings fields accepted and ignored.
pub const EMBEDDINGS_IGNORED: &[(&str, &str)] = &[
    (
        "priority",
        "vLLM's priority scheduling; folio schedules FCFS",
    ),
    ("request_id", "vLLM request id; folio makes its own"),
];

/// /v1/embeddings options folio has only at their default (vLLM's names).
pub const EMBEDDINGS_UNSUPPORTED: &[(&str, &str, &str)] = &[
    (
        "truncate_prompt_tokens",
        "null",
        "folio never cuts an input; a too-long one is a 400",
    ),
    (
        "add_special_tokens",
        "true",
        "inputs are tokenized as completions prompts are",
    ),
    ("normalize", "true", "vectors are always L2-normalized"),
];

fn embeddings_neutral(name: &str, v: &Value) -> bool {
    matches!(name, "add_special_tokens" | "normalize") && v == &Value::Bool(true)
}

/// The /v1/embeddings fields.
const EMBEDDINGS_TABLE: Table = Table {
    path: "/v1/embeddings",
    reads: &[EMBEDDINGS],
    ignored: EMBEDDINGS_IGNORED,
    unsupported: EMBEDDINGS_UNSUPPORTED,
    neutral: embeddings_neutral,
};

/// Rejects the first field of a /v1/embeddings body folio neither reads nor may ignore.
pub fn check_embeddings(body: &Map<String, Value>) -> Result<(), ApiError> {
    EMBEDDINGS_TABLE.check(body)
}

/// One endpoint's fields: read, ignored, and (name, neutral value, why) accepted only
/// where `neutral` says so.
struct Table {
    path: &'static str,
    reads: &'static [&'static [&'static str]],
    ignored: &'static [(&'static str, &'static str)],
    unsupported: &'static [(&'static str, &'static str, &'static str)],
    neutral: fn(&str, &Value) -> bool,
}

impl Table {
    fn check(&self, body: &Map<String, Value>) -> Result<(), ApiError> {
        for (name, v) in body {
            let read = self.reads.iter().any(|r| r.contains(&name.as_str()));
            if v.is_null() || read || self.ignored.iter().any(|(n, _)| n == name) {
                continue;
            }
            if let Some((_, want, why)) = self.unsupported.iter().find(|(n, ..)| n == name) {
                if (self.neutral)(name, v) {
                    continue;
                }
                return Err(ApiError::param(
                    name.as_str(),
                    format!("{why} (only {want} is accepted), got {}", show(v)),
                ));
            }
            return Err(unknown(self.path, name, v));
        }
        Ok(())
    }
}

/// The 400 for a field no table names.
fn unknown(path: &str, name: &str, v: &Value) -> ApiError {
    ApiError::param(
        name,
        format!(
            "unknown field for {path}: folio does not implement it, got {}",
            show(v)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value, api: Api) -> Result<(), String> {
        check(v.as_object().unwrap(), api)
            .map(|_| ())
            .map_err(|e| e.message)
    }

    #[test]
    fn ignored_fields_are_returned_for_the_warning() {
        let got = check(
            json!({"messages": [], "verbosity": "low", "cache_prompt": true, "store": null,
                   "metadata": {}, "dynatemp_range": 0, "typical_p": 0.9})
            .as_object()
            .unwrap(),
            Api::Chat,
        )
        .unwrap();
        assert_eq!(
            warning(&got).unwrap(),
            "299 folio \"ignored fields: cache_prompt, metadata, verbosity\""
        );
        assert_eq!(warning(&[]), None);
        assert_eq!(
            run(json!({"dynatemp_range": 0.5}), Api::Chat).unwrap_err(),
            "dynatemp_range: not supported by folio except as 0, got 0.5"
        );
    }

    #[test]
    fn unknown_fields_are_named_and_harmless_ones_pass() {
        assert_eq!(
            run(json!({"prompt": "x", "frobnicate": 1}), Api::Completions).unwrap_err(),
            "frobnicate: unknown field for /v1/completions: folio does not implement it, got 1"
        );
        assert_eq!(
            run(json!({"messages": [], "prompt": "x"}), Api::Chat).unwrap_err(),
            "prompt: unknown field for /v1/chat/completions: folio does not implement it, got string \"x\""
        );
        assert_eq!(
            run(json!({"use_beam_search": true}), Api::Chat).unwrap_err(),
            "use_beam_search: not supported by folio except as false, got true"
        );
        run(
            json!({"prompt": "x", "metadata": {"a": "b"}, "store": false, "use_beam_search": false,
                   "skip_special_tokens": true, "add_special_tokens": true, "truncate_prompt_tokens": null}),
            Api::Completions,
        )
        .unwrap();
        run(
            json!({"messages": [], "tools": [], "tool_choice": "none", "add_special_tokens": false}),
            Api::Chat,
        )
        .unwrap();
    }

    #[test]
    fn a_chat_request_as_vllm_router_forwards_it_passes() {
        // vllm-router 0.1.17 re-encodes chat requests with these defaults (any policy).
        run(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false,
                   "max_tokens": 2, "logprobs": false, "no_stop_trim": false, "ignore_eos": false,
                   "continue_final_message": false, "skip_special_tokens": true,
                   "separate_reasoning": true, "stream_reasoning": true,
                   "return_hidden_states": false, "include_reasoning": true}),
            Api::Chat,
        )
        .unwrap();
        assert_eq!(
            run(
                json!({"messages": [], "continue_final_message": true}),
                Api::Chat
            )
            .unwrap_err(),
            "continue_final_message: not supported by folio except as false, got true"
        );
    }

    #[test]
    fn responses_features_folio_lacks_are_named() {
        let run = |v: Value| check_responses(v.as_object().unwrap()).map_err(|e| e.message);
        assert_eq!(
            run(json!({"input": "x", "background": true})).unwrap_err(),
            "background: folio answers in the request (no background responses to poll) (only false is accepted), got true"
        );
        assert_eq!(
            run(json!({"conversation": "conv_1"})).unwrap_err(),
            "conversation: folio keeps no conversations; send the whole conversation in input (only null is accepted), got string \"conv_1\""
        );
        // Tools, storing and continuing are read (see `responses`).
        run(
            json!({"input": "x", "store": true, "previous_response_id": "resp_1",
                   "tools": [{"type": "function", "name": "f"}], "tool_choice": "required",
                   "parallel_tool_calls": false}),
        )
        .unwrap();
        assert_eq!(
            run(json!({"messages": []})).unwrap_err(),
            "messages: unknown field for /v1/responses: folio does not implement it, got an array of 0 items"
        );
        let emb = |v: Value| check_embeddings(v.as_object().unwrap()).map_err(|e| e.message);
        assert_eq!(
            emb(json!({"input": "x", "normalize": false})).unwrap_err(),
            "normalize: vectors are always L2-normalized (only true is accepted), got false"
        );
        emb(json!({"input": "x", "normalize": true, "pooling": "mean", "dimensions": 3})).unwrap();
        run(
            json!({"input": "x", "store": false, "tools": [], "tool_choice": "auto",
                   "truncation": "disabled", "metadata": {"k": "v"}, "include": [],
                   "previous_response_id": null, "seed": 1}),
        )
        .unwrap();
    }
}
