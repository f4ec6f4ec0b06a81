//! The Responses API's stream: named SSE events (`event: response.output_text.delta`,
//! `data: {…}`), no `[DONE]` (as OpenAI). Like the chat stream, a request still queued
//! gets its headers, `response.created` and keep-alive comments at once; a refusal then
//! comes as `response.failed`, and the request timeout ends it as `response.incomplete`.

use super::build::{Build, Ev};
use super::{end_of, feed, tokens_of};
use crate::choice_state::{ChoiceState, SLOW_READER};
use crate::generate::{log_finished, refusal, until, Running};
use crate::outbox::Outbox;
use crate::sse::{drain, event_stream, keep_alive_frame, wait_admitted, Waited};
use crate::state::Slots;
use axum::body::Bytes;
use axum::response::Response;
use tokio::sync::mpsc;

/// The SSE frames of `evs`.
fn frames(evs: &[Ev]) -> Bytes {
    let mut out = String::new();
    for (kind, body) in evs {
        out.push_str(&format!("event: {kind}\ndata: {body}\n\n"));
    }
    Bytes::from(out)
}

/// Starts the streaming task and returns the SSE response at once.
pub fn respond(req: Running, b: Build, queued: Option<Slots>) -> Response {
    event_stream(|tx| pump(req, b, tx, queued))
}

async fn pump(req: Running, mut b: Build, tx: mpsc::Sender<Bytes>, queued: Option<Slots>) {
    let Running {
        st,
        job,
        mut choices,
        deadline,
        ..
    } = req;
    let s = &st.0;
    let mut c = ChoiceState::default();
    let gone = |c: &ChoiceState| log_finished(&job, std::slice::from_ref(c), "client disconnected");
    if tx.send(frames(&b.start())).await.is_err() {
        return gone(&c);
    }
    if let Some(queued) = queued {
        let waited =
            wait_admitted(&mut choices, &tx, s.opts.keep_alive, deadline.map(|d| d.at)).await;
        drop(queued);
        match waited {
            Waited::Admitted | Waited::TimedOut => {}
            Waited::Disconnected => return gone(&c),
            Waited::Refused(reason) => {
                let e = refusal(reason);
                s.metrics.rejected(e.status.as_u16());
                let _ = tx.send(frames(&b.refuse(e.code, &e.message))).await;
                return log_finished(&job, std::slice::from_ref(&c), "refused");
            }
        }
    }
    // What the client has not taken yet, bounded as in the chat stream (see `outbox`).
    let mut out = Outbox::new(s.opts.stream_buffer_bytes);
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => return gone(&c),
            permit = tx.reserve(), if !out.is_empty() => match permit {
                Ok(p) => {
                    p.send(out.pop().unwrap_or_default());
                    continue;
                }
                Err(_) => return gone(&c),
            },
            _ = until(deadline.map(|d| d.at)) => {
                choices.abort();
                if let Some(d) = deadline {
                    c.cut_off(d.reason, &s.metrics);
                }
                break;
            }
            r = tokio::time::timeout(s.opts.keep_alive, choices.next()) => r,
        };
        let bytes = match next {
            Err(_) if out.is_empty() => keep_alive_frame(),
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some((_, ev))) => frames(&feed(&mut b, &mut c, ev, &job, &st)),
        };
        if !bytes.is_empty() && !out.push(bytes) {
            tracing::info!(
                limit = s.opts.stream_buffer_bytes,
                "stream cut: its client fell behind by more than --stream-buffer-bytes"
            );
            choices.abort();
            c.cut_off(SLOW_READER, &s.metrics);
            break;
        }
    }
    drop(choices);
    // Timed out, cut, or the engine went away without a finish.
    let last = b.finish(&end_of(&c), tokens_of(&job, &c));
    out.push(frames(&last));
    if !drain(&mut out, &tx, s.opts.idle_timeout).await {
        return log_finished(&job, std::slice::from_ref(&c), "client stopped reading");
    }
    log_finished(&job, std::slice::from_ref(&c), "complete");
}
