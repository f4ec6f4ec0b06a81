//! The engine loop: one thread owns the scheduler, the KV cache and every request's
//! sampler; each iteration is one fused forward over all scheduled tokens of all requests.
//!
//! ```text
//!  commands ──► add / abort ──► Scheduler::schedule ──► runner: copies, forward
//!      ▲                                                              │
//!  EngineHandle        events ◄── output: sample, verify, stop, detok ◄┘ ──► Scheduler::update
//!                                                                     └──► draft: propose
//! ```
//!
//! Who does what: `spawn.rs` builds the engine; `admit.rs` turns a `GenerateRequest` into a
//! scheduler request and engine-side state (`live.rs`), and forks `n > 1` samples;
//! `runner.rs` owns the model and KV bytes and runs the forwards; `output.rs` turns logit
//! rows into tokens and events; `draft.rs` proposes the next step's drafts; `tier_io.rs`
//! moves blocks to and from the disk tier; `publish.rs` feeds `/metrics` and the step log.

mod admit;
mod draft;
mod drafter;
mod live;
mod output;
mod publish;
mod runner;
mod spawn;
mod tier_io;

pub use spawn::{spawn_engine, spawn_engine_with_draft, SpawnError};

use crate::api::{Command, EngineMetrics, Event, FinishReason, Usage};
use crate::constraint::Grammars;
use crate::RequestId;
use drafter::Drafter;
use folio_core::cost::{step_budget, StepCurve};
use folio_core::sched::RejectReason;
use folio_core::{Scheduler, SchedulerOutput};
use folio_tokenizer::Tokenizer;
use live::{Live, PendingChild};
use runner::Runner;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Engine {
    /// The model, its KV bytes, a draft model and the disk tier: the forward side.
    runner: Runner,
    sched: Scheduler,
    live: HashMap<RequestId, Live>,
    tokenizer: Arc<Tokenizer>,
    eog: Vec<u32>,
    grammars: Arc<Grammars>,
    metrics: Arc<EngineMetrics>,
    epoch: Instant,
    shutting_down: bool,
    /// Speculation across requests: defaults, priors, the planner's measurements.
    drafter: Drafter,
    /// Measured step time by rows: draft planning, the `max_itl_ms` budget, and (its
    /// linear fit) admission rates.
    step_curve: StepCurve,
    /// `EngineConfig::max_itl_ms` and the configured budget it may shrink.
    max_itl_ms: Option<f64>,
    token_budget: usize,
    /// Samples waiting to be forked from their group's first request once its prompt is
    /// computed (OpenAI `n`): they share its KV blocks instead of recomputing the prompt.
    forks: HashMap<RequestId, Vec<PendingChild>>,
    salt: u64,
    /// Prefix-cache events for an outside router, if configured.
    kv_events: Option<crate::kv_events::KvEventTap>,
}

