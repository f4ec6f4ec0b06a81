//! How many tokens to draft: the marginal rule of DESIGN.md §speculation, applied to the whole batch.
//!
//! With acceptance a at every position, a round drafting m tokens fixes E[N_m] = 1 + a + … +
//! a^m tokens; folio keeps a rate per position ([`Acceptance`]), so E[N_m] = Σ reach(i).
//! One more draft token pays only if ΔT/ΔN < T/N, where T is the step's time and N the
//! tokens the step is expected to fix. The step's time is a measured function of the
//! rows it computes ([`StepTime`]), not a line: on a CPU where one row is bound by the
//! weight read, the next few rows are nearly free, while in a large batch (weights already
//! shared) every extra row costs its full compute, so the same acceptance earns drafts
//! alone and none in a crowd.

use crate::acceptance::{Acceptance, AcceptanceCounts};
use folio_core::cost::StepTime;
#[cfg(test)]
use folio_core::CostModel;

/// First-position rate assumed before any round is seen: optimistic, so a request tries
/// drafting and its own rounds correct the guess within a few steps.
const START_RATE: f64 = 0.6;

/// How much a request's older rounds at a draft position still weigh after each new one
/// there (its memory is about 1 / (1 − decay) = 10 rounds): short, because a request's
/// text moves between copying and writing, but long enough that the planner, which drafts
/// long exactly when the estimates run high, is not chasing a lucky streak (at 0.8 the
/// adaptive length on a repeated list fell to 0.92x of the best fixed one; 0.95 was slower
/// to notice the list's miscopied numbers).
const REQUEST_DECAY: f64 = 0.9;

/// The engine-wide estimate new requests start from remembers longer (about 50 rounds a
/// position): it describes the proposer on this traffic, not one request's current span.
const PRIOR_DECAY: f64 = 0.98;

/// Per-request draft-length state: acceptance by position and limits.
#[derive(Debug, Clone)]
pub struct DraftControl {
    counts: AcceptanceCounts,
    /// What the proposer achieved on earlier requests, standing in where this request has
    /// few rounds; `None` for the engine-wide estimate itself.
    prior: Option<Acceptance>,
    pub max_tokens: usize,
    /// A fixed draft length (`--spec-tokens`); `None` = adaptive.
    pub fixed: Option<usize>,
}

/// One decoding request as the batch planner sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub acceptance: Acceptance,
    /// Most drafts this round (controller limit and room left before max_tokens).
    pub max: usize,
    /// A fixed draft length, exempt from the rule.
    pub fixed: Option<usize>,
    /// Seconds to produce one draft token (0 for context lookup).
    pub draft_s: f64,
    /// Whether the planner may spend its probe budget on a draft the rule refuses: for a
    /// proposer whose acceptance is learned only from drafts it verifies (a draft model).
    /// Context lookup checks every proposal against the output whatever is drafted, so it
    /// needs no probes.
    pub probe: bool,
}

/// Share of step time the engine lets the planner spend on probes: drafts the rule
/// refuses, taken so that an estimate below paying can still be proven wrong. Without any,
/// a draft model whose first rounds (or start rate) priced it out would never draft
/// again; at 1% the probes cost at most about 1% of decode speed when the rule is right.
pub const PROBE_SHARE: f64 = 0.01;

impl DraftControl {
    /// A request's control, starting from `prior` (the proposer's engine-wide estimate).
    pub fn new(max_tokens: usize, fixed: Option<usize>, prior: Acceptance) -> DraftControl {
        DraftControl {
            counts: AcceptanceCounts::new(REQUEST_DECAY),
            prior: Some(prior),
            max_tokens,
            fixed,
        }
    }

    /// The engine-wide estimate of one proposer, which every request's rounds also feed.
    pub fn engine_wide(max_tokens: usize) -> DraftControl {
        DraftControl {
            counts: AcceptanceCounts::new(PRIOR_DECAY),
            prior: None,
            max_tokens,
            fixed: None,
        }
    }

    /// Records a round: the first `accepted` of `drafted` drafts were accepted.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        self.counts.observe(drafted, accepted);
    }

    /// Acceptance by position, from this request's rounds and its prior.
    pub fn acceptance(&self) -> Acceptance {
        self.counts.rates(self.prior.as_ref(), START_RATE)
    }

    /// This request as a planner candidate with at most `room` drafts (`probe`: see
    /// [`Candidate::probe`]).
    pub fn candidate(&self, room: usize, draft_s: f64, probe: bool) -> Candidate {
        Candidate {
            acceptance: self.acceptance(),
            max: self.max_tokens.min(room),
            fixed: self.fixed.map(|k| k.min(self.max_tokens).min(room)),
            draft_s,
            probe,
        }
    }
}

