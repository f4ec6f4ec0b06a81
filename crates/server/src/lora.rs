//! LoRA adapters over HTTP: choosing them per request, loading and unloading them at
//! runtime, listing them.
//!
//! A request picks adapters as vLLM clients do, by `model` (an adapter's name), or as
//! llama-server clients do, by a `lora` list of `{"id": index, "scale": s}` (or `{"name":
//! …}`). Runtime loading takes vLLM's bodies: `POST /v1/load_lora_adapter {"lora_name",
//! "lora_path"}` and `POST /v1/unload_lora_adapter {"lora_name"}`.

use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use crate::models::Served;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use folio_engine::{LoraError, LoraSet};
use serde_json::{json, Value};

/// Most adapters one request may combine.
const MAX_PER_REQUEST: usize = 8;

fn api_error(e: LoraError, field: &str) -> ApiError {
    crate::error::Error::Lora {
        err: e,
        field: field.into(),
    }
    .into()
}

/// A request's `model` field: the name of a model or adapter, or `None` (the default
/// model); anything but a string is a 400.
pub fn model_field<'a>(f: &Fields<'a>) -> Result<Option<&'a str>, ApiError> {
    match f.get("model") {
        None => Ok(None),
        Some(Value::String(m)) => Ok(Some(m.as_str())),
        Some(m) => Err(ApiError::param(
            "model",
            format!("must be a string, got {}", show(m)),
        )),
    }
}

/// The adapters of one request on model `s` (the request's lease) and the model name its
/// response reports: `model` naming an adapter selects it at scale 1, and a `lora` list
/// adds adapters with scales. A `model` that is neither the served name nor an adapter is
/// a 404 naming it.
pub fn request_adapters(s: &Served, f: &Fields) -> Result<(Option<LoraSet>, String), ApiError> {
    let mut names: Vec<(String, f32)> = Vec::new();
    let model = match model_field(f)? {
        None => s.name.clone(),
        Some(m) if *m == s.name => m.to_string(),
        Some(m) => {
            if !s.has_adapter(m) {
                return Err(ApiError::model_not_found(m, &s.name));
            }
            names.push((m.to_string(), 1.0));
            m.to_string()
        }
    };
    match f.get("lora") {
        None => {}
        Some(Value::Array(items)) => {
            if items.len() > MAX_PER_REQUEST {
                return Err(ApiError::param(
                    "lora",
                    format!("at most {MAX_PER_REQUEST} adapters, got {}", items.len()),
                ));
            }
            for (i, item) in items.iter().enumerate() {
                let field = format!("lora[{i}]");
                names.push(lora_item(s, &field, item)?);
            }
        }
        Some(v) => {
            return Err(ApiError::param(
                "lora",
                format!(
                    "must be an array of {{\"id\": n, \"scale\": s}}, got {}",
                    show(v)
                ),
            ))
        }
    }
    let mut seen: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(ApiError::param(
            "lora",
            format!("adapter '{}' is given twice", w[0]),
        ));
    }
    names.retain(|(_, s)| *s != 0.0);
    if names.is_empty() {
        return Ok((None, model));
    }
    let field = if f.get("lora").is_some() {
        "lora"
    } else {
        "model"
    };
    let set = s.engine.lora_set(&names).map_err(|e| api_error(e, field))?;
    Ok((Some(set), model))
}

