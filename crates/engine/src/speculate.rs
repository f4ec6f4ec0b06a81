//! Speculative decoding inside the engine: proposing drafts after a step (n-gram lookup or
//! the self-draft through the target's first layers) and verifying them in the next fused
//! forward.
//!
//! The self-draft writes K/V for its layers at the draft positions. Positions the request
//! already has blocks for are written in place (they are beyond its computed tokens, so
//! private, and the verify step overwrites them); positions past its blocks go to scratch
//! blocks the scheduler never hands out (`KvCache` is sized `num_blocks + scratch`).

use crate::SpecMethod;
use folio_spec::{DraftControl, NgramIndex, StepCost};

/// A request's speculation state.
pub(crate) struct SpecState {
    pub method: SpecMethod,
    pub control: DraftControl,
    /// Prompt + output tokens (n-gram lookup).
    pub index: NgramIndex,
    /// The self-draft's distribution for each pending draft (sampled requests only).
    pub draft_q: Vec<Vec<(u32, f32)>>,
}

impl SpecState {
    pub fn new(
        method: SpecMethod,
        max_tokens: usize,
        fixed: Option<usize>,
        prompt: &[u32],
    ) -> SpecState {
        let mut index = NgramIndex::new(1, 4);
        if method == SpecMethod::Ngram {
            index.extend(prompt);
        }
        SpecState {
            method,
            control: DraftControl::new(max_tokens, fixed),
            index,
            draft_q: Vec::new(),
        }
    }
}

/// Online least-squares fit of step wall time against tokens computed, exponentially
/// forgetting old steps so it follows the machine's current state.
#[derive(Debug, Clone)]
pub(crate) struct CostFit {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl CostFit {
    pub fn new() -> CostFit {
        CostFit {
            n: 0.0,
            sx: 0.0,
            sy: 0.0,
            sxx: 0.0,
            sxy: 0.0,
        }
    }

    pub fn add(&mut self, tokens: usize, wall_s: f64) {
        let d = 0.98;
        let x = tokens as f64;
        self.n = self.n * d + 1.0;
        self.sx = self.sx * d + x;
        self.sy = self.sy * d + wall_s;
        self.sxx = self.sxx * d + x * x;
        self.sxy = self.sxy * d + x * wall_s;
    }

    /// The fitted cost; a conservative default until the data spans several batch sizes.
    pub fn cost(&self) -> StepCost {
        let default = StepCost {
            fixed_s: 0.003,
            per_token_s: 0.0002,
        };
        if self.n < 4.0 {
            return default;
        }
        let var = self.sxx / self.n - (self.sx / self.n).powi(2);
        if var < 1.0 {
            return StepCost {
                fixed_s: (self.sy / self.n).max(1e-5) * 0.8,
                per_token_s: default.per_token_s,
            };
        }
        let beta = ((self.sxy / self.n - self.sx / self.n * self.sy / self.n) / var).max(1e-6);
        let alpha = (self.sy / self.n - beta * self.sx / self.n).max(1e-5);
        StepCost {
            fixed_s: alpha,
            per_token_s: beta,
        }
    }
}
