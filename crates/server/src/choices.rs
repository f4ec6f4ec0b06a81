//! The engine streams of one HTTP request (n choices × prompts), merged into one stream of
//! `(choice index, event)`.
//!
//! NOTE: [`Choices`] owns the [`RequestStream`]s. Whoever holds it (the SSE task, or the
//! handler future of a non-streaming request) drops it when the client goes away, and
//! `Drop` aborts every unfinished request at once, so the engine frees their KV blocks
//! without waiting to notice the closed channels.

use folio_engine::{EngineHandle, Event, FinishReason, RequestId, RequestStream};
use futures::stream::{BoxStream, SelectAll, StreamExt};
use std::collections::VecDeque;

/// Merged event streams of one HTTP request.
pub struct Choices {
    merged: SelectAll<BoxStream<'static, (usize, Event)>>,
    /// Engine ids of choices that have not finished yet.
    pending: Vec<Option<RequestId>>,
    /// Where to send aborts; `None` in unit tests that feed streams by hand.
    engine: Option<EngineHandle>,
    /// Events read by [`Choices::admitted`], replayed by `next` first.
    buffered: VecDeque<(usize, Event)>,
    /// Choices whose first event `admitted` has seen (kept here so that `admitted` can be
    /// cancelled by a timer and called again).
    seen: Vec<bool>,
    /// The server's state, whose finish counters count choices dropped unfinished (the
    /// client went away) as `abort`: their `Finished` event is never read.
    counted: Option<std::sync::Arc<crate::models::Served>>,
}

impl Choices {
    /// Stream `i` of `streams` becomes choice `i`.
    pub fn new(streams: Vec<RequestStream>, engine: Option<EngineHandle>) -> Choices {
        let pending: Vec<_> = streams.iter().map(|s| Some(s.id)).collect();
        let merged = futures::stream::select_all(streams.into_iter().enumerate().map(|(i, rs)| {
            futures::stream::unfold(
                rs,
                |mut rs| async move { rs.next().await.map(|ev| (ev, rs)) },
            )
            .map(move |ev| (i, ev))
            .boxed()
        }));
        let seen = vec![false; pending.len()];
        Choices {
            merged,
            pending,
            engine,
            buffered: VecDeque::new(),
            seen,
            counted: None,
        }
    }

    /// Counts choices dropped unfinished in `model`'s finish counters (as `abort`).
    pub fn counting_aborts(mut self, model: std::sync::Arc<crate::models::Served>) -> Choices {
        self.counted = Some(model);
        self
    }

    /// Waits for the first event of every choice and returns the refusal if the engine
    /// refused any of them before it produced a token (admission control rejects a
    /// request with a `Finished { Rejected }` event, a stopping engine with an `Error`).
    /// The events read are replayed by `next`.
    ///
    /// NOTE: this is what lets a refused request get a 429/503 status instead of a 200
    /// whose stream says "rejected". Streams wait for it only briefly
    /// (`ServerOptions::admission_wait`) before sending their headers.
    ///
    /// Cancel-safe: an event is recorded in the same poll that reads it, so the future can
    /// be dropped (a timer fired) and `admitted` called again.
    pub async fn admitted(&mut self) -> Result<(), FinishReason> {
        while self.seen.iter().any(|s| !s) {
            let Some((i, ev)) = self.next_raw().await else {
                break;
            };
            if !self.seen[i] {
                self.seen[i] = true;
                if let Event::Finished {
                    reason:
                        r @ (FinishReason::Rejected(_)
                        | FinishReason::Error(_)
                        | FinishReason::ShuttingDown),
                    ..
                } = &ev
                {
                    return Err(r.clone());
                }
            }
            self.buffered.push_back((i, ev));
        }
        Ok(())
    }

    pub fn count(&self) -> usize {
        self.pending.len()
    }

    /// The next event of any choice; `None` once every stream has ended.
    pub async fn next(&mut self) -> Option<(usize, Event)> {
        if let Some(x) = self.buffered.pop_front() {
            return Some(x);
        }
        self.next_raw().await
    }

