//! What one request can really use: the model's context length, or less when the KV pool
//! cannot hold a sequence that long.
//!
//! The engine refuses a request whose final KV can never fit the whole pool
//! (`RejectReason::KvNeverFits`); that refusal reached clients as a 429 "retry later",
//! which no retry can fix. The server therefore checks prompts and `max_tokens` against
//! [`Capacity::max_model_len`] before submitting (a 400 naming the limit and the value),
//! clamps the default `max_tokens` to it (as vLLM clamps to its `max_model_len`), and
//! reports it as `max_model_len` in /v1/models and /tokenize.

use crate::error::ApiError;
use folio_engine::{EngineInfo, MaxTokens};

/// The two limits on one request's tokens (prompt + output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The model's context length.
    pub context: usize,
    /// The longest sequence the KV pool holds (`EngineInfo::kv_capacity_tokens`).
    pub kv_tokens: usize,
}

impl Capacity {
    /// Only the context counts (`/tokenize`, which runs nothing).
    pub fn context_only(context: usize) -> Capacity {
        Capacity {
            context,
            kv_tokens: context,
        }
    }

    pub fn of(info: &EngineInfo) -> Capacity {
        Capacity {
            context: info.context_length,
            kv_tokens: info.kv_capacity_tokens,
        }
    }

    /// Prompt + output tokens one request can use. NOTE: `min(context, kv_tokens)` is one
    /// token conservative for the pool (the last generated token needs no KV), which keeps
    /// the rule the same as the context's: prompt + max_tokens ≤ max_model_len.
    pub fn max_model_len(&self) -> usize {
        self.context.min(self.kv_tokens)
    }

    /// Whether the KV pool, not the context, is the binding limit.
    pub fn pool_bound(&self) -> bool {
        self.kv_tokens < self.context
    }

    /// The limit as a phrase that completes "…, but {phrase}".
    fn limit_phrase(&self) -> String {
        if self.pool_bound() {
            format!(
                "one request can use at most {} tokens (the KV pool holds {} tokens, less than the context length of {}; see --kv-cache-bytes)",
                self.max_model_len(),
                self.kv_tokens,
                self.context
            )
        } else {
            format!("the context length is {} tokens", self.context)
        }
    }

    /// The startup line: context against KV capacity.
    pub fn describe(&self) -> String {
        if self.pool_bound() {
            format!(
                "context {} tokens, KV pool holds {} tokens: one request can use at most {} tokens",
                self.context,
                self.kv_tokens,
                self.max_model_len()
            )
        } else {
            format!(
                "context {} tokens, KV pool holds {} tokens: one request can use the whole context",
                self.context, self.kv_tokens
            )
        }
    }

    /// A tokenized prompt: at least one token, and room for one generated token.
    pub fn check_prompt(&self, field: &str, len: usize) -> Result<(), ApiError> {
        if len == 0 {
            return Err(ApiError::param(
                field,
                "must contain at least 1 token, got 0",
            ));
        }
        let max = self.max_model_len();
        if len >= max {
            return Err(self.too_long(
                field,
                len,
                0,
                false,
                ApiError::param(
                    field,
                    format!(
                        "{len} tokens, but {} (at most {} prompt tokens fit)",
                        self.limit_phrase(),
                        max.saturating_sub(1)
                    ),
                ),
            ));
        }
        Ok(())
    }

    /// Text that must encode to more prompt tokens than fit, refused before it is
    /// tokenized (tokenizing costs ~90 bytes of memory per byte of text): `min_tokens` is
    /// `Tokenizer::min_tokens(text)`, a lower bound on its token count.
    pub fn check_text(
        &self,
        field: &str,
        bytes: usize,
        min_tokens: usize,
        max_token_bytes: Option<usize>,
    ) -> Result<(), ApiError> {
        let fit = self.max_model_len().saturating_sub(1);
        if min_tokens <= fit {
            return Ok(());
        }
        Err(self.too_long(field, min_tokens, 0, true, ApiError::param(
            field,
            format!(
                "{bytes} bytes of text, at least {min_tokens} tokens (no token of this model stands for more than {} bytes), but {} (at most {fit} prompt tokens fit)",
                max_token_bytes.unwrap_or(0),
                self.limit_phrase(),
            ),
        )))
    }

    /// The `max_tokens` of a request with `prompt_len` prompt tokens: the requested value
    /// if it fits (0: score only), else a 400; without one, the rest of what fits, capped at
    /// `default_cap`. The engine and the scheduler trust the value this decides.
    pub fn max_tokens(
        &self,
        requested: Option<usize>,
        prompt_field: &str,
        prompt_len: usize,
        default_cap: usize,
    ) -> Result<MaxTokens, ApiError> {
        let max = self.max_model_len();
        let room = max.saturating_sub(prompt_len);
        match requested {
            Some(m) if m > room => {
                let limit = if self.pool_bound() {
                    format!(
                        "what one request can use, {max} tokens (the KV pool holds {} tokens, less than the context length of {}; see --kv-cache-bytes)",
                        self.kv_tokens, self.context
                    )
                } else {
                    format!("the context length of {} tokens", self.context)
                };
                Err(self.too_long(
                    prompt_field,
                    prompt_len,
                    m,
                    false,
                    ApiError::param(
                        "max_tokens",
                        format!(
                            "{m} + {prompt_len} prompt tokens exceeds {limit} (at most {room} fit)"
                        ),
                    ),
                ))
            }
            Some(m) => Ok(MaxTokens::new(m, room)),
            None => Ok(MaxTokens::new(room.min(default_cap).max(1), room)),
        }
    }
}

