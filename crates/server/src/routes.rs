//! Handlers: the generation endpoints delegate to `generate`; the rest are small.

use crate::api::Api;
use crate::api::PromptInput;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::generate::generate;
use crate::models::{ModelEntry, Served};
use crate::prompt;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::{header, Uri};
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

/// A model's card: its served name (also as `root`: the file path stays private). A server
/// of several models adds llama-server router mode's `status` (`loaded`, `loading`,
/// `unloaded`); `max_model_len` is known only while it is loaded.
fn model_card(st: &AppState, e: &ModelEntry, loaded: Option<&Served>) -> Value {
    let mut card = json!({
        "id": e.name,
        "object": "model",
        "created": st.0.started,
        "owned_by": "folio",
        "root": e.name,
        "parent": null,
        "max_model_len": loaded.map(|m| m.capacity().max_model_len()),
        "permission": [],
    });
    if !st.0.models.is_single() {
        card["status"] = json!({"value": e.status.as_str()});
    }
    card
}

/// Every known model, each followed by its LoRA adapters when loaded (`parent`: the model).
fn model_cards(st: &AppState) -> Vec<Value> {
    let loaded = st.0.models.loaded();
    let mut data = Vec::new();
    for e in st.model_list() {
        let m = loaded.iter().find(|m| m.name == e.name);
        data.push(model_card(st, &e, m.map(|m| &**m)));
        if let Some(m) = m {
            data.extend(crate::lora::model_cards(st, m));
        }
    }
    data
}

/// `/v1/models` and `/models`: the served models, then their LoRA adapters.
pub async fn models(State(st): State<AppState>) -> Json<Value> {
    Json(json!({"object": "list", "data": model_cards(&st)}))
}

/// `/v1/models/{id}`: the card of a model or an adapter, 404 for any other id.
pub async fn model(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    match model_cards(&st)
        .into_iter()
        .find(|c| c["id"] == id.as_str())
    {
        Some(card) => Json(card).into_response(),
        None => {
            let names: Vec<String> = st.model_list().into_iter().map(|e| e.name).collect();
            ApiError::model_not_found(&id, &names.join("`, `")).into_response()
        }
    }
}

/// The model whose tokenizer `/tokenize` and `/detokenize` use: the body's `model` on a
/// server of several models; the single-model server ignores it, as it always did.
fn tokenizer_model<'a>(st: &AppState, f: &Fields<'a>) -> Result<Option<&'a str>, ApiError> {
    if st.0.models.is_single() {
        return Ok(None);
    }
    crate::lora::model_field(f)
}

/// `{prompt}` or `{messages}` → `{count, max_model_len, tokens}` (vLLM's shape).
pub async fn tokenize(
    State(st): State<AppState>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let messages = body.remove("messages").filter(|m| !m.is_null());
    let prompt = body.remove("prompt").filter(|p| !p.is_null());
    let f = Fields::new(&body);
    let (input, field) = match (prompt, messages) {
        (Some(Value::String(p)), None) => (PromptInput::Text(p), "prompt"),
        (Some(v), None) => {
            return Err(ApiError::param(
                "prompt",
                format!("must be a string, got {}", show(&v)),
            ))
        }
        (None, Some(m)) => (prompt::chat_prompt(Some(m), &f)?, "messages"),
        _ => {
            return Err(ApiError::bad_request(
                "exactly one of prompt or messages is required",
                "invalid_parameter",
            ))
        }
    };
    let add_special = f.bool("add_special_tokens", true)?;
    let s = st.lease(tokenizer_model(&st, &f)?).await?;
    let tok = s.engine.tokenizer.clone();
    // Counting runs nothing, so only the context bounds it (not the KV pool); text that
    // cannot fit the context is refused from its length before it is tokenized.
    let cap = crate::capacity::Capacity::context_only(s.engine.info.context_length);
    if let PromptInput::Text(t) = &input {
        prompt::check_text(&tok, t, field, &cap)?;
    }
    let turn = st
        .prompt_permit(prompt::text_bytes(std::slice::from_ref(&input)))
        .await;
    let mut tokens = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        prompt::tokenize(&tok, &input, field, &cap)
    })
    .await
    .map_err(ApiError::tokenizer_task)??;
    if !add_special
        && field == "prompt"
        && s.engine.tokenizer.add_bos()
        && tokens.first() == s.engine.tokenizer.bos_id().as_ref()
    {
        tokens.remove(0);
    }
    Ok(Json(
        json!({"count": tokens.len(), "max_model_len": s.capacity().max_model_len(), "tokens": tokens}),
    ))
}

/// `{tokens}` → `{prompt}`.
pub async fn detokenize(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let f = Fields::new(&body);
    let s = st.lease(tokenizer_model(&st, &f)?).await?;
    let vocab = s.engine.info.vocab_size;
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

/// 200 `{}` while serving; 503 once a shutdown signal arrived (load balancers stop
/// sending while in-flight requests finish).
pub async fn health(State(st): State<AppState>) -> Response {
    if st.draining() {
        ApiError::from(crate::error::Error::Draining).into_response()
    } else {
        Json(json!({})).into_response()
    }
}

/// One page per loaded model (the single-model server's page as it always was); several
/// are joined with `model_name` labels (see `models::metrics_page`).
pub async fn metrics(State(st): State<AppState>) -> Response {
    let s = &st.0;
    let page = |m: &Served| {
        let mut text = m
            .metrics
            .render(&m.engine.info, &m.engine.metrics, &m.name, &s.rejections);
        crate::lora::render_metrics(m, &mut text);
        text
    };
    let loaded = s.models.loaded();
    let text = match (s.models.is_single(), loaded.as_slice()) {
        (true, [m]) => page(m),
        (_, []) => {
            let mut text = String::new();
            s.rejections.render(&mut text);
            text
        }
        _ => {
            let pages: Vec<(String, String)> =
                loaded.iter().map(|m| (m.name.clone(), page(m))).collect();
            crate::models::metrics_page::join(&pages, &crate::metrics::SERVER_WIDE)
        }
    };
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
    crate::error::Error::NoRoute(uri.path().into()).into()
}

/// OpenAI routes folio does not serve: 501, not 404, so that routers (litellm) do not
/// take the deployment for a wrong URL and put it in cooldown.
pub async fn not_implemented(uri: Uri) -> ApiError {
    crate::error::Error::NotImplemented(uri.path().into()).into()
}

pub async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    crate::error::Error::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().into(),
    }
    .into()
}
