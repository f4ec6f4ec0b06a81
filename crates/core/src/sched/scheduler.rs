//! The scheduler: one budget loop, no prefill/decode phases (vLLM v1 style).
//!
//! Each step:
//! 1. running requests that only need their newest token (decodes) take one token each
//!    (plus drafts), then running requests still catching up take a chunk of at most
//!    `max_chunk`; each takes `min(remaining, budget)`. When KV runs out the newest
//!    not-yet-scheduled running request is preempted by recompute (possibly the one asking).
//!    Before the catch-ups, a waiting prompt shorter than every one of them is admitted
//!    (shortest remaining first), so a short request does not wait behind long prefills;
//! 2. if nothing was preempted and the policy lets new requests in, waiting requests are
//!    admitted FCFS while budget, `max_running` and KV (per the reservation mode) allow; a
//!    prefix-cache hit starts them past their cached tokens.
//!
//! `num_computed_tokens` advances at schedule time (the step is committed to compute them);
//! `update` rolls back rejected drafts, appends sampled tokens, commits full blocks to the
//! prefix cache, finishes requests and releases the step's holds on KV blocks.

use std::collections::{HashMap, HashSet, VecDeque};

use super::admission::{self, AdmissionEstimate, Rates, RejectReason};
use super::config::{BatchPolicy, ConfigError, KvReservation, SchedulerConfig};
use super::max_tokens::MaxTokens;
use super::output::{Lookahead, RequestResult, ScheduledRequest, SchedulerOutput};
use super::request::{FinishReason, Request, RequestId, RequestStatus};
use crate::kv::{KvError, KvManager, KvStats, StepId};

/// Error building a scheduler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Kv(#[from] KvError),
}

/// Counters since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStats {
    pub steps: u64,
    pub preemptions: u64,
    /// Tokens computed again after preemption.
    pub recomputed_tokens: u64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub draft_tokens: u64,
    pub accepted_draft_tokens: u64,
    pub finished: u64,
    pub aborted: u64,
}

/// The scheduler. Owns the requests, the queues and the KV manager.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    kv: KvManager,
    requests: HashMap<RequestId, Request>,
    /// FCFS; preempted requests go back to the front.
    waiting: VecDeque<RequestId>,
    /// Admission order (oldest first); preemption victims come from the back.
    running: Vec<RequestId>,
    next_step: u64,
    stats: SchedStats,
}

/// One request's planned share of the step being built.
struct Planned {
    id: RequestId,
    start: usize,
    num_known: usize,
    num_draft: usize,
}

