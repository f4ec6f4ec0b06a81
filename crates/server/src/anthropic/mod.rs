//! `POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API, what
//! the `anthropic` SDKs and Claude Code send. A request runs as a chat completion
//! (`request` turns its body into one, `generate::start` validates, tokenizes and submits
//! it, so the prefix cache, speculation, constraints, tools and LoRA by `model` are the
//! chat path's); `build` turns the chat stream's filtered deltas into content blocks and
//! their events, `sink` hands those to the one drive loop (`running`), and `error` gives
//! every failure Anthropic's error shape.

mod build;
pub mod error;
mod request;
mod sink;

use crate::api::Api;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::running::Running;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use build::Build;
use request::Route;
use serde_json::{json, Map, Value};
use sink::MessagesSink;
use std::time::Instant;

pub async fn messages(State(st): State<AppState>, body: Result<JsonObject, ApiError>) -> Response {
    let arrival = Instant::now();
    match body {
        Ok(JsonObject(b)) => answer(st, b, arrival).await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(error::response)
}

async fn answer(
    st: AppState,
    body: Map<String, Value>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    let (chat, asked) = request::to_chat(&body, Route::Messages)?;
    let mut req = crate::generate::start(st, Api::Chat, chat, arrival)
        .await
        .map_err(request::renamed)?;
    if asked.thinking == Some(true) && req.job.reasoning.is_none() {
        // Asked to think without `--reasoning-parser`: a `<think>` the model writes opens
        // a thinking block (qwen3's convention; text without one stays text).
        req.job.reasoning = Some(crate::reasoning::Parser::Qwen3);
    }
    let build = Build::new(&req.job, asked.stop_sequences, Some(tokenizer(&req)));
    req.job.id = build.id().to_string();
    req.drive(MessagesSink { build }).await
}

/// The tokenizer of the model that runs `req` (it decodes the tokens that stopped it).
fn tokenizer(req: &Running) -> std::sync::Arc<folio_tokenizer::Tokenizer> {
    req.model.engine.tokenizer.clone()
}

/// `{"input_tokens": n}`: the prompt's tokens as `/v1/messages` would run it (the chat
/// prompt the same conversation renders to).
pub async fn count_tokens(
    State(st): State<AppState>,
    body: Result<JsonObject, ApiError>,
) -> Response {
    let count = async {
        let JsonObject(body) = body?;
        let (mut chat, _) = request::to_chat(&body, Route::CountTokens)?;
        let messages = chat.remove("messages");
        let (_, ids) = crate::render::chat_ids(&st, messages, &chat)
            .await
            .map_err(request::renamed)?;
        Ok::<_, ApiError>(axum::Json(json!({"input_tokens": ids.len()})).into_response())
    };
    count.await.unwrap_or_else(error::response)
}
