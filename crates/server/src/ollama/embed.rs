//! `/api/embed` (`{"model", "input": text | [texts]}` → `{"embeddings": [[…]]}`, L2-normalized
//! as Ollama's) and the older `/api/embeddings` (`{"model", "prompt"}` → `{"embedding": […]}`),
//! both run by `/v1/embeddings`' engine path (`embeddings::vectors`).

use super::error::Result;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// Top-level fields of /api/embed (`truncate`: folio refuses an input that does not fit
/// instead of cutting it, so `true` and `false` answer alike for inputs that fit).
const EMBED: &[&str] = &[
    "model",
    "input",
    "truncate",
    "options",
    "keep_alive",
    "dimensions",
];
const EMBEDDINGS: &[&str] = &["model", "prompt", "options", "keep_alive"];

/// The OpenAI embeddings body of an Ollama one, after its fields are checked.
async fn run(
    st: &AppState,
    body: &Map<String, Value>,
    own: &[&str],
    input: Value,
) -> Result<(crate::embeddings::Embedded, u64, u64)> {
    let arrival = Instant::now();
    for (k, v) in body {
        if !own.contains(&k.as_str()) {
            return Err(ApiError::param(
                k.as_str(),
                format!(
                    "unknown field, got {}; this endpoint reads {}",
                    show(v),
                    own.join(", ")
                ),
            )
            .into());
        }
    }
    let f = Fields::new(body);
    // Options change no vector; they are checked as for generation, then dropped.
    super::options::apply(f.get("options"), &mut Map::new())?;
    let keep_alive = super::request::keep_alive(f.get("keep_alive"))?;
    let model = super::resolve(st, f.str("model")?);
    let lease = st.lease(model.as_deref()).await?;
    let load = arrival.elapsed();
    if let Some(d) = keep_alive {
        st.keep_alive(&lease.name, d);
    }
    let mut oa = Map::new();
    oa.insert("model".into(), json!(lease.name));
    oa.insert("input".into(), input);
    if let Some(d) = f.get("dimensions") {
        oa.insert("dimensions".into(), d.clone());
    }
    let e = crate::embeddings::vectors(st.clone(), oa, arrival).await?;
    drop(lease);
    let ns = |d: std::time::Duration| d.as_nanos() as u64;
    Ok((e, ns(arrival.elapsed()), ns(load)))
}

pub async fn embed(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>> {
    let input = match body.get("input") {
        None | Some(Value::Null) => {
            return Err(ApiError::param("input", "required, got nothing").into())
        }
        Some(v @ (Value::String(_) | Value::Array(_))) => v.clone(),
        Some(v) => {
            return Err(ApiError::param(
                "input",
                format!("must be a string or an array of strings, got {}", show(v)),
            )
            .into())
        }
    };
    let (e, total, load) = run(&st, &body, EMBED, input).await?;
    Ok(Json(json!({
        "model": e.model,
        "embeddings": e.vectors,
        "total_duration": total,
        "load_duration": load,
        "prompt_eval_count": e.prompt_tokens,
    })))
}

pub async fn embeddings(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>> {
    let prompt = match body.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::param("prompt", "required, got nothing").into())
        }
        Some(v) => {
            return Err(
                ApiError::param("prompt", format!("must be a string, got {}", show(v))).into(),
            )
        }
    };
    let (e, _, _) = run(&st, &body, EMBEDDINGS, json!(prompt)).await?;
    let v = e.vectors.into_iter().next().unwrap_or_default();
    Ok(Json(json!({"embedding": v})))
}