    async fn next_raw(&mut self) -> Option<(usize, Event)> {
        let (i, ev) = self.merged.next().await?;
        if matches!(ev, Event::Finished { .. }) {
            self.pending[i] = None;
        }
        Some((i, ev))
    }

    /// Aborts every unfinished choice (request timeout) and returns their indices; their
    /// later events are not read.
    pub fn abort(&mut self) -> Vec<usize> {
        let open = self.unfinished();
        if let Some(engine) = &self.engine {
            for id in self.pending.iter().flatten() {
                engine.abort(*id);
            }
        }
        self.pending.iter_mut().for_each(|p| *p = None);
        open
    }

    /// Indices of choices whose stream ended without `Finished` (engine went away).
    pub fn unfinished(&self) -> Vec<usize> {
        self.pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .map(|(i, _)| i)
            .collect()
    }
}

impl Drop for Choices {
    fn drop(&mut self) {
        if let Some(engine) = &self.engine {
            for id in self.pending.iter().flatten() {
                engine.abort(*id);
            }
        }
        if let Some(st) = &self.counted {
            for _ in self.pending.iter().flatten() {
                st.metrics.finished("abort");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_engine::{FinishReason, Usage};
    use std::time::Instant;
    use tokio::sync::mpsc;

    fn tokens(text: &str) -> Event {
        Event::Tokens {
            ids: vec![1],
            text: text.into(),
            logprobs: vec![],
            prompt_logprobs: vec![],
            at: Instant::now(),
        }
    }

    fn finished() -> Event {
        Event::Finished {
            reason: FinishReason::Stop,
            usage: Usage::default(),
            at: Instant::now(),
        }
    }

    type Tx = mpsc::UnboundedSender<Event>;

    /// Two choices with engine ids `ids`, fed through the returned senders.
    fn two(ids: [RequestId; 2]) -> (Choices, Tx, Tx) {
        let (tx0, rx0) = mpsc::unbounded_channel();
        let (tx1, rx1) = mpsc::unbounded_channel();
        let streams = vec![
            RequestStream {
                id: ids[0],
                rx: rx0,
            },
            RequestStream {
                id: ids[1],
                rx: rx1,
            },
        ];
        (Choices::new(streams, None), tx0, tx1)
    }

    #[tokio::test]
    async fn merges_streams_and_tracks_finished() {
        let (mut c, tx0, tx1) = two([10, 11]);
        tx1.send(tokens("b")).unwrap();
        tx1.send(finished()).unwrap();
        drop(tx1);
        let mut got = Vec::new();
        while got.len() < 2 {
            let (i, ev) = c.next().await.unwrap();
            got.push((i, matches!(ev, Event::Finished { .. })));
        }
        assert_eq!(got, vec![(1, false), (1, true)]);
        assert_eq!(c.unfinished(), vec![0]);
        tx0.send(tokens("a")).unwrap();
        drop(tx0);
        assert_eq!(c.next().await.map(|(i, _)| i), Some(0));
        assert!(c.next().await.is_none());
        assert_eq!(c.unfinished(), vec![0]);
    }

    #[tokio::test]
    async fn admitted_replays_first_events_or_reports_refusal() {
        let (mut c, tx0, tx1) = two([1, 2]);
        tx0.send(tokens("a")).unwrap();
        tx0.send(tokens("b")).unwrap();
        tx1.send(tokens("c")).unwrap();
        assert_eq!(c.admitted().await, Ok(()));
        let mut texts = Vec::new();
        for _ in 0..3 {
            if let Some((i, Event::Tokens { text, .. })) = c.next().await {
                texts.push((i, text));
            }
        }
        texts.sort();
        assert_eq!(
            texts,
            vec![
                (0, "a".to_string()),
                (0, "b".to_string()),
                (1, "c".to_string())
            ]
        );

        let (mut c, tx0, tx1) = two([1, 2]);
        tx0.send(tokens("a")).unwrap();
        let rejected = FinishReason::Rejected(folio_engine::RejectReason::GroupRefused);
        tx1.send(Event::Finished {
            reason: rejected.clone(),
            usage: Usage::default(),
            at: Instant::now(),
        })
        .unwrap();
        assert_eq!(c.admitted().await, Err(rejected));
    }
}