impl Engine {
    fn run(&mut self, rx: Receiver<Command>) {
        loop {
            // What the last iteration stored in and evicted from the prefix cache.
            if let Some(tap) = self.kv_events.as_mut() {
                tap.flush(self.sched.kv_mut());
            }
            // Block when idle; otherwise take whatever commands arrived since the last step.
            if !self.sched.has_unfinished() {
                if self.shutting_down {
                    // Requests that arrived after the shutdown get their refusal rather
                    // than a stream that just closes.
                    while let Ok(cmd) = rx.try_recv() {
                        self.command(cmd);
                    }
                    return;
                }
                match rx.recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        self.shutting_down = true;
                        break;
                    }
                }
            }
            self.drop_closed();
            if !self.sched.has_unfinished() {
                continue;
            }
            self.set_step_budget();
            let out = self.sched.schedule();
            if out.is_empty() {
                // Nothing can run right now (e.g. waiting on KV): wait briefly for commands.
                self.sched.release_step(out.step);
                match rx.recv_timeout(Duration::from_millis(2)) {
                    Ok(cmd) => self.command(cmd),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => self.shutting_down = true,
                }
                continue;
            }
            self.step(out);
        }
    }

    fn command(&mut self, cmd: Command) {
        self.apply(cmd);
        self.publish();
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Add { id, req, tx } => self.add(id, *req, tx, 0),
            Command::AddGroup {
                ids,
                req,
                params,
                txs,
            } => {
                let mut group = ids.into_iter().zip(params).zip(txs).map(|((id, p), tx)| {
                    let mut r = (*req).clone();
                    r.params = p;
                    (id, r, tx)
                });
                let (pid, preq, ptx) = group.next().expect("a group has at least two samples");
                let children: Vec<PendingChild> = group
                    .map(|(id, req, tx)| PendingChild { id, req, tx })
                    .collect();
                self.add(pid, preq, ptx, children.len());
                if self.live.contains_key(&pid) {
                    self.forks.insert(pid, children);
                } else {
                    for c in children {
                        let _ = c.tx.send(Event::Finished {
                            reason: FinishReason::Rejected(RejectReason::GroupRefused),
                            usage: Usage::default(),
                            at: Instant::now(),
                        });
                    }
                }
            }
            Command::Abort(id) => self.abort(id, FinishReason::Aborted),
            Command::Shutdown => {
                self.shutting_down = true;
                let ids: Vec<RequestId> = self.live.keys().copied().collect();
                for id in ids {
                    self.abort(id, FinishReason::ShuttingDown);
                }
            }
        }
    }

    /// Seconds since the engine's epoch (instants before it count as 0).
    pub(super) fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    pub(super) fn abort(&mut self, id: RequestId, reason: FinishReason) {
        for c in self.forks.remove(&id).unwrap_or_default() {
            let _ = c.tx.send(Event::Finished {
                reason: reason.clone(),
                usage: Usage::default(),
                at: Instant::now(),
            });
        }
        self.sched.abort(id);
        if let Some(l) = self.live.remove(&id) {
            l.finish_silently(reason);
        }
    }

    /// Requests whose stream was dropped are aborted (client went away).
    fn drop_closed(&mut self) {
        let closed: Vec<RequestId> = self
            .live
            .iter()
            .filter(|(_, l)| l.tx.is_closed())
            .map(|(&id, _)| id)
            .collect();
        if closed.is_empty() {
            return;
        }
        for id in closed {
            self.abort(id, FinishReason::Aborted);
        }
        self.publish();
    }

    /// One iteration: spill what the step's allocations evicted, run the copy orders and
    /// the forward, choose and emit tokens, and hand the results back to the scheduler.
    fn step(&mut self, mut out: SchedulerOutput) {
        let t0 = Instant::now();
        // Evicted blocks still hold their data: spill before this step overwrites them.
        self.spill(&out.evicted);
        self.runner.copy_blocks(&out.copies);
        let (batch, rows_of, hidden_of) = self.build_batch(&mut out);
        let (fwd, fstats) = match self.runner.forward(batch) {
            Ok(r) => r,
            Err(e) => {
                // A batch the model refuses is a bug upstream; fail its requests, keep serving.
                tracing::error!("forward failed: {e}");
                self.sched.release_step(out.step);
                for sr in &out.requests {
                    self.abort(
                        sr.id,
                        FinishReason::Error(format!("forward pass failed: {e}")),
                    );
                }
                return;
            }
        };
        let now = Instant::now();
        let forward_s = t0.elapsed().as_secs_f64();
        let rows = output::Rows {
            logits: &fwd.logits,
            logits_of: &rows_of,
            hidden: &fwd.hidden,
            hidden_of: &hidden_of,
        };
        let (results, fork_jobs) = self.process_outputs(&out, rows, forward_s, now);
        for (parent, row, cached) in fork_jobs {
            self.fork_children(parent, &row, cached, now);
        }
        let finished = self.sched.update(&out, &results);
        for r in finished {
            if let Some(l) = self.live.remove(&r.id) {
                let folio_core::RequestStatus::Finished(reason) = r.status else {
                    unreachable!("Scheduler::update returns finished requests only")
                };
                l.finish(reason, now);
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        self.drafter.earn_probe_time(wall);
        self.step_curve.add(out.num_tokens(), wall);
        self.learn_costs();
        self.record(&out, wall, fstats);
        self.propose();
    }

    /// Hands the KV manager this machine's measured costs: the step line (what recomputing
    /// a cached block would cost) and the disk tier's fetch and spill times per token.
    pub(super) fn learn_costs(&mut self) {
        let bs = self.runner.kv.block_size as f64;
        let tier = self.runner.tier.as_ref().map(|t| folio_core::TierCost {
            fetch_per_token_s: t.stats.fetch_s_per_block / bs,
            maintain_per_token_s: t.stats.spill_s_per_block / bs,
        });
        let cost = self.step_curve.fit.cost();
        self.sched.kv_mut().set_costs(cost, tier);
    }

    /// The step's token budget: with requests decoding and an ITL target, what
    /// `folio_core::cost::step_budget` fits; otherwise the whole budget.
    fn set_step_budget(&mut self) {
        let b = match self.max_itl_ms {
            Some(ms) if self.sched.num_decoding() > 0 => step_budget(
                &self.step_curve,
                ms / 1e3,
                self.sched.num_running(),
                self.sched.num_decoding(),
                self.token_budget,
            ),
            _ => self.token_budget,
        };
        self.sched.set_token_budget(b);
    }
}
