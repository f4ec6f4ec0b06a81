//! Speculation accounting. Time per token is ΣT/ΣN over rounds, never the mean of
//! per-round ratios: rounds of 1.5 ms yielding 1 and 5 tokens cost 3 ms for 6 tokens
//! (0.5 ms/token), not (1.5 + 0.3)/2 = 0.9 ms/token (DESIGN.md §speculation).

/// Counters of one engine (or one request).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecStats {
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Tokens emitted by verification rounds (accepted + corrections/bonus).
    pub emitted: u64,
    /// accepted_by_position[i]: rounds whose draft i was accepted.
    pub accepted_by_position: Vec<u64>,
    /// drafted_by_position[i]: rounds that drafted at least i + 1 tokens.
    pub drafted_by_position: Vec<u64>,
    /// Σ round time (s) and Σ tokens over the same rounds.
    pub time_s: f64,
    /// The draft-length rule's decisions: speculating requests it considered, those it
    /// gave no draft (speculation turned down), and the draft tokens it planned.
    pub rule_considered: u64,
    pub rule_declined: u64,
    pub rule_planned_tokens: u64,
    /// Seconds spent proposing after steps: planning draft lengths, lookups and draft-model
    /// passes, all that speculation adds outside the verifying forward (with the rule
    /// declining every draft, the whole of its cost).
    pub propose_s: f64,
}

impl SpecStats {
    /// Records one plan: the draft length given to each speculating request.
    pub fn record_plan(&mut self, lengths: &[usize]) {
        self.rule_considered += lengths.len() as u64;
        self.rule_declined += lengths.iter().filter(|&&k| k == 0).count() as u64;
        self.rule_planned_tokens += lengths.iter().sum::<usize>() as u64;
    }

    /// Records one verification round.
    pub fn record(&mut self, drafted: usize, accepted: usize, emitted: usize, time_s: f64) {
        self.rounds += 1;
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
        self.emitted += emitted as u64;
        self.time_s += time_s;
        if self.drafted_by_position.len() < drafted {
            self.drafted_by_position.resize(drafted, 0);
            self.accepted_by_position.resize(drafted, 0);
        }
        for i in 0..drafted {
            self.drafted_by_position[i] += 1;
        }
        for i in 0..accepted {
            self.accepted_by_position[i] += 1;
        }
    }

    /// The counts added since `before` (a snapshot of the same counters).
    pub fn since(&self, before: &SpecStats) -> SpecStats {
        SpecStats {
            rounds: self.rounds - before.rounds,
            drafted: self.drafted - before.drafted,
            accepted: self.accepted - before.accepted,
            emitted: self.emitted - before.emitted,
            time_s: self.time_s - before.time_s,
            rule_considered: self.rule_considered - before.rule_considered,
            rule_declined: self.rule_declined - before.rule_declined,
            rule_planned_tokens: self.rule_planned_tokens - before.rule_planned_tokens,
            propose_s: self.propose_s - before.propose_s,
            ..SpecStats::default()
        }
    }

    /// ΣT / ΣN.
    pub fn time_per_token_s(&self) -> f64 {
        if self.emitted == 0 {
            0.0
        } else {
            self.time_s / self.emitted as f64
        }
    }

    /// Mean tokens fixed per round.
    pub fn tokens_per_round(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            self.emitted as f64 / self.rounds as f64
        }
    }

    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}
