//! vLLM's renderer API: `POST /v1/completions/render` and `/v1/chat/completions/render`
//! return a request's prompt as the exact token ids generation would compute, and
//! generate nothing.
//!
//! NOTE: why folio serves these: `vllm-router --policy kv_aware` does not tokenize; it
//! asks every worker to render the request, hashes the token ids per block and looks the
//! blocks up among the workers' KV events (`--kv-events-endpoint`). Without these routes
//! every request scores zero and the policy falls back to least-load.
//!
//! The prompt goes through the same steps as in `generate` (prompt shapes, chat template,
//! tools rendered into the prompt), so the ids match the blocks the engine commits.
//! Fields that only matter to generation (sampling, stop, logprobs, and whatever the
//! router adds such as `no_stop_trim`) are not validated here: the generation request
//! that follows checks them. The answers are vLLM's shapes: a list of `GenerateRequest`s
//! for completions (one per prompt), one for chat.

use crate::api::PromptInput;
use crate::body::JsonObject;
use crate::error::ApiError;
use crate::fields::Fields;
use crate::models::Served;
use crate::prompt;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Sampling fields echoed back under `sampling_params` (as vLLM's `GenerateRequest`).
const SAMPLING: [&str; 10] = [
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
];

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `/v1/completions/render`: `[GenerateRequest, …]`, one per prompt.
pub async fn completions(
    State(st): State<AppState>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let prompt_field = body.remove("prompt");
    let f = Fields::new(&body);
    let m = st.lease(crate::lora::model_field(&f)?).await?;
    let (_, model) = crate::lora::request_adapters(&m, &f)?;
    let inputs = prompt::completion_prompts(prompt_field, m.engine.info.vocab_size)?;
    let count = inputs.len();
    let mut out = Vec::with_capacity(count);
    for (i, input) in inputs.into_iter().enumerate() {
        let field = if count == 1 {
            "prompt".to_string()
        } else {
            format!("prompt[{i}]")
        };
        let ids = tokenize(&m, input, field).await?;
        out.push(generate_request("cmpl", &model, ids, &body));
    }
    Ok(Json(Value::Array(out)))
}

/// `/v1/chat/completions/render`: one `GenerateRequest`.
pub async fn chat(
    State(st): State<AppState>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Value>, ApiError> {
    let messages = body.remove("messages");
    let (model, ids) = chat_ids(&st, messages, &body).await?;
    Ok(Json(generate_request("chatcmpl", &model, ids, &body)))
}

/// The served model name and the prompt ids of a chat body (its `messages` taken out):
/// also Anthropic's `count_tokens`.
pub async fn chat_ids(
    st: &AppState,
    messages: Option<Value>,
    body: &Map<String, Value>,
) -> Result<(String, Vec<u32>), ApiError> {
    let f = Fields::new(body);
    let m = st.lease(crate::lora::model_field(&f)?).await?;
    let (_, model) = crate::lora::request_adapters(&m, &f)?;
    let mut input = prompt::chat_prompt(messages, &f)?;
    if f.get("tools").is_some() {
        let tools = crate::tools::parse(&f)?;
        crate::tools::render_into(&mut input, &tools, m.engine.tokenizer.chat_template());
    }
    Ok((model, tokenize(&m, input, "messages".into()).await?))
}

/// Tokenizes off the async threads (a long prompt takes a while), as `generate` does, and
/// refuses, as it does, text that cannot fit what the server can run.
async fn tokenize(m: &Served, input: PromptInput, field: String) -> Result<Vec<u32>, ApiError> {
    let tok = m.engine.tokenizer.clone();
    let cap = m.capacity();
    tokio::task::spawn_blocking(move || prompt::tokenize(&tok, &input, &field, &cap))
        .await
        .map_err(ApiError::tokenizer_task)?
}

/// vLLM's `GenerateRequest`: the token ids and what generation would run with.
fn generate_request(prefix: &str, model: &str, ids: Vec<u32>, body: &Map<String, Value>) -> Value {
    let sampling: Map<String, Value> = SAMPLING
        .iter()
        .filter_map(|&k| body.get(k).map(|v| (k.to_string(), v.clone())))
        .collect();
    json!({
        "request_id": format!("{prefix}-{}", NEXT_ID.fetch_add(1, Relaxed)),
        "model": model,
        "token_ids": ids,
        "sampling_params": sampling,
        "stream": body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        "stream_options": body.get("stream_options").cloned().unwrap_or(Value::Null),
    })
}
