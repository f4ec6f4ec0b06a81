//! Per-replica figures for a run through a router (`folio bench serve --replica-metrics
//! URL,URL`): each replica's `/metrics` is read before and after the run, giving the
//! requests it served and its prefix-cache hit rate. A router's own `/metrics` has
//! neither, so a run against a router otherwise reports no hit rate at all.
//!
//! Counters are vLLM's names (`vllm:request_success_total`, `vllm:prefix_cache_*`), which
//! folio exports too, so the same works for vLLM replicas.

use serde::{Deserialize, Serialize};

use crate::client::{self, BaseUrl};
use crate::prom::{self, PrefixCacheDelta, PrefixCounters};

/// Counters of one replica at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaCounters {
    /// Requests finished (`vllm:request_success_total`, every finish reason).
    pub requests: f64,
    pub prefix: Option<PrefixCounters>,
}

/// Reads the counters from a `/metrics` text; `None` when it has no request counter.
pub fn counters(text: &str) -> Option<ReplicaCounters> {
    let requests = prom::sum_metric(
        text,
        &["vllm:request_success_total", "vllm:request_success"],
    )?;
    Some(ReplicaCounters {
        requests,
        prefix: prom::prefix_counters(text),
    })
}

/// Reads the counters of the replica at `base` (named `url` in messages), or says why not.
pub async fn read(url: &str, base: &BaseUrl) -> Result<ReplicaCounters, crate::BenchError> {
    use crate::BenchError;
    match client::get(base, "/metrics", std::time::Duration::from_secs(10)).await {
        Ok((200, text)) => counters(&text).ok_or_else(|| {
            BenchError::msg(format!("{url}: /metrics has no vllm:request_success_total"))
        }),
        Ok((status, _)) => Err(BenchError::msg(format!(
            "{url}: /metrics answered {status}"
        ))),
        Err(e) => Err(BenchError::msg(format!("{url}: /metrics: {e}"))),
    }
}

/// What one replica did during a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaDelta {
    pub url: String,
    /// Requests it finished during the run.
    pub requests: f64,
    pub prefix_cache: Option<PrefixCacheDelta>,
}

impl ReplicaDelta {
    pub fn between(url: &str, before: ReplicaCounters, after: ReplicaCounters) -> Self {
        ReplicaDelta {
            url: url.to_string(),
            requests: after.requests - before.requests,
            prefix_cache: match (before.prefix, after.prefix) {
                (Some(b), Some(a)) => Some(PrefixCacheDelta::between(b, a)),
                _ => None,
            },
        }
    }
}

/// The hit rate over all replicas: total hit tokens over total queried tokens (each
/// replica weighted by what it was asked), `None` when no replica reports the counters.
pub fn combined(replicas: &[ReplicaDelta]) -> Option<PrefixCacheDelta> {
    let ps: Vec<&PrefixCacheDelta> = replicas
        .iter()
        .filter_map(|r| r.prefix_cache.as_ref())
        .collect();
    if ps.is_empty() {
        return None;
    }
    let q: f64 = ps.iter().map(|p| p.queried_tokens).sum();
    let h: f64 = ps.iter().map(|p| p.hit_tokens).sum();
    Some(PrefixCacheDelta {
        queried_tokens: q,
        hit_tokens: h,
        hit_rate: (q > 0.0).then(|| h / q),
    })
}

/// The per-replica table printed after a run's report.
pub fn table(replicas: &[ReplicaDelta]) -> String {
    let rate = |p: Option<&PrefixCacheDelta>| match p.and_then(|p| p.hit_rate) {
        Some(h) => format!("{:.1}%", h * 100.0),
        None => "-".into(),
    };
    let mut t = format!(
        "{:-^58}\n{:<34}{:>10}{:>14}\n",
        " Replicas (/metrics) ", "replica", "requests", "prefix hits"
    );
    for r in replicas {
        t.push_str(&format!(
            "{:<34}{:>10.0}{:>14}\n",
            r.url,
            r.requests,
            rate(r.prefix_cache.as_ref())
        ));
    }
    let all = combined(replicas);
    t.push_str(&format!(
        "{:<34}{:>10.0}{:>14}\n",
        "all",
        replicas.iter().map(|r| r.requests).sum::<f64>(),
        rate(all.as_ref())
    ));
    t
}
