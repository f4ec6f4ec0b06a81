//! Admission into the engine: a request's checks, its prefix brought back from the disk
//! tier, its engine-side state, and the samples of an `n > 1` group forked from the first
//! once its prompt is computed.

use super::output::{choose_tokens, emit, score_event};
use super::Engine;
use crate::api::{Event, FinishReason, Usage};
use crate::prompt_scoring::PromptScores;
use crate::{GenerateRequest, RequestId};
use folio_core::sched::admission::Rates;
use folio_core::Request;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

impl Engine {
    /// Queues request `id`; `forks` samples will be forked from it after its prompt.
    pub(super) fn add(
        &mut self,
        id: RequestId,
        mut req: GenerateRequest,
        tx: UnboundedSender<Event>,
        forks: usize,
    ) {
        let finish = |tx: &UnboundedSender<Event>, reason| {
            let _ = tx.send(Event::Finished {
                reason,
                usage: Usage::default(),
                at: Instant::now(),
            });
        };
        if self.shutting_down {
            return finish(&tx, FinishReason::ShuttingDown);
        }
        let guide = req
            .constraint
            .as_ref()
            .map(|c| self.grammars.guide(c, self.metrics.clone()));
        let prompt_len = req.prompt.len();
        let prompt = std::mem::take(&mut req.prompt);
        let ns = req.lora.as_ref().map_or(0, |l| l.key());
        if let Some(tap) = self.kv_events.as_mut() {
            tap.note(ns, req.lora.as_ref());
        }
        let mut r = Request::new(id, prompt, req.max_tokens)
            .with_forks(forks)
            .with_cache_ns(ns)
            .with_prefix_cache(
                req.prompt_logprobs.is_none()
                    && req.embed.is_none_or(crate::Pooling::uses_prefix_cache),
            );
        let now = self.epoch.elapsed().as_secs_f64();
        r = r.with_arrival(req.arrival.map(|a| self.secs(a)).unwrap_or(now));
        if let Some(d) = req.deadline {
            r = r.with_deadline(self.secs(d));
            // Rates from the fitted step cost: prefill at 1/β tokens/s, decode at one token
            // per step of the current batch.
            let c = self.step_curve.fit.cost();
            let batch = (self.sched.num_running() + 1) as f64;
            let rates = Rates {
                prefill_tokens_per_s: 1.0 / c.per_token_s,
                decode_tokens_per_s: 1.0 / (c.fixed_s + c.per_token_s * batch),
            };
            if let Err(reason) = self.sched.check_admission(&r, now, &rates) {
                self.metrics.rejected.fetch_add(1, Relaxed);
                return finish(&tx, FinishReason::Rejected(reason));
            }
        }
        self.restore_prefix(r.prompt(), ns);
        let live = self.new_live(req, r.prompt(), tx, guide);
        if let Err(reason) = self.sched.add_request(r) {
            self.metrics.rejected.fetch_add(1, Relaxed);
            return finish(&live.tx, FinishReason::Rejected(reason));
        }
        self.live.insert(id, live);
        self.metrics
            .prompt_tokens
            .fetch_add(prompt_len as u64, Relaxed);
    }

    /// Forks the waiting samples of `parent`'s group now that its prompt is computed: each
    /// draws its own first token from the same logits and shares the parent's KV blocks.
    pub(super) fn fork_children(
        &mut self,
        parent: RequestId,
        logits: &[f32],
        cached: usize,
        now: Instant,
    ) {
        let Some(children) = self.forks.remove(&parent) else {
            return;
        };
        let vocab = self.runner.model.config.vocab_size;
        let parent_scores = self
            .live
            .get(&parent)
            .and_then(|l| l.scores.as_ref())
            .map(PromptScores::all)
            .unwrap_or_default();
        for c in children {
            let prompt = c.req.prompt.clone();
            let max_tokens = c.req.max_tokens;
            let guide = c
                .req
                .constraint
                .as_ref()
                .map(|g| self.grammars.guide(g, self.metrics.clone()));
            let mut live = self.new_live(c.req, &prompt, c.tx, guide);
            live.cached_tokens = cached;
            live.scores = None;
            if max_tokens.is_score_only() {
                let _ = live.tx.send(score_event(parent_scores.clone(), now));
                live.finish(FinishReason::Length, now);
                continue;
            }
            let (toks, logprobs) =
                choose_tokens(&mut live, &logits[..vocab], vocab, &[], &self.eog);
            let (kept, finish, mut event) = emit(&mut live, &toks, logprobs, &self.eog, now);
            if let Event::Tokens {
                prompt_logprobs, ..
            } = &mut event
            {
                prompt_logprobs.clone_from(&parent_scores);
            }
            let _ = live.tx.send(event);
            self.metrics
                .generation_tokens
                .fetch_add(kept.len() as u64, Relaxed);
            let done = finish
                .map(|_| FinishReason::Stop)
                .or((max_tokens.steps() == 1).then_some(FinishReason::Length));
            let result = match done {
                Some(reason) => Err(reason),
                None => self
                    .sched
                    .fork(parent, c.id, max_tokens, kept[0])
                    .map_err(|e| FinishReason::Error(e.to_string())),
            };
            match result {
                Ok(()) => {
                    self.live.insert(c.id, live);
                }
                Err(reason) => {
                    live.cached_tokens = cached;
                    live.finish(reason, now);
                }
            }
        }
    }
}
