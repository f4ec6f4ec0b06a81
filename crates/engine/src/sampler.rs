//! Turning logits into tokens: temperature, top-k, top-p, min-p, penalties, per-request seed.
//!
//! Each request owns its [`Sampler`] (and so its RNG): a seeded request draws the same
//! tokens whatever else shares its batch.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Per-request sampling settings (OpenAI / vLLM semantics).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means disabled.
    pub top_k: usize,
    /// 1.0 means disabled.
    pub top_p: f32,
    /// 0.0 means disabled.
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// 1.0 means disabled (llama.cpp/HF semantics: divide positive logits, multiply negative).
    pub repetition_penalty: f32,
    pub seed: Option<u64>,
    /// `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`.
    pub rules: crate::LogitRules,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: None,
            rules: crate::LogitRules::default(),
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// A request's sampler: its settings, its seed and its own RNG.
///
/// NOTE: tokens are drawn with a uniform keyed by (seed, output position), not from a
/// stream: how many draws came before (speculative acceptance tests, resampling, drafts of
/// any length) never changes which token a position gets, so a seeded request gives the
/// same tokens on every run, with speculation on or off (see `choose_tokens`).
pub struct Sampler {
    pub params: SamplingParams,
    seed: u64,
    rng: StdRng,
}

/// Index of the largest value (lowest index wins ties, as llama.cpp's greedy does).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// log-softmax of one row (for logprobs).
pub fn log_softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = m + x.iter().map(|v| (v - m).exp()).sum::<f32>().ln();
    x.iter().map(|v| v - lse).collect()
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(rand::random);
        Sampler {
            params,
            seed,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The uniform in [0, 1) of output position `pos`: a function of the seed and `pos`
    /// alone (splitmix64 of both).
    pub fn uniform_at(&self, pos: usize) -> f32 {
        let mut z = self.seed ^ (pos as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // 24 random bits: every value exactly representable, strictly below 1.
        (z >> 40) as f32 / (1u64 << 24) as f32
    }

    /// True when any penalty would change the logits.
    pub fn has_penalties(&self) -> bool {
        let p = &self.params;
        p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 || p.repetition_penalty != 1.0
    }

    /// Applies penalties in place given the tokens generated so far.
    pub fn apply_penalties(&self, logits: &mut [f32], history: &[u32]) {
        if !self.has_penalties() {
            return;
        }
        let p = &self.params;
        let mut counts: std::collections::HashMap<u32, u32> = Default::default();
        for &t in history {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            if let Some(l) = logits.get_mut(t as usize) {
                if p.repetition_penalty != 1.0 {
                    *l = if *l > 0.0 {
                        *l / p.repetition_penalty
                    } else {
                        *l * p.repetition_penalty
                    };
                }
                *l -= p.presence_penalty + p.frequency_penalty * c as f32;
            }
        }
    }

    /// The filtered, normalized distribution the sampler would draw from, as (id, prob)
    /// sorted by probability (descending). Used by sampling and by speculative verification.
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        let p = &self.params;
        let t = p.temperature.max(1e-6);
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l / t))
            .collect();
        let k = if p.top_k == 0 {
            cand.len()
        } else {
            p.top_k.min(cand.len())
        };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let m = cand[0].1;
        let mut sum = 0.0;
        for c in cand.iter_mut() {
            c.1 = (c.1 - m).exp();
            sum += c.1;
        }
        for c in cand.iter_mut() {
            c.1 /= sum;
        }
        if p.min_p > 0.0 {
            let floor = cand[0].1 * p.min_p;
            cand.retain(|c| c.1 >= floor);
        }
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = cand.len();
            for (i, c) in cand.iter().enumerate() {
                acc += c.1;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        let s: f32 = cand.iter().map(|c| c.1).sum();
        for c in cand.iter_mut() {
            c.1 /= s;
        }
        cand
    }

    /// Draws the token of output position `pos`: greedy when temperature is 0, else the
    /// inverse CDF of the filtered distribution at [`Sampler::uniform_at`]`(pos)`.
    pub fn sample_at(&self, logits: &[f32], pos: usize) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits) as u32;
        }
        let dist = self.distribution(logits);
        let r = self.uniform_at(pos);
        let mut acc = 0.0;
        for &(id, pr) in &dist {
            acc += pr;
            if r < acc {
                return id;
            }
        }
        dist.last()
            .expect("distribution keeps at least one token")
            .0
    }

    /// This request's RNG (rejection sampling draws from it so seeded requests repeat).
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// Draws from an already-filtered distribution (see [`Sampler::distribution`]).
    pub fn draw(&mut self, dist: &[(u32, f32)]) -> u32 {
        let r: f32 = self.rng.gen();
        let mut acc = 0.0;
        for &(id, pr) in dist {
            acc += pr;
            if r < acc {
                return id;
            }
        }
        dist.last()
            .expect("distribution keeps at least one token")
            .0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_first_max() {
        let s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample_at(&[0.1, 3.0, 3.0, -1.0], 0), 1);
    }

    #[test]
    fn top_k_and_top_p_filter() {
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 2,
            ..Default::default()
        });
        let d = s.distribution(&[0.0, 2.0, 1.0, -5.0]);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2]);
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            ..Default::default()
        });
        let d = s.distribution(&[0.0, 5.0, 1.0, -5.0]);
        assert_eq!(d, vec![(1, 1.0)]);
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            min_p: 0.7,
            ..Default::default()
        });
        let d = s.distribution(&[(0.4f32).ln(), (0.35f32).ln(), (0.25f32).ln()]);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn seeded_sampling_repeats() {
        let p = SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..Default::default()
        };
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let a: Vec<u32> = {
            let s = Sampler::new(p.clone());
            (0..20).map(|i| s.sample_at(&logits, i)).collect()
        };
        // Another sampler of the same seed, positions visited out of order, extra draws
        // from its RNG in between: position i still gets the same token.
        let mut s = Sampler::new(p);
        let mut b = vec![0; 20];
        for i in (0..20).rev() {
            let _: f32 = s.rng().gen();
            b[i] = s.sample_at(&logits, i);
        }
        assert_eq!(a, b);
        assert!(
            a.iter().any(|&t| t != a[0]),
            "temperature 1 should vary: {a:?}"
        );
    }

    #[test]
    fn penalties_lower_seen_tokens() {
        let s = Sampler::new(SamplingParams {
            presence_penalty: 1.0,
            frequency_penalty: 0.5,
            ..Default::default()
        });
        let mut l = vec![1.0, 1.0, 1.0];
        s.apply_penalties(&mut l, &[0, 0, 2]);
        assert_eq!(l, vec![-1.0, 1.0, -0.5]);
    }
}
