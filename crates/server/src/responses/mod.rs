//! `POST /v1/responses`: OpenAI's Responses API, text in and text out, for clients built
//! on the newer OpenAI API. A request runs as a chat completion (`request` turns its body
//! into one, `generate::start` validates, tokenizes and submits it, so sampling, limits,
//! structured output and the engine loop are the chat path's); `build` turns the text
//! into the `response` object or its stream events, and `stream` sends those.
//!
//! folio stores no responses: `store: true`, `previous_response_id`, `background`,
//! `conversation` and tools are 400s naming the field (see `known_fields`), and
//! `GET /v1/responses/{id}` is 501.

mod build;
mod request;
mod stream;

use crate::body::JsonObject;
use crate::choice_state::{usage_sum, ChoiceState};
use crate::error::ApiError;
use crate::generate::{log_finished, until, Running, Started};
use crate::openai::Job;
use crate::params::Api;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use build::{Build, End, Ev, Tokens};
use folio_engine::{Event, FinishReason};
use serde_json::{Map, Value};
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
    let Started { mut req, queued } = crate::generate::start(st, Api::Chat, chat, arrival)
        .await
        .map_err(request::renamed)?;
    let b = Build::new(req.job.model.clone(), asked, req.job.reasoning);
    req.job.id = b.id().to_string();
    if req.job.stream {
        Ok(stream::respond(req, b, queued))
    } else {
        drop(queued);
        collect(req, b).await
    }
}

/// Feeds one engine event to the response (and to the choice's state, which records the
/// latency histograms, usage and finish); returns the stream events it makes.
fn feed(b: &mut Build, c: &mut ChoiceState, ev: Event, job: &Job, st: &AppState) -> Vec<Ev> {
    let (text, tokens) = match &ev {
        Event::Tokens { text, ids, .. } => (text.clone(), ids.len()),
        Event::Finished { .. } | Event::Embedding { .. } => (String::new(), 0),
    };
    let s = &st.0;
    // Its chat chunk is not needed: the text is taken from the event above.
    let _ = c.apply(0, ev, job, &s.engine.tokenizer, &s.metrics);
    let mut out = b.text(&text, tokens);
    if c.finish.is_some() {
        out.extend(b.finish(&end_of(c), tokens_of(job, c)));
    }
    out
}

/// How the choice ended, in Responses terms.
fn end_of(c: &ChoiceState) -> End {
    let error = match &c.finish {
        Some(FinishReason::Error(m)) => Some(m.clone()),
        Some(FinishReason::Rejected(r)) => Some(r.to_string()),
        _ => None,
    };
    End::of(c.finish_reason(), error)
}

fn tokens_of(job: &Job, c: &ChoiceState) -> Tokens {
    let u = usage_sum(job, std::slice::from_ref(c));
    Tokens {
        input: u.prompt_tokens,
        cached: u.cached_tokens,
        output: u.completion_tokens,
    }
}

/// Waits for the whole answer and returns the `response` object. Dropping this future
/// (the client went away) drops `choices`, which aborts the request.
async fn collect(req: Running, mut b: Build) -> Result<Response, ApiError> {
    let Running {
        st,
        job,
        mut choices,
        deadline,
        ..
    } = req;
    let mut c = ChoiceState::default();
    loop {
        let next = tokio::select! {
            biased;
            _ = until(deadline.map(|d| d.at)) => {
                choices.abort();
                if let Some(d) = deadline {
                    c.cut_off(d.reason, &st.0.metrics);
                }
                break;
            }
            next = choices.next() => next,
        };
        let Some((_, ev)) = next else { break };
        feed(&mut b, &mut c, ev, &job, &st);
    }
    log_finished(&job, std::slice::from_ref(&c), "complete");
    let (end, tokens) = (end_of(&c), tokens_of(&job, &c));
    if let End::Failed(m) = &end {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("generation failed: {m}"),
            "generation_failed",
        ));
    }
    b.finish(&end, tokens);
    Ok(axum::Json(b.response(&end, tokens)).into_response())
}
