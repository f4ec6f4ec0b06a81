//! `/api/pull` and `/api/delete` for the models folio fetches by name (its catalogue,
//! `folio_fetch`). A pull streams Ollama's progress lines: `pulling manifest`, then
//! `{"status": "pulling <digest>", "digest", "total", "completed"}` as the file is
//! assembled, `verifying sha256 digest`, `writing manifest`, `success` (one
//! `{"status": "success"}` with `"stream": false`). `hf:ORG/REPO[:QUANT]` names are fetched
//! from the Hugging Face Hub into its cache (`folio_fetch::pull`, as `folio pull` does):
//! `pulling manifest`, then `success` or the error; `/api/delete` leaves them to `hf cache`.

use super::error::Result;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::Fields;
use crate::models::ModelStatus;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use folio_fetch::catalog::{self, Entry};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How often a pull reports the size of the file being assembled.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The catalogue entry an Ollama name means (`name`, `name:latest`, or Ollama's spelling
/// of it: [`catalog::find_loose`]).
fn entry(field: &str, asked: &str) -> std::result::Result<&'static Entry, ApiError> {
    if asked.starts_with("hf:") {
        return Err(ApiError::param(
            field,
            format!("{asked:?}: Hugging Face Hub models live in the Hugging Face cache ($HF_HOME/hub); delete them with `hf cache delete`; folio deletes its catalogue models: {}", catalog::names()),
        ));
    }
    catalog::find_loose(asked).ok_or_else(|| {
        not_found(format!(
            "model {asked:?} is not in folio's catalogue ({}); Ollama's registry is not used",
            catalog::names()
        ))
    })
}

/// 404 naming what is missing.
fn not_found(message: String) -> ApiError {
    crate::error::Error::ModelMissing(message).into()
}

/// `model` (or Ollama's older `name`).
fn model_field(f: &Fields) -> std::result::Result<(&'static str, String), ApiError> {
    for name in ["model", "name"] {
        if let Some(m) = f.str(name)? {
            return Ok((name, m.to_string()));
        }
    }
    Err(ApiError::param("model", "required, got nothing"))
}

fn line(v: Value) -> Bytes {
    Bytes::from(format!("{v}\n"))
}

/// `sha256:…` and the short form Ollama's status lines show.
fn digests(e: &Entry) -> (String, String) {
    (
        format!("sha256:{}", e.sha256),
        format!("pulling {}", &e.sha256[..12]),
    )
}

pub async fn pull(State(_st): State<AppState>, JsonObject(body): JsonObject) -> Result<Response> {
    let f = Fields::new(&body);
    let (field, asked) = model_field(&f)?;
    if folio_fetch::hub::is_hub_name(&asked) {
        let stream = f.bool("stream", true)?;
        return pull_hub(asked, stream).await;
    }
    let e = entry(field, &asked)?;
    // `insecure` is about registries folio does not use.
    let stream = f.bool("stream", true)?;
    if !stream {
        fetch(e).await?;
        return Ok(Json(json!({"status": "success"})).into_response());
    }
    let mut r = crate::sse::event_stream(move |tx| async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move { tx.send(line(v)).await.is_ok() }
        };
        if !send(json!({"status": "pulling manifest"})).await {
            return;
        }
        let (digest, status) = digests(e);
        let partial = partial_path(e);
        let job = tokio::task::spawn_blocking(move || folio_fetch::ensure(e));
        tokio::pin!(job);
        let mut last = None;
        let done = loop {
            tokio::select! {
                r = &mut job => break r,
                _ = tokio::time::sleep(PROGRESS_EVERY) => {
                    let n = std::fs::metadata(&partial).map_or(0, |m| m.len());
                    if last != Some(n) && n > 0 {
                        last = Some(n);
                        if !send(json!({"status": status, "digest": digest, "total": e.size, "completed": n})).await {
                            return;
                        }
                    }
                }
            }
        };
        let lines = match done {
            Ok(Ok(_)) => vec![
                json!({"status": status, "digest": digest, "total": e.size, "completed": e.size}),
                json!({"status": "verifying sha256 digest"}),
                json!({"status": "writing manifest"}),
                json!({"status": "success"}),
            ],
            Ok(Err(err)) => vec![json!({"error": format!("pulling {}: {err}", e.name)})],
            Err(err) => {
                vec![json!({"error": format!("pulling {}: the fetch task failed: {err}", e.name)})]
            }
        };
        for l in lines {
            if !send(l).await {
                return;
            }
        }
    });
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(r)
}

