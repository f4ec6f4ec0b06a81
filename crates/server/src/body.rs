//! Request bodies: bytes → a JSON object, every failure an OpenAI-shaped 4xx.
//!
//! NOTE: bodies are parsed into a `serde_json::Value` first and fields are read one by one
//! (see `fields`), rather than derived into structs, so that a wrong type is reported as
//! "temperature: must be a number, got string \"hot\"" instead of serde's
//! position-only message. serde_json's recursion limit (128) turns deeply nested input
//! into a 400 instead of a stack overflow.

use crate::error::ApiError;
use crate::json_budget::{self, JsonBudget};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// A request body that is a JSON object.
pub struct JsonObject(pub Map<String, Value>);

impl FromRequest<AppState> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            if let Some(t) = crate::body_deadline::BodyTimeout::in_chain(&r) {
                ApiError::from(crate::error::Error::BodyTimeout(t.to_string()))
            } else if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::from(crate::error::Error::BodyTooLarge(format!(
                    "request body: larger than the limit of {} bytes (--max-request-bytes)",
                    state.0.opts.max_body_bytes
                )))
            } else {
                ApiError::from(crate::error::Error::Body {
                    status,
                    message: r.body_text(),
                })
            }
        })?;
        // A large body waits for its turn before it is parsed (see `prompt_permit`).
        let _turn = state.prompt_permit(bytes.len()).await;
        parse_object(&bytes, state.body_budget()).map(JsonObject)
    }
}

/// Parses `bytes` as one JSON object within `budget` (see `json_budget`).
pub fn parse_object(bytes: &[u8], budget: JsonBudget) -> Result<Map<String, Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "request body: expected a JSON object, got an empty body",
            "invalid_json",
        ));
    }
    json_budget::parse_object(bytes, budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
        super::parse_object(bytes, JsonBudget::new(8192, 49152, 8192))
    }

    #[test]
    fn rejects_non_objects_and_garbage() {
        assert_eq!(
            parse_object(b"[1,2]").unwrap_err().message,
            "request body: expected a JSON object, got an array"
        );
        assert_eq!(
            parse_object(b"  ").unwrap_err().message,
            "request body: expected a JSON object, got an empty body"
        );
        let e = parse_object(b"\xff\xfe{").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(
            e.message.starts_with("request body: invalid JSON: "),
            "{}",
            e.message
        );
        assert!(parse_object(br#"{"a": 1e999}"#).is_err());
    }

    #[test]
    fn deep_nesting_is_a_400_not_a_crash() {
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse_object(deep.as_bytes()).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(
            e.message.contains("recursion limit exceeded"),
            "{}",
            e.message
        );
    }
}
