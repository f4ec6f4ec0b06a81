//! Acceptance by draft position, estimated from verification rounds.
//!
//! DESIGN.md §speculation prices a draft of m tokens with one per-position acceptance a:
//! E[N_m] = 1 + a + … + a^m. That geometric model fits a drafter whose every guess is
//! an independent coin, but context lookup is not one: its drafts are either a span being
//! copied (nearly every token accepted) or a stale match (the first token already wrong).
//! Measured on a list being repeated, 4-token drafts were accepted at 0.69 and 2-token
//! ones at 0.58: the tokens after an accepted one are accepted more often than the first.
//! A single rate fitted to such rounds is dragged down by the first position and
//! under-prices every later one, so the planner stops at 2 drafts where 4 to 6 pay.
//!
//! So acceptance is kept per position, conditional on reaching it: rate\[j\] =
//! P(draft j + 1 accepted | drafts 1..=j accepted), from decayed counts of the rounds
//! that reached position j, pulled towards a prior by a few pseudo-rounds. A position no
//! round has reached yet is assumed to continue like the one before it, so the planner
//! tries one longer draft where acceptance is high and learns that position's rate.

/// Positions tracked; drafts longer than this reuse the last position's rate.
pub const TRACKED: usize = 16;

/// Acceptance rates of draft positions 1, 2, …, each conditional on the drafts before it
/// being accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acceptance {
    rate: [f64; TRACKED],
}

/// Rates are capped below 1 so E[N] stays finite and a long perfect run still leaves room
/// for the next rejection.
const MAX_RATE: f64 = 0.99;

impl Acceptance {
    /// The same rate at every position: the geometric model (DESIGN.md §speculation).
    pub fn flat(a: f64) -> Acceptance {
        Acceptance {
            rate: [a.clamp(0.0, MAX_RATE); TRACKED],
        }
    }

    /// Rate of draft position `j + 1` given drafts `1..=j` accepted.
    pub fn at(&self, j: usize) -> f64 {
        self.rate[j.min(TRACKED - 1)]
    }

    /// Probability that the first `m` drafts are all accepted (1 for m = 0).
    pub fn reach(&self, m: usize) -> f64 {
        (0..m).map(|j| self.at(j)).product()
    }

    /// Expected tokens fixed by a round drafting `m` tokens: Σ_{i=0..m} reach(i) (the
    /// target's own token plus each accepted draft).
    pub fn expected_tokens(&self, m: usize) -> f64 {
        let mut reach = 1.0;
        let mut n = 1.0;
        for j in 0..m {
            reach *= self.at(j);
            n += reach;
        }
        n
    }
}

/// Decayed per-position counts of verification rounds, and the rates they give.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptanceCounts {
    /// Rounds that reached position j (drafted it with every earlier draft accepted).
    trials: [f64; TRACKED],
    /// Of those, rounds whose draft j was accepted.
    accepted: [f64; TRACKED],
    /// Each round that reaches a position multiplies that position's old counts by this:
    /// older rounds weigh less, so a request whose text changes from copying to writing
    /// stops drafting within a few rounds.
    decay: f64,
}

/// Pseudo-rounds of the prior behind every position's rate.
const PRIOR_WEIGHT: f64 = 2.0;

impl AcceptanceCounts {
    pub fn new(decay: f64) -> AcceptanceCounts {
        AcceptanceCounts {
            trials: [0.0; TRACKED],
            accepted: [0.0; TRACKED],
            decay,
        }
    }

