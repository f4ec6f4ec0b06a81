//! A cumulative Prometheus histogram and the text format's number and label rendering,
//! shared by every series `/metrics` prints.

use std::fmt::Write;
use std::sync::Mutex;

/// A cumulative histogram. A std `Mutex` because nothing awaits while it is held.
pub struct Histogram {
    bounds: Vec<f64>,
    inner: Mutex<HistInner>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct HistInner {
    /// Non-cumulative count per bucket; the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: Vec<f64>) -> Histogram {
        let counts = vec![0; bounds.len() + 1];
        Histogram {
            bounds,
            inner: Mutex::new(HistInner {
                counts,
                sum: 0.0,
                count: 0,
            }),
        }
    }

    pub fn observe(&self, v: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        let mut h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        h.counts[slot] += 1;
        h.sum += v;
        h.count += 1;
    }

    /// Observations so far (tests).
    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).count
    }

    pub(crate) fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let h = self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let sep = if labels.is_empty() { "" } else { "," };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            acc += h.counts[i];
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{}\"}} {acc}",
                fmt_f(*b)
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", fmt_f(h.sum));
        let _ = writeln!(out, "{name}_count{braced} {}", h.count);
    }
}

/// 1, 2, 5, 10, 20, 50, … up to `max` (vLLM's token-count buckets).
pub fn buckets_1_2_5(max: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = 1usize;
    loop {
        for m in [1, 2, 5] {
            let v = m * exp;
            if v > max {
                return out;
            }
            out.push(v as f64);
        }
        exp = exp.saturating_mul(10);
    }
}

pub(crate) fn fmt_f(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}.0", x as i64)
    } else {
        format!("{x}")
    }
}

/// Label value escaping per the text format.
pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
