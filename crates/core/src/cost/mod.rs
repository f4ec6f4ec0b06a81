//! Step-cost models: the round-time line `a + b·tokens + c·pairs` the simulator and the
//! planner use (the reference fit is its reference point), and the measured step curve the
//! live engine learns from its own steps (`curve.rs`), which feeds the same line to
//! admission, eviction and tier decisions.
//!
//! One round computing chunks of `c_i` new tokens after `h_i` context tokens costs
//! `fixed + per_token·Σc_i + per_pair·Σ(c_i·h_i + c_i(c_i+1)/2)` seconds: a constant part
//! (weight reads, launches, host work), a linear part, and the causal attention pairs, which
//! make a chunk deep in a long prompt dearer than the same chunk at its start (DESIGN.md §batching).

mod curve;

pub use curve::{
    budget_for_step_time, step_budget, CostFit, StepCurve, MIN_PREFILL_TOKENS, PREFILL_STRETCH,
};

/// Wall time of one forward step as a function of the rows (tokens) it computes.
pub trait StepTime {
    fn step_s(&self, rows: usize) -> f64;

    /// Whether `step_s(rows)` comes from measuring steps of that size (not a guess).
    fn measured(&self, _rows: usize) -> bool {
        true
    }
}

/// Round-time model `a + b·tokens + c·pairs`, all in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Time of a round independent of its token count (`a`).
    pub fixed_s: f64,
    /// Time per new token (`b`).
    pub per_token_s: f64,
    /// Time per causal query–key pair (`c`).
    pub per_pair_s: f64,
}

impl CostModel {
    /// The reference fit of the reference efficiency table (RTX PRO 6000, Qwen3-8B, batch 1): 26.22 ms +
    /// 30.4 µs per token + 3 ns per pair; gives 26.26 ms per 2K decode, 94.8 ms per 2K prefill.
    pub const REFERENCE: CostModel = CostModel {
        fixed_s: 26.22e-3,
        per_token_s: 30.4e-6,
        per_pair_s: 3e-9,
    };

    /// Causal query–key pairs of `n` new tokens after `h` context tokens: `n·h + n(n+1)/2`.
    pub fn pairs(h: usize, n: usize) -> u64 {
        let (h, n) = (h as u64, n as u64);
        n * h + n * (n + 1) / 2
    }

    /// Variable time of one chunk (no fixed part): what recomputing it costs in a shared round.
    pub fn chunk_s(&self, h: usize, n: usize) -> f64 {
        self.per_token_s * n as f64 + self.per_pair_s * Self::pairs(h, n) as f64
    }

    /// Time of one round over `(context, new_tokens)` chunks.
    pub fn round_s(&self, chunks: impl IntoIterator<Item = (usize, usize)>) -> f64 {
        self.fixed_s
            + chunks
                .into_iter()
                .map(|(h, n)| self.chunk_s(h, n))
                .sum::<f64>()
    }
}

/// A line through the step's rows: the attention pairs are not known at this level.
impl StepTime for CostModel {
    fn step_s(&self, rows: usize) -> f64 {
        self.fixed_s + self.per_token_s * rows as f64
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self::REFERENCE
    }
}

/// Cost of the second KV tier (host memory or disk) per token of KV, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierCost {
    /// Time to fetch one token's KV back from the tier (`T_f` per token).
    pub fetch_per_token_s: f64,
    /// Time to keep one token's KV in the tier: the swap-out copy (`T_m` per token).
    pub maintain_per_token_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_fit_reproduces_decode_and_prefill() {
        let m = CostModel::REFERENCE;
        let decode = m.round_s([(2048, 1)]);
        let prefill = m.round_s([(0, 2048)]);
        assert!((decode * 1e3 - 26.26).abs() < 0.01, "{decode}");
        assert!((prefill * 1e3 - 94.8).abs() < 0.05, "{prefill}");
        assert_eq!(CostModel::pairs(0, 512), 131_328);
        assert_eq!(CostModel::pairs(7680, 512), 4_063_488);
    }
}
