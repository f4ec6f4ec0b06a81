//! A generation request the engine took, and the one loop that drives it to its answer.
//!
//! Every API (chat, completions, Responses; streamed or not) runs [`Running::drive`]; what
//! differs is only the [`Sink`] that formats the output. A streamed answer is a task that
//! owns the request's [`Choices`] and writes frames into a bounded channel whose receiver
//! is the response body: a request still queued in the engine gets its headers and
//! `: keep-alive` comments until its first token, the cutoff (request timeout or
//! `deadline_ms`) ends every unfinished choice, and a client that falls too far behind is
//! cut (see `outbox`). When the client disconnects, hyper drops the body, the channel
//! closes, the task returns and dropping `Choices` aborts the engine requests; a
//! non-streamed answer's handler future is dropped instead, with the same effect.

use crate::choice_state::{usage_sum, ChoiceState, SLOW_READER, TIMEOUT};
use crate::choices::Choices;
use crate::cutoff::{until, Cutoff};
use crate::error::ApiError;
use crate::openai::Job;
use crate::outbox::Outbox;
use crate::sink::{Sink, Update};
use crate::sse::{drain, event_stream, wait_admitted, Waited};
use crate::state::{AppState, Slots};
use axum::body::Bytes;
use axum::response::Response;
use folio_engine::{Event, FinishReason};
use tokio::sync::mpsc;

/// The log outcome of a stream whose client went away.
const DISCONNECTED: &str = "client disconnected";

/// One generation request after submission, owned by whoever answers it.
pub struct Running {
    pub st: AppState,
    pub job: Job,
    pub choices: Choices,
    /// When the server ends it (request timeout or `deadline_ms`), and with which reason.
    pub deadline: Option<Cutoff>,
    /// A stream the engine has not admitted yet: its queue places, held until its first
    /// event.
    pub queued: Option<Slots>,
    /// Counts the request as in flight (the drain waits for it).
    pub _active: Slots,
    /// The accepted-and-ignored fields the request sent (for the `Warning` header).
    pub ignored: Vec<&'static str>,
    /// Its model, kept loaded until the answer ends (last: dropped after `choices`).
    pub model: crate::models::Lease,
}

impl Running {
    /// Answers the request through `sink`: a stream of its frames (returned at once, a
    /// task sends them) or, not streamed, the sink's whole answer once every choice ended.
    pub async fn drive<S: Sink>(self, sink: S) -> Result<Response, ApiError> {
        if self.job.stream {
            return Ok(event_stream(move |tx| self.stream(sink, tx)));
        }
        self.collect(sink).await
    }

    async fn stream<S: Sink>(mut self, mut sink: S, tx: mpsc::Sender<Bytes>) {
        let mut states = vec![ChoiceState::default(); self.choices.count()];
        let mut out = Outbox::new(self.st.0.opts.stream_buffer_bytes);
        if let Some(early) = self
            .relay(&mut sink, &mut states, Some(&tx), &mut out)
            .await
        {
            return log_finished(&self.job, &states, early);
        }
        // Streams that ended without `Finished` (engine shut down) still get an end.
        let unfinished = self.choices.unfinished();
        drop(self.choices);
        out.push(sink.closing(&self.job, &states, &unfinished));
        let outcome = if drain(&mut out, &tx, self.st.0.opts.idle_timeout).await {
            "complete"
        } else {
            "client stopped reading"
        };
        log_finished(&self.job, &states, outcome);
    }

    async fn collect<S: Sink>(mut self, mut sink: S) -> Result<Response, ApiError> {
        drop(self.queued.take());
        let mut states = vec![ChoiceState::default(); self.choices.count()];
        let mut unused = Outbox::new(usize::MAX);
        self.relay(&mut sink, &mut states, None, &mut unused).await;
        log_finished(&self.job, &states, "complete");
        if let Some(m) = states.iter().find_map(|c| match &c.finish {
            Some(FinishReason::Error(m)) => Some(m.clone()),
            _ => None,
        }) {
            return Err(ApiError::generation_failed(&m));
        }
        sink.answer(self.job, states, &self.model.engine.tokenizer)
    }

