//! Percentiles and summaries of latency samples.
//!
//! NOTE: percentiles use **linear interpolation between closest ranks** (numpy's default
//! `linear` method, the one vLLM's `benchmark_serving` reports): for `n` sorted values and
//! percentile `p`, the rank is `h = (n − 1)·p/100` and the value is
//! `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`. So p50 of `[1, 2, 3, 4]` is 2.5 and p100 is
//! the maximum. Nearest-rank would report only observed values but jumps in steps of 1/n;
//! interpolation keeps figures comparable with vLLM's tables.

use serde::{Deserialize, Serialize};

/// The `p`-th percentile (0..=100) of `sorted` (ascending), by linear interpolation;
/// `None` for an empty slice or a `p` outside 0..=100.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// Mean, extremes and the percentiles DESIGN.md §requests asks for (never only a mean).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summary of `values` in any order; `None` when there are none. Non-finite values are
    /// dropped (a clock cannot produce them; a bug upstream must not poison the table).
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let p = |q| percentile(&v, q).expect("non-empty and q in range");
        Some(Summary {
            n: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: p(50.0),
            p90: p(90.0),
            p95: p(95.0),
            p99: p(99.0),
            max: v[v.len() - 1],
        })
    }

    /// The same summary with every figure multiplied by `k` (seconds → milliseconds).
    pub fn scaled(&self, k: f64) -> Summary {
        Summary {
            n: self.n,
            mean: self.mean * k,
            min: self.min * k,
            p50: self.p50 * k,
            p90: self.p90 * k,
            p95: self.p95 * k,
            p99: self.p99 * k,
            max: self.max * k,
        }
    }
}
