//! The errors of the HTTP layer: [`Error`] says what went wrong (typed, with the values its
//! message names), and [`Error::http`] is the one place that decides each one's status and
//! OpenAI `code`; [`ApiError`] is that answer, rendered in OpenAI's JSON shape
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use folio_engine::{FinishReason, InvalidKind, LoraError, SubmitError};
use serde_json::json;

/// What went wrong with a request. Messages name the field, the limit and the value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad field.
    #[error("{param}: {detail}")]
    Param { param: String, detail: String },
    /// A bad request without a single field to blame (malformed JSON, …).
    #[error("{message}")]
    BadRequest { message: String, code: &'static str },
    /// The engine refused the request at submit time.
    #[error(transparent)]
    Submit(SubmitError),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("Host header: {host:?} is not an allowed host (folio listens on {bound}; allowed are localhost, IP addresses and the names given with --allowed-hosts; `--allowed-hosts '*'` turns this DNS-rebinding check off)")]
    HostNotAllowed { host: String, bound: String },
    #[error("Content-Type header: must be application/json, got {0} (browsers send other types, and none, cross-site without a CORS preflight; send `Content-Type: application/json`, or start folio with --allow-any-content-type)")]
    NotJson(String),
    #[error("runtime LoRA adapter loading and unloading is off: start the server with --allow-runtime-lora (or VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)")]
    RuntimeLoraDisabled,
    /// A `lora_path` that cannot be loaded.
    #[error("lora_path: {0}")]
    LoraPath(String),
    /// An adapter operation failed; `field` is the request field that named it.
    #[error("{err}")]
    Lora { err: LoraError, field: String },
    #[error("The model `{model}` does not exist; this server serves `{served}`.")]
    ModelNotFound { model: String, served: String },
    /// A known model that cannot be had now (still loading past `--load-timeout`, or no
    /// room under `--models-max`/`--models-memory` while the others serve requests).
    #[error("model `{model}`: {reason}")]
    ModelUnavailable { model: String, reason: String },
    /// Loading a model failed (the file, the engine's settings).
    #[error("model `{model}` could not be loaded: {message}")]
    ModelLoadFailed { model: String, message: String },
    #[error("no route for {0}")]
    NoRoute(String),
    /// A stored response that is not there (`field`: the request field that named it,
    /// `previous_response_id`, or none for a path id); `why` says what became of it.
    #[error("{}response {id:?} is not stored: {why}", field.map_or(String::new(), |f| format!("{f}: ")))]
    ResponseNotFound {
        id: String,
        field: Option<&'static str>,
        why: String,
    },
    #[error("{0} is not implemented by folio (it serves /v1/completions, /v1/chat/completions, /v1/responses, /v1/embeddings and /v1/models)")]
    NotImplemented(String),
    /// A route of another API that folio answers without serving (Ollama's Modelfile and
    /// registry routes); the text says what to use instead.
    #[error("{0}")]
    Unsupported(String),
    /// A model that is not on disk (Ollama's `/api/delete`, `/api/show` of a missing file).
    #[error("{0}")]
    ModelMissing(String),
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// The body did not arrive in time.
    #[error("{0}")]
    BodyTimeout(String),
    #[error("{0}")]
    BodyTooLarge(String),
    /// The body could not be read (`status` as the reader said).
    #[error("request body: {message}")]
    Body { status: StatusCode, message: String },
    /// The queue is full.
    #[error("{0}")]
    Overloaded(String),
    /// The engine refused the request before its first token.
    #[error("request rejected: {0}")]
    Rejected(folio_engine::RejectReason),
    #[error("server is shutting down")]
    ShuttingDown,
    #[error("server is draining after a shutdown signal")]
    Draining,
    #[error("{0}")]
    GrammarCompilerBusy(String),
    #[error("embeddings: not done within --request-timeout-s")]
    EmbeddingsTimeout,
    /// The engine ended a choice with an error.
    #[error("generation failed: {0}")]
    GenerationFailed(String),
    /// A server fault (a task that died, an end that cannot happen).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The one mapping from an error to its HTTP status, OpenAI `code` and the field at
    /// fault.
    pub fn http(&self) -> (StatusCode, &'static str, Option<String>) {
        use StatusCode as S;
        match self {
            Error::Param { param, .. } => {
                (S::BAD_REQUEST, "invalid_parameter", Some(param.clone()))
            }
            Error::BadRequest { code, .. } => (S::BAD_REQUEST, code, None),
            Error::Submit(SubmitError::Invalid { field, kind, .. }) => (
                S::BAD_REQUEST,
                match kind {
                    InvalidKind::ContextLength => "context_length_exceeded",
                    InvalidKind::Parameter => "invalid_parameter",
                },
                Some(field.to_string()),
            ),
            Error::Submit(SubmitError::ShuttingDown) | Error::ShuttingDown => {
                (S::SERVICE_UNAVAILABLE, "shutting_down", None)
            }
            Error::Unauthorized(_) => (S::UNAUTHORIZED, "invalid_api_key", None),
            Error::HostNotAllowed { .. } => (S::FORBIDDEN, "host_not_allowed", None),
            Error::NotJson(_) => (S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", None),
            Error::RuntimeLoraDisabled => (S::FORBIDDEN, "runtime_lora_disabled", None),
            Error::LoraPath(_) => (
                S::BAD_REQUEST,
                "invalid_lora_adapter",
                Some("lora_path".into()),
            ),
            Error::Lora { err, field } => {
                let (status, code) = match err {
                    LoraError::Unknown(_) => (S::NOT_FOUND, "model_not_found"),
                    LoraError::Busy { .. } => (S::TOO_MANY_REQUESTS, "lora_slots_busy"),
                    _ => (S::BAD_REQUEST, "invalid_lora_adapter"),
                };
                (status, code, Some(field.clone()))
            }
            Error::ModelNotFound { .. } => (S::NOT_FOUND, "model_not_found", Some("model".into())),
            Error::ModelUnavailable { .. } => (
                S::SERVICE_UNAVAILABLE,
                "model_unavailable",
                Some("model".into()),
            ),
            Error::ModelLoadFailed { .. } => (
                S::INTERNAL_SERVER_ERROR,
                "model_load_failed",
                Some("model".into()),
            ),
            Error::NoRoute(_) => (S::NOT_FOUND, "not_found", None),
            Error::ResponseNotFound { field, .. } => (
                S::NOT_FOUND,
                match field {
                    Some(_) => "previous_response_not_found",
                    None => "response_not_found",
                },
                field.map(String::from),
            ),
            Error::NotImplemented(_) | Error::Unsupported(_) => {
                (S::NOT_IMPLEMENTED, "not_implemented", None)
            }
            Error::ModelMissing(_) => (S::NOT_FOUND, "model_not_found", Some("model".into())),
            Error::MethodNotAllowed { .. } => (S::METHOD_NOT_ALLOWED, "method_not_allowed", None),
            Error::BodyTimeout(_) => (S::REQUEST_TIMEOUT, "body_timeout", None),
            Error::BodyTooLarge(_) => (S::PAYLOAD_TOO_LARGE, "body_too_large", None),
            Error::Body { status, .. } => (*status, "invalid_body", None),
            Error::Overloaded(_) => (S::TOO_MANY_REQUESTS, "overloaded", None),
            Error::Rejected(r) => {
                use folio_engine::RejectReason as R;
                let (status, code) = match r {
                    // Load-dependent: a later retry may be admitted.
                    R::DeadlineUnreachable { .. } | R::GroupRefused => {
                        (S::TOO_MANY_REQUESTS, "overloaded")
                    }
                    // No retry can fix these: the request itself is too big or empty.
                    R::KvNeverFits { .. } => (S::BAD_REQUEST, "context_length_exceeded"),
                    R::EmptyPrompt => (S::BAD_REQUEST, "invalid_request"),
                    // The server chose ids and rates itself: a bug, not the client's fault.
                    R::DuplicateId(_) | R::NotForkable { .. } | R::BadRate { .. } => {
                        (S::INTERNAL_SERVER_ERROR, "internal")
                    }
                };
                (status, code, None)
            }
            Error::Draining => (S::SERVICE_UNAVAILABLE, "shutting_down", None),
            Error::GrammarCompilerBusy(_) => {
                (S::SERVICE_UNAVAILABLE, "grammar_compiler_busy", None)
            }
            Error::EmbeddingsTimeout => (S::SERVICE_UNAVAILABLE, "timeout", None),
            Error::GenerationFailed(_) => (S::INTERNAL_SERVER_ERROR, "generation_failed", None),
            Error::Internal(_) => (S::INTERNAL_SERVER_ERROR, "internal", None),
        }
    }

    /// The HTTP answer to a request the engine refused before its first token.
    pub fn refusal(reason: FinishReason) -> Error {
        match reason {
            FinishReason::Rejected(m) => Error::Rejected(m),
            FinishReason::ShuttingDown => Error::ShuttingDown,
            FinishReason::Error(m) => Error::GenerationFailed(m),
            other => Error::Internal(format!(
                "unexpected end: {}",
                crate::api::finish_reason(&other)
            )),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (status, code, param) = e.http();
        ApiError {
            status,
            message: e.to_string(),
            param,
            code,
            retry_after_s: None,
        }
    }
}

/// An error answer: what [`Error::http`] made of an [`Error`].
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A short machine-readable code (`invalid_parameter`, `context_length_exceeded`, …).
    pub code: &'static str,
    /// A 429's `Retry-After`, seconds, where the server measured one (else
    /// [`RETRY_AFTER_S`]).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// 400 for a bad field: `"{param}: {detail}"`.
    pub fn param(param: impl Into<String>, detail: impl std::fmt::Display) -> ApiError {
        Error::Param {
            param: param.into(),
            detail: detail.to_string(),
        }
        .into()
    }

    /// 400 without a single field to blame (malformed JSON, …).
    pub fn bad_request(message: impl Into<String>, code: &'static str) -> ApiError {
        Error::BadRequest {
            message: message.into(),
            code,
        }
        .into()
    }

    /// OpenAI's `type` string for this status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 401 | 405 | 408 | 413 | 415 | 422 => "invalid_request_error",
            403 => "permission_error",
            404 => "not_found_error",
            501 => "not_implemented_error",
            429 => "rate_limit_error",
            503 => "service_unavailable_error",
            _ => "internal_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    /// NOTE: every 429 carries `Retry-After` (seconds), which OpenAI's clients and
    /// litellm read before retrying.
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            let v = match self.retry_after_s {
                Some(s) => axum::http::HeaderValue::from(s),
                None => axum::http::HeaderValue::from_static(RETRY_AFTER_S),
            };
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        r
    }
}

