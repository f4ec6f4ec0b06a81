//! Turning logits into tokens: penalties, DRY, temperature, top-k, top-p, min-p, typical-p,
//! top-nσ, XTC, Mirostat 2, in the order a request asks for, and a per-request seed.
//!
//! Each request owns its [`Sampler`] (and so its RNG): a seeded request draws the same
//! tokens whatever else shares its batch.

mod cands;
pub mod dry;
mod mirostat;
pub mod order;

use cands::Cands;
pub use dry::Dry;
pub use mirostat::Mirostat;
pub use order::{Stage, DEFAULT_ORDER};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Per-request sampling settings (OpenAI / vLLM semantics, and llama.cpp's samplers).
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
    /// The three penalties count only the last n output tokens; `None`: all of them.
    pub repeat_last_n: Option<usize>,
    /// Locally typical sampling; 1.0 means disabled.
    pub typical_p: f32,
    /// Top-nσ; 0 or less means disabled.
    pub top_n_sigma: f32,
    /// XTC: the chance it applies (0 means disabled) and its probability threshold.
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    pub dry: Option<Dry>,
    /// Mirostat 2: replaces the filters after temperature.
    pub mirostat: Option<Mirostat>,
    /// The order of the stages (llama.cpp's `samplers`); `None`: [`DEFAULT_ORDER`].
    pub order: Option<Vec<Stage>>,
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
            repeat_last_n: None,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            dry: None,
            mirostat: None,
            order: None,
            seed: None,
            rules: crate::LogitRules::default(),
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    fn order(&self) -> &[Stage] {
        self.order.as_deref().unwrap_or(DEFAULT_ORDER)
    }

    /// Whether the chain has `stage`.
    fn has(&self, stage: Stage) -> bool {
        self.order().contains(&stage)
    }
}

/// The sampler's state before one output position: the position (it keys the draws) and
/// Mirostat's `mu`. Rows of a speculative step each get their own, derived from the one
/// before as if its token were taken; only the accepted tokens' one is committed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub pos: usize,
    pub mu: f32,
}

