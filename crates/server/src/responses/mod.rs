//! `POST /v1/responses`: OpenAI's Responses API, text in and text out, for clients built
//! on the newer OpenAI API. A request runs as a chat completion (`request` turns its body
//! into one, `generate::start` validates, tokenizes and submits it, so sampling, limits,
//! structured output and the engine loop are the chat path's); `build` turns the text
//! into the `response` object or its stream events, and `sink` hands those to the
//! one drive loop (`running`).
//!
//! folio stores no responses: `store: true`, `previous_response_id`, `background`,
//! `conversation` and tools are 400s naming the field (see `known_fields`), and
//! `GET /v1/responses/{id}` is 501.

mod build;
mod request;
mod sink;

use crate::api::Api;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use build::Build;
use serde_json::{Map, Value};
use sink::ResponsesSink;
use std::time::Instant;

pub async fn responses(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    let arrival = Instant::now();
    answer(st, body, arrival)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn answer(
    st: AppState,
    body: Map<String, Value>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    crate::known_fields::check_responses(&body)?;
    let (chat, asked) = request::to_chat(&body)?;
    let mut req = crate::generate::start(st, Api::Chat, chat, arrival)
        .await
        .map_err(request::renamed)?;
    let build = Build::new(req.job.model.clone(), asked, req.job.reasoning);
    req.job.id = build.id().to_string();
    req.drive(ResponsesSink { build }).await
}
