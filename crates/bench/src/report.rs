//! A run's figures (throughput, latency percentiles, goodput, prefix-cache hit rate), the
//! table people read and the JSON file machines (and `folio bench plot`) read.

use serde::{Deserialize, Serialize};

use crate::prom::PrefixCacheDelta;
use crate::record::RequestRecord;
use crate::slo::Slo;
use crate::stats::Summary;

/// How a run was driven (copied into the report so a result file explains itself).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSetup {
    pub workload: String,
    /// Requests per second; `None` = all at once.
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub num_requests: usize,
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub seed: u64,
}

/// What `/health` and `/metrics` showed while the run went on (issue 5, acceptance 3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MonitorSummary {
    pub samples: usize,
    pub health_failures: usize,
    pub max_running: Option<f64>,
    pub max_waiting: Option<f64>,
    pub max_kv_usage: Option<f64>,
    /// Gauges read once more after the run ended (should be back to idle).
    pub after_running: Option<f64>,
    pub after_waiting: Option<f64>,
    pub after_kv_usage: Option<f64>,
}

/// How goodput counts a request, as the result file states it.
pub const GOOD_RULE: &str =
    "completed, correct when the workload judges answers, and within every SLO limit";

/// Figures of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub setup: RunSetup,
    pub completed: usize,
    pub failed: usize,
    /// Requests whose answer was checked, and how many were right.
    pub judged: usize,
    pub correct: usize,
    /// Observed time: start of the run to the last response's end.
    pub duration_s: f64,
    /// Completed requests per second.
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Latencies in milliseconds.
    pub ttft_ms: Option<Summary>,
    pub tpot_ms: Option<Summary>,
    pub itl_ms: Option<Summary>,
    pub e2e_ms: Option<Summary>,
    pub slo: Slo,
    /// What counts as good: [`GOOD_RULE`], written into the result file.
    #[serde(default)]
    pub good_rule: String,
    /// Completed requests within the SLO, right or wrong.
    #[serde(default)]
    pub on_time: usize,
    /// Completed requests judged wrong (never good, however fast).
    #[serde(default)]
    pub wrong: usize,
    /// Requests completed, not judged wrong and within the SLO (a judged request must be
    /// correct and on time).
    pub good: usize,
    /// `good / duration_s` (DESIGN.md §serving: R_good = Σ Q_i·D_i / T_obs).
    pub goodput_rps: f64,
    pub prefix_cache: Option<PrefixCacheDelta>,
    /// Per-replica requests and hit rates behind a router (`--replica-metrics`).
    #[serde(default)]
    pub replicas: Vec<crate::replicas::ReplicaDelta>,
    /// Prompt tokens the server's usage reported as cached, over all prompt tokens.
    pub usage_cached_fraction: Option<f64>,
    pub monitor: Option<MonitorSummary>,
    /// Up to five distinct error messages.
    pub errors: Vec<String>,
    pub records: Vec<RequestRecord>,
}

