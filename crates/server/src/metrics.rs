//! /metrics in Prometheus text format (0.0.4).
//!
//! NOTE: rendered by hand rather than through the `metrics` facade: its recorder is
//! process-global (one per process, so two servers in one test binary would share
//! histograms), and the text here must match vLLM's names exactly (`vllm:` prefix, `_total`
//! counters) for routers and autoscalers built for vLLM. Gauges and engine counters are
//! read from [`EngineMetrics`] at scrape time; request histograms are recorded here by the
//! server from event timestamps.

pub use crate::histogram::{buckets_1_2_5, Histogram};
use crate::histogram::{escape, fmt_f};
use folio_engine::{EngineInfo, EngineMetrics};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// vLLM's bucket bounds (seconds).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Finish reasons counted separately, in `FinishReason::as_openai` spelling.
/// `timeout`: ended by the server's request timeout (`ServerOptions::request_timeout`);
/// `deadline`: ended by the request's own `deadline_ms` while it ran.
const REASONS: [&str; 8] = [
    "stop",
    "length",
    "abort",
    "rejected",
    "error",
    "timeout",
    "deadline",
    "slow_reader",
];

/// What the server records itself.
pub struct ServerMetrics {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub prompt_tokens: Histogram,
    pub generation_tokens: Histogram,
    finished: [AtomicU64; REASONS.len()],
    /// Requests the server answered 429 (admission) or 503 (shutting down).
    rejected_429: AtomicU64,
    rejected_503: AtomicU64,
}

impl ServerMetrics {
    pub fn new(context_length: usize) -> ServerMetrics {
        ServerMetrics {
            ttft: Histogram::new(TTFT_BUCKETS.to_vec()),
            itl: Histogram::new(ITL_BUCKETS.to_vec()),
            e2e: Histogram::new(E2E_BUCKETS.to_vec()),
            prompt_tokens: Histogram::new(buckets_1_2_5(context_length)),
            generation_tokens: Histogram::new(buckets_1_2_5(context_length)),
            finished: Default::default(),
            rejected_429: AtomicU64::new(0),
            rejected_503: AtomicU64::new(0),
        }
    }

