//! Mirostat 2: a surprise target `tau` (bits); tokens more surprising than the running
//! `mu` are cut, and `mu` follows the surprise of each chosen token (learning rate `eta`).

use super::cands::Cands;

/// `mirostat: 2` settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mirostat {
    pub tau: f32,
    pub eta: f32,
}

impl Mirostat {
    /// `mu` before the first token: twice the target, as llama.cpp starts it.
    pub fn initial_mu(&self) -> f32 {
        2.0 * self.tau
    }

    /// Keeps the tokens whose surprise −log2 p is at most `mu` (at least the most probable
    /// one), renormalized.
    pub fn truncate(&self, c: &mut Cands, mu: f32) {
        c.normalize();
        let keep =
            c.c.iter()
                .position(|x| -x.1.log2() > mu)
                .unwrap_or(c.c.len())
                .max(1);
        c.c.truncate(keep);
        c.normalize();
    }

    /// `mu` after choosing a token of probability `p` in the truncated distribution.
    pub fn update(&self, mu: f32, p: f32) -> f32 {
        mu - self.eta * (-p.log2() - self.tau)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_by_surprise_and_follows_the_target() {
        let m = Mirostat { tau: 2.0, eta: 0.5 };
        assert_eq!(m.initial_mu(), 4.0);
        // Surprises: 1.32, 2, 2.74, 3.32, 4.06, 4.64 bits.
        let p = [0.4f32, 0.25, 0.15, 0.1, 0.06, 0.04];
        let mut c = Cands::from_logits(&p.map(f32::ln));
        m.truncate(&mut c, 3.0);
        let ids: Vec<u32> = c.c.iter().map(|x| x.0).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert!((c.c[0].1 - 0.5).abs() < 1e-6);
        // Nothing within mu: the most probable token stays.
        let mut c = Cands::from_logits(&p.map(f32::ln));
        m.truncate(&mut c, 0.5);
        assert_eq!(c.c, vec![(0, 1.0)]);
        // Chose p = 0.5 (1 bit, below tau 2): mu rises by eta · 1.
        assert_eq!(m.update(3.0, 0.5), 3.5);
        assert_eq!(m.update(3.0, 0.125), 2.5);
    }
}
