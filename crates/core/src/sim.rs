//! Scheduling simulator: the real [`Scheduler`] driven by a [`CostModel`] instead of a model.
//!
//! Rules (the reference worked example, DESIGN.md §batching):
//! - a request is visible to a round that starts at or after its arrival;
//! - a round lasts `a + b·(new tokens) + c·(causal query–key pairs)` over everything it
//!   computes, and every token it samples is out when the round ends;
//! - when nothing is runnable the clock jumps to the next arrival;
//! - outputs have fixed lengths (`max_tokens`), so runs compare time at equal work.
//!
//! `TTFT = t_1 − t_a`, `ITL_j = t_{j+1} − t_j`, `E2E = t_G − t_a`.

use crate::cost::CostModel;
use crate::sched::{
    FinishReason, RejectReason, Request, RequestId, RequestResult, RequestStatus, Scheduler,
    SchedulerConfig, SchedulerError,
};

/// One simulated request.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    pub id: RequestId,
    pub arrival_s: f64,
    pub prompt: Vec<u32>,
    /// Output tokens it will produce (fixed length).
    pub output_len: usize,
}

impl SimRequest {
    /// A request with a prompt of `prompt_len` tokens unique to `id` (no prefix sharing).
    pub fn unique(id: RequestId, arrival_s: f64, prompt_len: usize, output_len: usize) -> Self {
        let base = (id as u32).wrapping_mul(1_000_003);
        let prompt = (0..prompt_len as u32)
            .map(|t| base.wrapping_add(t))
            .collect();
        Self {
            id,
            arrival_s,
            prompt,
            output_len,
        }
    }
}

/// What happened to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMetrics {
    pub id: RequestId,
    pub arrival_s: f64,
    /// End of the round that produced each output token.
    pub token_times_s: Vec<f64>,
    /// `Some` when refused at admission.
    pub rejected: Option<RejectReason>,
    pub finish: Option<FinishReason>,
    pub num_preemptions: u32,
    pub num_recomputed_tokens: usize,
    pub num_cached_tokens: usize,
}

impl RequestMetrics {
    /// Time to first token.
    pub fn ttft_s(&self) -> Option<f64> {
        self.token_times_s.first().map(|t| t - self.arrival_s)
    }

    /// Gaps between consecutive output tokens.
    pub fn itls_s(&self) -> Vec<f64> {
        self.token_times_s.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Arrival to last token.
    pub fn e2e_s(&self) -> Option<f64> {
        self.token_times_s.last().map(|t| t - self.arrival_s)
    }
}

/// One simulated round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundRecord {
    pub start_s: f64,
    pub duration_s: f64,
    pub num_requests: usize,
    pub num_prefill_tokens: usize,
    pub num_decode_tokens: usize,
}

/// Result of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    /// In input order.
    pub requests: Vec<RequestMetrics>,
    pub rounds: Vec<RoundRecord>,
    /// Time from the first arrival to the last token.
    pub makespan_s: f64,
    /// Largest gap between two output tokens of one request.
    pub max_itl_s: f64,
    pub preemptions: u64,
    pub recomputed_tokens: u64,
    /// Draft tokens verified, and how many of them were accepted (speculation only).
    pub draft_tokens: u64,
    pub accepted_draft_tokens: u64,
}

/// Speculation in the simulator: after each round every decoding request reserves `k`
/// lookahead slots (as a model-based drafter does), drafts into them, and the verifier
/// accepts `accept(id, round)` of the drafts the next round carries.
pub struct SimSpec<'a> {
    pub k: usize,
    pub accept: &'a dyn Fn(RequestId, usize) -> usize,
}

/// Runs `reqs` through a fresh scheduler built from `cfg`, timing rounds with `cost`.
pub fn simulate(
    cfg: SchedulerConfig,
    cost: &CostModel,
    reqs: &[SimRequest],
) -> Result<SimReport, SchedulerError> {
    simulate_spec(cfg, cost, reqs, None)
}

