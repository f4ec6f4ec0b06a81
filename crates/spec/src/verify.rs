//! Exact verification of drafts against the target's distributions.
//!
//! Greedy: accept drafts while each equals the target's argmax at its position; at the
//! first mismatch emit the target's token; if all match emit one bonus token. Sampling:
//! accept draft x with probability min(1, p(x)/q(x)); on rejection draw from
//! norm([p − q]+) and stop. Either way the emitted tokens are distributed exactly as if the
//! target had decoded alone (DESIGN.md §speculation).

use rand::Rng;

/// Result of verifying one request's drafts.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Tokens to append: accepted drafts, then the correction or bonus token.
    pub tokens: Vec<u32>,
    /// How many drafts were accepted (tokens.len() − 1).
    pub accepted: usize,
}

/// Greedy verification. `targets[i]` is the target's argmax at draft position i
/// (`targets.len() == drafts.len() + 1`; the last is the bonus).
pub fn verify_greedy(drafts: &[u32], targets: &[u32]) -> Verdict {
    assert_eq!(
        targets.len(),
        drafts.len() + 1,
        "one target token per draft plus the bonus"
    );
    let accepted = drafts
        .iter()
        .zip(targets)
        .take_while(|(d, t)| d == t)
        .count();
    let mut tokens = drafts[..accepted].to_vec();
    tokens.push(targets[accepted]);
    Verdict { tokens, accepted }
}

/// A probability distribution over the vocabulary, sparse: (token, probability).
pub type Dist = [(u32, f32)];

fn prob(d: &Dist, t: u32) -> f32 {
    d.iter().find(|e| e.0 == t).map(|e| e.1).unwrap_or(0.0)
}

fn draw(d: &[(u32, f32)], r: f32) -> u32 {
    let total: f32 = d.iter().map(|e| e.1).sum();
    let mut acc = 0.0;
    for &(t, p) in d {
        acc += p / total;
        if r < acc {
            return t;
        }
    }
    d.last().expect("non-empty distribution").0
}

/// Rejection-sampling verification.
///
/// `p[i]`: the target's distribution at draft position i (`drafts.len() + 1` of them, the
/// last for the bonus token); `q[i]`: the proposer's distribution for draft i (a point
/// mass `[(d, 1.0)]` for deterministic proposers such as n-gram lookup).
pub fn verify_sampled<R: Rng>(
    drafts: &[u32],
    p: &[Vec<(u32, f32)>],
    q: &[Vec<(u32, f32)>],
    rng: &mut R,
) -> Verdict {
    assert_eq!(p.len(), drafts.len() + 1);
    assert_eq!(q.len(), drafts.len());
    let mut tokens = Vec::with_capacity(drafts.len() + 1);
    for (i, &x) in drafts.iter().enumerate() {
        let (px, qx) = (prob(&p[i], x), prob(&q[i], x));
        let u: f32 = rng.gen();
        if qx > 0.0 && u < (px / qx).min(1.0) {
            tokens.push(x);
            continue;
        }
        // Rejected: residual distribution norm([p − q]+). q is scattered into a dense
        // array first, so this is linear in the vocabulary (a lookup per token of p would
        // be quadratic).
        let mut dense_q = vec![0f32; q[i].iter().map(|e| e.0 as usize + 1).max().unwrap_or(0)];
        for &(t, qt) in &q[i] {
            dense_q[t as usize] += qt;
        }
        let resid: Vec<(u32, f32)> = p[i]
            .iter()
            .map(|&(t, pt)| {
                (
                    t,
                    (pt - dense_q.get(t as usize).copied().unwrap_or(0.0)).max(0.0),
                )
            })
            .filter(|e| e.1 > 0.0)
            .collect();
        let t = if resid.is_empty() {
            draw(&p[i], rng.gen())
        } else {
            draw(&resid, rng.gen())
        };
        tokens.push(t);
        return Verdict {
            accepted: i,
            tokens,
        };
    }
    tokens.push(draw(&p[drafts.len()], rng.gen()));
    Verdict {
        accepted: drafts.len(),
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_accepts_prefix_then_corrects() {
        assert_eq!(
            verify_greedy(&[4, 5, 6], &[4, 5, 9, 1]),
            Verdict {
                tokens: vec![4, 5, 9],
                accepted: 2
            }
        );
        assert_eq!(
            verify_greedy(&[4, 5], &[4, 5, 7]),
            Verdict {
                tokens: vec![4, 5, 7],
                accepted: 2
            }
        );
        assert_eq!(
            verify_greedy(&[], &[3]),
            Verdict {
                tokens: vec![3],
                accepted: 0
            }
        );
        assert_eq!(
            verify_greedy(&[1], &[2, 3]),
            Verdict {
                tokens: vec![2],
                accepted: 0
            }
        );
    }
}