impl Scheduler {
    /// A scheduler with an empty KV pool.
    pub fn new(cfg: SchedulerConfig) -> Result<Self, SchedulerError> {
        cfg.validate()?;
        let kv = KvManager::new(cfg.kv.clone())?;
        Ok(Self {
            cfg,
            kv,
            requests: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_step: 0,
            stats: SchedStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Changes the per-step token budget from the next `schedule` on (an executor that
    /// targets a step time derives it from measured step costs). At least 1.
    pub fn set_token_budget(&mut self, tokens: usize) {
        self.cfg.token_budget = tokens.max(1);
    }

    /// The KV manager (read-only: tables, slots, cache, stats).
    pub fn kv(&self) -> &KvManager {
        &self.kv
    }

    /// The KV manager, for the executor's tier hooks (`restore_block`, `take_evicted`).
    pub fn kv_mut(&mut self) -> &mut KvManager {
        &mut self.kv
    }

    /// KV occupancy and counters.
    pub fn kv_stats(&self) -> KvStats {
        self.kv.stats()
    }

    /// Scheduler counters.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }

    /// Requests waiting (including preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests running.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Running requests that only need their newest token computed (decoding).
    pub fn num_decoding(&self) -> usize {
        self.running
            .iter()
            .filter(|id| {
                let r = &self.requests[*id];
                r.num_tokens().saturating_sub(r.num_computed_tokens) <= 1
            })
            .count()
    }

    /// True while any request is waiting or running.
    pub fn has_unfinished(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// A live (not finished) request.
    pub fn request(&self, id: RequestId) -> Option<&Request> {
        self.requests.get(&id)
    }

    /// Queues a request after static checks (non-empty prompt, unique id,
    /// final KV fits the whole pool).
    pub fn add_request(&mut self, mut req: Request) -> Result<(), RejectReason> {
        if self.requests.contains_key(&req.id) {
            return Err(RejectReason::DuplicateId(req.id));
        }
        self.check_fits(&req)?;
        req.status = RequestStatus::Waiting;
        self.waiting.push_back(req.id);
        self.requests.insert(req.id, req);
        Ok(())
    }

    /// Full admission check of a not-yet-added request: static checks, then the deadline
    /// against the prompt work already queued or running, at the measured `rates`.
    pub fn check_admission(
        &self,
        req: &Request,
        now_s: f64,
        rates: &Rates,
    ) -> Result<AdmissionEstimate, RejectReason> {
        self.check_fits(req)?;
        let queued: usize = self
            .waiting
            .iter()
            .chain(&self.running)
            .map(|id| {
                let r = &self.requests[id];
                r.num_prompt_tokens().saturating_sub(r.num_computed_tokens)
            })
            .sum();
        admission::check_deadline(req, now_s, rates, queued)
    }

    /// Sets the drafts to verify in the next step (speculative decoding). Capped so the
    /// request cannot pass `max_tokens`. Returns false for an unknown or finished request.
    pub fn set_draft(&mut self, id: RequestId, mut draft: Vec<u32>) -> bool {
        let Some(r) = self.requests.get_mut(&id) else {
            return false;
        };
        draft.truncate(r.draft_room());
        if r.status == RequestStatus::Running && r.num_computed_tokens + 1 == r.num_tokens() {
            // Lookahead slots past the drafts made go back now (drafting stopped early).
            let _ = self
                .kv
                .truncate(id, r.num_computed_tokens + draft.len() + 1);
        }
        r.draft = draft;
        true
    }

    /// Reserves KV for a drafter that writes K/V before the verifying step (self-draft or
    /// a draft model): positions `pos..pos + k`, `pos` being the running request's newest
    /// token (not yet computed). The KV manager allocates the slots and decides
    /// copy-on-write of a shared tail block; the copies come back with the slots and must
    /// run before the drafter writes. Drafting is optional, so this never preempts: with
    /// too few free blocks fewer slots are given, and `None` means none (or the request is
    /// not decoding). The next `update` gives back the slots of rejected drafts.
    pub fn reserve_lookahead(&mut self, id: RequestId, k: usize) -> Option<Lookahead> {
        let r = self.requests.get(&id)?;
        if r.status != RequestStatus::Running || r.num_computed_tokens + 1 != r.num_tokens() {
            return None;
        }
        let pos = r.num_computed_tokens;
        // Drafts past max_tokens could never be kept (`set_draft` cuts them too).
        // Slots up to the verifying step's extent (the newest token and k drafts), so
        // that step needs no block this did not get.
        let mut k = k.min(r.draft_room());
        while k > 0 && self.kv.grow(id, pos + k + 1).is_err() {
            k -= 1;
        }
        if k == 0 {
            return None;
        }
        Some(Lookahead {
            start_pos: pos,
            num_slots: k,
            tables: self.kv.tables(id),
            copies: self.kv.take_copy_ops(),
        })
    }

    /// Forks running request `parent` into a new request `child` that shares all its KV
    /// blocks (the partial tail is copied on the child's first append, copy-on-write) and
    /// continues with `first_token` as its first output: n > 1 samples of one prompt
    /// compute the prompt once. Call between `schedule` and `update` of the step that
    /// computed the parent's prompt (the parent has no output yet).
    pub fn fork(
        &mut self,
        parent: RequestId,
        child: RequestId,
        max_tokens: impl Into<MaxTokens>,
        first_token: u32,
    ) -> Result<(), RejectReason> {
        // The sample stops counting as pending whether or not it can be forked.
        if let Some(p) = self.requests.get_mut(&parent) {
            p.forks = p.forks.saturating_sub(1);
        }
        if self.requests.contains_key(&child) {
            return Err(RejectReason::DuplicateId(child));
        }
        let Some(p) = self.requests.get(&parent) else {
            return Err(RejectReason::NotForkable {
                id: parent,
                why: "unknown or finished",
            });
        };
        if p.status != RequestStatus::Running || p.num_output_tokens() != 0 {
            return Err(RejectReason::NotForkable {
                id: parent,
                why: "not running or already has output",
            });
        }
        let mut c = Request::new(child, p.prompt().to_vec(), max_tokens.into());
        c.arrival_s = p.arrival_s;
        c.deadline_s = p.deadline_s;
        c.status = RequestStatus::Running;
        c.num_computed_tokens = p.num_computed_tokens;
        c.max_computed_tokens = p.num_computed_tokens;
        c.num_cached_tokens = p.num_cached_tokens;
        c.push_output(first_token);
        self.kv
            .fork(parent, child)
            .map_err(|_| RejectReason::NotForkable {
                id: parent,
                why: "no KV sequence",
            })?;
        let at = self
            .running
            .iter()
            .position(|&r| r == parent)
            .map_or(self.running.len(), |i| i + 1);
        self.running.insert(at, child);
        self.requests.insert(child, c);
        Ok(())
    }

    /// Cancels a request at any time: it is never scheduled again and its KV is released
    /// as soon as no in-flight step reads it. Returns it (status `Finished(Aborted)`).
    pub fn abort(&mut self, id: RequestId) -> Option<Request> {
        let mut r = self.requests.remove(&id)?;
        self.waiting.retain(|&w| w != id);
        self.running.retain(|&w| w != id);
        self.kv.free_seq(id);
        r.status = RequestStatus::Finished(FinishReason::Aborted);
        self.stats.aborted += 1;
        Some(r)
    }

    /// Builds the next step. An empty output means nothing can run now.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let step = StepId(self.next_step);
        self.next_step += 1;
        let mut budget = self.cfg.token_budget;
        let mut planned: Vec<Planned> = Vec::new();
        let mut done: HashSet<RequestId> = HashSet::new();
        let mut preempted = Vec::new();

        // Decodes first, then running requests still catching up, each in admission order;
        // between the two, waiting prompts shorter than every unscheduled catch-up.
        let (decodes, catch_ups): (Vec<RequestId>, Vec<RequestId>) =
            self.running.iter().partition(|id| {
                let r = &self.requests[id];
                r.num_tokens() - r.num_computed_tokens.min(r.num_tokens()) <= 1
            });
        for id in decodes {
            self.plan_running(id, &mut budget, &mut planned, &mut done, &mut preempted);
        }
        if preempted.is_empty() && self.admission_open() {
            // Shortest remaining first between the waiting head and the running prefills:
            // a short prompt arriving behind long ones gets its first token in the next
            // step instead of after all their chunks. Equal lengths keep FCFS.
            let shortest = catch_ups
                .iter()
                .map(|id| self.requests[id].num_tokens() - self.requests[id].num_computed_tokens)
                .min();
            if let Some(rest) = shortest {
                let short: Vec<RequestId> = self
                    .waiting
                    .iter()
                    .copied()
                    .filter(|id| self.requests[id].num_tokens() < rest)
                    .collect();
                for id in short {
                    if budget == 0 || self.running_samples() >= self.cfg.effective_max_running() {
                        break;
                    }
                    let Some(p) = self.try_admit(id, budget) else {
                        break;
                    };
                    budget -= p.num_known + p.num_draft;
                    // Scheduled: a catch-up short of KV must not preempt it.
                    done.insert(id);
                    planned.push(p);
                }
            }
        }
        for id in catch_ups {
            self.plan_running(id, &mut budget, &mut planned, &mut done, &mut preempted);
        }

        if preempted.is_empty() && self.admission_open() {
            while budget > 0 && self.running_samples() < self.cfg.effective_max_running() {
                let Some(&id) = self.waiting.front() else {
                    break;
                };
                let Some(p) = self.try_admit(id, budget) else {
                    break;
                };
                budget -= p.num_known + p.num_draft;
                planned.push(p);
            }
        }

        self.build_output(step, planned, preempted)
    }

    /// Applies the executor's results for step `out`; returns the requests that finished.
    pub fn update(&mut self, out: &SchedulerOutput, results: &[RequestResult]) -> Vec<Request> {
        let by_id: HashMap<RequestId, &RequestResult> = results.iter().map(|r| (r.id, r)).collect();
        let mut finished = Vec::new();
        for sr in &out.requests {
            let Some(r) = self.requests.get_mut(&sr.id) else {
                continue;
            }; // aborted meanwhile
            let res = by_id.get(&sr.id);
            let running = r.status == RequestStatus::Running;
            if sr.sample {
                let new = res.map(|x| x.new_token_ids.as_slice()).unwrap_or(&[]);
                if running {
                    if new.is_empty() {
                        // No token came back: recompute the last position next step.
                        r.num_computed_tokens = r
                            .num_computed_tokens
                            .saturating_sub(1 + sr.num_draft_tokens);
                    } else {
                        let accepted = (new.len() - 1).min(sr.num_draft_tokens);
                        r.num_computed_tokens -= sr.num_draft_tokens - accepted;
                        self.stats.accepted_draft_tokens += accepted as u64;
                    }
                    // Rejected drafts' slots (and lookahead slots left unused) go back.
                    self.kv
                        .truncate(sr.id, r.num_computed_tokens)
                        .expect("running request has KV");
                }
                for &t in new {
                    if r.num_output_tokens() >= r.max_outputs() {
                        break;
                    }
                    r.push_output(t);
                }
                r.draft.clear();
            }
            if running {
                self.kv
                    .commit(sr.id, r.tokens(), r.num_computed_tokens)
                    .expect("running request has KV");
            }
            let reason = res.and_then(|x| x.finish.clone()).or_else(|| {
                (r.num_output_tokens() >= r.max_outputs()).then_some(FinishReason::Length)
            });
            if let Some(reason) = reason {
                finished.push(self.finish(sr.id, reason));
            }
        }
        self.kv.release_step(out.step);
        finished
    }

    /// Releases step `step`'s KV holds without applying results (e.g. the executor failed).
    /// Requests keep the counters advanced at schedule time; abort them if the step's work
    /// is lost.
    pub fn release_step(&mut self, step: StepId) {
        self.kv.release_step(step);
    }

    // ---- helpers ----

    /// Plans running request `id`'s tokens this step (its decode plus drafts, or its next
    /// prompt chunk), growing its KV and preempting the newest unscheduled running request
    /// (possibly itself) while the pool is short.
    fn plan_running(
        &mut self,
        id: RequestId,
        budget: &mut usize,
        planned: &mut Vec<Planned>,
        done: &mut HashSet<RequestId>,
        preempted: &mut Vec<RequestId>,
    ) {
        if *budget == 0 || !self.running.contains(&id) {
            return; // out of budget, or preempted earlier in this step
        }
        let Some((num_known, mut num_draft)) = self.plan_tokens(id, *budget) else {
            return;
        };
        let start = self.requests[&id].num_computed_tokens;
        while let Err(KvError::OutOfBlocks { .. }) = self.kv.grow(id, start + num_known + num_draft)
        {
            if num_draft > 0 {
                // Drafts are optional: drop them before preempting anyone for their slots.
                num_draft = 0;
                continue;
            }
            let victim = *self
                .running
                .iter()
                .rev()
                .find(|r| !done.contains(r))
                .expect("the asking request itself is not yet scheduled");
            self.preempt(victim);
            preempted.push(victim);
            if victim == id {
                return;
            }
        }
        *budget -= num_known + num_draft;
        done.insert(id);
        planned.push(Planned {
            id,
            start,
            num_known,
            num_draft,
        });
    }

    /// [`admission::check_static`] against this pool: the most pages the request's final
    /// KV holds at once must fit the whole pool.
    fn check_fits(&self, req: &Request) -> Result<(), RejectReason> {
        let chunk = self.cfg.max_chunk;
        let pages = |tokens| self.kv.pages_at_most(tokens, chunk);
        admission::check_static(req, &pages, self.kv.num_blocks())
    }

    /// Tokens request `id` computes this step: `(known, drafts)`, or `None` if it has
    /// nothing to compute (its sampled token is still in flight).
    fn plan_tokens(&self, id: RequestId, budget: usize) -> Option<(usize, usize)> {
        let r = &self.requests[&id];
        let remaining = r
            .num_tokens()
            .checked_sub(r.num_computed_tokens)
            .filter(|&n| n > 0)?;
        if remaining == 1 {
            let n = (1 + r.draft.len()).min(budget);
            Some((1, n - 1))
        } else {
            Some((remaining.min(self.cfg.max_chunk).min(budget), 0))
        }
    }

    fn admission_open(&self) -> bool {
        match self.cfg.policy {
            BatchPolicy::Continuous | BatchPolicy::Serial => true,
            BatchPolicy::Fixed => self.running.is_empty(),
        }
    }

    /// Running requests plus the samples they will still fork: what `max_running` bounds.
    fn running_samples(&self) -> usize {
        self.running.len()
            + self
                .running
                .iter()
                .map(|id| self.requests[id].forks)
                .sum::<usize>()
    }

    /// Admits waiting request `id` if KV allows under the reservation mode, and its samples
    /// fit `max_running` (a group larger than the limit runs when nothing else does).
    fn try_admit(&mut self, id: RequestId, budget: usize) -> Option<Planned> {
        let r = &self.requests[&id];
        let samples = 1 + r.forks;
        if !self.running.is_empty()
            && self.running_samples() + samples > self.cfg.effective_max_running()
        {
            return None;
        }
        // Without the prefix cache, the probe is empty: nothing matches, nothing attaches.
        let probe = if r.use_prefix_cache { r.tokens() } else { &[] };
        let m = self.kv.match_prefix_in(probe, r.cache_ns);
        let cached = m.num_tokens;
        let remaining = r.num_tokens() - cached;
        let n = if remaining > 1 {
            remaining.min(self.cfg.max_chunk)
        } else {
            remaining
        }
        .min(budget);
        let available = self.kv.num_available() - m.num_unreferenced;
        let needed = match self.cfg.reservation {
            KvReservation::OnDemand => {
                (self.kv.blocks_for(cached + n) - m.num_blocks) * self.kv.pages_per_block()
            }
            KvReservation::ReserveFinal => {
                let final_pages = self
                    .kv
                    .pages_at_most(r.final_kv_tokens(), self.cfg.max_chunk)
                    .saturating_sub(m.num_pages);
                final_pages + self.outstanding_reservations()
            }
        };
        if needed > available {
            return None;
        }
        let got = self
            .kv
            .create_seq_in(id, probe, r.cache_ns)
            .expect("waiting request has no KV yet");
        debug_assert_eq!(got, cached);
        if self.kv.grow(id, cached + n).is_err() {
            self.kv.free_seq(id);
            return None;
        }
        self.waiting.retain(|&w| w != id);
        self.running.push(id);
        let r = self.requests.get_mut(&id).expect("waiting request exists");
        r.status = RequestStatus::Running;
        r.num_computed_tokens = cached;
        r.num_cached_tokens = cached;
        Some(Planned {
            id,
            start: cached,
            num_known: n,
            num_draft: 0,
        })
    }

    /// Blocks running requests may still allocate to reach their final length.
    fn outstanding_reservations(&self) -> usize {
        self.running
            .iter()
            .map(|id| {
                let r = &self.requests[id];
                let most = self
                    .kv
                    .pages_at_most(r.final_kv_tokens(), self.cfg.max_chunk);
                most.saturating_sub(self.kv.pages_held(*id))
            })
            .sum()
    }

    /// Preemption by recompute: free the KV, keep the tokens, requeue at the front.
    fn preempt(&mut self, id: RequestId) {
        self.kv.free_seq(id);
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id);
        let r = self.requests.get_mut(&id).expect("running request exists");
        r.status = RequestStatus::Preempted;
        r.num_computed_tokens = 0;
        r.num_preemptions += 1;
        r.draft.clear();
        self.stats.preemptions += 1;
    }

    fn finish(&mut self, id: RequestId, reason: FinishReason) -> Request {
        let mut r = self.requests.remove(&id).expect("finishing a live request");
        self.running.retain(|&x| x != id);
        self.waiting.retain(|&x| x != id);
        self.kv.free_seq(id);
        r.status = RequestStatus::Finished(reason);
        self.stats.finished += 1;
        r
    }

    fn build_output(
        &mut self,
        step: StepId,
        planned: Vec<Planned>,
        preempted: Vec<RequestId>,
    ) -> SchedulerOutput {
        let mut out = SchedulerOutput {
            step,
            preempted,
            ..SchedulerOutput::default()
        };
        let ids: Vec<RequestId> = planned.iter().map(|x| x.id).collect();
        for pl in planned {
            let r = self
                .requests
                .get_mut(&pl.id)
                .expect("planned request exists");
            let end_known = pl.start + pl.num_known;
            let mut token_ids = r.tokens()[pl.start..end_known].to_vec();
            token_ids.extend_from_slice(&r.draft[..pl.num_draft]);
            let prompt = r.num_prompt_tokens();
            let n_prefill = prompt.clamp(pl.start, end_known) - pl.start;
            out.num_prefill_tokens += n_prefill;
            out.num_decode_tokens += pl.num_known - n_prefill;
            out.num_draft_tokens += pl.num_draft;
            // Work below the high-water mark was done before a preemption: recompute.
            let recomputed = r.max_computed_tokens.clamp(pl.start, end_known) - pl.start;
            r.num_recomputed_tokens += recomputed;
            self.stats.recomputed_tokens += recomputed as u64;
            r.num_computed_tokens = end_known + pl.num_draft;
            r.max_computed_tokens = r.max_computed_tokens.max(end_known);
            out.requests.push(ScheduledRequest {
                id: pl.id,
                token_ids,
                start_pos: pl.start,
                tables: self.kv.tables(pl.id),
                sample: end_known == r.num_tokens(),
                num_draft_tokens: pl.num_draft,
            });
        }
        out.copies = self.kv.take_copy_ops();
        out.evicted = self.kv.take_evicted();
        self.kv.hold_step(step, &ids);
        self.stats.steps += 1;
        self.stats.prefill_tokens += out.num_prefill_tokens as u64;
        self.stats.decode_tokens += out.num_decode_tokens as u64;
        self.stats.draft_tokens += out.num_draft_tokens as u64;
        out
    }
}
