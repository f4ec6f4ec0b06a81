//! Server-sent events: `data: {json}\n\n` per chunk, `data: [DONE]\n\n` at the end.
//!
//! A task owns the request's [`Choices`] and writes frames into a bounded channel whose
//! receiver is the response body. When the client disconnects, hyper drops the body, the
//! channel closes, the task returns and dropping `Choices` aborts the engine requests.

use crate::choice_state::{usage_sum, ChoiceState};
use crate::choices::Choices;
use crate::generate::log_finished;
use crate::openai::Job;
use crate::params::Api;
use crate::state::{AppState, InFlight};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::convert::Infallible;
use tokio::sync::mpsc;

/// One SSE frame carrying `json`.
pub fn frame(json: &Value) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

/// The end-of-stream frame.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// A comment frame: keeps proxies from timing out and notices dead clients while a
/// request waits in the queue.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// Starts the streaming task and returns the SSE response.
pub fn respond(st: AppState, job: Job, choices: Choices, permit: InFlight) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(pump(st, job, choices, tx, permit));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

async fn pump(
    st: AppState,
    job: Job,
    mut choices: Choices,
    tx: mpsc::Sender<Bytes>,
    _permit: InFlight,
) {
    let s = &st.0;
    let tok = &s.engine.tokenizer;
    let mut states = vec![ChoiceState::default(); choices.count()];
    if job.api == Api::Chat {
        for i in 0..choices.count() {
            if tx.send(frame(&job.role_chunk(i))).await.is_err() {
                return log_finished(&job, &states, "client disconnected");
            }
        }
    }
    loop {
        let next = tokio::select! {
            _ = tx.closed() => return log_finished(&job, &states, "client disconnected"),
            r = tokio::time::timeout(s.opts.keep_alive, choices.next()) => r,
        };
        let bytes = match next {
            Err(_) => keep_alive(),
            Ok(None) => break,
            Ok(Some((i, ev))) => match states[i].apply(i, ev, &job, tok, &s.metrics) {
                Some(chunk) => frame(&chunk),
                None => continue,
            },
        };
        if tx.send(bytes).await.is_err() {
            return log_finished(&job, &states, "client disconnected");
        }
    }
    // Streams that ended without `Finished` (engine shut down) still get a finish reason.
    for i in choices.unfinished() {
        if tx
            .send(frame(&job.chunk(i, "", None, Some("abort"))))
            .await
            .is_err()
        {
            break;
        }
    }
    if job.include_usage {
        let _ = tx
            .send(frame(&job.usage_chunk(usage_sum(&job, &states))))
            .await;
    }
    let _ = tx.send(done()).await;
    log_finished(&job, &states, "complete");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn framing() {
        assert_eq!(
            &frame(&json!({"a": [1, "b"]}))[..],
            b"data: {\"a\":[1,\"b\"]}\n\n"
        );
        assert_eq!(&done()[..], b"data: [DONE]\n\n");
        assert!(keep_alive().starts_with(b":"));
    }
}
