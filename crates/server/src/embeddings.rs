//! `POST /v1/embeddings`: vectors of the loaded model. Each input is one engine request
//! (`GenerateRequest::embed`) that prefills in the same steps as every other request and
//! ends with its pooled, L2-normalized final hidden state instead of a sampled token, so a
//! batch of N inputs is N engine requests batched like any others.
//!
//! `input` has the shapes of completions' `prompt` (a string, strings, token ids, lists of
//! token ids); pooling is `--pooling` (default: the model file's `pooling_type`, else
//! last-token, as vLLM pools decoder models) or the request's `pooling` extension.

use crate::api::PromptInput;
use crate::body::JsonObject;
use crate::choices::Choices;
use crate::cutoff::{until, Cutoff};
use crate::error::ApiError;
use crate::fields::Fields;
use crate::prompt;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use folio_engine::{Event, FinishReason, GenerateRequest, Pooling};
use serde_json::{json, Map, Value};
use std::time::Instant;

/// Most inputs in one request (each is an engine request; OpenAI allows 2048).
pub const MAX_INPUTS: usize = 256;

pub async fn embeddings(State(st): State<AppState>, JsonObject(body): JsonObject) -> Response {
    let arrival = Instant::now();
    answer(st, body, arrival)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// How vectors are written: JSON numbers, or base64 of little-endian f32 bytes.
#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Float,
    Base64,
}

async fn answer(
    st: AppState,
    body: Map<String, Value>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    crate::known_fields::check_embeddings(&body)?;
    let encoding = match Fields::new(&body).str("encoding_format")? {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ApiError::param(
                "encoding_format",
                format!("must be float or base64, got {other:?}"),
            ))
        }
    };
    let e = vectors(st, body, arrival).await?;
    let data: Vec<Value> = e
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| json!({"object": "embedding", "index": index, "embedding": encode(v, encoding)}))
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": e.model,
        "usage": {"prompt_tokens": e.prompt_tokens, "total_tokens": e.prompt_tokens},
    }))
    .into_response())
}

/// The vectors of one (field-checked) embeddings body, in input order.
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
    /// The model (or adapter) name the answer reports.
    pub model: String,
}

/// Runs the inputs of an embeddings body (OpenAI's fields; /api/embed comes through here
/// too) through the engine.
pub async fn vectors(
    st: AppState,
    mut body: Map<String, Value>,
    arrival: Instant,
) -> Result<Embedded, ApiError> {
    let s = &st.0;
    st.refuse_if_draining()?;
    // The inputs leave the body (moved, not copied: they may be megabytes).
    let input = body.remove("input");
    let f = Fields::new(&body);
    let m = st.lease(crate::lora::model_field(&f)?).await?;
    let (lora, model_name) = crate::lora::request_adapters(&m, &f)?;
    let info = &m.engine.info;
    let width = info.hidden_size;
    if let Some(d) = f.int("dimensions", 1, i64::MAX)? {
        if d as usize != width {
            return Err(ApiError::param(
                "dimensions",
                format!("folio returns the model's full width of {width} (it cannot shorten vectors), got {d}"),
            ));
        }
    }
    let pooling = match f.str("pooling")? {
        None => s
            .opts
            .pooling
            .or(info.gguf_pooling)
            .unwrap_or(Pooling::Last),
        Some(p) => Pooling::parse(p).ok_or_else(|| {
            ApiError::param("pooling", format!("must be last or mean, got {p:?}"))
        })?,
    };
    let inputs = prompt::prompt_list(input, "input", info.vocab_size, MAX_INPUTS)?;
    let field = |i: usize| match inputs.len() {
        1 => "input".to_string(),
        _ => format!("input[{i}]"),
    };
    for (i, inp) in inputs.iter().enumerate() {
        if matches!(inp, PromptInput::Text(t) if t.is_empty()) {
            return Err(ApiError::param(field(i), "must not be empty"));
        }
    }
    let n = inputs.len();
    let fields: Vec<String> = (0..n).map(field).collect();
    let tok = m.engine.tokenizer.clone();
    let cap = m.capacity();
    // As for prompts: text that cannot fit is refused from its length, and large texts
    // are tokenized a few at a time (`AppState::prompt_permit`).
    for (inp, name) in inputs.iter().zip(&fields) {
        if let PromptInput::Text(t) = inp {
            prompt::check_text(&tok, t, name, &cap)?;
        }
    }
    let turn = st.prompt_permit(prompt::text_bytes(&inputs)).await;
    let names = fields.clone();
    let prompts = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        inputs
            .iter()
            .zip(&names)
            .map(|(inp, name)| prompt::tokenize(&tok, inp, name, &cap))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(ApiError::tokenizer_task)??;
    for (ids, name) in prompts.iter().zip(&fields) {
        cap.check_prompt(name, ids.len())?;
    }
    if n > s.opts.max_queued {
        return Err(ApiError::param(
            "input",
            format!(
                "{n} inputs, more than the {} requests the server queues (--max-queued-requests)",
                s.opts.max_queued
            ),
        ));
    }

    let _active = st.begin();
    let _queued = st.reserve(n)?;
    let mut streams = Vec::with_capacity(n);
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    for ids in prompts {
        let mut req = GenerateRequest::embedding(ids, pooling);
        req.arrival = Some(arrival);
        req.lora = lora.clone();
        match m.engine.submit(req) {
            Ok(rs) => streams.push(rs),
            Err(e) => return Err(st.submit_failed(&m.engine, &streams, e)),
        }
    }
    // Dropping `choices` (client gone, error) aborts the unfinished requests.
    let mut choices = Choices::new(streams, Some(m.engine.clone()));
    let deadline = Cutoff::earliest(s.opts.request_timeout, None, arrival).map(|c| c.at);
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; n];
    loop {
        let next = tokio::select! {
            biased;
            _ = until(deadline) => {
                choices.abort();
                return Err(crate::error::Error::EmbeddingsTimeout.into());
            }
            next = choices.next() => next,
        };
        let Some((i, ev)) = next else { break };
        match ev {
            Event::Embedding { vector, .. } => vectors[i] = Some(vector),
            Event::Finished { reason, .. } => match reason {
                FinishReason::Stop => {}
                r @ (FinishReason::Rejected(_) | FinishReason::Error(_)) => {
                    return Err(st.refused(r));
                }
                other => {
                    return Err(crate::error::Error::Internal(format!(
                        "embedding ended early: {}",
                        crate::api::finish_reason(&other)
                    ))
                    .into())
                }
            },
            Event::Tokens { .. } => {}
        }
    }
    let mut data = Vec::with_capacity(n);
    for (index, v) in vectors.into_iter().enumerate() {
        let v = v.ok_or_else(|| {
            ApiError::from(crate::error::Error::Internal(format!(
                "{}: the engine ended without a vector",
                fields[index]
            )))
        })?;
        data.push(v);
    }
    tracing::info!(
        inputs = n,
        prompt_tokens,
        pooling = pooling.name(),
        e2e_ms = arrival.elapsed().as_secs_f64() * 1e3,
        "embeddings finished"
    );
    Ok(Embedded {
        vectors: data,
        prompt_tokens,
        model: model_name,
    })
}

fn encode(v: &[f32], e: Encoding) -> Value {
    match e {
        Encoding::Float => json!(v),
        Encoding::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32() {
        let v = [1.0f32, -2.5];
        let Value::String(b) = encode(&v, Encoding::Base64) else {
            panic!()
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(b).unwrap();
        let back: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, v);
        assert_eq!(encode(&v, Encoding::Float), json!([1.0, -2.5]));
    }
}
