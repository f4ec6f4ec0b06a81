//! Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`, made from
//! the server's one error type: the `type` follows the HTTP status that [`Error::http`]
//! chose (never the message text), so every failure the chat path can report reaches an
//! Anthropic client in the form its SDK maps to an exception class.
//!
//! [`Error::http`]: crate::error::Error::http

use crate::error::ApiError;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Anthropic's error `type` for an HTTP status.
pub fn kind(status: u16) -> &'static str {
    match status {
        400 | 405 | 408 | 415 | 422 | 501 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        // Anthropic answers 529 for this; folio keeps its 503 (clients retry either).
        503 => "overloaded_error",
        _ => "api_error",
    }
}

/// The error body.
pub fn body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": kind(e.status.as_u16()), "message": e.message}})
}

/// The whole answer: the status and headers of the OpenAI-shaped answer (a 429 keeps its
/// `Retry-After`), Anthropic's body.
pub fn response(e: ApiError) -> Response {
    let b = body(&e).to_string();
    let mut r = e.into_response();
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    *r.body_mut() = Body::from(b);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_decides_the_type() {
        let e = ApiError::param("max_tokens", "required, got nothing");
        assert_eq!(
            body(&e),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                   "message": "max_tokens: required, got nothing"}})
        );
        let e = ApiError::model_not_found("claude-x", "smol");
        assert_eq!(body(&e)["error"]["type"], "not_found_error");
        assert_eq!(
            body(&ApiError::shutting_down())["error"]["type"],
            "overloaded_error"
        );
        assert_eq!(kind(401), "authentication_error");
        assert_eq!(kind(429), "rate_limit_error");
        assert_eq!(kind(500), "api_error");
    }
}