    /// Records a round that drafted `drafted` tokens, of which the first `accepted` were
    /// accepted.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        // Positions 1..=accepted were accepted; the next one, if drafted, was tried and
        // rejected. Positions past TRACKED fold into the last one. A position's old counts
        // decay only when it is tried again: a position few rounds reach keeps the
        // evidence it has rather than fading towards its prior between visits.
        let reached = (accepted + 1).min(drafted);
        for j in 0..reached {
            let p = j.min(TRACKED - 1);
            if j < TRACKED {
                self.trials[p] *= self.decay;
                self.accepted[p] *= self.decay;
            }
            self.trials[p] += 1.0;
            if j < accepted {
                self.accepted[p] += 1.0;
            }
        }
    }

    /// The rates: each position's observed share, pulled towards `prior` at that position
    /// (or, with no prior, towards the rate of the position before it, `start` at the
    /// first).
    pub fn rates(&self, prior: Option<&Acceptance>, start: f64) -> Acceptance {
        let mut rate = [0.0; TRACKED];
        let mut prev = start;
        for (j, rj) in rate.iter_mut().enumerate() {
            let base = prior.map_or(prev, |p| p.at(j));
            let r = (self.accepted[j] + PRIOR_WEIGHT * base) / (self.trials[j] + PRIOR_WEIGHT);
            *rj = r.clamp(0.0, MAX_RATE);
            prev = *rj;
        }
        Acceptance { rate }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_rates_are_the_geometric_model() {
        // AAAA (a = 1/4) ≈ 1.33 tokens/round, BBBB (a = 3/4) ≈ 3.05 (DESIGN.md §speculation).
        assert!((Acceptance::flat(0.25).expected_tokens(4) - 1.33).abs() < 0.005);
        assert!((Acceptance::flat(0.75).expected_tokens(4) - 3.05).abs() < 0.005);
        assert_eq!(Acceptance::flat(0.5).reach(0), 1.0);
        assert_eq!(Acceptance::flat(0.5).reach(3), 0.125);
    }

    #[test]
    fn copying_rounds_give_a_low_first_rate_and_high_later_ones() {
        // Half the rounds are a stale match (first draft wrong), half copy all 4.
        let mut c = AcceptanceCounts::new(1.0);
        for _ in 0..20 {
            c.observe(4, 0);
            c.observe(4, 4);
        }
        let r = c.rates(None, 0.6);
        // Position 1: 20 of 40 (+ 2 pseudo-rounds at 0.6) = 21.2 / 42.
        assert!((r.at(0) - 21.2 / 42.0).abs() < 1e-12, "{}", r.at(0));
        // Positions 2..4: reached 20 times, accepted 20 times: (20 + 2·prev) / 22.
        assert!(r.at(1) > 0.95 && r.at(3) > 0.95, "{r:?}");
        // Position 5 was never reached: it continues like position 4.
        assert_eq!(r.at(4), r.at(3));
        // Averaging each round's own rate (0 or 1 here) gives one rate of 0.5: 1.94 tokens
        // from 4 drafts and 0.03 for a 5th draft, where the rounds say 3 and 0.48.
        assert!(
            (r.expected_tokens(4) - 3.0).abs() < 0.1,
            "{}",
            r.expected_tokens(4)
        );
        assert!(r.reach(5) > 0.45, "{}", r.reach(5));
        assert!((Acceptance::flat(0.5).expected_tokens(4) - 1.9375).abs() < 1e-12);
    }

    #[test]
    fn a_prior_stands_in_for_unreached_positions() {
        let prior = Acceptance::flat(0.9);
        let mut c = AcceptanceCounts::new(1.0);
        c.observe(1, 1);
        let r = c.rates(Some(&prior), 0.6);
        // (1 + 2·0.9) / 3 at position 1; the prior itself past it.
        assert!((r.at(0) - 2.8 / 3.0).abs() < 1e-12);
        assert_eq!(r.at(1), 0.9);
    }

    #[test]
    fn a_position_few_rounds_reach_keeps_its_evidence() {
        let mut c = AcceptanceCounts::new(0.9);
        for _ in 0..10 {
            c.observe(8, 8);
        }
        for _ in 0..30 {
            c.observe(8, 0);
        }
        let r = c.rates(None, 0.6);
        // Position 1 now fails; position 8 was last reached in the copying rounds and
        // still says so (6.5 of 6.5 decayed rounds against 2 pseudo-rounds of the rate
        // before it). Decayed by every round, its 6.5 rounds would be 0.28 by now, and
        // its rate would follow position 1 down.
        assert!(r.at(0) < 0.15, "{}", r.at(0));
        assert!(r.at(7) > 0.95, "{}", r.at(7));
    }

    #[test]
    fn decay_forgets_old_rounds() {
        let mut c = AcceptanceCounts::new(0.5);
        for _ in 0..10 {
            c.observe(2, 2);
        }
        for _ in 0..5 {
            c.observe(2, 0);
        }
        // Old successes weigh 0.5^5 ≈ 3% of a new round each: the rate is now low.
        assert!(c.rates(None, 0.6).at(0) < 0.35);
    }
}