/// [`simulate`] with speculative decoding: drafts are scheduler state, their slots come
/// from the KV manager, and rejected ones are rolled back by `update`. The KV invariants
/// are checked after every round.
pub fn simulate_spec(
    cfg: SchedulerConfig,
    cost: &CostModel,
    reqs: &[SimRequest],
    spec: Option<&SimSpec>,
) -> Result<SimReport, SchedulerError> {
    let mut sched = Scheduler::new(cfg)?;
    let mut metrics: Vec<RequestMetrics> = reqs
        .iter()
        .map(|r| RequestMetrics {
            id: r.id,
            arrival_s: r.arrival_s,
            token_times_s: Vec::new(),
            rejected: None,
            finish: None,
            num_preemptions: 0,
            num_recomputed_tokens: 0,
            num_cached_tokens: 0,
        })
        .collect();
    let index: std::collections::HashMap<RequestId, usize> =
        reqs.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by(|&a, &b| reqs[a].arrival_s.total_cmp(&reqs[b].arrival_s));
    let mut next = 0;
    // The clock starts at the first arrival (0 for an empty workload).
    let mut now = reqs
        .iter()
        .map(|r| r.arrival_s)
        .reduce(f64::min)
        .unwrap_or(0.0);
    let start = now;
    let mut rounds = Vec::new();
    loop {
        while next < order.len() && reqs[order[next]].arrival_s <= now {
            let r = &reqs[order[next]];
            let req = Request::new(r.id, r.prompt.clone(), r.output_len).with_arrival(r.arrival_s);
            if let Err(e) = sched.add_request(req) {
                metrics[order[next]].rejected = Some(e);
            }
            next += 1;
        }
        let out = if sched.has_unfinished() {
            sched.schedule()
        } else {
            Default::default()
        };
        if out.is_empty() {
            if next < order.len() {
                now = now.max(reqs[order[next]].arrival_s);
                continue;
            }
            break; // nothing runnable and nothing left to arrive
        }
        let duration = cost.round_s(
            out.requests
                .iter()
                .map(|r| (r.start_pos, r.token_ids.len())),
        );
        rounds.push(RoundRecord {
            start_s: now,
            duration_s: duration,
            num_requests: out.requests.len(),
            num_prefill_tokens: out.num_prefill_tokens,
            num_decode_tokens: out.num_decode_tokens,
        });
        now += duration;
        let round = rounds.len() - 1;
        let results: Vec<RequestResult> = out
            .requests
            .iter()
            .filter(|r| r.sample)
            .map(|r| {
                let accepted = spec.map_or(0, |sp| (sp.accept)(r.id, round));
                RequestResult {
                    id: r.id,
                    new_token_ids: vec![1; 1 + accepted.min(r.num_draft_tokens)],
                    finish: None,
                }
            })
            .collect();
        for r in &results {
            let m = &mut metrics[index[&r.id]];
            let left = reqs[index[&r.id]].output_len - m.token_times_s.len();
            let n = r.new_token_ids.len().min(left);
            m.token_times_s.extend(std::iter::repeat_n(now, n));
        }
        for done in sched.update(&out, &results) {
            let m = &mut metrics[index[&done.id]];
            m.finish = match done.status {
                RequestStatus::Finished(f) => Some(f),
                _ => None,
            };
            m.num_preemptions = done.num_preemptions;
            m.num_recomputed_tokens = done.num_recomputed_tokens;
            m.num_cached_tokens = done.num_cached_tokens;
        }
        if let Some(sp) = spec {
            for r in reqs {
                if let Some(la) = sched.reserve_lookahead(r.id, sp.k) {
                    sched.set_draft(r.id, vec![1; la.num_slots]);
                }
            }
        }
        if spec.is_some() || cfg!(debug_assertions) {
            if let Err(e) = sched.kv().check_invariants() {
                panic!("KV invariants broken after round {}: {e}", rounds.len());
            }
        }
    }
    let last = metrics
        .iter()
        .filter_map(|m| m.token_times_s.last().copied())
        .fold(start, f64::max);
    let max_itl_s = metrics.iter().flat_map(|m| m.itls_s()).fold(0.0, f64::max);
    let st = sched.stats();
    Ok(SimReport {
        requests: metrics,
        rounds,
        makespan_s: last - start,
        max_itl_s,
        preemptions: st.preemptions,
        recomputed_tokens: st.recomputed_tokens,
        draft_tokens: st.draft_tokens,
        accepted_draft_tokens: st.accepted_draft_tokens,
    })
}