/// Draft lengths for every decoding request of the next step, jointly: start from no
/// drafts (fixed lengths excepted) and hand out one draft token at a time to the request
/// whose next draft is most likely accepted, while ΔT/ΔN < T/N for the step as a whole.
/// Every extra row costs the same ΔT = T(R + 1) − T(R) whoever gets it, so the greedy order
/// is by expected gain a^(m+1) per cost, and it stops at the first refusal.
///
/// Exploration: when the refused row count was never measured (its time is interpolated),
/// one draft that is likely accepted (a^(m+1) ≥ 1/2) goes ahead anyway, so the curve learns
/// that size; otherwise a guess from distant sizes (say, from prefill steps) could keep
/// the planner from ever trying the cheap rows it would find. Only a draft that would pay
/// were its row free is explored: a draft model's own time is measured, not guessed, so a
/// draft it alone prices out stays refused (a self-draft at batch 4 would otherwise spend a
/// draft-model pass each time a stale bin invites a look).
///
/// `base_rows`: rows the step computes besides these requests' (prefill chunks), so each
/// draft row is priced where the step really is on the curve.
///
/// No probes: [`plan_probing`] with no budget.
pub fn plan(time: &impl StepTime, base_rows: usize, reqs: &[Candidate]) -> Vec<usize> {
    plan_probing(time, base_rows, reqs, 0.0).0
}

