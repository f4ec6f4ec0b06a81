//! llama-server router mode's endpoints: `GET /models` (the `/v1/models` list),
//! `POST /models/load {"model"}` and `POST /models/unload {"model"}` → `{"success": true}`.

use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::Fields;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

fn model_field(body: &serde_json::Map<String, Value>) -> Result<String, ApiError> {
    match Fields::new(body).str("model")? {
        Some(m) if !m.is_empty() => Ok(m.to_string()),
        _ => Err(ApiError::param("model", "is required")),
    }
}

/// `POST /models/load`: answers once the model is loaded (or why it could not be).
pub async fn load(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let name = model_field(&body)?;
    st.load_model(&name).await?;
    Ok(Json(json!({"success": true})))
}

/// `POST /models/unload`: unloads now if idle, else when its running requests end.
pub async fn unload(
    State(st): State<AppState>,
    JsonObject(body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let name = model_field(&body)?;
    st.unload_model(&name)?;
    Ok(Json(json!({"success": true})))
}
