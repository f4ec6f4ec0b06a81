//! DRY ("don't repeat yourself"): a token that would extend a repeat of what came before
//! loses `multiplier · base^(length − allowed_length)` of its logit, where `length` is the
//! longest earlier repeat it would continue. Repeats do not reach back across a sequence
//! breaker. After llama.cpp's `llama_sampler_dry_apply` (a direct match search instead of
//! its Z-algorithm: the same lengths).
//!
//! NOTE: a breaker string is matched by the tokens whose text contains it whole (all of
//! llama.cpp's default breakers are one character, so every such token); llama.cpp also
//! matches a breaker spread over several tokens, which folio does not.

use std::collections::HashMap;
use std::sync::Arc;

/// llama-server's default `dry_sequence_breakers`.
pub const DEFAULT_BREAKERS: &[&str] = &["\n", ":", "\"", "*"];

/// DRY settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: usize,
    /// How many recent tokens (prompt and output) are searched; `None`: all of them.
    pub penalty_last_n: Option<usize>,
    /// Token ids that break repeats, sorted.
    pub breakers: Arc<[u32]>,
}

impl Dry {
    /// Whether it can change anything (llama.cpp's own early return).
    pub fn is_active(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n != Some(0)
    }

    fn is_breaker(&self, t: u32) -> bool {
        self.breakers.binary_search(&t).is_ok()
    }

    /// The tokens of the window `hist` takes into account (the most recent ones).
    pub fn window<'a>(&self, hist: &'a [u32]) -> &'a [u32] {
        let n = self.penalty_last_n.unwrap_or(usize::MAX).min(hist.len());
        &hist[hist.len() - n..]
    }

    /// (token, penalty) for the token after `hist` (oldest first).
    pub fn penalties(&self, hist: &[u32]) -> Vec<(u32, f32)> {
        if !self.is_active() {
            return Vec::new();
        }
        let w = self.window(hist);
        let n = w.len();
        if n <= self.allowed_length {
            return Vec::new();
        }
        // rat(i): the i-th most recent token.
        let rat = |i: usize| w[n - 1 - i];
        // Repeats end at the most recent breaker.
        let rep_limit = (0..n).find(|&i| self.is_breaker(rat(i))).unwrap_or(n);
        if rep_limit < self.allowed_length {
            return Vec::new();
        }
        // For each earlier end k tokens back: how long the text up to it matches the
        // text up to now (the Z-function of the reversed window, O(n) even for a long
        // run of one token); the token after it would continue that repeat.
        let rev: Vec<u32> = w.iter().rev().copied().collect();
        let z = z_function(&rev);
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for (k, &zk) in z.iter().enumerate().take(n).skip(1) {
            let len = zk.min(rep_limit);
            if len >= self.allowed_length {
                let e = longest.entry(rat(k - 1)).or_default();
                *e = (*e).max(len);
            }
        }
        // base^x overflows f32 past this exponent.
        let max_exponent = if self.base > 1.000_001 {
            (88.722_84 / self.base.ln()) as usize
        } else {
            0
        };
        let mut out: Vec<(u32, f32)> = longest
            .into_iter()
            .filter(|(t, _)| !self.is_breaker(*t))
            .map(|(t, len)| {
                let mut e = len - self.allowed_length;
                if max_exponent > 0 {
                    e = e.min(max_exponent);
                }
                (t, self.multiplier * self.base.powi(e as i32))
            })
            .collect();
        out.sort_by_key(|x| x.0);
        out
    }

    /// Lowers the logits of the tokens that would extend a repeat.
    pub fn apply(&self, logits: &mut [f32], hist: &[u32]) {
        for (t, p) in self.penalties(hist) {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= p;
            }
        }
    }
}

/// `z[k]`: the length of the longest common prefix of `s` and `s[k..]` (`z[0]` = 0).
fn z_function(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    let (mut l, mut r) = (0, 0);
    for i in 1..n {
        if i < r {
            z[i] = (r - i).min(z[i - l]);
        }
        while i + z[i] < n && s[z[i]] == s[i + z[i]] {
            z[i] += 1;
        }
        if i + z[i] > r {
            l = i;
            r = i + z[i];
        }
    }
    z
}

