//! How many tokens to draft: the marginal rule of SPEC §5.
//!
//! With per-position acceptance a, a round drafting m tokens fixes E[N_m] = 1 + a + … + a^m
//! tokens. Lengthening by one pays only if ΔT/ΔN < T/N. A request's share of a step's
//! time is the fixed cost split over the batch plus its own tokens' marginal cost, so in
//! a large batch (fixed cost already shared) extra draft tokens stop paying and the
//! controller drafts fewer or none.

/// Expected tokens fixed per round with `m` drafts at acceptance `a`: Σ_{j=0..m} a^j.
pub fn expected_tokens(a: f64, m: usize) -> f64 {
    (0..=m).map(|j| a.powi(j as i32)).sum()
}

/// A linear model of one step's wall time: `fixed_s + per_token_s · tokens`, fitted online.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    pub fixed_s: f64,
    pub per_token_s: f64,
}

impl StepCost {
    /// A request's share of a step in a batch of `batch` requests computing `1 + m` tokens,
    /// plus the drafting cost per draft token.
    pub fn share(&self, batch: usize, m: usize, draft_per_token_s: f64) -> f64 {
        self.fixed_s / batch.max(1) as f64
            + self.per_token_s * (1 + m) as f64
            + draft_per_token_s * m as f64
    }
}

/// Per-request draft-length controller: acceptance estimate and the marginal rule.
#[derive(Debug, Clone)]
pub struct DraftControl {
    /// Smoothed per-position acceptance rate.
    pub acceptance: f64,
    pub max_tokens: usize,
    /// A fixed draft length (`--spec-tokens`); `None` = adaptive.
    pub fixed: Option<usize>,
}

impl DraftControl {
    pub fn new(max_tokens: usize, fixed: Option<usize>) -> DraftControl {
        // Optimistic start so a request tries drafting; observations correct it quickly.
        DraftControl {
            acceptance: 0.6,
            max_tokens,
            fixed,
        }
    }

    /// Records a round: `accepted` of `drafted` drafts were accepted.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        // Per-position rate from the accepted prefix length: a ≈ accepted / (accepted + 1
        // rejection), counting a full acceptance as `drafted` successes without failure.
        let fails = if accepted < drafted { 1.0 } else { 0.0 };
        let a = accepted as f64 / (accepted as f64 + fails).max(1.0);
        self.acceptance = 0.7 * self.acceptance + 0.3 * a;
    }

    /// Draft length for the next round: the m maximizing E[N_m] / T_m, growing m only
    /// while ΔT/ΔN < T/N.
    pub fn choose(&self, cost: &StepCost, batch: usize, draft_per_token_s: f64) -> usize {
        if let Some(k) = self.fixed {
            return k.min(self.max_tokens);
        }
        let a = self.acceptance.clamp(0.0, 0.99);
        let mut m = 0;
        while m < self.max_tokens {
            let (t, n) = (
                cost.share(batch, m, draft_per_token_s),
                expected_tokens(a, m),
            );
            let (t1, n1) = (
                cost.share(batch, m + 1, draft_per_token_s),
                expected_tokens(a, m + 1),
            );
            if (t1 - t) / (n1 - n) < t / n {
                m += 1;
            } else {
                break;
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chapter_expected_tokens() {
        // AAAA (a = 1/4) ≈ 1.33 tokens/round, BBBB (a = 3/4) ≈ 3.05 (SPEC §5).
        assert!((expected_tokens(0.25, 4) - 1.33).abs() < 0.005);
        assert!((expected_tokens(0.75, 4) - 3.05).abs() < 0.005);
    }

    #[test]
    fn drafts_less_when_the_batch_shares_the_fixed_cost() {
        let cost = StepCost {
            fixed_s: 0.010,
            per_token_s: 0.0005,
        };
        let c = DraftControl {
            acceptance: 0.7,
            max_tokens: 8,
            fixed: None,
        };
        let alone = c.choose(&cost, 1, 0.0);
        let crowd = c.choose(&cost, 64, 0.0);
        assert!(
            alone >= 3,
            "batch 1 should draft several tokens, chose {alone}"
        );
        assert!(
            crowd < alone,
            "batch 64 should draft fewer: {crowd} vs {alone}"
        );
        let poor = DraftControl {
            acceptance: 0.05,
            max_tokens: 8,
            fixed: None,
        };
        // At a = 0.05 one draft adds 0.05 tokens for 0.5 ms: still under T/N = 10.5 ms when
        // drafting is free, but not once a draft costs 1 ms to produce.
        assert_eq!(poor.choose(&cost, 1, 0.0), 1);
        assert_eq!(
            poor.choose(&cost, 1, 0.001),
            0,
            "useless drafts are not worth their cost"
        );
        let fixed = DraftControl {
            acceptance: 0.0,
            max_tokens: 8,
            fixed: Some(5),
        };
        assert_eq!(fixed.choose(&cost, 64, 0.0), 5);
    }
}