impl Capacity {
    /// A context overflow: folio's own detail `e` (whose param stays), then OpenAI's words,
    /// which clients recognize (litellm's `ContextWindowExceededError` looks for "This
    /// model's maximum context length is" anywhere in the message); code
    /// `context_length_exceeded`.
    /// `at_least`: `prompt` is a lower bound (text refused before tokenizing).
    fn too_long(
        &self,
        prompt_field: &str,
        prompt: usize,
        completion: usize,
        at_least: bool,
        e: ApiError,
    ) -> ApiError {
        let what = if prompt_field.starts_with("prompt") {
            "prompt"
        } else if prompt_field.starts_with("input") {
            "input"
        } else {
            "messages"
        };
        let al = if at_least { "at least " } else { "" };
        let message = format!(
            "{}. This model's maximum context length is {} tokens. However, you requested {al}{} tokens ({al}{prompt} in the {what}, {completion} in the completion). Please reduce the length of the {what} or completion.",
            e.message,
            self.max_model_len(),
            prompt + completion,
        );
        ApiError {
            code: "context_length_exceeded",
            message,
            ..e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: Capacity = Capacity {
        context: 8192,
        kv_tokens: 50_000,
    };
    const POOL: Capacity = Capacity {
        context: 8192,
        kv_tokens: 720,
    };

    #[test]
    fn max_model_len_is_the_smaller_limit() {
        assert_eq!(CTX.max_model_len(), 8192);
        assert!(!CTX.pool_bound());
        assert_eq!(POOL.max_model_len(), 720);
        assert!(POOL.pool_bound());
        assert_eq!(
            POOL.describe(),
            "context 8192 tokens, KV pool holds 720 tokens: one request can use at most 720 tokens"
        );
    }

    #[test]
    fn prompt_checks_name_the_binding_limit() {
        assert_eq!(
            CTX.check_prompt("prompt", 0).unwrap_err().message,
            "prompt: must contain at least 1 token, got 0"
        );
        let e = CTX.check_prompt("prompt", 8192).unwrap_err();
        assert_eq!(
            e.message,
            "prompt: 8192 tokens, but the context length is 8192 tokens (at most 8191 prompt tokens fit). This model's maximum context length is 8192 tokens. However, you requested 8192 tokens (8192 in the prompt, 0 in the completion). Please reduce the length of the prompt or completion."
        );
        assert_eq!(e.code, "context_length_exceeded");
        assert!(CTX.check_prompt("prompt", 8191).is_ok());
        let e = POOL.check_prompt("messages", 900).unwrap_err();
        assert_eq!(
            e.message,
            "messages: 900 tokens, but one request can use at most 720 tokens (the KV pool holds 720 tokens, less than the context length of 8192; see --kv-cache-bytes) (at most 719 prompt tokens fit). This model's maximum context length is 720 tokens. However, you requested 900 tokens (900 in the messages, 0 in the completion). Please reduce the length of the messages or completion."
        );
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(POOL.check_prompt("prompt", 719).is_ok());
    }

    #[test]
    fn text_that_cannot_fit_is_refused_by_its_lower_bound() {
        assert!(CTX.check_text("prompt", 600_000, 8191, Some(81)).is_ok());
        let e = CTX
            .check_text("prompt", 3_800_000, 46_914, Some(81))
            .unwrap_err();
        assert_eq!(e.message, "prompt: 3800000 bytes of text, at least 46914 tokens (no token of this model stands for more than 81 bytes), but the context length is 8192 tokens (at most 8191 prompt tokens fit). This model's maximum context length is 8192 tokens. However, you requested at least 46914 tokens (at least 46914 in the prompt, 0 in the completion). Please reduce the length of the prompt or completion.");
        assert_eq!(e.code, "context_length_exceeded");
        assert!(POOL
            .check_text("messages", 81 * 720, 720, Some(81))
            .is_err());
        assert!(POOL.check_text("messages", 81 * 719, 719, Some(81)).is_ok());
        assert_eq!(Capacity::context_only(100).max_model_len(), 100);
    }

    #[test]
    fn max_tokens_fit_and_default_is_clamped() {
        assert_eq!(
            CTX.max_tokens(None, "prompt", 100, 4096).unwrap().steps(),
            4096
        );
        assert_eq!(
            CTX.max_tokens(None, "prompt", 8000, 4096).unwrap().steps(),
            192
        );
        assert_eq!(
            CTX.max_tokens(Some(10), "prompt", 100, 4096)
                .unwrap()
                .steps(),
            10
        );
        let e = CTX.max_tokens(Some(200), "prompt", 8000, 4096).unwrap_err();
        assert_eq!(e.message, "max_tokens: 200 + 8000 prompt tokens exceeds the context length of 8192 tokens (at most 192 fit). This model's maximum context length is 8192 tokens. However, you requested 8200 tokens (8000 in the prompt, 200 in the completion). Please reduce the length of the prompt or completion.");
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert_eq!(e.code, "context_length_exceeded");
        // The pool: the default shrinks to what fits instead of being refused later.
        assert_eq!(
            POOL.max_tokens(None, "prompt", 2, 4096).unwrap().steps(),
            718
        );
        let e = POOL.max_tokens(Some(4000), "prompt", 2, 4096).unwrap_err();
        assert_eq!(e.message, "max_tokens: 4000 + 2 prompt tokens exceeds what one request can use, 720 tokens (the KV pool holds 720 tokens, less than the context length of 8192; see --kv-cache-bytes) (at most 718 fit). This model's maximum context length is 720 tokens. However, you requested 4002 tokens (2 in the prompt, 4000 in the completion). Please reduce the length of the prompt or completion.");
        assert_eq!(
            POOL.max_tokens(Some(718), "prompt", 2, 4096)
                .unwrap()
                .steps(),
            718
        );
    }
}