/// [`plan`], and a probe: where the rule refuses the next draft of a candidate that allows
/// probes ([`Candidate::probe`]) and that draft's estimated cost fits in `probe_s`
/// seconds, it is drafted anyway (one per step). Returns the lengths and the estimated
/// seconds the probe costs (0 without one), which the caller takes from its budget
/// (see [`PROBE_SHARE`]).
pub fn plan_probing(
    time: &impl StepTime,
    base_rows: usize,
    reqs: &[Candidate],
    probe_s: f64,
) -> (Vec<usize>, f64) {
    let mut m: Vec<usize> = reqs.iter().map(|c| c.fixed.unwrap_or(0)).collect();
    let mut rows = base_rows + reqs.len() + m.iter().sum::<usize>();
    let mut n: f64 = reqs
        .iter()
        .zip(&m)
        .map(|(c, &k)| c.acceptance.expected_tokens(k))
        .sum();
    let mut t = time.step_s(rows)
        + reqs
            .iter()
            .zip(&m)
            .map(|(c, &k)| c.draft_s * k as f64)
            .sum::<f64>();
    let mut explore = true;
    let mut probe_cost = 0.0;
    loop {
        // A step is never cheaper with more rows; noise in a measured curve must not make
        // drafts look free.
        let dt_rows = (time.step_s(rows + 1) - time.step_s(rows)).max(t * 1e-3);
        let best = reqs
            .iter()
            .enumerate()
            .filter(|(i, c)| c.fixed.is_none() && m[*i] < c.max)
            .map(|(i, c)| {
                let gain = c.acceptance.reach(m[i] + 1);
                (i, gain, dt_rows + c.draft_s)
            })
            .max_by(|x, y| (x.1 / x.2).total_cmp(&(y.1 / y.2)));
        let Some((i, dn, dt)) = best else {
            break;
        };
        if dn <= 0.0 || dt / dn >= t / n {
            // Exploring only measures the curve: a draft whose own cost (`dt - dt_rows`,
            // the draft model's time) outweighs its gain with the row free learns nothing
            // worth its price.
            let pays_if_row_free = (dt - dt_rows) / dn < t / n;
            // A probe only learns acceptance: where even a draft accepted for certain (one
            // token for `dt`) would not pay, no estimate it could correct makes drafting
            // pay, and the probe would be spent for nothing (a draft model in a crowd).
            let could_pay = dt < t / n;
            let probe = reqs[i].probe && dn > 0.0 && dt <= probe_s && could_pay;
            if explore && dn >= 0.5 && pays_if_row_free && !time.measured(rows + 1) {
                explore = false;
            } else if explore && probe {
                explore = false;
                probe_cost = dt;
            } else {
                break;
            }
        }
        m[i] += 1;
        rows += 1;
        n += dn;
        // From the curve again (not += the floored step), so T cannot drift from it.
        t += time.step_s(rows) - time.step_s(rows - 1) + (dt - dt_rows);
    }
    (m, probe_cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose drafts cost nothing to make, up to `max` accepted at rate `a` each.
    fn free(a: f64, max: usize) -> Candidate {
        Candidate {
            acceptance: Acceptance::flat(a),
            max,
            fixed: None,
            draft_s: 0.0,
            probe: false,
        }
    }

    /// `c`'s draft length in a step where `batch - 1` other decodes draft nothing.
    fn alone_in(c: &DraftControl, cost: &CostModel, batch: usize, draft_s: f64) -> usize {
        let idle = free(0.0, 0);
        let mut reqs = vec![idle; batch];
        reqs[0] = c.candidate(c.max_tokens, draft_s, false);
        plan(cost, 0, &reqs)[0]
    }

    #[test]
    fn drafts_less_when_the_batch_shares_the_fixed_cost() {
        let cost = CostModel {
            fixed_s: 0.010,
            per_token_s: 0.0005,
            per_pair_s: 0.0,
        };
        let c = DraftControl::new(8, None, Acceptance::flat(0.7));
        let alone = alone_in(&c, &cost, 1, 0.0);
        let crowd = alone_in(&c, &cost, 64, 0.0);
        assert!(
            alone >= 3,
            "batch 1 should draft several tokens, chose {alone}"
        );
        assert!(
            crowd < alone,
            "batch 64 should draft fewer: {crowd} vs {alone}"
        );
        let poor = DraftControl::new(8, None, Acceptance::flat(0.05));
        // At a = 0.05 one draft adds 0.05 tokens for 0.5 ms: still under T/N = 10.5 ms when
        // drafting is free, but not once a draft costs 1 ms to produce.
        assert_eq!(alone_in(&poor, &cost, 1, 0.0), 1);
        assert_eq!(
            alone_in(&poor, &cost, 1, 0.001),
            0,
            "useless drafts are not worth their cost"
        );
        let fixed = DraftControl::new(8, Some(5), Acceptance::flat(0.0));
        assert_eq!(alone_in(&fixed, &cost, 64, 0.0), 5);
    }

    /// A CPU-like step: the first 4 rows cost 0.1 ms each over a 3 ms weight read, every
    /// row after that 1 ms of compute.
    struct Knee;
    impl StepTime for Knee {
        fn step_s(&self, rows: usize) -> f64 {
            let r = rows as f64;
            0.003 + 0.0001 * r.min(4.0) + 0.001 * (r - 4.0).max(0.0)
        }
    }

    #[test]
    fn plan_follows_the_measured_step_curve() {
        let c = free(0.85, 8);
        // Alone: rows 2..4 are nearly free, and at a = 0.85 later rows still pay:
        // T = 3.4 ms for N = 1 + .85 + .72 + .61 = 3.18 → T/N ≈ 1.07 ms; the 5th row costs
        // 1 ms for 0.52 tokens, so it stops at 3 drafts.
        assert_eq!(plan(&Knee, 0, &[c]), vec![3]);
        // 16 decoding requests: 16 ms for 16 tokens; a draft row costs 1 ms for 0.85 tokens.
        assert_eq!(plan(&Knee, 0, &[c; 16]), vec![0; 16]);
        // A poor acceptor gets nothing even alone once drafting itself costs time.
        let poor = Candidate {
            acceptance: Acceptance::flat(0.1),
            draft_s: 0.002,
            ..c
        };
        assert_eq!(plan(&Knee, 0, &[poor]), vec![0]);
        // The better acceptor gets the free rows first.
        let low = Candidate {
            acceptance: Acceptance::flat(0.3),
            ..c
        };
        assert_eq!(plan(&Knee, 0, &[low, c]), vec![0, 2]);
        // Fixed lengths are kept whatever the rule says.
        let fixed = Candidate {
            fixed: Some(5),
            ..c
        };
        assert_eq!(plan(&Knee, 0, &[fixed; 16]), vec![5; 16]);
    }

    /// The knee's cost, but only rows 1 and 400 were ever measured: interpolated, the
    /// rows in between look like 1 ms each.
    struct Sparse;
    impl StepTime for Sparse {
        fn step_s(&self, rows: usize) -> f64 {
            0.0031 + (rows as f64 - 1.0) * 0.001
        }
        fn measured(&self, rows: usize) -> bool {
            rows == 1 || rows == 400
        }
    }

    #[test]
    fn plan_explores_one_unmeasured_row_count() {
        let c = free(0.85, 8);
        // By the guess one draft (1 ms for 0.85 tokens vs T/N = 3.1 ms) pays, the second
        // (1 ms for 0.72 tokens vs 4.1/1.85 = 2.2 ms) too, the third (1/0.61 = 1.63 vs
        // 5.1/2.57 = 1.98) too, the fourth (1/0.522 = 1.916 vs 6.1/3.187 = 1.914) does not,
        // but its row count was never measured and 0.52 ≥ 1/2, so it goes ahead once.
        assert_eq!(plan(&Sparse, 0, &[c]), vec![4]);
        let poor = Candidate {
            acceptance: Acceptance::flat(0.4),
            ..c
        };
        // One draft pays (1/0.4 = 2.5 < 3.1); the second gains 0.16 < 1/2: no exploration.
        assert_eq!(plan(&Sparse, 0, &[poor]), vec![1]);
        // A draft model costing 2.5 ms per token: the first draft (3.5 ms for 0.85 tokens,
        // 4.1 ms per token, vs T/N = 3.1 ms) does not pay, but would were its row free
        // (2.5/0.85 = 2.9 ms < 3.1 ms), so it is explored; at 3 ms per token
        // (3/0.85 = 3.5 ms > 3.1 ms) the draft model alone prices it out: no exploration.
        let costly = |draft_s| Candidate { draft_s, ..c };
        assert_eq!(plan(&Sparse, 0, &[costly(0.0025)]), vec![1]);
        assert_eq!(plan(&Sparse, 0, &[costly(0.003)]), vec![0]);
    }

    #[test]
    fn a_refused_draft_is_probed_only_within_the_budget_and_where_allowed() {
        // A draft model at 3 ms per token with a 0.4 estimate: the rule refuses it (4 ms
        // for 0.4 tokens against T/N = 5 ms per token alone, 3 ms for two).
        let c = Candidate {
            draft_s: 0.003,
            probe: true,
            ..free(0.4, 8)
        };
        assert_eq!(plan_probing(&cpu_line(), 0, &[c], 0.0), (vec![0], 0.0));
        // A budget short of the draft's 4 ms buys nothing; one that covers it buys exactly
        // one probe (one draft token, one step), and its cost is reported.
        assert_eq!(plan_probing(&cpu_line(), 0, &[c], 0.0039), (vec![0], 0.0));
        let (m, cost) = plan_probing(&cpu_line(), 0, &[c], 1.0);
        assert_eq!(m, vec![1]);
        assert!((cost - 0.004).abs() < 1e-12, "{cost}");
        // Two requests: T/N = 6 ms / 2 = 3 ms a token, below the 4 ms even a certain draft
        // costs, so no acceptance a probe could find would make drafting pay: no probe.
        assert_eq!(
            plan_probing(&cpu_line(), 0, &[c; 2], 1.0),
            (vec![0, 0], 0.0)
        );
        // A cheaper draft model (1 ms a token, 2 ms with its row) could pay with good
        // acceptance: one of the two is probed.
        let cheap = Candidate {
            draft_s: 0.001,
            ..c
        };
        let (m, cost) = plan_probing(&cpu_line(), 0, &[cheap; 2], 1.0);
        assert_eq!(m.iter().sum::<usize>(), 1, "{m:?}");
        assert!((cost - 0.002).abs() < 1e-12, "{cost}");
        // Context lookup learns from its proposal check: never probed.
        let lookup = Candidate { probe: false, ..c };
        assert_eq!(plan_probing(&cpu_line(), 0, &[lookup], 1.0), (vec![0], 0.0));
    }

    /// A cache-resident model on a CPU: a 5 ms step plus 1 ms per extra row.
    fn cpu_line() -> CostModel {
        CostModel {
            fixed_s: 0.004,
            per_token_s: 0.001,
            per_pair_s: 0.0,
        }
    }

    #[test]
    fn copying_rounds_earn_long_drafts_where_one_rate_stops_at_one() {
        // Half the rounds a stale match (first draft wrong), half a copied span; the
        // engine-wide estimate (this request's prior) saw the same kind of rounds.
        let mut engine = DraftControl::engine_wide(8);
        for _ in 0..20 {
            engine.observe(8, 0);
            engine.observe(8, 8);
        }
        let mut c = DraftControl::new(8, None, engine.acceptance());
        for _ in 0..20 {
            c.observe(8, 0);
            c.observe(8, 8);
        }
        let cand = c.candidate(8, 0.0, false);
        assert_eq!(plan(&cpu_line(), 0, &[cand]), vec![8]);
        // One rate for the same rounds (each round's own rate, 0 or 1, averaged): the
        // second draft already costs 1 ms for 0.25 tokens against T/N = 6 / 1.5 = 4 ms.
        let one_rate = Candidate {
            acceptance: Acceptance::flat(0.5),
            ..cand
        };
        assert_eq!(plan(&cpu_line(), 0, &[one_rate]), vec![1]);
    }

    #[test]
    fn a_declined_request_drafts_again_once_its_lookups_hit() {
        let mut c = DraftControl::new(8, None, Acceptance::flat(0.6));
        for _ in 0..10 {
            c.observe(4, 0);
        }
        assert_eq!(plan(&cpu_line(), 0, &[c.candidate(8, 0.0, false)]), vec![0]);
        // While declined, each step's lookup is checked against the sampled token and
        // observed as a one-token round (the engine's shadow draft).
        for _ in 0..4 {
            c.observe(1, 1);
        }
        assert!(plan(&cpu_line(), 0, &[c.candidate(8, 0.0, false)])[0] >= 1);
    }
}