/// One `lora` entry: `{"id": index}` (llama-server) or `{"name": …}`, `scale` defaulting
/// to 1.
fn lora_item(s: &Served, field: &str, item: &Value) -> Result<(String, f32), ApiError> {
    let Value::Object(o) = item else {
        return Err(ApiError::param(
            field,
            format!(
                "must be an object {{\"id\": n, \"scale\": s}}, got {}",
                show(item)
            ),
        ));
    };
    let f = Fields::new(o);
    let scale = f
        .number("scale", -100.0, 100.0, false)
        .map_err(|e| ApiError::param(format!("{field}.scale"), e.message))?
        .unwrap_or(1.0) as f32;
    let reg = s.engine.lora.lock().unwrap_or_else(|e| e.into_inner());
    let name = match (f.get("id"), f.get("name")) {
        (Some(id), None) => {
            let idx = id.as_u64().ok_or_else(|| {
                ApiError::param(
                    format!("{field}.id"),
                    format!("must be an adapter index, got {}", show(id)),
                )
            })?;
            reg.name_at(idx as usize)
                .ok_or_else(|| {
                    api_error(
                        LoraError::Unknown(format!("#{idx}")),
                        &format!("{field}.id"),
                    )
                })?
                .to_string()
        }
        (None, Some(Value::String(n))) => {
            if !reg.list().iter().any(|l| l.name == *n) {
                return Err(api_error(
                    LoraError::Unknown(n.clone()),
                    &format!("{field}.name"),
                ));
            }
            n.clone()
        }
        _ => {
            return Err(ApiError::param(
                field,
                "needs exactly one of \"id\" (an adapter index) or \"name\"",
            ))
        }
    };
    Ok((name, scale))
}

/// The `/v1/models` cards of model `s`'s adapters (vLLM's shape: `parent` is the base
/// model).
pub fn model_cards(st: &AppState, s: &Served) -> Vec<Value> {
    let list = s
        .engine
        .lora
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .list();
    list.into_iter()
        .map(|l| {
            json!({
                "id": l.name,
                "object": "model",
                "created": st.0.started,
                "owned_by": "folio",
                "root": l.name,
                "parent": s.name,
                "max_model_len": s.capacity().max_model_len(),
                "permission": [],
            })
        })
        .collect()
}

