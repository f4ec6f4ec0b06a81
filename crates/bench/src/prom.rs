//! Reading counters and gauges from a Prometheus text exposition (`GET /metrics`).

use serde::{Deserialize, Serialize};

/// Sum of every sample of the first metric in `names` that the text has (labels ignored,
/// so per-model or per-engine series add up); `None` when none of the names appears.
pub fn sum_metric(text: &str, names: &[&str]) -> Option<f64> {
    for name in names {
        let mut found = false;
        let mut sum = 0.0;
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some(rest) = line.strip_prefix(name) else {
                continue;
            };
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                continue;
            }
            let value = rest
                .rsplit_once('}')
                .map_or(rest, |(_, v)| v)
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(v) = value {
                found = true;
                sum += v;
            }
        }
        if found {
            return Some(sum);
        }
    }
    None
}

/// The prefix-cache counters (in tokens) of vLLM-compatible servers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefixCounters {
    pub queries: f64,
    pub hits: f64,
}

/// Reads `vllm:prefix_cache_{queries,hits}` (with or without `_total`; older vLLM names
/// them `vllm:gpu_prefix_cache_*`).
pub fn prefix_counters(text: &str) -> Option<PrefixCounters> {
    let q = sum_metric(
        text,
        &[
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_queries",
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries",
        ],
    )?;
    let h = sum_metric(
        text,
        &[
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_hits",
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits",
        ],
    )?;
    Some(PrefixCounters {
        queries: q,
        hits: h,
    })
}

/// The prefix-cache hit rate over a run, from counters read before and after it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheDelta {
    pub queried_tokens: f64,
    pub hit_tokens: f64,
    /// `hits / queries` of the deltas; `None` when nothing was queried.
    pub hit_rate: Option<f64>,
}

impl PrefixCacheDelta {
    pub fn between(before: PrefixCounters, after: PrefixCounters) -> PrefixCacheDelta {
        let q = after.queries - before.queries;
        let h = after.hits - before.hits;
        PrefixCacheDelta {
            queried_tokens: q,
            hit_tokens: h,
            hit_rate: (q > 0.0).then(|| h / q),
        }
    }
}