    /// Counts a finished choice by its OpenAI finish reason.
    pub fn finished(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request refused with `status` (429 or 503).
    pub fn rejected(&self, status: u16) {
        match status {
            429 => self.rejected_429.fetch_add(1, Ordering::Relaxed),
            503 => self.rejected_503.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// The whole /metrics page.
    pub fn render(&self, info: &EngineInfo, m: &EngineMetrics, model_name: &str) -> String {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let lu = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed) as f64;
        let (running, waiting, used, cached) = (
            lu(&m.num_running),
            lu(&m.num_waiting),
            lu(&m.kv_blocks_used),
            lu(&m.kv_blocks_cached),
        );
        let usage = if info.num_blocks == 0 {
            0.0
        } else {
            used / info.num_blocks as f64
        };
        let mut out = String::with_capacity(16 * 1024);
        let mut one = |name: &str, kind: &str, help: &str, labels: &str, v: f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {}", fmt_f(v));
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {}", fmt_f(v));
            }
        };
        // folio's own names.
        one(
            "folio_requests_running",
            "gauge",
            "Requests being computed.",
            "",
            running,
        );
        one(
            "folio_requests_waiting",
            "gauge",
            "Requests queued for admission.",
            "",
            waiting,
        );
        one(
            "folio_kv_blocks_used",
            "gauge",
            "KV blocks held by requests.",
            "",
            used,
        );
        one(
            "folio_kv_blocks_cached",
            "gauge",
            "KV blocks registered in the prefix cache, held or evictable.",
            "",
            cached,
        );
        one(
            "folio_kv_layers_per_block",
            "gauge",
            "Layers whose K/V one KV block holds (fewer than the model's layers when sliding-window layers have their own blocks).",
            "",
            info.kv_layers_per_block as f64,
        );
        one(
            "folio_kv_bytes_used",
            "gauge",
            "Bytes of the KV blocks held by requests.",
            "",
            used * info.kv_block_bytes as f64,
        );
        one(
            "folio_kv_window_released_blocks_total",
            "counter",
            "Sliding-window layers' KV blocks returned to the pool behind the window.",
            "",
            ld(&m.kv_window_released_blocks) as f64,
        );
        one(
            "folio_kv_blocks_total",
            "gauge",
            "KV blocks in the pool.",
            "",
            info.num_blocks as f64,
        );
        one(
            "folio_kv_block_size_tokens",
            "gauge",
            "Tokens per KV block.",
            "",
            info.block_size as f64,
        );
        one(
            "folio_kv_capacity_tokens",
            "gauge",
            "KV capacity in tokens.",
            "",
            info.kv_capacity_tokens as f64,
        );
        one(
            "folio_kv_usage_ratio",
            "gauge",
            "Fraction of KV blocks in use.",
            "",
            usage,
        );
        one(
            "folio_prefix_cache_queries_tokens_total",
            "counter",
            "Prompt tokens looked up in the prefix cache.",
            "",
            ld(&m.prefix_queries_tokens) as f64,
        );
        one(
            "folio_prefix_cache_hits_tokens_total",
            "counter",
            "Prompt tokens found in the prefix cache.",
            "",
            ld(&m.prefix_hits_tokens) as f64,
        );
        one(
            "folio_kv_tier_spills_total",
            "counter",
            "KV blocks spilled to the second (disk) tier.",
            "",
            ld(&m.tier_spills) as f64,
        );
        one(
            "folio_kv_events_dropped_total",
            "counter",
            "KV-cache events not published: no subscriber connected, or the queue was full.",
            "",
            ld(&m.kv_events_dropped) as f64,
        );
        one(
            "folio_kv_tier_fetches_total",
            "counter",
            "KV blocks fetched back from the second tier instead of recomputed.",
            "",
            ld(&m.tier_fetches) as f64,
        );
        one(
            "folio_kv_tier_hits_tokens_total",
            "counter",
            "Prompt tokens served from blocks fetched back from the second tier.",
            "",
            ld(&m.tier_hit_tokens) as f64,
        );
        one(
            "folio_kv_evictions_total",
            "counter",
            "Cached KV blocks evicted from memory.",
            "",
            ld(&m.evictions) as f64,
        );
        one(
            "folio_constraint_mask_seconds_total",
            "counter",
            "Seconds spent computing and applying structured-output token masks.",
            "",
            ld(&m.constraint_mask_ns) as f64 / 1e9,
        );
        one(
            "folio_constraint_masks_total",
            "counter",
            "Structured-output token masks computed (sampled, drafted and verified positions).",
            "",
            ld(&m.constraint_masks) as f64,
        );
        one(
            "folio_constraint_commit_seconds_total",
            "counter",
            "Seconds spent committing tokens to structured-output grammars.",
            "",
            ld(&m.constraint_commit_ns) as f64 / 1e9,
        );
        {
            let sp = m.spec.lock().map(|s| s.clone()).unwrap_or_default();
            let mn0 = format!("model_name=\"{}\"", escape(model_name));
            for (name, help, v) in [
                (
                    "folio_spec_rounds_total",
                    "Verification steps with drafts.",
                    sp.rounds as f64,
                ),
                (
                    "folio_spec_draft_tokens_total",
                    "Draft tokens proposed.",
                    sp.drafted as f64,
                ),
                (
                    "folio_spec_accepted_tokens_total",
                    "Draft tokens accepted.",
                    sp.accepted as f64,
                ),
                (
                    "folio_spec_emitted_tokens_total",
                    "Tokens fixed by verification steps.",
                    sp.emitted as f64,
                ),
                (
                    "folio_spec_rule_considered_total",
                    "Speculating decodes the draft-length rule planned for.",
                    sp.rule_considered as f64,
                ),
                (
                    "folio_spec_rule_declined_total",
                    "Of those, decodes the rule gave no draft (speculation turned down).",
                    sp.rule_declined as f64,
                ),
                (
                    "folio_spec_rule_planned_tokens_total",
                    "Draft tokens the rule planned.",
                    sp.rule_planned_tokens as f64,
                ),
                (
                    "vllm:spec_decode_num_drafts_total",
                    "Number of spec decoding drafts.",
                    sp.rounds as f64,
                ),
                (
                    "vllm:spec_decode_num_draft_tokens_total",
                    "Number of draft tokens.",
                    sp.drafted as f64,
                ),
                (
                    "vllm:spec_decode_num_accepted_tokens_total",
                    "Number of accepted tokens.",
                    sp.accepted as f64,
                ),
            ] {
                let labels = if name.starts_with("vllm:") {
                    mn0.clone()
                } else {
                    String::new()
                };
                one(name, "counter", help, &labels, v);
            }
            one(
                "folio_spec_tokens_per_step",
                "gauge",
                "Mean tokens fixed per verification step (sum over sum).",
                "",
                sp.tokens_per_round(),
            );
        }
        one(
            "folio_preemptions_total",
            "counter",
            "Requests preempted to free KV.",
            "",
            ld(&m.preemptions) as f64,
        );
        one(
            "folio_requests_rejected_total",
            "counter",
            "Requests rejected by the engine's admission control.",
            "",
            ld(&m.rejected) as f64,
        );
        one(
            "folio_engine_steps_total",
            "counter",
            "Engine steps (model executions).",
            "",
            ld(&m.steps) as f64,
        );
        one(
            "folio_prompt_tokens_total",
            "counter",
            "Prompt tokens of admitted requests, prefix-cache hits included (folio_prefix_cache_hits_tokens_total is the cached share).",
            "",
            ld(&m.prompt_tokens) as f64,
        );
        one(
            "folio_generation_tokens_total",
            "counter",
            "Tokens generated.",
            "",
            ld(&m.generation_tokens) as f64,
        );
        one(
            "folio_recomputed_tokens_total",
            "counter",
            "Tokens recomputed after preemption.",
            "",
            ld(&m.recomputed_tokens) as f64,
        );
        let _ = writeln!(out, "# HELP folio_http_rejected_total Requests the server refused with 429 or 503.\n# TYPE folio_http_rejected_total counter");
        let _ = writeln!(
            out,
            "folio_http_rejected_total{{status=\"429\"}} {}",
            ld(&self.rejected_429)
        );
        let _ = writeln!(
            out,
            "folio_http_rejected_total{{status=\"503\"}} {}",
            ld(&self.rejected_503)
        );
        let _ = writeln!(out, "# HELP folio_requests_finished_total Finished choices by finish reason.\n# TYPE folio_requests_finished_total counter");
        for (r, c) in REASONS.iter().zip(&self.finished) {
            let _ = writeln!(
                out,
                "folio_requests_finished_total{{reason=\"{r}\"}} {}",
                ld(c)
            );
        }

        // vLLM-compatible names.
        let mn = format!("model_name=\"{}\"", escape(model_name));
        let mut one = |name: &str, kind: &str, help: &str, labels: &str, v: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {}",
                fmt_f(v)
            );
        };
        one(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            &mn,
            running,
        );
        one(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            &mn,
            waiting,
        );
        one(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            &mn,
            usage,
        );
        one(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "KV-cache usage (older name). 1 means 100 percent usage.",
            &mn,
            usage,
        );
        let cfg = format!(
            "block_size=\"{}\",cache_dtype=\"{}\",num_gpu_blocks=\"{}\"",
            info.block_size,
            escape(&info.kv_format),
            info.num_blocks
        );
        one(
            "vllm:cache_config_info",
            "gauge",
            "Information of the KV cache config.",
            &cfg,
            1.0,
        );
        one(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            &mn,
            ld(&m.prefix_queries_tokens) as f64,
        );
        one(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            &mn,
            ld(&m.prefix_hits_tokens) as f64,
        );
        one(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemptions.",
            &mn,
            ld(&m.preemptions) as f64,
        );
        one(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            &mn,
            ld(&m.prompt_tokens) as f64,
        );
        one(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            &mn,
            ld(&m.generation_tokens) as f64,
        );
        let _ = writeln!(out, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter");
        for (r, c) in REASONS.iter().zip(&self.finished).take(3) {
            let _ = writeln!(
                out,
                "vllm:request_success_total{{{mn},finished_reason=\"{r}\"}} {}",
                ld(c)
            );
        }

        // Histograms under both names.
        for (prefix, labels) in [("folio_", ""), ("vllm:", mn.as_str())] {
            let hists: [(&str, &Histogram, &str); 6] = [
                (
                    "time_to_first_token_seconds",
                    &self.ttft,
                    "Time from arrival at the server to the first token.",
                ),
                (
                    "inter_token_latency_seconds",
                    &self.itl,
                    "Time between consecutive token events of a request.",
                ),
                (
                    "time_per_output_token_seconds",
                    &self.itl,
                    "Time per output token (same samples as inter-token latency).",
                ),
                (
                    "e2e_request_latency_seconds",
                    &self.e2e,
                    "Time from arrival at the server to the last token.",
                ),
                (
                    "request_prompt_tokens",
                    &self.prompt_tokens,
                    "Prompt tokens per request.",
                ),
                (
                    "request_generation_tokens",
                    &self.generation_tokens,
                    "Generated tokens per request.",
                ),
            ];
            for (name, h, help) in hists {
                if prefix == "folio_" && name == "time_per_output_token_seconds" {
                    continue;
                }
                h.render(&mut out, &format!("{prefix}{name}"), help, labels);
            }
        }
        // Accepted draft tokens by position (one family, one sample per position).
        let sp = m.spec.lock().map(|s| s.clone()).unwrap_or_default();
        if !sp.accepted_by_position.is_empty() {
            let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
            let _ = writeln!(
                out,
                "# HELP {name} Accepted draft tokens per draft position.\n# TYPE {name} counter"
            );
            for (i, &a) in sp.accepted_by_position.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{model_name=\"{}\",position=\"{i}\"}} {}",
                    escape(model_name),
                    fmt_f(a as f64)
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> EngineInfo {
        EngineInfo {
            model_name: "m".into(),
            model_path: "/m.gguf".into(),
            context_length: 100,
            vocab_size: 10,
            block_size: 16,
            num_blocks: 8,
            kv_capacity_tokens: 128,
            kv_layers_per_block: 30,
            kv_block_bytes: 1000,
            kv_format: "f16".into(),
            numerics: "fast".into(),
            hidden_size: 8,
            gguf_pooling: None,
        }
    }

    #[test]
    fn token_buckets() {
        assert_eq!(
            buckets_1_2_5(100),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(buckets_1_2_5(8192).last(), Some(&5000.0));
    }

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::new(vec![1.0, 2.0]);
        for v in [0.5, 1.5, 1.5, 9.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "help", "a=\"b\"");
        assert_eq!(
            s,
            "# HELP x help\n# TYPE x histogram\nx_bucket{a=\"b\",le=\"1.0\"} 1\nx_bucket{a=\"b\",le=\"2.0\"} 3\n\
             x_bucket{a=\"b\",le=\"+Inf\"} 4\nx_sum{a=\"b\"} 12.5\nx_count{a=\"b\"} 4\n"
        );
    }

    #[test]
    fn renders_vllm_and_folio_names() {
        let m = EngineMetrics::default();
        m.num_running.store(3, Ordering::Relaxed);
        m.kv_blocks_used.store(2, Ordering::Relaxed);
        m.prefix_hits_tokens.store(32, Ordering::Relaxed);
        let s = ServerMetrics::new(100);
        s.ttft.observe(0.05);
        s.finished("stop");
        s.rejected(429);
        let text = s.render(&info(), &m, "smol\"lm");
        for line in [
            "folio_requests_running 3.0",
            "folio_kv_blocks_used 2.0",
            "folio_kv_bytes_used 2000.0",
            "folio_kv_usage_ratio 0.25",
            "folio_http_rejected_total{status=\"429\"} 1",
            "folio_requests_finished_total{reason=\"stop\"} 1",
            "vllm:num_requests_running{model_name=\"smol\\\"lm\"} 3.0",
            "vllm:num_requests_waiting{model_name=\"smol\\\"lm\"} 0.0",
            "vllm:kv_cache_usage_perc{model_name=\"smol\\\"lm\"} 0.25",
            "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"f16\",num_gpu_blocks=\"8\"} 1.0",
            "vllm:prefix_cache_hits_total{model_name=\"smol\\\"lm\"} 32.0",
            "vllm:prefix_cache_queries_total{model_name=\"smol\\\"lm\"} 0.0",
            "vllm:num_preemptions_total{model_name=\"smol\\\"lm\"} 0.0",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"smol\\\"lm\",le=\"0.06\"} 1",
            "vllm:time_to_first_token_seconds_count{model_name=\"smol\\\"lm\"} 1",
            "folio_time_to_first_token_seconds_count 1",
            "vllm:e2e_request_latency_seconds_count{model_name=\"smol\\\"lm\"} 0",
            "vllm:inter_token_latency_seconds_count{model_name=\"smol\\\"lm\"} 0",
            "vllm:request_prompt_tokens_bucket{model_name=\"smol\\\"lm\",le=\"100.0\"} 0",
            "vllm:request_generation_tokens_count{model_name=\"smol\\\"lm\"} 0",
            "vllm:request_success_total{model_name=\"smol\\\"lm\",finished_reason=\"stop\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        // Every sample line is `name{labels} value` or `name value`.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = l.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }
}
