//! The one error type of the HTTP layer, rendered in OpenAI's JSON shape:
//! `{"error": {"message", "type", "param", "code"}}` with the matching status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use folio_engine::{FinishReason, InvalidKind, SubmitError};
use serde_json::json;

/// An error answer. Messages name the field, the limit and the value received.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A short machine-readable code (`invalid_parameter`, `context_length_exceeded`, …).
    pub code: &'static str,
}

impl ApiError {
    /// 400 for a bad field: `"{param}: {detail}"`.
    pub fn param(param: impl Into<String>, detail: impl std::fmt::Display) -> ApiError {
        let param = param.into();
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("{param}: {detail}"),
            param: Some(param),
            code: "invalid_parameter",
        }
    }

    /// 400 without a single field to blame (malformed JSON, …).
    pub fn bad_request(message: impl Into<String>, code: &'static str) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
            code,
        }
    }

    pub fn new(status: StatusCode, message: impl Into<String>, code: &'static str) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code,
        }
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
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_S),
            );
        }
        r
    }
}

/// The `Retry-After` of a 429, in seconds.
pub const RETRY_AFTER_S: &str = "1";

impl ApiError {
    /// 500 for a tokenizer task (run off the async threads) that panicked or was cancelled.
    pub fn tokenizer_task(e: tokio::task::JoinError) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("tokenizer task failed: {e}"),
            "internal",
        )
    }

    /// 503 while the server drains after a shutdown signal.
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server is shutting down",
            "shutting_down",
        )
    }

    /// 404 for a `model` other than the served one.
    pub fn model_not_found(model: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                format!("The model `{model}` does not exist; this server serves `{served}`."),
                "model_not_found",
            )
        }
    }
}

impl ApiError {
    /// 500 for a choice the engine ended with an error.
    pub fn generation_failed(m: &str) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("generation failed: {m}"),
            "generation_failed",
        )
    }

    /// The HTTP answer to a request the engine refused before its first token.
    pub fn refusal(reason: FinishReason) -> ApiError {
        match reason {
            FinishReason::Rejected(m) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("request rejected: {m}"),
                "overloaded",
            ),
            FinishReason::ShuttingDown => ApiError::shutting_down(),
            FinishReason::Error(m) => ApiError::generation_failed(&m),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("unexpected end: {}", other.as_openai()),
                "internal",
            ),
        }
    }
}

impl From<SubmitError> for ApiError {
    /// NOTE: bad input is 400 naming the field; shutdown is 503 (go elsewhere).
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::Invalid {
                field,
                message,
                kind,
            } => ApiError {
                status: StatusCode::BAD_REQUEST,
                message,
                param: Some(field.into()),
                code: match kind {
                    InvalidKind::ContextLength => "context_length_exceeded",
                    InvalidKind::Parameter => "invalid_parameter",
                },
            },
            SubmitError::ShuttingDown => ApiError::shutting_down(),
        }
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