/// The `Retry-After` of a 429, in seconds.
pub const RETRY_AFTER_S: &str = "1";

impl ApiError {
    /// With a measured `Retry-After` (see `drain_rate`), used if it is a 429.
    pub fn retry_after(self, seconds: u64) -> ApiError {
        ApiError {
            retry_after_s: Some(seconds),
            ..self
        }
    }

    /// 500 for a tokenizer task (run off the async threads) that panicked or was cancelled.
    /// This error under another name of its field: `param` becomes `new`, and so does the
    /// message's leading field name; status and code unchanged. The Responses, Anthropic
    /// and Ollama routes run the chat path and answer in their own field names.
    pub fn with_param(mut self, new: String) -> ApiError {
        if let Some(param) = &self.param {
            if let Some(rest) = self.message.strip_prefix(param.as_str()) {
                self.message = format!("{new}{rest}");
            }
        }
        self.param = Some(new);
        self
    }

    /// [`ApiError::with_param`] by a table of `(chat field, this API's field)`: a `param`
    /// that is a chat field, or starts with it followed by `.` or `[`, takes the other
    /// name (the first match wins; the rest of the path is kept).
    pub fn renamed<'a>(self, table: impl IntoIterator<Item = (&'a str, &'a str)>) -> ApiError {
        let Some(param) = self.param.clone() else {
            return self;
        };
        for (chat, ours) in table {
            if let Some(rest) = param.strip_prefix(chat) {
                if rest.is_empty() || rest.starts_with(['.', '[']) {
                    return self.with_param(format!("{ours}{rest}"));
                }
            }
        }
        self
    }

    pub fn tokenizer_task(e: tokio::task::JoinError) -> ApiError {
        Error::Internal(format!("tokenizer task failed: {e}")).into()
    }

    /// 503 while the server drains after a shutdown signal.
    pub fn shutting_down() -> ApiError {
        Error::ShuttingDown.into()
    }

    /// 404 for a `model` other than the served one.
    pub fn model_not_found(model: &str, served: &str) -> ApiError {
        Error::ModelNotFound {
            model: model.into(),
            served: served.into(),
        }
        .into()
    }

    /// 500 for a choice the engine ended with an error.
    pub fn generation_failed(m: &str) -> ApiError {
        Error::GenerationFailed(m.into()).into()
    }

    /// The HTTP answer to a request the engine refused before its first token.
    pub fn refusal(reason: FinishReason) -> ApiError {
        Error::refusal(reason).into()
    }
}

impl From<SubmitError> for ApiError {
    /// NOTE: bad input is 400 naming the field; shutdown is 503 (go elsewhere).
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::ShuttingDown => Error::ShuttingDown,
            e => Error::Submit(e),
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_error_has_openai_shape() {
        let e = ApiError::param("temperature", "must be in [0, 2], got 5");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            json!({"error": {
                "message": "temperature: must be in [0, 2], got 5",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "invalid_parameter"
            }})
        );
    }

    #[test]
    fn submit_errors_map_to_statuses() {
        let e: ApiError = SubmitError::ShuttingDown.into();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        let e: ApiError = SubmitError::Invalid {
            field: "prompt",
            message: "prompt: 9000 tokens; the context length is 8192".into(),
            kind: InvalidKind::ContextLength,
        }
        .into();
        assert_eq!(
            (e.status, e.param.as_deref(), e.code),
            (
                StatusCode::BAD_REQUEST,
                Some("prompt"),
                "context_length_exceeded"
            )
        );
    }
}