/// `POST /v1/load_lora_adapter {"lora_name", "lora_path"}`: 200 with vLLM's text, 400 for a
/// bad or mismatched file (naming the tensor and shapes), 429 when every slot is busy.
/// Off unless `--allow-runtime-lora`; the path must pass [`crate::lora_path::resolve`].
pub async fn load(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    let opts = &st.0.opts;
    if !opts.allow_runtime_lora {
        return crate::lora_path::disabled().into_response();
    }
    let f = Fields::new(&body);
    let m = match lease(&st, &f).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let (name, raw) = match (required(&f, "lora_name"), required(&f, "lora_path")) {
        (Ok(n), Ok(p)) => (n, p),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let path = match crate::lora_path::resolve(&raw, opts.lora_dir.as_deref()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let engine = m.engine.clone();
    let (n, p) = (name.clone(), path.clone());
    // The file read is blocking work: off the async workers, and outside the registry lock.
    let read = tokio::task::spawn_blocking(move || {
        let reg = engine.lora.lock().unwrap_or_else(|e| e.into_inner());
        if reg.list().iter().any(|l| l.name == n) {
            return Err(LoraError::Exists(n));
        }
        let cfg_reader = reg.reader();
        drop(reg);
        cfg_reader.read(&n, &p)
    })
    .await;
    let adapter = match read {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return load_error(e).into_response(),
        Err(e) => {
            return ApiError::from(crate::error::Error::Internal(format!(
                "adapter load task failed: {e}"
            )))
            .into_response()
        }
    };
    let mut reg = m.engine.lora.lock().unwrap_or_else(|e| e.into_inner());
    match reg.insert(&name, &path, adapter) {
        Ok(()) => {
            tracing::info!(adapter = %name, path = %path.display(), "LoRA adapter loaded");
            (
                StatusCode::OK,
                format!("Success: LoRA adapter '{name}' added successfully."),
            )
                .into_response()
        }
        Err(e) => api_error(e, "lora_name").into_response(),
    }
}

/// A failed read as the client sees it: a file that is not an adapter at all (missing,
/// unreadable, not GGUF, another GGUF type) gets the one generic answer, never its bytes
/// or why (that would tell a client which files exist and what they begin with); an
/// adapter that does not fit the model keeps its detail (the tensor and the shapes).
fn load_error(e: LoraError) -> ApiError {
    if e.is_not_an_adapter() {
        return crate::lora_path::refused(crate::lora_path::NOT_LOADABLE);
    }
    api_error(e, "lora_path")
}

/// `POST /v1/unload_lora_adapter {"lora_name"}`: the name goes at once; requests already
/// using the adapter finish with it, and its slot frees after them. Off unless
/// `--allow-runtime-lora`, as loading.
pub async fn unload(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    if !st.0.opts.allow_runtime_lora {
        return crate::lora_path::disabled().into_response();
    }
    let f = Fields::new(&body);
    let name = match required(&f, "lora_name") {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    let m = match lease(&st, &f).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let mut reg = m.engine.lora.lock().unwrap_or_else(|e| e.into_inner());
    match reg.unload(&name) {
        Ok(in_use) => {
            tracing::info!(adapter = %name, in_use, "LoRA adapter unloaded");
            (
                StatusCode::OK,
                format!("Success: LoRA adapter '{name}' removed successfully."),
            )
                .into_response()
        }
        Err(e) => api_error(e, "lora_name").into_response(),
    }
}

/// `GET /lora-adapters` (llama-server): `[{"id", "path", "scale"}]`, plus folio's
/// `name`, `resident`, `rank` and request counts. `path` is the file's name only: where
/// files lie on the server is not the client's business. Behind the API key (see `auth`).
pub async fn list(State(st): State<AppState>) -> Json<Value> {
    let list: Vec<_> =
        st.0.models
            .loaded()
            .iter()
            .flat_map(|m| {
                m.engine
                    .lora
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .list()
            })
            .collect();
    Json(Value::Array(
        list.into_iter()
            .map(|l| {
                json!({
                    "id": l.index,
                    "name": l.name,
                    "path": std::path::Path::new(&l.path)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned()),
                    "scale": 1.0,
                    "resident": l.resident,
                    "rank": l.rank,
                    "requests": l.requests,
                    "in_use": l.in_use,
                })
            })
            .collect(),
    ))
}

/// The model whose adapters a load or unload changes: the body's `model` (folio's
/// addition, for a server of several models), else the default model.
async fn lease(st: &AppState, f: &Fields<'_>) -> Result<crate::models::Lease, ApiError> {
    st.lease(model_field(f)?).await
}

fn required(f: &Fields, name: &str) -> Result<String, ApiError> {
    match f.str(name)? {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(ApiError::param(name, "is required")),
    }
}

/// The adapter lines of `/metrics`: vLLM's `vllm:lora_requests_info` (running and waiting
/// requests' adapters, `max_lora`; the value is the time of the reading, as vLLM's), the
/// slots used, and requests per adapter.
pub fn render_metrics(s: &Served, out: &mut String) {
    use std::fmt::Write;
    let m = &s.engine.metrics;
    let get =
        |v: &std::sync::Mutex<Vec<String>>| v.lock().unwrap_or_else(|e| e.into_inner()).join(",");
    let (running, waiting) = (get(&m.lora_running), get(&m.lora_waiting));
    let mut reg = s.engine.lora.lock().unwrap_or_else(|e| e.into_inner());
    let (max, used, list) = (reg.max_loras(), reg.slots_used(), reg.list());
    drop(reg);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let esc = crate::histogram::escape;
    let _ = writeln!(
        out,
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{{max_lora=\"{max}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {now:.3}",
        esc(&running),
        esc(&waiting)
    );
    let _ = writeln!(
        out,
        "# HELP folio_lora_slots_used LoRA adapter slots in use (resident adapters, and unloaded ones requests still hold).\n# TYPE folio_lora_slots_used gauge\nfolio_lora_slots_used {used}\n# HELP folio_lora_slots_total LoRA adapter slots (--max-loras).\n# TYPE folio_lora_slots_total gauge\nfolio_lora_slots_total {max}"
    );
    let _ = writeln!(
        out,
        "# HELP folio_lora_requests_total Requests served with each LoRA adapter.\n# TYPE folio_lora_requests_total counter"
    );
    for l in list {
        let _ = writeln!(
            out,
            "folio_lora_requests_total{{adapter=\"{}\"}} {}",
            esc(&l.name),
            l.requests
        );
    }
}
