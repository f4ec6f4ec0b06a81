//! Scoring a context-lookup proposal at its full length, whatever length was drafted.
//!
//! The draft-length rule learns acceptance by position from the drafts it verifies, so it
//! learns nothing about positions it stops short of: a position estimated low once is
//! never drafted again, never re-measured, and the request stays on short drafts for good
//! (seen on a repeated list: stuck at 1 draft with position 2 estimated at 0.6, where a
//! fixed 4 accepts 73% of its drafts). A lookup's continuation costs nothing to make, so
//! folio checks the whole of it (up to the longest draft allowed) against the tokens the
//! target then emits, over this step and the following ones, and records that: every
//! position is measured whatever the planner chose.
//!
//! Under greedy decoding a draft is accepted exactly when it equals the target's token, so
//! this is the acceptance the draft would have had. Under sampling, a one-token draft
//! (q = 1 on it) is accepted with probability p(x), which is also the probability that
//! the sampled token is x: the same rate.

/// A proposal being checked against the emitted tokens.
#[derive(Debug, Clone, Default)]
pub struct ProposalCheck {
    proposal: Vec<u32>,
    matched: usize,
}

impl ProposalCheck {
    /// No proposal is being checked.
    pub fn is_idle(&self) -> bool {
        self.proposal.is_empty()
    }

    /// Starts checking `proposal` (the lookup's continuation from the current last token).
    pub fn start(&mut self, proposal: Vec<u32>) {
        self.proposal = proposal;
        self.matched = 0;
    }

    /// Feeds the next emitted token. Returns `(proposed, accepted)` once the proposal is
    /// settled: at its first mismatch, or when every token matched. Idle afterwards.
    pub fn push(&mut self, token: u32) -> Option<(usize, usize)> {
        let &want = self.proposal.get(self.matched)?;
        if want == token {
            self.matched += 1;
            if self.matched < self.proposal.len() {
                return None;
            }
        }
        let settled = (self.proposal.len(), self.matched);
        self.proposal.clear();
        self.matched = 0;
        Some(settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_at_the_first_mismatch_or_full_match() {
        let mut c = ProposalCheck::default();
        assert!(c.is_idle());
        assert_eq!(c.push(7), None, "idle: nothing to settle");
        c.start(vec![1, 2, 3, 4]);
        assert_eq!(c.push(1), None);
        assert_eq!(c.push(2), None);
        assert_eq!(c.push(9), Some((4, 2)));
        assert!(c.is_idle());
        c.start(vec![5, 6]);
        assert_eq!(c.push(5), None);
        assert_eq!(c.push(6), Some((2, 2)));
        assert!(c.is_idle());
        c.start(vec![5, 6]);
        assert_eq!(c.push(8), Some((2, 0)));
    }
}
