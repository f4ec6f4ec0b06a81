//! Speculative decoding inside the engine: proposing drafts after a step (n-gram lookup or
//! the self-draft through the target's first layers) and verifying them in the next fused
//! forward.
//!
//! The self-draft writes K/V for its layers at the draft positions. Positions the request
//! already has blocks for are written in place (they are beyond its computed tokens, so
//! private, and the verify step overwrites them); positions past its blocks go to scratch
//! blocks the scheduler never hands out (`KvCache` is sized `num_blocks + scratch`).

use crate::SpecMethod;
use folio_spec::{DraftControl, NgramIndex, StepCost, StepTime};

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

/// Measured step time by rows computed: a smoothed mean per row count (exact up to 64
/// rows, 16-row bins above), interpolated between measured counts and extended with the
/// linear fit's slope beyond them. The draft planner needs the curve's shape: on a CPU the
/// first extra rows ride on the weight read almost free, later ones cost full compute,
/// and a single line through all steps gets both ends wrong.
#[derive(Debug, Clone)]
pub(crate) struct StepCurve {
    /// Per bin: (smoothed seconds, steps seen).
    bins: Vec<(f64, u32)>,
    /// Fallback and slope for extrapolation.
    pub fit: CostFit,
}

impl StepCurve {
    const EXACT: usize = 64;
    const WIDE: usize = 16;
    const BINS: usize = Self::EXACT + 64;

    pub fn new() -> StepCurve {
        StepCurve {
            bins: vec![(0.0, 0); Self::BINS + 1],
            fit: CostFit::new(),
        }
    }

    fn bin(rows: usize) -> usize {
        if rows <= Self::EXACT {
            rows
        } else {
            (Self::EXACT + (rows - Self::EXACT) / Self::WIDE).min(Self::BINS)
        }
    }

    /// The row count a bin stands for (its lower edge).
    fn rows_of(bin: usize) -> usize {
        if bin <= Self::EXACT {
            bin
        } else {
            Self::EXACT + (bin - Self::EXACT) * Self::WIDE
        }
    }

    pub fn add(&mut self, rows: usize, wall_s: f64) {
        self.fit.add(rows, wall_s);
        if rows == 0 {
            return;
        }
        let b = &mut self.bins[Self::bin(rows)];
        b.0 = if b.1 == 0 {
            wall_s
        } else {
            0.75 * b.0 + 0.25 * wall_s
        };
        b.1 = b.1.saturating_add(1);
    }
}

impl StepTime for StepCurve {
    fn measured(&self, rows: usize) -> bool {
        self.bins[Self::bin(rows)].1 > 0
    }

    fn step_s(&self, rows: usize) -> f64 {
        let line = self.fit.cost();
        let at = Self::bin(rows);
        if self.bins[at].1 > 0 {
            return self.bins[at].0;
        }
        let below = (1..at).rev().find(|&b| self.bins[b].1 > 0);
        let above = (at + 1..self.bins.len()).find(|&b| self.bins[b].1 > 0);
        let x = rows as f64;
        match (below, above) {
            (Some(l), Some(h)) => {
                let (xl, xh) = (Self::rows_of(l) as f64, Self::rows_of(h) as f64);
                let (yl, yh) = (self.bins[l].0, self.bins[h].0);
                yl + (yh - yl) * (x - xl) / (xh - xl)
            }
            (Some(l), None) => self.bins[l].0 + line.per_token_s * (x - Self::rows_of(l) as f64),
            (None, Some(h)) => {
                (self.bins[h].0 - line.per_token_s * (Self::rows_of(h) as f64 - x)).max(1e-6)
            }
            (None, None) => line.step_s(rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_between_measured_row_counts() {
        let mut c = StepCurve::new();
        c.add(1, 0.003);
        c.add(5, 0.004);
        c.add(16, 0.016);
        assert_eq!(c.step_s(1), 0.003);
        assert!((c.step_s(3) - 0.0035).abs() < 1e-12);
        // 10.5 steps of 1 ms between 5 and 16 rows.
        assert!((c.step_s(10) - (0.004 + 0.012 * 5.0 / 11.0)).abs() < 1e-12);
        // Smoothing: a second sample moves the bin a quarter of the way.
        c.add(1, 0.007);
        assert!((c.step_s(1) - 0.004).abs() < 1e-12);
        // Beyond the last measured count: the line's slope from there.
        let slope = c.fit.cost().per_token_s;
        assert!((c.step_s(20) - (0.016 + 4.0 * slope)).abs() < 1e-12);
        // Wide bins above 64 rows.
        c.add(100, 0.1);
        assert_eq!(c.step_s(97), 0.1);
    }
}
