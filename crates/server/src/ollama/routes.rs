//! `/api/chat` and `/api/generate`: the body read into a chat (or completions) request,
//! run by `generate::start` and `Running::drive` as /v1/chat/completions is, answered by
//! the NDJSON sink; and `/api/version`.

use super::error::Result;
use super::request::{self, Endpoint};
use super::sink::NdjsonSink;
use crate::api::Api;
use crate::body::JsonObject;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// The Ollama API version whose request and response shapes folio follows (clients that
/// check for features compare against Ollama's versions, not folio's).
pub const OLLAMA_VERSION: &str = "0.9.0";

pub async fn chat(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    run(st, Endpoint::Chat, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn generate(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    run(st, Endpoint::Generate, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_VERSION}))
}

/// Ollama's routes that build or publish models (Modelfiles, blobs, its registry): folio
/// serves GGUF files as they are.
pub async fn unsupported(uri: axum::http::Uri) -> super::error::OllamaError {
    let e: crate::error::ApiError = crate::error::Error::Unsupported(format!(
        "{} is not implemented by folio: it serves GGUF files as they are (no Modelfiles, blobs or registry pushes); use /api/pull for its catalogue models or `folio serve --model PATH`",
        uri.path()
    ))
    .into();
    e.into()
}

async fn run(st: AppState, endpoint: Endpoint, body: Map<String, Value>) -> Result<Response> {
    let arrival = Instant::now();
    let mut ask = request::read(endpoint, &body)?;
    let model = super::resolve(&st, ask.model.as_deref());
    let lease = st.lease(model.as_deref()).await?;
    let load = arrival.elapsed();
    let name = lease.name.clone();
    if let Some(d) = ask.keep_alive {
        st.keep_alive(&name, d);
    }
    if ask.empty {
        return Ok(Json(loaded(
            endpoint,
            &name,
            ask.keep_alive.is_some_and(|d| d.is_zero()),
        ))
        .into_response());
    }
    ask.body.insert("model".into(), json!(name));
    let mut req = crate::generate::start(st.clone(), ask.api, ask.body, arrival)
        .await
        .map_err(|e| prompt_named(endpoint, super::options::renamed(e)))?;
    if ask.api == Api::Chat {
        match ask.think {
            Some(true) => {
                req.job.reasoning =
                    st.0.opts
                        .reasoning()
                        .or(Some(crate::reasoning::Parser::Qwen3))
            }
            Some(false) => req.job.reasoning = None,
            None => {}
        }
    }
    let sink = NdjsonSink::new(endpoint, &req.job, load, Some(lease));
    let mut r = req.drive(sink).await?;
    if ask.stream {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
    }
    Ok(r)
}

/// A generate's prompt went in as chat `messages`: errors about it name `prompt`.
fn prompt_named(endpoint: Endpoint, mut e: crate::error::ApiError) -> crate::error::ApiError {
    if endpoint == Endpoint::Generate && e.param.as_deref() == Some("messages") {
        e.param = Some("prompt".into());
        if let Some(rest) = e.message.strip_prefix("messages") {
            e.message = format!("prompt{rest}");
        }
    }
    e
}

/// The answer to a request without messages or prompt: Ollama's way to load a model
/// (`done_reason: "load"`) or, with `keep_alive: 0`, to unload it (`"unload"`).
fn loaded(endpoint: Endpoint, model: &str, unload: bool) -> Value {
    let mut v = json!({"model": model, "created_at": super::clock::now()});
    match endpoint {
        Endpoint::Chat => v["message"] = json!({"role": "assistant", "content": ""}),
        Endpoint::Generate => v["response"] = json!(""),
    }
    v["done"] = json!(true);
    v["done_reason"] = json!(if unload { "unload" } else { "load" });
    v
}