/// `/api/pull` of an `hf:` name: the Hub's files into the Hugging Face cache.
async fn pull_hub(asked: String, stream: bool) -> Result<Response> {
    folio_fetch::hub::parse(&asked).map_err(|e| ApiError::param("model", e.to_string()))?;
    let name = asked.clone();
    let job = tokio::task::spawn_blocking(move || folio_fetch::pull(&name));
    if !stream {
        job.await
            .map_err(|err| {
                ApiError::from(crate::error::Error::Internal(format!(
                    "the fetch task failed: {err}"
                )))
            })?
            .map_err(|err| {
                ApiError::from(crate::error::Error::Internal(format!(
                    "pulling {asked}: {err}"
                )))
            })?;
        return Ok(Json(json!({"status": "success"})).into_response());
    }
    let mut r = crate::sse::event_stream(move |tx| async move {
        if tx
            .send(line(json!({"status": "pulling manifest"})))
            .await
            .is_err()
        {
            return;
        }
        let l = match job.await {
            Ok(Ok(_)) => json!({"status": "success"}),
            Ok(Err(err)) => json!({"error": format!("pulling {asked}: {err}")}),
            Err(err) => json!({"error": format!("pulling {asked}: the fetch task failed: {err}")}),
        };
        let _ = tx.send(line(l)).await;
    });
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(r)
}

/// Fetches `e` (nothing to do when it is on disk and verified).
async fn fetch(e: &'static Entry) -> std::result::Result<PathBuf, ApiError> {
    tokio::task::spawn_blocking(move || folio_fetch::ensure(e))
        .await
        .map_err(|err| {
            ApiError::from(crate::error::Error::Internal(format!(
                "the fetch task failed: {err}"
            )))
        })?
        .map_err(|err| crate::error::Error::Internal(format!("pulling {}: {err}", e.name)).into())
}

/// Where `folio_fetch` assembles `e`'s file before renaming it into place.
fn partial_path(e: &Entry) -> PathBuf {
    folio_fetch::models_dir().join(format!(".{}.part{}", e.file_name, std::process::id()))
}

/// Removes a fetched catalogue model's file: 200, or 404 when it is not on disk. A model
/// that is loaded is unloaded first (refused when the registry cannot).
pub async fn delete(State(st): State<AppState>, JsonObject(body): JsonObject) -> Result<Response> {
    let f = Fields::new(&body);
    let (field, asked) = model_field(&f)?;
    let e = entry(field, &asked)?;
    let path = folio_fetch::model_path(e);
    if !path.is_file() {
        return Err(not_found(format!(
            "model {asked:?} not found: it is not downloaded ({} is absent)",
            path.display()
        ))
        .into());
    }
    let file = super::CatalogueFile::at(&path);
    for m in st.model_list() {
        if file.holds(&m) && m.status != ModelStatus::Unloaded {
            st.unload_model(&m.name)?;
        }
    }
    std::fs::remove_file(&path).map_err(|err| {
        ApiError::from(crate::error::Error::Internal(format!(
            "removing {}: {err}",
            path.display()
        )))
    })?;
    let mut marker = path.into_os_string();
    marker.push(".sha256-ok");
    let _ = std::fs::remove_file(marker);
    Ok(().into_response())
}