impl RunReport {
    /// Computes the figures from the records of a run that lasted `duration_s`.
    pub fn from_records(
        setup: RunSetup,
        records: Vec<RequestRecord>,
        duration_s: f64,
        slo: Slo,
    ) -> RunReport {
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.ok).collect();
        let completed = ok.len();
        let prompt_tokens: u64 = ok.iter().filter_map(|r| r.prompt_tokens).sum();
        let output_tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
        let ms = |v: Vec<f64>| Summary::of(&v).map(|s| s.scaled(1e3));
        let judged = ok.iter().filter(|r| r.correct.is_some()).count();
        let correct = ok.iter().filter(|r| r.correct == Some(true)).count();
        let good = records.iter().filter(|r| r.good(&slo)).count();
        let on_time = ok
            .iter()
            .filter(|r| match (r.ttft(), r.e2e()) {
                (Some(ttft), Some(e2e)) => slo.met(ttft, r.tpot(), e2e),
                _ => false,
            })
            .count();
        let wrong = ok.iter().filter(|r| r.correct == Some(false)).count();
        let per_s = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let cached: u64 = ok.iter().filter_map(|r| r.cached_tokens).sum();
        let usage_cached_fraction = (ok.iter().any(|r| r.cached_tokens.is_some())
            && prompt_tokens > 0)
            .then(|| cached as f64 / prompt_tokens as f64);
        let mut errors: Vec<String> = Vec::new();
        for e in records.iter().filter_map(|r| r.error.as_ref()) {
            if errors.len() < 5 && !errors.contains(e) {
                errors.push(e.clone());
            }
        }
        RunReport {
            setup,
            completed,
            failed: records.len() - completed,
            judged,
            correct,
            duration_s,
            request_throughput: per_s(completed as f64),
            output_throughput: per_s(output_tokens as f64),
            total_token_throughput: per_s((prompt_tokens + output_tokens) as f64),
            prompt_tokens,
            output_tokens,
            ttft_ms: ms(ok.iter().filter_map(|r| r.ttft()).collect()),
            tpot_ms: ms(ok.iter().filter_map(|r| r.tpot()).collect()),
            itl_ms: ms(ok.iter().flat_map(|r| r.itls()).collect()),
            e2e_ms: ms(ok.iter().filter_map(|r| r.e2e()).collect()),
            slo,
            good_rule: GOOD_RULE.into(),
            on_time,
            wrong,
            good,
            goodput_rps: per_s(good as f64),
            prefix_cache: None,
            replicas: Vec::new(),
            usage_cached_fraction,
            monitor: None,
            errors,
            records,
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let s = &self.setup;
        let mut t = String::new();
        let rate = s
            .request_rate
            .map_or("inf (all at once)".to_string(), |r| format!("{r} req/s"));
        let line = |t: &mut String, k: &str, v: String| t.push_str(&format!("{k:<34}{v}\n"));
        t.push_str(&format!("{:=^58}\n", " Serving Benchmark Result "));
        line(&mut t, "Workload:", s.workload.clone());
        line(
            &mut t,
            "Request rate:",
            format!("{rate} (burstiness {})", s.burstiness),
        );
        line(
            &mut t,
            "Max concurrency:",
            s.max_concurrency.map_or("none".into(), |c| c.to_string()),
        );
        line(&mut t, "Successful requests:", self.completed.to_string());
        line(&mut t, "Failed requests:", self.failed.to_string());
        line(
            &mut t,
            "Benchmark duration (s):",
            format!("{:.2}", self.duration_s),
        );
        line(
            &mut t,
            "Total input tokens:",
            self.prompt_tokens.to_string(),
        );
        line(
            &mut t,
            "Total generated tokens:",
            self.output_tokens.to_string(),
        );
        line(
            &mut t,
            "Request throughput (req/s):",
            format!("{:.2}", self.request_throughput),
        );
        line(
            &mut t,
            "Output token throughput (tok/s):",
            format!("{:.2}", self.output_throughput),
        );
        line(
            &mut t,
            "Total token throughput (tok/s):",
            format!("{:.2}", self.total_token_throughput),
        );
        if self.judged > 0 {
            line(
                &mut t,
                "Correct answers:",
                format!("{}/{}", self.correct, self.judged),
            );
        }
        line(&mut t, "SLO:", self.slo.describe());
        line(
            &mut t,
            "On time (within the SLO):",
            self.on_time.to_string(),
        );
        if self.judged > 0 {
            line(&mut t, "Wrong answers:", self.wrong.to_string());
        }
        line(&mut t, "Good (correct and on time):", self.good.to_string());
        line(
            &mut t,
            "Goodput (req/s):",
            format!("{:.2}", self.goodput_rps),
        );
        match &self.prefix_cache {
            Some(p) => line(
                &mut t,
                "Prefix cache hit rate (/metrics):",
                p.hit_rate.map_or("- (no queries)".into(), |h| {
                    format!(
                        "{:.1}% ({:.0}/{:.0} tokens)",
                        h * 100.0,
                        p.hit_tokens,
                        p.queried_tokens
                    )
                }),
            ),
            None => line(&mut t, "Prefix cache hit rate (/metrics):", "n/a".into()),
        }
        if let Some(f) = self.usage_cached_fraction {
            line(
                &mut t,
                "Cached prompt tokens (usage):",
                format!("{:.1}%", f * 100.0),
            );
        }
        t.push_str(&format!(
            "{:-^58}\n{:<8}{:>8}{:>8}{:>8}{:>8}{:>8}{:>9}\n",
            " Latency (ms, from scheduled arrival) ", "", "mean", "p50", "p90", "p95", "p99", "max"
        ));
        for (name, s) in [
            ("TTFT", &self.ttft_ms),
            ("TPOT", &self.tpot_ms),
            ("ITL", &self.itl_ms),
            ("E2E", &self.e2e_ms),
        ] {
            match s {
                Some(s) => t.push_str(&format!(
                    "{name:<8}{:>8.1}{:>8.1}{:>8.1}{:>8.1}{:>8.1}{:>9.1}\n",
                    s.mean, s.p50, s.p90, s.p95, s.p99, s.max
                )),
                None => t.push_str(&format!("{name:<8}{:>8}\n", "-")),
            }
        }
        if let Some(m) = &self.monitor {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
            t.push_str(&format!("{:-^58}\n", " Server during the run "));
            line(
                &mut t,
                "/health probes (failed):",
                format!("{} ({})", m.samples, m.health_failures),
            );
            line(
                &mut t,
                "max running / waiting / KV use:",
                format!(
                    "{} / {} / {}",
                    f(m.max_running),
                    f(m.max_waiting),
                    f(m.max_kv_usage)
                ),
            );
            line(
                &mut t,
                "after: running / waiting / KV use:",
                format!(
                    "{} / {} / {}",
                    f(m.after_running),
                    f(m.after_waiting),
                    f(m.after_kv_usage)
                ),
            );
        }
        for e in &self.errors {
            t.push_str(&format!("error: {e}\n"));
        }
        t.push_str(&"=".repeat(58));
        t.push('\n');
        t
    }
}

/// A result file: one server, one or more runs (a sweep over rates or concurrencies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Series name in plots (`--label`, default the base URL).
    pub label: String,
    pub base_url: String,
    pub model: String,
    pub runs: Vec<RunReport>,
}
