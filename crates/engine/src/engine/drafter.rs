//! The speculation state the engine keeps across steps: the configured defaults, the
//! engine-wide acceptance priors, and what the draft planner has measured and may spend.

use crate::SpecMethod;
use folio_spec::DraftControl;

/// The probe budget holds at most this many steps' time: enough for one probe of a draft
/// model (a fraction of a step per token) from the first step on, so a fresh engine tests
/// its start rate early, and no more, so a long quiet spell does not buy a run of probes.
const PROBE_BURST: f64 = 3.0;

/// Speculation across requests (each request's own state is its `SpecState`).
pub(super) struct Drafter {
    /// The proposer of requests that name none (`EngineConfig::spec`).
    pub method: SpecMethod,
    /// A fixed draft length for requests that set none (`None`: planned per step).
    pub fixed_tokens: Option<usize>,
    /// The longest draft the planner considers.
    pub max_tokens: usize,
    /// Engine-wide draft acceptance per proposer (n-gram, self-draft), smoothed over every
    /// verified round of every request; a new request's controller starts from it.
    pub prior: [DraftControl; 2],
    /// Layers the self-draft runs through.
    pub layers: usize,
    /// Measured seconds per self-draft token (per request); `None` until the first draft.
    pub cost_s: Option<f64>,
    /// Seconds the draft planner may still spend on probes (drafts its rule refuses):
    /// each step adds `folio_spec::PROBE_SHARE` of its time, up to `PROBE_BURST` steps'
    /// worth, so probes stay about 1% of the time and never come in a run.
    pub probe_budget_s: f64,
}

impl Drafter {
    /// The speculation defaults from the config; the self-draft runs `layers` layers.
    pub fn new(
        method: SpecMethod,
        fixed_tokens: Option<usize>,
        max_tokens: usize,
        layers: usize,
    ) -> Self {
        Self {
            method,
            fixed_tokens,
            max_tokens,
            prior: std::array::from_fn(|_| DraftControl::engine_wide(max_tokens)),
            layers,
            cost_s: None,
            // Capped to PROBE_BURST steps at the first step.
            probe_budget_s: f64::INFINITY,
        }
    }

    /// The engine-wide acceptance estimate new requests of `method` start from.
    pub fn prior(&self, method: SpecMethod) -> &DraftControl {
        &self.prior[prior_slot(method)]
    }

    /// The engine-wide acceptance estimate of `method`, to learn from a verified round.
    pub fn prior_mut(&mut self, method: SpecMethod) -> &mut DraftControl {
        &mut self.prior[prior_slot(method)]
    }

    /// A step of `wall` seconds ran: its share of probe time, capped at the burst.
    pub fn earn_probe_time(&mut self, wall: f64) {
        self.probe_budget_s =
            (self.probe_budget_s + folio_spec::PROBE_SHARE * wall).min(PROBE_BURST * wall);
    }

    /// Folds a measured per-token self-draft cost into the running estimate.
    pub fn observe_cost(&mut self, per_token_s: f64) {
        self.cost_s = Some(match self.cost_s {
            None => per_token_s,
            Some(c) => 0.8 * c + 0.2 * per_token_s,
        });
    }
}

/// Index of a proposer's engine-wide acceptance estimate in [`Drafter::prior`].
fn prior_slot(method: SpecMethod) -> usize {
    match method {
        SpecMethod::SelfDraft => 1,
        SpecMethod::Ngram | SpecMethod::Off => 0,
    }
}