/// A request's sampler: its settings, its seed and its own RNG.
///
/// NOTE: tokens are drawn with a uniform keyed by (seed, output position), not from a
/// stream: how many draws came before (speculative acceptance tests, resampling, drafts of
/// any length) never changes which token a position gets, so a seeded request gives the
/// same tokens on every run, with speculation on or off (see `choose_tokens`). XTC's coin
/// is keyed the same way.
pub struct Sampler {
    pub params: SamplingParams,
    seed: u64,
    rng: StdRng,
    /// Mirostat's `mu` after the accepted tokens.
    mu: f32,
    /// The end of the prompt DRY searches too (llama-server counts the prompt).
    dry_prompt: Vec<u32>,
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

/// A uniform in [0, 1): splitmix64 of `key` and `pos`, 24 random bits (every value exactly
/// representable, strictly below 1).
fn keyed_uniform(key: u64, pos: usize) -> f32 {
    let mut z = key ^ (pos as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 24) as f32
}

/// Keeps XTC's coin independent of the token draw of the same position.
const XTC_KEY: u64 = 0x5854_4300_0000_0001;

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(rand::random);
        let mu = params.mirostat.map_or(0.0, |m| m.initial_mu());
        Sampler {
            params,
            seed,
            rng: StdRng::seed_from_u64(seed),
            mu,
            dry_prompt: Vec::new(),
        }
    }

    /// Gives DRY the prompt to search (its window's worth of it) when DRY is on.
    pub fn with_prompt(mut self, prompt: &[u32]) -> Sampler {
        if let Some(d) = self.dry() {
            self.dry_prompt = d.window(prompt).to_vec();
        }
        self
    }

    fn dry(&self) -> Option<&Dry> {
        let p = &self.params;
        p.dry
            .as_ref()
            .filter(|d| d.is_active() && p.has(Stage::Dry))
    }

    /// The uniform in [0, 1) of output position `pos`: a function of the seed and `pos`
    /// alone (splitmix64 of both).
    pub fn uniform_at(&self, pos: usize) -> f32 {
        keyed_uniform(self.seed, pos)
    }

    /// The state before output position `pos`, from the accepted tokens.
    pub fn step_at(&self, pos: usize) -> Step {
        Step { pos, mu: self.mu }
    }

    /// The state after taking `tok` at `s`, drawn from `dist` (what
    /// [`Sampler::distribution_at`] gave at `s`).
    pub fn next(&self, s: &Step, tok: u32, dist: &[(u32, f32)]) -> Step {
        let mu = match self.params.mirostat {
            Some(m) => {
                let p = dist.iter().find(|x| x.0 == tok).map_or(0.0, |x| x.1);
                m.update(s.mu, p)
            }
            None => s.mu,
        };
        Step { pos: s.pos + 1, mu }
    }

    /// Makes `s` the state of the accepted tokens.
    pub fn commit(&mut self, s: &Step) {
        self.mu = s.mu;
    }

    /// True when any penalty would change the logits.
    pub fn has_penalties(&self) -> bool {
        let p = &self.params;
        let penalties = p.has(Stage::Penalties)
            && p.repeat_last_n != Some(0)
            && (p.presence_penalty != 0.0
                || p.frequency_penalty != 0.0
                || p.repetition_penalty != 1.0);
        penalties || self.dry().is_some()
    }

    /// Applies penalties (and DRY) in place given the tokens generated so far.
    pub fn apply_penalties(&self, logits: &mut [f32], history: &[u32]) {
        if !self.has_penalties() {
            return;
        }
        let p = &self.params;
        if p.has(Stage::Penalties) {
            let n = p.repeat_last_n.unwrap_or(usize::MAX).min(history.len());
            let mut counts: std::collections::HashMap<u32, u32> = Default::default();
            for &t in &history[history.len() - n..] {
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
        if let Some(d) = self.dry() {
            if self.dry_prompt.is_empty() {
                d.apply(logits, history);
            } else {
                let mut h = self.dry_prompt.clone();
                h.extend_from_slice(history);
                d.apply(logits, &h);
            }
        }
    }

    /// The filtered, normalized distribution the sampler would draw from at the first
    /// output position not yet taken, as (id, prob) sorted by probability (descending).
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        self.distribution_at(logits, &self.step_at(0))
    }

    /// The filtered, normalized distribution at `s`, as (id, prob) sorted by probability
    /// (descending). Used by sampling and by speculative verification.
    pub fn distribution_at(&self, logits: &[f32], s: &Step) -> Vec<(u32, f32)> {
        let p = &self.params;
        let t = p.temperature.max(1e-6);
        let mut c = Cands::from_logits(logits);
        if let Some(m) = p.mirostat {
            // llama.cpp's Mirostat chain: temperature, then Mirostat alone.
            c.temperature(t);
            m.truncate(&mut c, s.mu);
            return c.c;
        }
        for &stage in p.order() {
            match stage {
                Stage::Penalties | Stage::Dry => {}
                Stage::Temperature => c.temperature(t),
                Stage::TopK => c.top_k(p.top_k),
                Stage::TopP => c.top_p(p.top_p),
                Stage::MinP => c.min_p(p.min_p),
                Stage::TypicalP => c.typical(p.typical_p),
                Stage::TopNSigma => c.top_n_sigma(p.top_n_sigma),
                Stage::Xtc => c.xtc(
                    p.xtc_probability,
                    p.xtc_threshold,
                    keyed_uniform(self.seed ^ XTC_KEY, s.pos),
                ),
            }
        }
        c.ensure_probs();
        c.normalize();
        c.c
    }

    /// Draws the token of `s` from `dist` by the inverse CDF at its position's uniform.
    pub fn draw_at(&self, dist: &[(u32, f32)], s: &Step) -> u32 {
        let r = self.uniform_at(s.pos);
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

    /// Draws the token of output position `pos`: greedy when temperature is 0, else the
    /// inverse CDF of the filtered distribution at [`Sampler::uniform_at`]`(pos)`.
    pub fn sample_at(&self, logits: &[f32], pos: usize) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits) as u32;
        }
        let s = self.step_at(pos);
        self.draw_at(&self.distribution_at(logits, &s), &s)
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
    fn the_order_of_stages_is_the_requests() {
        // p = 0.5, 0.3, 0.2. Temperature 4 first flattens them (0.374, 0.329, 0.297): min-p
        // 0.85 keeps two; min-p on the raw probabilities first keeps only the top one.
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let p = SamplingParams {
            temperature: 4.0,
            min_p: 0.85,
            ..Default::default()
        };
        let ids = |d: Vec<(u32, f32)>| d.into_iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(Sampler::new(p.clone()).distribution(&l)), vec![0, 1]);
        let late = SamplingParams {
            order: Some(vec![Stage::MinP, Stage::Temperature]),
            ..p.clone()
        };
        assert_eq!(ids(Sampler::new(late).distribution(&l)), vec![0]);
        // A list without penalties turns them off.
        let off = Sampler::new(SamplingParams {
            presence_penalty: 1.0,
            order: Some(vec![Stage::Temperature]),
            ..p
        });
        assert!(!off.has_penalties());
    }

    #[test]
    fn mirostat_state_follows_the_taken_tokens() {
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            mirostat: Some(Mirostat { tau: 1.0, eta: 0.5 }),
            seed: Some(3),
            ..Default::default()
        });
        // mu starts at 2 bits: p = 0.5 (1 bit) and 0.3 (1.74) stay, 0.2 (2.32) goes.
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let s0 = s.step_at(0);
        let d = s.distribution_at(&l, &s0);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        // Taking token 0 (p 0.625, 0.678 bits): mu = 2 − 0.5·(0.678 − 1).
        let s1 = s.next(&s0, 0, &d);
        assert_eq!(s1.pos, 1);
        assert!((s1.mu - (2.0 - 0.5 * (-(0.625f32).log2() - 1.0))).abs() < 1e-6);
        let mut s = s;
        s.commit(&s1);
        assert_eq!(s.step_at(1), s1);
    }

    #[test]
    fn xtc_coin_is_keyed_by_position() {
        let s = Sampler::new(SamplingParams {
            temperature: 1.0,
            xtc_probability: 0.5,
            xtc_threshold: 0.25,
            seed: Some(9),
            ..Default::default()
        });
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let kept: Vec<usize> = (0..64)
            .map(|pos| s.distribution_at(&l, &s.step_at(pos)).len())
            .collect();
        // Each position either drops the top token (2 left) or not (3), the same every time.
        assert!(kept.contains(&2) && kept.contains(&3), "{kept:?}");
        let again: Vec<usize> = (0..64)
            .map(|pos| s.distribution_at(&l, &s.step_at(pos)).len())
            .collect();
        assert_eq!(kept, again);
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
        // repeat_last_n 1: only the last token counts.
        let s = Sampler::new(SamplingParams {
            presence_penalty: 1.0,
            repetition_penalty: 2.0,
            repeat_last_n: Some(1),
            ..Default::default()
        });
        let mut l = vec![1.0, 1.0, 1.0];
        s.apply_penalties(&mut l, &[0, 0, 2]);
        assert_eq!(l, vec![1.0, 1.0, -0.5]);
    }
}
