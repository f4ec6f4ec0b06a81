//! Per-request edits of the logits before sampling: OpenAI's `logit_bias`, and vLLM's
//! `min_tokens`, `allowed_token_ids` and `bad_words`.
//!
//! They change what the sampler draws from (greedy included), never the reported
//! logprobs, which stay those of the model's raw distribution.

/// The logit edits of one request; the default changes nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogitRules {
    /// (token id, bias) added to the logit (OpenAI: -100 bans, +100 forces in practice).
    pub bias: Vec<(u32, f32)>,
    /// End-of-generation and stop token ids are masked until this many tokens are out.
    pub min_tokens: usize,
    /// When set, only these token ids can be drawn (sorted, deduplicated).
    pub allowed: Option<Vec<u32>>,
    /// Token sequences never generated: the last token of a sequence is masked whenever
    /// the output so far ends with the rest of it (a one-token sequence is always masked).
    pub bad_words: Vec<Vec<u32>>,
}

impl LogitRules {
    /// True when the rules change nothing (the common path skips them).
    pub fn is_empty(&self) -> bool {
        self.bias.is_empty()
            && self.min_tokens == 0
            && self.allowed.is_none()
            && self.bad_words.is_empty()
    }

    /// Applies the rules to `logits` for the next token after `history` (the output so
    /// far, pending drafts included); `ends` are the tokens that would end generation.
    pub fn apply(&self, logits: &mut [f32], history: &[u32], ends: &[u32]) {
        if let Some(allowed) = &self.allowed {
            let mut next = allowed.iter().peekable();
            for (i, l) in logits.iter_mut().enumerate() {
                if next.peek() == Some(&&(i as u32)) {
                    next.next();
                } else {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        for &(t, b) in &self.bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if history.len() < self.min_tokens {
            for &e in ends {
                if let Some(l) = logits.get_mut(e as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        for w in &self.bad_words {
            let Some((&last, head)) = w.split_last() else {
                continue;
            };
            if history.ends_with(head) {
                if let Some(l) = logits.get_mut(last as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_edits_exactly_its_tokens() {
        let ninf = f32::NEG_INFINITY;
        let mut l = vec![0.0; 6];
        LogitRules {
            bias: vec![(1, 5.0), (2, -100.0)],
            ..Default::default()
        }
        .apply(&mut l, &[], &[]);
        assert_eq!(l, vec![0.0, 5.0, -100.0, 0.0, 0.0, 0.0]);

        let mut l = vec![1.0; 6];
        LogitRules {
            allowed: Some(vec![0, 3, 5]),
            ..Default::default()
        }
        .apply(&mut l, &[], &[]);
        assert_eq!(l, vec![1.0, ninf, ninf, 1.0, ninf, 1.0]);

        let min = LogitRules {
            min_tokens: 2,
            ..Default::default()
        };
        let mut l = vec![1.0; 4];
        min.apply(&mut l, &[3], &[0, 2]);
        assert_eq!(l, vec![ninf, 1.0, ninf, 1.0]);
        let mut l = vec![1.0; 4];
        min.apply(&mut l, &[3, 3], &[0, 2]);
        assert_eq!(l, vec![1.0; 4]);

        let bad = LogitRules {
            bad_words: vec![vec![4], vec![1, 2]],
            ..Default::default()
        };
        let mut l = vec![1.0; 6];
        bad.apply(&mut l, &[0, 1], &[]);
        assert_eq!(l, vec![1.0, 1.0, ninf, 1.0, ninf, 1.0]);
        let mut l = vec![1.0; 6];
        bad.apply(&mut l, &[1, 0], &[]);
        assert_eq!(l, vec![1.0, 1.0, 1.0, 1.0, ninf, 1.0]);
        assert!(LogitRules::default().is_empty() && !bad.is_empty());
    }
}
