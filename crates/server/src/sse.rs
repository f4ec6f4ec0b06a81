//! Server-sent events: `data: {json}\n\n` per chunk, `data: [DONE]\n\n` at the end.
//!
//! A task owns the request's [`Choices`] and writes frames into a bounded channel whose
//! receiver is the response body. A request still queued in the engine gets its headers
//! and `: keep-alive` comments until its first token; the request timeout ends every
//! unfinished choice with finish reason `timeout` (`deadline` for the request's own
//! `deadline_ms`). When the client disconnects, hyper drops the body, the
//! channel closes, the task returns and dropping `Choices` aborts the engine requests.

use crate::choice_state::{usage_sum, ChoiceState, SLOW_READER};
use crate::choices::Choices;
use crate::chunk_filter::ChunkFilter;
use crate::generate::{log_finished, refusal, until, Running};
use crate::outbox::Outbox;
use crate::params::Api;
use crate::state::Slots;
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
pub fn keep_alive_frame() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// Starts the streaming task and returns the SSE response at once. `queued` is held
/// while the engine has not admitted the request yet: the task waits for that, sending
/// keep-alive comments.
pub fn respond(req: Running, queued: Option<Slots>) -> Response {
    event_stream(|tx| pump(req, tx, queued))
}

/// An SSE response whose body is the frames `task` sends, the task spawned now (the
/// chat/completions stream and the Responses API's stream both run this way).
pub fn event_stream<F>(task: impl FnOnce(mpsc::Sender<Bytes>) -> F) -> Response
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    // Few frames: what the client has not taken waits in the task's `Outbox`, counted.
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(task(tx));
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

/// How waiting for admission inside the stream ended.
pub enum Waited {
    Admitted,
    Refused(folio_engine::FinishReason),
    /// The cutoff passed first (the main loop ends the choices).
    TimedOut,
    Disconnected,
}

/// Waits for the engine to admit the request, sending a keep-alive comment every
/// `keep_alive` so that proxies see bytes while it is queued.
pub async fn wait_admitted(
    choices: &mut Choices,
    tx: &mpsc::Sender<Bytes>,
    keep_alive: std::time::Duration,
    deadline: Option<std::time::Instant>,
) -> Waited {
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(start + keep_alive, keep_alive);
    let admitted = choices.admitted();
    tokio::pin!(admitted);
    loop {
        tokio::select! {
            r = &mut admitted => return match r {
                Ok(()) => Waited::Admitted,
                Err(reason) => Waited::Refused(reason),
            },
            _ = until(deadline) => return Waited::TimedOut,
            _ = tx.closed() => return Waited::Disconnected,
            _ = tick.tick() => {
                if tx.send(keep_alive_frame()).await.is_err() {
                    return Waited::Disconnected;
                }
            }
        }
    }
}

async fn pump(req: Running, tx: mpsc::Sender<Bytes>, queued: Option<Slots>) {
    let Running {
        st,
        job,
        mut choices,
        deadline,
        ..
    } = req;
    let s = &st.0;
    let tok = &s.engine.tokenizer;
    let mut states = vec![ChoiceState::default(); choices.count()];
    let mut filter =
        (job.api == Api::Chat).then(|| ChunkFilter::new(choices.count(), job.reasoning, job.tools));
    // A chat chunk on its way out: reasoning split and tool calls (see `chunk_filter`).
    let mut frames = |i: usize, chunk: Value| -> Bytes {
        match filter.as_mut() {
            None => frame(&chunk),
            Some(f) => Bytes::from(
                f.apply(i, chunk)
                    .iter()
                    .flat_map(|c| frame(c).to_vec())
                    .collect::<Vec<u8>>(),
            ),
        }
    };
    if let Some(queued) = queued {
        let waited =
            wait_admitted(&mut choices, &tx, s.opts.keep_alive, deadline.map(|c| c.at)).await;
        drop(queued);
        match waited {
            Waited::Admitted | Waited::TimedOut => {}
            Waited::Disconnected => return log_finished(&job, &states, "client disconnected"),
            Waited::Refused(reason) => {
                // The headers are out: the refusal is an error event, as vLLM sends.
                let e = refusal(reason);
                s.metrics.rejected(e.status.as_u16());
                let _ = tx.send(frame(&e.body())).await;
                let _ = tx.send(done()).await;
                return log_finished(&job, &states, "refused");
            }
        }
    }
    if job.api == Api::Chat {
        for i in 0..choices.count() {
            if tx.send(frame(&job.role_chunk(i))).await.is_err() {
                return log_finished(&job, &states, "client disconnected");
            }
        }
    }
    // What the client has not taken yet (see `outbox`): engine events are read as they
    // come, whether or not the client keeps up.
    let mut out = Outbox::new(s.opts.stream_buffer_bytes);
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => return log_finished(&job, &states, "client disconnected"),
            permit = tx.reserve(), if !out.is_empty() => match permit {
                Ok(p) => {
                    p.send(out.pop().unwrap_or_default());
                    continue;
                }
                Err(_) => return log_finished(&job, &states, "client disconnected"),
            },
            _ = until(deadline.map(|c| c.at)) => {
                let reason = deadline.map_or(crate::choice_state::TIMEOUT, |c| c.reason);
                for i in choices.abort() {
                    states[i].cut_off(reason, &s.metrics);
                    out.push(frames(i, job.chunk(i, "", None, Some(reason))));
                }
                break;
            }
            r = tokio::time::timeout(s.opts.keep_alive, choices.next()) => r,
        };
        let bytes = match next {
            Err(_) if out.is_empty() => keep_alive_frame(),
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some((i, ev))) => match states[i].apply(i, ev, &job, tok, &s.metrics) {
                Some(chunk) => frames(i, chunk),
                None => continue,
            },
        };
        if bytes.is_empty() {
            continue;
        }
        if !out.push(bytes) {
            tracing::info!(
                limit = s.opts.stream_buffer_bytes,
                "stream cut: its client fell behind by more than --stream-buffer-bytes"
            );
            for i in choices.abort() {
                states[i].cut_off(SLOW_READER, &s.metrics);
                out.push(frames(i, job.chunk(i, "", None, Some(SLOW_READER))));
            }
            break;
        }
    }
    // Streams that ended without `Finished` (engine shut down) still get a finish reason.
    for i in choices.unfinished() {
        out.push(frames(i, job.chunk(i, "", None, Some("abort"))));
    }
    drop(choices);
    if job.include_usage {
        out.push(frame(&job.usage_chunk(usage_sum(&job, &states))));
    }
    out.push(done());
    if !drain(&mut out, &tx, s.opts.idle_timeout).await {
        return log_finished(&job, &states, "client stopped reading");
    }
    log_finished(&job, &states, "complete");
}

/// Sends what `out` holds; false when the client left, or took nothing for `stall`
/// (the connection is then closed by the transport's idle timeout).
pub async fn drain(out: &mut Outbox, tx: &mpsc::Sender<Bytes>, stall: std::time::Duration) -> bool {
    while let Some(f) = out.pop() {
        match tokio::time::timeout(stall, tx.send(f)).await {
            Ok(Ok(())) => {}
            _ => return false,
        }
    }
    true
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
        assert_eq!(&keep_alive_frame()[..], b": keep-alive\n\n");
    }
}
