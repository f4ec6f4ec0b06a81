//! A service-level objective given on the command line: `ttft=MS,tpot=MS,e2e=MS`.

use serde::{Deserialize, Serialize};

/// Latency limits a request must meet to count toward goodput; an absent limit always holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    /// Parses `ttft=500,tpot=100,e2e=7000` (milliseconds, any subset, any order).
    pub fn parse(s: &str) -> Result<Slo, crate::BenchError> {
        Self::parse_items(s).map_err(crate::BenchError::Failed)
    }

    fn parse_items(s: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("--slo item {part:?} must look like ttft=MS"))?;
            let ms: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("--slo {k} = {v:?} is not a number of milliseconds"))?;
            if !(ms.is_finite() && ms > 0.0) {
                return Err(format!("--slo {k} = {ms} must be a positive number of ms"));
            }
            match k.trim() {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" => slo.tpot_ms = Some(ms),
                "e2e" => slo.e2e_ms = Some(ms),
                other => {
                    return Err(format!(
                        "--slo key {other:?} is unknown (expected ttft, tpot or e2e)"
                    ))
                }
            }
        }
        Ok(slo)
    }

    pub fn is_empty(&self) -> bool {
        self.ttft_ms.is_none() && self.tpot_ms.is_none() && self.e2e_ms.is_none()
    }

    /// Whether latencies (seconds) meet every limit. A request without a TPOT (one output
    /// token) meets the TPOT limit: it has no inter-token time to miss.
    pub fn met(&self, ttft_s: f64, tpot_s: Option<f64>, e2e_s: f64) -> bool {
        let ok = |limit: Option<f64>, v: f64| limit.is_none_or(|l| v * 1e3 <= l);
        ok(self.ttft_ms, ttft_s)
            && tpot_s.is_none_or(|t| ok(self.tpot_ms, t))
            && ok(self.e2e_ms, e2e_s)
    }

    /// `ttft=…,tpot=…,e2e=…` for tables and chart titles.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("ttft", self.ttft_ms),
            ("tpot", self.tpot_ms),
            ("e2e", self.e2e_ms),
        ] {
            if let Some(v) = v {
                parts.push(format!("{k}≤{v}ms"));
            }
        }
        if parts.is_empty() {
            "none (correct requests count)".into()
        } else {
            parts.join(", ")
        }
    }
}
