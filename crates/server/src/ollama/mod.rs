//! Ollama's API on folio's port, for the many tools that speak only it: `/api/chat` and
//! `/api/generate` (NDJSON streams, or one object with `"stream": false`), `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/embed` (and the older `/api/embeddings`), `/api/pull`,
//! `/api/delete` and `/api/version`. Ollama's model-building and registry routes
//! (`/api/create`, `/api/copy`, `/api/push`, `/api/blobs`) are 501s saying so.
//!
//! Generation is the chat path's: `request` turns an Ollama body into a chat (or, for a
//! `raw` generate, a completions) body, `generate::start` validates, tokenizes and submits
//! it, `Running::drive` runs it, and `sink` writes Ollama's lines. Errors are Ollama's
//! `{"error": "…"}` (`error`). Models come from the registry (`lease`, `model_list`,
//! `keep_alive`); `details` reads what `/api/show` and `/api/tags` say from the GGUF header.
//! `pull` fetches catalogue models through `folio_fetch` with Ollama's progress lines.
//!
//! `GET /` and `HEAD /` (Ollama's "Ollama is running" probe) are left to the chat page;
//! clients that probe use `/api/version`.

mod clock;
mod details;
mod embed;
mod error;
mod listing;
mod options;
mod pull;
mod request;
mod routes;
mod sink;

use crate::state::AppState;
use axum::routing::{any, delete, get, post};
use axum::Router;

/// The Ollama routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/chat", post(routes::chat))
        .route("/api/generate", post(routes::generate))
        .route("/api/version", get(routes::version))
        .route("/api/tags", get(listing::tags))
        .route("/api/ps", get(listing::ps))
        .route("/api/show", post(listing::show))
        .route("/api/embed", post(embed::embed))
        .route("/api/embeddings", post(embed::embeddings))
        .route("/api/pull", post(pull::pull))
        .route("/api/delete", delete(pull::delete))
        .route("/api/create", any(routes::unsupported))
        .route("/api/copy", any(routes::unsupported))
        .route("/api/push", any(routes::unsupported))
        .route("/api/blobs/{digest}", any(routes::unsupported))
}

/// The registry's name for what an Ollama client sent: Ollama names carry a tag, and
/// clients add `:latest` to a name without one, so `name:latest` finds `name`; and the
/// name a client pulled a catalogue model by (`/api/pull` takes Ollama's spellings,
/// `catalog::find_loose`) finds the served model of that catalogue entry, so `pull
/// qwen2.5-coder:1.5b` then `chat qwen2.5-coder:1.5b` reach the same model. Anything else
/// goes to the registry as sent (its 404 lists the served names).
pub fn resolve(st: &AppState, model: Option<&str>) -> Option<String> {
    let m = model?;
    let known = st.model_list();
    if known.iter().any(|e| e.name == m) {
        return Some(m.to_string());
    }
    if let Some(base) = m.strip_suffix(":latest") {
        if known.iter().any(|e| e.name == base) {
            return Some(base.to_string());
        }
    }
    if let Some(e) = folio_fetch::catalog::find_loose(m) {
        let file = CatalogueFile::of(e);
        let mut served = known.iter().filter(|k| k.name == e.name || file.holds(k));
        if let (Some(k), None) = (served.next(), served.next()) {
            return Some(k.name.clone());
        }
    }
    Some(m.to_string())
}

/// A catalogue entry's file in the cache, canonicalised once for the served models it is
/// compared with (`None` while it is not downloaded: then no served model holds it).
struct CatalogueFile(Option<std::path::PathBuf>);

impl CatalogueFile {
    fn of(e: &folio_fetch::catalog::Entry) -> Self {
        Self::at(&folio_fetch::model_path(e))
    }

    /// The file at `path` (a catalogue entry's `model_path`, when the caller has it).
    fn at(path: &std::path::Path) -> Self {
        Self(path.canonicalize().ok())
    }

    /// Whether served model `m` is this file, wherever the two paths came from (a model
    /// served from the cache by `--models-dir` is named by its file stem).
    fn holds(&self, m: &crate::models::ModelEntry) -> bool {
        self.0.is_some() && m.path.as_ref().and_then(|p| p.canonicalize().ok()) == self.0
    }
}
