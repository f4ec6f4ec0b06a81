//! Which request fields folio reads, which it ignores because ignoring them cannot change
//! the output, and which it accepts only at their neutral value. Any other field is a 400
//! that names it: a client that sends a field expects it to do something, and silently
//! dropping it (as folio did before) returns a wrong answer that looks right.
//!
//! The README's "Request fields" table lists the same sets; keep them in step.

use crate::error::ApiError;
use crate::fields::show;
use crate::params::Api;
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
];

/// Accepted and ignored: they ask for bookkeeping or scheduling hints that do not change
/// what is generated.
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
];

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
        "length_penalty" => v.as_f64() == Some(1.0),
        "add_special_tokens" => v == &Value::Bool(api == Api::Completions),
        "echo" => api == Api::Chat && v == &Value::Bool(false),
        _ => false,
    }
}

/// Rejects the first field of `body` folio neither reads nor may ignore (null values count
/// as absent, as everywhere).
pub fn check(body: &Map<String, Value>, api: Api) -> Result<(), ApiError> {
    let own = match api {
        Api::Completions => COMPLETIONS,
        Api::Chat => CHAT,
    };
    for (name, v) in body {
        if v.is_null()
            || COMMON.contains(&name.as_str())
            || own.contains(&name.as_str())
            || IGNORED.iter().any(|(n, _)| n == name)
        {
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
        return Err(ApiError::param(
            name.as_str(),
            format!(
                "unknown field for {path}: folio does not implement it, got {}",
                show(v)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value, api: Api) -> Result<(), String> {
        check(v.as_object().unwrap(), api).map_err(|e| e.message)
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
}
