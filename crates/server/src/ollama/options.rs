//! Ollama's `options` object → the chat fields folio's sampling reads. Options that change
//! the output map to folio's own fields (so their limits and errors are the chat path's,
//! renamed back to `options.…` by [`renamed`]); the runtime knobs of Ollama's llama.cpp
//! runner (GPU layers, threads, mmap, batch) do not change what is generated and are
//! accepted and ignored; samplers folio does not have are accepted only at their
//! neutral value (`tfs_z`); any other name is a 400 naming it.

use crate::error::ApiError;
use crate::fields::show;
use serde_json::{Map, Value};

/// Ollama option → the chat field it becomes.
pub const MAPPED: &[(&str, &str)] = &[
    ("num_predict", "max_tokens"),
    ("temperature", "temperature"),
    ("top_k", "top_k"),
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("repeat_penalty", "repetition_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("seed", "seed"),
    ("stop", "stop"),
    ("typical_p", "typical_p"),
    ("repeat_last_n", "repeat_last_n"),
    ("mirostat", "mirostat"),
    ("mirostat_tau", "mirostat_tau"),
    ("mirostat_eta", "mirostat_eta"),
];

/// Accepted and ignored, and why ignoring them cannot change the answer (or what folio
/// does instead).
pub const IGNORED: &[(&str, &str)] = &[
    ("num_ctx", "the context is the one the model was loaded with (`context_length` in /api/ps); a prompt that does not fit is a 400, not truncated"),
    ("num_keep", "folio does not shift the context; a prompt that does not fit is a 400"),
    ("penalize_newline", "deprecated in Ollama, which ignores it too"),
    ("num_batch", "the engine batches by its own token budget"),
    ("num_gpu", "runtime placement"),
    ("main_gpu", "runtime placement"),
    ("low_vram", "runtime placement"),
    ("num_thread", "the engine's thread pool is set at start"),
    ("numa", "runtime placement"),
    ("use_mmap", "the model file is always mapped"),
    ("use_mlock", "runtime placement"),
    ("vocab_only", "runtime loading"),
    ("f16_kv", "the KV format is set at start (--kv-format)"),
    ("logits_all", "runtime loading"),
    ("embedding_only", "runtime loading"),
];

/// Samplers folio does not have (tail-free sampling, gone from llama.cpp too): accepted
/// at the value that turns them off.
const NEUTRAL: &[(&str, f64)] = &[("tfs_z", 1.0)];

/// Writes `options` into the chat body `chat`.
pub fn apply(options: Option<&Value>, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let o = match options {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(ApiError::param(
                "options",
                format!("must be an object, got {}", show(v)),
            ))
        }
    };
    for (name, v) in o {
        if v.is_null() {
            continue;
        }
        if let Some((_, to)) = MAPPED.iter().find(|(n, _)| n == name) {
            // Ollama: -1 generates until the model stops, -2 fills the context; folio's
            // default (no max_tokens) is the rest of the context, capped by
            // --default-max-tokens.
            if *name == "num_predict" && matches!(v.as_i64(), Some(n) if n < 0) {
                continue;
            }
            chat.insert(to.to_string(), v.clone());
        } else if IGNORED.iter().any(|(n, _)| n == name) {
        } else if let Some((_, off)) = NEUTRAL.iter().find(|(n, _)| n == name) {
            if v.as_f64() != Some(*off) {
                return Err(ApiError::param(
                    format!("options.{name}"),
                    format!(
                        "folio has no such sampler; only {off} (off) is accepted, got {}",
                        show(v)
                    ),
                ));
            }
        } else {
            return Err(ApiError::param(
                format!("options.{name}"),
                format!(
                    "unknown option, got {}; folio reads {}",
                    show(v),
                    MAPPED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// An error of the chat path renamed to the Ollama field the client sent: `max_tokens` is
/// `options.num_predict`, `response_format` is `format`, and so on.
pub fn renamed(e: ApiError) -> ApiError {
    let options: Vec<(&str, String)> = MAPPED
        .iter()
        .map(|(ours, chat)| (*chat, format!("options.{ours}")))
        .collect();
    e.renamed(
        options
            .iter()
            .map(|(chat, ours)| (*chat, ours.as_str()))
            .chain([("response_format", "format")]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(o: Value) -> Result<Value, String> {
        let mut chat = Map::new();
        apply(Some(&o), &mut chat).map_err(|e| e.message)?;
        Ok(Value::Object(chat))
    }

    #[test]
    fn options_map_to_chat_fields() {
        let got = run(
            json!({"num_predict": 8, "temperature": 0, "top_k": 1, "top_p": 0.9,
            "min_p": 0.1, "repeat_penalty": 1.1, "seed": 3, "stop": ["\n"], "num_ctx": 4096,
            "num_gpu": 99, "typical_p": 0.9, "mirostat": 2, "mirostat_tau": 4, "tfs_z": 1.0,
            "repeat_last_n": 32}),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"max_tokens": 8, "temperature": 0, "top_k": 1, "top_p": 0.9, "min_p": 0.1,
                   "repetition_penalty": 1.1, "seed": 3, "stop": ["\n"], "typical_p": 0.9,
                   "mirostat": 2, "mirostat_tau": 4, "repeat_last_n": 32})
        );
        assert_eq!(run(json!({"num_predict": -1})).unwrap(), json!({}));
    }

    #[test]
    fn unknown_and_non_neutral_options_name_the_field() {
        assert_eq!(
            run(json!({"tfs_z": 0.5})).unwrap_err(),
            "options.tfs_z: folio has no such sampler; only 1 (off) is accepted, got 0.5"
        );
        assert!(run(json!({"temprature": 1}))
            .unwrap_err()
            .starts_with("options.temprature: unknown option, got 1; folio reads num_predict, "));
        assert_eq!(
            run(json!(3)).unwrap_err(),
            "options: must be an object, got 3"
        );
    }

    #[test]
    fn chat_errors_are_renamed() {
        let e = renamed(ApiError::param(
            "max_tokens",
            "must be an integer in [1, 9], got 0",
        ));
        assert_eq!(
            e.message,
            "options.num_predict: must be an integer in [1, 9], got 0"
        );
        assert_eq!(e.param.as_deref(), Some("options.num_predict"));
        let e = renamed(ApiError::param("response_format.json_schema", "bad"));
        assert_eq!(e.message, "format.json_schema: bad");
        let e = renamed(ApiError::param("top_logprobs", "x"));
        assert_eq!(e.message, "top_logprobs: x");
    }
}
