//! Server-sent events: `data: {json}\n\n` per chunk, `data: [DONE]\n\n` at the end; the
//! response whose body a task writes, and the waits of that task (see `running`).

use crate::choices::Choices;
use crate::cutoff::until;
use crate::outbox::Outbox;
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

/// Waits for the engine to admit the request, sending `ping` (the sink's keep-alive; none
/// when empty) every `keep_alive` so that proxies see bytes while it is queued.
pub async fn wait_admitted(
    choices: &mut Choices,
    tx: &mpsc::Sender<Bytes>,
    keep_alive: std::time::Duration,
    ping: Bytes,
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
            _ = tick.tick(), if !ping.is_empty() => {
                if tx.send(ping.clone()).await.is_err() {
                    return Waited::Disconnected;
                }
            }
        }
    }
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
