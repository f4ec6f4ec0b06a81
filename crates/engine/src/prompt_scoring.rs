//! Log-probabilities of the prompt's own tokens (`GenerateRequest::prompt_logprobs`): what
//! OpenAI's `echo` + `logprobs` and vLLM's `prompt_logprobs` return, and what
//! lm-evaluation-harness scores loglikelihood tasks with.
//!
//! Such a request skips the prefix cache (cached positions have no logits) and asks the
//! model for a logit row at every prompt position of each chunk: the row of position `p`
//! scores prompt token `p + 1`. Rows are stored by position, so a chunk computed again
//! after a preemption overwrites rather than appends.

use crate::api::TokenLogprob;
use crate::sampler::log_softmax;

/// The logprob of `tok` in `row` with the `k` most likely alternatives, best first.
pub fn token_logprob(row: &[f32], tok: u32, k: usize) -> TokenLogprob {
    let lp = log_softmax(row);
    let mut top: Vec<(u32, f32)> = Vec::new();
    if k > 0 {
        let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
        let k = k.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
        idx.truncate(k);
        idx.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
        top = idx.into_iter().map(|i| (i, lp[i as usize])).collect();
    }
    TokenLogprob {
        token: tok,
        logprob: lp[tok as usize],
        top,
    }
}

/// One request's prompt scores in progress.
#[derive(Clone, Debug)]
pub struct PromptScores {
    prompt: Vec<u32>,
    /// Top alternatives per position.
    k: usize,
    /// Entry `i` scores prompt token `i + 1`.
    scores: Vec<Option<TokenLogprob>>,
    sent: bool,
}

impl PromptScores {
    pub fn new(prompt: &[u32], k: usize) -> PromptScores {
        PromptScores {
            prompt: prompt.to_vec(),
            k,
            scores: vec![None; prompt.len().saturating_sub(1)],
            sent: false,
        }
    }

    /// True while some position in `[start, start + len)` still needs its row: the step
    /// then asks for logits at all `len` positions.
    pub fn wants(&self, start: usize, len: usize) -> bool {
        (start..(start + len).min(self.scores.len())).any(|p| self.scores[p].is_none())
    }

    /// Records the rows of positions `start..start + rows.len() / vocab`.
    pub fn record(&mut self, start: usize, rows: &[f32], vocab: usize) {
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            let p = start + i;
            if p < self.scores.len() {
                self.scores[p] = Some(token_logprob(row, self.prompt[p + 1], self.k));
            }
        }
    }

    /// The scores of prompt tokens 1.. once all are known and not yet handed out.
    pub fn take_ready(&mut self) -> Vec<TokenLogprob> {
        if self.sent || self.scores.iter().any(Option::is_none) {
            return Vec::new();
        }
        self.sent = true;
        self.all()
    }

    /// All scores known so far, in position order.
    pub fn all(&self) -> Vec<TokenLogprob> {
        self.scores.iter().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_score_the_next_prompt_token_once_complete() {
        let vocab = 3;
        let mut s = PromptScores::new(&[0, 2, 1], 1);
        assert!(s.wants(0, 2) && !s.wants(2, 1));
        // Position 0's row scores token 2, position 1's row token 1; rows past the prompt's
        // second-to-last position are ignored.
        s.record(0, &[0.0, 0.0, 1.0], vocab);
        assert!(s.take_ready().is_empty());
        s.record(1, &[0.0, 2.0, 0.0, 9.0, 9.0, 9.0], vocab);
        let got = s.take_ready();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].token, got[0].top[0].0), (2, 2));
        assert_eq!((got[1].token, got[1].top[0].0), (1, 1));
        let e = (1.0f32.exp() + 2.0).ln();
        assert!((got[0].logprob - (1.0 - e)).abs() < 1e-6);
        assert!(s.take_ready().is_empty(), "handed out once");
        assert!(!s.wants(0, 3));
    }
}
