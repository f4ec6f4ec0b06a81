//! Errors in Ollama's shape: `{"error": "…"}` with the status folio's [`ApiError`] chose
//! (400 bad field, 404 unknown model, 429/503 overload, 500 fault). Ollama's clients read
//! only `error`, so the message carries what OpenAI's `param` and `code` would.

use crate::error::ApiError;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// An [`ApiError`] answered the Ollama way.
#[derive(Debug)]
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        OllamaError(e)
    }
}

impl OllamaError {
    /// The body: `{"error": message}`.
    pub fn body(&self) -> Value {
        json!({"error": self.0.message})
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let mut r = (self.0.status, axum::Json(self.body())).into_response();
        if self.0.status == axum::http::StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(crate::error::RETRY_AFTER_S),
            );
        }
        r
    }
}

/// A handler result rendered the Ollama way.
pub type Result<T> = std::result::Result<T, OllamaError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_one_string_with_the_status_kept() {
        let e = OllamaError(ApiError::param(
            "options.top_k",
            "must be an integer in [0, 1000], got -3",
        ));
        assert_eq!(
            e.body(),
            json!({"error": "options.top_k: must be an integer in [0, 1000], got -3"})
        );
        assert_eq!(e.into_response().status(), 400);
    }
}