/// The ids of the tokens whose text contains one of `breakers` (sorted).
pub fn breaker_tokens(tok: &folio_tokenizer::Tokenizer, breakers: &[String]) -> Arc<[u32]> {
    let pats: Vec<&[u8]> = breakers
        .iter()
        .map(|b| b.as_bytes())
        .filter(|b| !b.is_empty())
        .collect();
    (0..tok.vocab_size() as u32)
        .filter(|&id| {
            let t = tok.token_bytes_ref(id);
            pats.iter().any(|p| t.windows(p.len()).any(|w| w == *p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(breakers: &[u32]) -> Dry {
        Dry {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            penalty_last_n: None,
            breakers: breakers.into(),
        }
    }

    #[test]
    fn the_token_that_would_extend_a_repeat_is_penalized() {
        // "1 2 3 4 1 2 3": a 4 next would make the repeat 4 long; 3 tokens repeat now,
        // so its penalty is 1 · 2^(3 − 2).
        let h = [1, 2, 3, 4, 1, 2, 3];
        assert_eq!(dry(&[]).penalties(&h), vec![(4, 2.0)]);
        let mut l = vec![0.0; 6];
        dry(&[]).apply(&mut l, &h);
        assert_eq!(l, vec![0.0, 0.0, 0.0, 0.0, -2.0, 0.0]);
        // A longer repeat: "5 1 2 3 4 5 1 2 3": 4 would continue a 4-token repeat.
        assert_eq!(
            dry(&[]).penalties(&[5, 1, 2, 3, 4, 5, 1, 2, 3]),
            vec![(4, 4.0)]
        );
        // Too short to count: "1 2 1".
        assert_eq!(dry(&[]).penalties(&[1, 2, 9, 1]), vec![]);
    }

    #[test]
    fn z_function_matches_a_direct_search() {
        let s = [1, 1, 2, 1, 1, 2, 1, 3, 1, 1];
        let direct: Vec<usize> = (0..s.len())
            .map(|k| {
                if k == 0 {
                    return 0;
                }
                (0..s.len() - k).take_while(|&i| s[i] == s[i + k]).count()
            })
            .collect();
        assert_eq!(z_function(&s), direct);
        // A long run of one token: every earlier position continues it, capped by length.
        let run = vec![7u32; 4000];
        let p = dry(&[]).penalties(&run);
        assert_eq!(p.len(), 1);
        assert!(p[0].1 > 1e30, "{p:?}");
    }

    #[test]
    fn breakers_bound_repeats() {
        let h = [1, 2, 3, 4, 1, 2, 3];
        // 2 is a breaker: only "3" follows the last one, shorter than allowed.
        assert_eq!(dry(&[2]).penalties(&h), vec![]);
        // 1 is a breaker: the repeat counts from after it, "2 3": 2^0.
        assert_eq!(dry(&[1]).penalties(&h), vec![(4, 1.0)]);
        // The token itself a breaker: never penalized.
        assert_eq!(dry(&[4]).penalties(&h), vec![]);
    }

    #[test]
    fn window_and_off_switches() {
        let h = [1, 2, 3, 4, 1, 2, 3];
        let mut d = dry(&[]);
        d.penalty_last_n = Some(6); // "2 3 4 1 2 3": the 4 is still in reach, repeat 2.
        assert_eq!(d.penalties(&h), vec![(4, 1.0)]);
        d.penalty_last_n = Some(0);
        assert!(!d.is_active());
        let mut d = dry(&[]);
        d.multiplier = 0.0;
        assert_eq!(d.penalties(&h), vec![]);
        // A huge base: the exponent is capped, the penalty stays finite.
        let mut d = dry(&[]);
        d.base = 1e30;
        d.allowed_length = 0;
        assert!(d.penalties(&h).iter().all(|p| p.1.is_finite()));
    }
}
