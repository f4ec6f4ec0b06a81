//! Handlers: the generation endpoints delegate to `generate`; the rest are small.

use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::generate::generate;
use crate::params::Api;
use crate::prompt::{self, PromptInput};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::time::Instant;

pub async fn completions(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    // NOTE: arrival is taken after the body is read; for TTFT the difference is the upload.
    let arrival = Instant::now();
    generate(st, Api::Completions, body, arrival)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn chat(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    let arrival = Instant::now();
    generate(st, Api::Chat, body, arrival)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn models(State(st): State<AppState>) -> Json<Value> {
    let s = &st.0;
    Json(json!({
        "object": "list",
        "data": [{
            "id": s.model_name,
            "object": "model",
            "created": s.started,
            "owned_by": "folio",
            "root": s.engine.info.model_path,
            "parent": null,
            "max_model_len": s.engine.info.context_length,
            "permission": [],
        }]
    }))
}

/// `{prompt}` or `{messages}` → `{count, max_model_len, tokens}` (vLLM's shape).
pub async fn tokenize(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let s = &st.0;
    let f = Fields::new(&body);
    let (input, field) = match (f.get("prompt"), f.get("messages")) {
        (Some(Value::String(p)), None) => (PromptInput::Text(p.clone()), "prompt"),
        (Some(v), None) => {
            return Err(ApiError::param(
                "prompt",
                format!("must be a string, got {}", show(v)),
            ))
        }
        (None, Some(_)) => (prompt::chat_prompt(&f)?, "messages"),
        _ => {
            return Err(ApiError::bad_request(
                "exactly one of prompt or messages is required",
                "invalid_parameter",
            ))
        }
    };
    let add_special = f.bool("add_special_tokens", true)?;
    let tok = s.engine.tokenizer.clone();
    let mut tokens = tokio::task::spawn_blocking(move || prompt::tokenize(&tok, &input, field))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("tokenizer task failed: {e}"),
                "internal",
            )
        })??;
    if !add_special
        && field == "prompt"
        && s.engine.tokenizer.add_bos()
        && tokens.first() == s.engine.tokenizer.bos_id().as_ref()
    {
        tokens.remove(0);
    }
    Ok(Json(
        json!({"count": tokens.len(), "max_model_len": s.engine.info.context_length, "tokens": tokens}),
    ))
}

/// `{tokens}` → `{prompt}`.
pub async fn detokenize(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let s = &st.0;
    let vocab = s.engine.info.vocab_size;
    let f = Fields::new(&body);
    let Some(Value::Array(items)) = f.get("tokens") else {
        let got = f.get("tokens").map_or("nothing".to_string(), show);
        return Err(ApiError::param(
            "tokens",
            format!("must be an array of token ids, got {got}"),
        ));
    };
    let ids = items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_u64() {
            Some(t) if (t as usize) < vocab => Ok(t as u32),
            _ => Err(ApiError::param(
                format!("tokens[{i}]"),
                format!("must be a token id in [0, {vocab}), got {}", show(v)),
            )),
        })
        .collect::<Result<Vec<u32>, _>>()?;
    Ok(Json(
        json!({"prompt": s.engine.tokenizer.decode(&ids, false)}),
    ))
}

pub async fn health() -> Json<Value> {
    Json(json!({}))
}

pub async fn metrics(State(st): State<AppState>) -> Response {
    let s = &st.0;
    let text = s
        .metrics
        .render(&s.engine.info, &s.engine.metrics, &s.model_name);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route for {}", uri.path()),
        "not_found",
    )
}

pub async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {}", uri.path()),
        "method_not_allowed",
    )
}