    /// Reads the engine's events into `states` and `sink` until every choice ended (None)
    /// or the stream ended early (its log outcome). With `tx` (a stream) the frames go
    /// to the client through `out`; without, the sink's frames are dropped.
    async fn relay<S: Sink>(
        &mut self,
        sink: &mut S,
        states: &mut [ChoiceState],
        tx: Option<&mpsc::Sender<Bytes>>,
        out: &mut Outbox,
    ) -> Option<&'static str> {
        let Running {
            st,
            job,
            choices,
            deadline,
            queued,
            model,
            ..
        } = self;
        let s = &st.0;
        let tok = &model.engine.tokenizer;
        if let Some(tx) = tx {
            if !send(tx, sink.opened(job)).await {
                return Some(DISCONNECTED);
            }
            if let Some(q) = queued.take() {
                let at = deadline.map(|c| c.at);
                let ping = sink.keep_alive();
                let waited = wait_admitted(choices, tx, s.opts.keep_alive, ping, at).await;
                drop(q);
                match waited {
                    Waited::Admitted | Waited::TimedOut => {}
                    Waited::Disconnected => return Some(DISCONNECTED),
                    Waited::Refused(reason) => {
                        // The headers are out: the refusal is the stream's end.
                        let e = st.refused(reason);
                        let _ = send(tx, sink.refused(&e)).await;
                        return Some("refused");
                    }
                }
            }
            if !send(tx, sink.admitted(job, choices.count())).await {
                return Some(DISCONNECTED);
            }
        }
        loop {
            let next = tokio::select! {
                biased;
                _ = closed(tx) => return Some(DISCONNECTED),
                permit = reserve(tx), if !out.is_empty() => match permit {
                    Ok(p) => {
                        p.send(out.pop().unwrap_or_default());
                        continue;
                    }
                    Err(_) => return Some(DISCONNECTED),
                },
                _ = until(deadline.map(|c| c.at)) => {
                    let reason = deadline.map_or(TIMEOUT, |c| c.reason);
                    for i in choices.abort() {
                        states[i].cut_off(reason, &model.metrics);
                        let b = sink.cut(job, i, reason);
                        if tx.is_some() {
                            out.push(b);
                        }
                    }
                    return None;
                }
                r = tokio::time::timeout(s.opts.keep_alive, choices.next()) => r,
            };
            let bytes = match next {
                Err(_) if out.is_empty() && tx.is_some() => sink.keep_alive(),
                Err(_) => continue,
                Ok(None) => return None,
                Ok(Some((i, ev))) => {
                    let (text, ids) = match &ev {
                        Event::Tokens { text, ids, .. } => (text.clone(), ids.clone()),
                        Event::Finished { .. } | Event::Embedding { .. } => {
                            (String::new(), Vec::new())
                        }
                    };
                    let chunk = states[i].apply(i, ev, job, tok, &model.metrics);
                    let u = Update {
                        index: i,
                        text: &text,
                        tokens: ids.len(),
                        ids: &ids,
                        chunk,
                        state: &states[i],
                    };
                    sink.event(job, u)
                }
            };
            if tx.is_none() || bytes.is_empty() || out.push(bytes) {
                continue;
            }
            tracing::info!(
                limit = s.opts.stream_buffer_bytes,
                "stream cut: its client fell behind by more than --stream-buffer-bytes"
            );
            for i in choices.abort() {
                states[i].cut_off(SLOW_READER, &model.metrics);
                out.push(sink.cut(job, i, SLOW_READER));
            }
            return None;
        }
    }
}

/// Sends `b` unless it is empty; false when the client went away.
async fn send(tx: &mpsc::Sender<Bytes>, b: Bytes) -> bool {
    b.is_empty() || tx.send(b).await.is_ok()
}

/// Resolves when the client went away; never without a client channel.
async fn closed(tx: Option<&mpsc::Sender<Bytes>>) {
    match tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

/// A place in the client channel; never without one.
async fn reserve(
    tx: Option<&mpsc::Sender<Bytes>>,
) -> Result<mpsc::Permit<'_, Bytes>, mpsc::error::SendError<()>> {
    match tx {
        Some(tx) => tx.reserve().await,
        None => std::future::pending().await,
    }
}

/// The one structured log line per request.
pub fn log_finished(job: &Job, states: &[ChoiceState], outcome: &str) {
    let u = usage_sum(job, states);
    let ttft_ms = states
        .iter()
        .filter_map(|c| c.first_at)
        .min()
        .map(|t| t.saturating_duration_since(job.arrival).as_secs_f64() * 1e3);
    let reasons: Vec<&str> = states.iter().map(ChoiceState::finish_reason).collect();
    tracing::info!(
        id = %job.id,
        stream = job.stream,
        choices = states.len(),
        prompt_tokens = u.prompt_tokens,
        completion_tokens = u.completion_tokens,
        cached_tokens = u.cached_tokens,
        ttft_ms = ttft_ms.unwrap_or(f64::NAN),
        e2e_ms = job.arrival.elapsed().as_secs_f64() * 1e3,
        finish_reason = %reasons.join(","),
        outcome,
        "request finished"
    );
}
