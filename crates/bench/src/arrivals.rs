//! Arrival schedules, fixed before the run starts so a slow server cannot slow the arrivals
//! (an open-loop load generator).
//!
//! Inter-arrival gaps are gamma-distributed with shape `burstiness` and mean `1/rate`:
//! shape 1 is a Poisson process; below 1 arrivals clump into bursts, above 1 they become
//! more regular. A rate of `None` means all requests arrive at time 0.

use rand::Rng;

/// Arrival times (seconds from the start) of `n` requests; the first arrives at 0.
pub fn schedule<R: Rng>(n: usize, rate: Option<f64>, burstiness: f64, rng: &mut R) -> Vec<f64> {
    let mut t = 0.0;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 {
            if let Some(rate) = rate {
                t += gamma(burstiness, 1.0 / (rate * burstiness), rng);
            }
        }
        out.push(t);
    }
    out
}

/// A Gamma(shape, scale) sample by Marsaglia and Tsang's method (shape < 1 boosted by
/// `U^(1/shape)`), so no extra distribution crate is needed.
pub fn gamma<R: Rng>(shape: f64, scale: f64, rng: &mut R) -> f64 {
    if shape < 1.0 {
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        return gamma(shape + 1.0, scale, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * scale;
        }
    }
}

/// A standard normal sample (Box–Muller).
fn normal<R: Rng>(rng: &mut R) -> f64 {
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
