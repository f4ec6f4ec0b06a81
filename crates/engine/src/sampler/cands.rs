//! The candidate list the filtering stages narrow, and the stages themselves, each after
//! llama.cpp's `src/llama-sampling.cpp` (its `min_keep` is 0 here, as llama-server's
//! default).
//!
//! Values are logits or probabilities: stages that need probabilities turn logits into
//! them once (sorted, softmax) and stages that need logits take their logarithm, so that
//! the usual chain (temperature, top-k, min-p, top-p) computes exactly what it computed
//! before the other stages existed.

/// Candidates: (token id, value); `probs` says whether values are probabilities (then
/// sorted, most probable first) or logits (any order).
#[derive(Clone, Debug, PartialEq)]
pub struct Cands {
    pub c: Vec<(u32, f32)>,
    pub probs: bool,
}

impl Cands {
    pub fn from_logits(logits: &[f32]) -> Cands {
        Cands {
            c: logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, l))
                .collect(),
            probs: false,
        }
    }

    /// Sorted by probability (ties: lower id first), softmax of the logits.
    pub fn ensure_probs(&mut self) {
        if self.probs {
            return;
        }
        let c = &mut self.c;
        c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let m = c[0].1;
        let mut sum = 0.0;
        for x in c.iter_mut() {
            x.1 = (x.1 - m).exp();
            sum += x.1;
        }
        for x in c.iter_mut() {
            x.1 /= sum;
        }
        self.probs = true;
    }

    /// Probabilities that sum to 1 over what is left (llama.cpp re-softmaxes the survivors).
    pub fn normalize(&mut self) {
        if !self.probs {
            return self.ensure_probs();
        }
        let s: f32 = self.c.iter().map(|x| x.1).sum();
        for x in self.c.iter_mut() {
            x.1 /= s;
        }
    }

    /// Back to logits (the log of the probabilities: the same distribution).
    pub fn ensure_logits(&mut self) {
        if self.probs {
            for x in self.c.iter_mut() {
                x.1 = x.1.ln();
            }
            self.probs = false;
        }
    }

    /// Logits divided by `t` (> 0).
    pub fn temperature(&mut self, t: f32) {
        self.ensure_logits();
        for x in self.c.iter_mut() {
            x.1 /= t;
        }
    }

    /// The `k` largest (0: all).
    pub fn top_k(&mut self, k: usize) {
        if k == 0 || k >= self.c.len() {
            return;
        }
        if self.probs {
            self.c.truncate(k);
        } else {
            self.c
                .select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            self.c.truncate(k);
        }
    }

    /// Tokens at least `min_p` times as probable as the most probable one.
    pub fn min_p(&mut self, min_p: f32) {
        if min_p <= 0.0 {
            return;
        }
        self.ensure_probs();
        let floor = self.c[0].1 * min_p;
        self.c.retain(|x| x.1 >= floor);
    }

    /// The smallest prefix whose mass reaches `top_p`.
    pub fn top_p(&mut self, top_p: f32) {
        if top_p >= 1.0 {
            return;
        }
        self.ensure_probs();
        let mut acc = 0.0;
        let mut keep = self.c.len();
        for (i, x) in self.c.iter().enumerate() {
            acc += x.1;
            if acc >= top_p {
                keep = i + 1;
                break;
            }
        }
        self.c.truncate(keep.max(1));
    }

    /// Locally typical sampling: tokens ordered by how far their surprise is from the
    /// entropy, kept until their mass exceeds `p`.
    pub fn typical(&mut self, p: f32) {
        if p >= 1.0 {
            return;
        }
        self.normalize();
        let entropy: f32 = self
            .c
            .iter()
            .filter(|x| x.1 > 0.0)
            .map(|x| -x.1 * x.1.ln())
            .sum();
        let mut order: Vec<(usize, f32)> = self
            .c
            .iter()
            .enumerate()
            .map(|(i, x)| (i, (-x.1.ln() - entropy).abs()))
            .collect();
        order.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut cum = 0.0;
        let mut last = order.len();
        for (i, &(j, _)) in order.iter().enumerate() {
            cum += self.c[j].1;
            if cum > p {
                last = i + 1;
                break;
            }
        }
        let mut kept: Vec<(u32, f32)> = order[..last].iter().map(|&(j, _)| self.c[j]).collect();
        kept.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.c = kept;
        self.normalize();
    }

    /// Top-nσ: logits below max − n·σ go (σ and the mean over the finite logits).
    pub fn top_n_sigma(&mut self, n: f32) {
        if n <= 0.0 || self.c.len() <= 1 {
            return;
        }
        self.ensure_logits();
        let finite = || self.c.iter().map(|x| x.1).filter(|l| l.is_finite());
        let count = finite().count();
        if count == 0 {
            return;
        }
        let max = finite().fold(f32::NEG_INFINITY, f32::max);
        let mean = finite().sum::<f32>() / count as f32;
        let var = finite().map(|l| (l - mean) * (l - mean)).sum::<f32>() / count as f32;
        let floor = max - n * var.sqrt();
        self.c.retain(|x| x.1 >= floor);
    }

    /// Exclude Top Choices: with chance `probability` (the draw `chance`), every token at
    /// least `threshold` probable except the least probable of them goes.
    pub fn xtc(&mut self, probability: f32, threshold: f32, chance: f32) {
        if probability <= 0.0 || threshold > 0.5 || self.c.len() < 2 || chance > probability {
            return;
        }
        self.normalize();
        let mut last = 0;
        for (i, x) in self.c.iter().enumerate() {
            if x.1 >= threshold {
                last = i;
            } else {
                break;
            }
        }
        if last > 0 {
            self.c.drain(..last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed distribution of the tests: p = 0.4, 0.25, 0.15, 0.1, 0.06, 0.04.
    const P: [f32; 6] = [0.4, 0.25, 0.15, 0.1, 0.06, 0.04];

    fn fixed() -> Cands {
        Cands::from_logits(&P.map(f32::ln))
    }

    fn ids(c: &Cands) -> Vec<u32> {
        c.c.iter().map(|x| x.0).collect()
    }

    fn close(got: &Cands, want: &[(u32, f32)]) {
        assert_eq!(ids(got), want.iter().map(|x| x.0).collect::<Vec<_>>());
        for (g, w) in got.c.iter().zip(want) {
            assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn typical_keeps_the_tokens_nearest_the_entropy() {
        // H = 1.5255 nats; |−ln p − H|: 0.609, 0.139, 0.372, 0.777, 1.288, 1.693.
        // Ordered 1, 2, 0, 3, …: mass 0.25, 0.40, 0.80 > 0.5 after three.
        let mut c = fixed();
        c.typical(0.5);
        close(&c, &[(0, 0.5), (1, 0.3125), (2, 0.1875)]);
        // Strictly more than p: 0.25 is not > 0.25, so a second token comes in.
        let mut c = fixed();
        c.typical(0.25);
        close(&c, &[(1, 0.625), (2, 0.375)]);
        let mut c = fixed();
        c.typical(1.0);
        assert_eq!(c, fixed());
    }

    #[test]
    fn top_n_sigma_cuts_below_max_minus_n_sigma() {
        // Logits 3, 2, 1, 0, −1, −2, −inf: mean 0.5, σ = 1.7078 over the finite ones.
        let l = [3.0, 2.0, 1.0, 0.0, -1.0, -2.0, f32::NEG_INFINITY];
        let mut c = Cands::from_logits(&l);
        c.top_n_sigma(1.0); // floor 1.292
        assert_eq!(ids(&c), vec![0, 1]);
        let mut c = Cands::from_logits(&l);
        c.top_n_sigma(2.0); // floor −0.416
        assert_eq!(ids(&c), vec![0, 1, 2, 3]);
        let mut c = Cands::from_logits(&l);
        c.top_n_sigma(0.0);
        assert_eq!(c.c.len(), 7);
    }

    #[test]
    fn xtc_drops_all_top_choices_but_the_last() {
        // Above 0.12: 0.4, 0.25, 0.15; all but 0.15 go.
        let mut c = fixed();
        c.xtc(1.0, 0.12, 0.3);
        close(&c, &[(2, 0.15), (3, 0.1), (4, 0.06), (5, 0.04)]);
        // The draw above the probability: nothing happens.
        let mut c = fixed();
        c.xtc(0.5, 0.12, 0.6);
        assert_eq!(c, fixed());
        // One token above the threshold: it stays.
        let mut c = fixed();
        c.xtc(1.0, 0.3, 0.0);
        assert_eq!(ids(&c), vec![0, 1, 2, 3, 4, 5]);
        // A threshold above 0.5 turns it off.
        let mut c = fixed();
        c.xtc(1.0, 0.6, 0.0);
        assert_eq!(c, fixed());
    }

    #[test]
    fn min_p_top_p_top_k() {
        let mut c = fixed();
        c.top_k(3);
        c.ensure_probs();
        close(&c, &[(0, 0.5), (1, 0.3125), (2, 0.1875)]);
        let mut c = fixed();
        c.min_p(0.3); // floor 0.12
        assert_eq!(ids(&c), vec![0, 1, 2]);
        let mut c = fixed();
        c.top_p(0.7);
        assert_eq!(ids(&c), vec![0, 1, 2]);
    }
}
