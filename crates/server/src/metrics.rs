//! /metrics in Prometheus text format (0.0.4).
//!
//! NOTE: written by a small table-driven writer ([`FAMILIES`]) rather than through the
//! `metrics` facade or a Prometheus client crate: the facade's recorder is process-global
//! (two servers in one test binary would share histograms), the client crates own their
//! values while folio's gauges live in [`EngineMetrics`] and are read at scrape time, and
//! the text must match vLLM's names exactly (`vllm:` prefix, `_total` counters, the
//! `model_name` label) for routers and autoscalers built for vLLM. Gauges and engine counters are
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
}

/// Requests the server answered 429 (admission) or 503 (shutting down): server-wide, as
/// a request may be refused before its model is known.
#[derive(Default)]
pub struct Rejections {
    rejected_429: AtomicU64,
    rejected_503: AtomicU64,
}

/// The families that belong to the server, not to one model (one copy on a page that
/// joins several models').
pub const SERVER_WIDE: [&str; 1] = ["folio_http_rejected_total"];

impl Rejections {
    /// Counts a request refused with `status` (429 or 503).
    pub fn rejected(&self, status: u16) {
        match status {
            429 => self.rejected_429.fetch_add(1, Ordering::Relaxed),
            503 => self.rejected_503.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// The `folio_http_rejected_total` family.
    pub fn render(&self, out: &mut String) {
        header(
            out,
            "folio_http_rejected_total",
            "counter",
            "Requests the server refused with 429 or 503.",
        );
        for (status, c) in [("429", &self.rejected_429), ("503", &self.rejected_503)] {
            let _ = writeln!(
                out,
                "folio_http_rejected_total{{status=\"{status}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
    }
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
        }
    }

    /// Counts a finished choice by its OpenAI finish reason.
    pub fn finished(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The whole /metrics page: the [`FAMILIES`] table, then the labelled families
    /// (rejections, finish reasons, cache config, histograms, per-position acceptance).
    pub fn render(
        &self,
        info: &EngineInfo,
        m: &EngineMetrics,
        model_name: &str,
        rejections: &Rejections,
    ) -> String {
        let scrape = Scrape::new(info, m);
        let mn = format!("model_name=\"{}\"", escape(model_name));
        let mut out = String::with_capacity(16 * 1024);
        for f in FAMILIES {
            let labels = if f.name.starts_with("vllm:") {
                mn.as_str()
            } else {
                ""
            };
            family(&mut out, f.name, f.kind, f.help, labels, (f.value)(&scrape));
        }
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        rejections.render(&mut out);
        header(
            &mut out,
            "folio_requests_finished_total",
            "counter",
            "Finished choices by finish reason.",
        );
        for (r, c) in REASONS.iter().zip(&self.finished) {
            let _ = writeln!(
                out,
                "folio_requests_finished_total{{reason=\"{r}\"}} {}",
                ld(c)
            );
        }
        let cfg = format!(
            "block_size=\"{}\",cache_dtype=\"{}\",num_gpu_blocks=\"{}\"",
            info.block_size,
            escape(&info.kv_format),
            info.num_blocks
        );
        family(
            &mut out,
            "vllm:cache_config_info",
            "gauge",
            "Information of the KV cache config.",
            &cfg,
            1.0,
        );
        header(
            &mut out,
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
        );
        for (r, c) in REASONS.iter().zip(&self.finished).take(3) {
            let _ = writeln!(
                out,
                "vllm:request_success_total{{{mn},finished_reason=\"{r}\"}} {}",
                ld(c)
            );
        }
        self.render_histograms(&mut out, &mn);
        let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
        if !scrape.spec.accepted_by_position.is_empty() {
            header(
                &mut out,
                name,
                "counter",
                "Accepted draft tokens per draft position.",
            );
        }
        for (i, &a) in scrape.spec.accepted_by_position.iter().enumerate() {
            let _ = writeln!(out, "{name}{{{mn},position=\"{i}\"}} {}", fmt_f(a as f64));
        }
        out
    }

    /// Each request histogram under folio's name and vLLM's (vLLM's alone has the
    /// time-per-output-token alias).
    fn render_histograms(&self, out: &mut String, mn: &str) {
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
        for (prefix, labels) in [("folio_", ""), ("vllm:", mn)] {
            for (name, h, help) in hists {
                if prefix == "folio_" && name == "time_per_output_token_seconds" {
                    continue;
                }
                h.render(out, &format!("{prefix}{name}"), help, labels);
            }
        }
    }
}

/// `# HELP` and `# TYPE` of one family.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A family with one sample.
fn family(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, v: f64) {
    header(out, name, kind, help);
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {}", fmt_f(v));
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {}", fmt_f(v));
    }
}

/// What one scrape reads, taken once so every family sees the same figures.
struct Scrape<'a> {
    info: &'a EngineInfo,
    m: &'a EngineMetrics,
    spec: folio_engine::SpecStats,
}

impl<'a> Scrape<'a> {
    fn new(info: &'a EngineInfo, m: &'a EngineMetrics) -> Scrape<'a> {
        let spec = m.spec.lock().map(|s| s.clone()).unwrap_or_default();
        Scrape { info, m, spec }
    }
    fn gauge(&self, a: &std::sync::atomic::AtomicUsize) -> f64 {
        a.load(Ordering::Relaxed) as f64
    }
    fn count(&self, a: &AtomicU64) -> f64 {
        a.load(Ordering::Relaxed) as f64
    }
    fn usage(&self) -> f64 {
        if self.info.num_blocks == 0 {
            0.0
        } else {
            self.gauge(&self.m.kv_blocks_used) / self.info.num_blocks as f64
        }
    }
}

/// One single-sample family: its name, Prometheus type, help text and how a scrape reads
/// its value. Names starting `vllm:` carry the `model_name` label.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&Scrape) -> f64,
}

const fn gauge(name: &'static str, help: &'static str, value: fn(&Scrape) -> f64) -> Family {
    Family {
        name,
        kind: "gauge",
        help,
        value,
    }
}

const fn counter(name: &'static str, help: &'static str, value: fn(&Scrape) -> f64) -> Family {
    Family {
        name,
        kind: "counter",
        help,
        value,
    }
}

/// The single-sample families, in page order: folio's names, then vLLM's.
const FAMILIES: &[Family] = &[
    gauge("folio_requests_running", "Requests being computed.", |s| s.gauge(&s.m.num_running)),
    gauge("folio_requests_waiting", "Requests queued for admission.", |s| s.gauge(&s.m.num_waiting)),
    gauge("folio_kv_blocks_used", "KV blocks held by requests.", |s| s.gauge(&s.m.kv_blocks_used)),
    gauge("folio_kv_blocks_cached", "KV blocks registered in the prefix cache, held or evictable.", |s| s.gauge(&s.m.kv_blocks_cached)),
    gauge("folio_kv_layers_per_block", "Layers whose K/V one KV block holds (fewer than the model's layers when sliding-window layers have their own blocks).", |s| s.info.kv_layers_per_block as f64),
    gauge("folio_kv_bytes_used", "Bytes of the KV blocks held by requests.", |s| s.gauge(&s.m.kv_blocks_used) * s.info.kv_block_bytes as f64),
    gauge("folio_kv_bytes_per_token", "KV bytes one token takes in the cache, all layers (multi-head latent attention: the latent row).", |s| s.info.kv_bytes_per_token as f64),
    gauge("folio_kv_bytes_per_token_uncompressed", "KV bytes per token of the uncompressed K and V (multi-head latent attention: every head's decompressed K and V; otherwise equal to folio_kv_bytes_per_token).", |s| s.info.kv_bytes_per_token_uncompressed as f64),
    counter("folio_kv_window_released_blocks_total", "Sliding-window layers' KV blocks returned to the pool behind the window.", |s| s.count(&s.m.kv_window_released_blocks)),
    gauge("folio_kv_k_bytes_per_token", "Bytes of one token's K in the cache's K format (all layers and KV heads).", |s| s.info.kv_k_bytes_per_token as f64),
    gauge("folio_kv_v_bytes_per_token", "Bytes of one token's V in the cache's V format (all layers and KV heads).", |s| s.info.kv_v_bytes_per_token as f64),
    gauge("folio_kv_blocks_total", "KV blocks in the pool.", |s| s.info.num_blocks as f64),
    gauge("folio_kv_block_size_tokens", "Tokens per KV block.", |s| s.info.block_size as f64),
    gauge("folio_kv_capacity_tokens", "KV capacity in tokens.", |s| s.info.kv_capacity_tokens as f64),
    gauge("folio_kv_usage_ratio", "Fraction of KV blocks in use.", |s| s.usage()),
    counter("folio_prefix_cache_queries_tokens_total", "Prompt tokens looked up in the prefix cache.", |s| s.count(&s.m.prefix_queries_tokens)),
    counter("folio_prefix_cache_hits_tokens_total", "Prompt tokens found in the prefix cache.", |s| s.count(&s.m.prefix_hits_tokens)),
    counter("folio_kv_tier_spills_total", "KV blocks spilled to the second (disk) tier.", |s| s.count(&s.m.tier_spills)),
    counter("folio_kv_events_dropped_total", "KV-cache events not published: no subscriber connected, or the queue was full.", |s| s.count(&s.m.kv_events_dropped)),
    counter("folio_kv_tier_fetches_total", "KV blocks fetched back from the second tier instead of recomputed.", |s| s.count(&s.m.tier_fetches)),
    counter("folio_kv_tier_hits_tokens_total", "Prompt tokens served from blocks fetched back from the second tier.", |s| s.count(&s.m.tier_hit_tokens)),
    counter("folio_kv_evictions_total", "Cached KV blocks evicted from memory.", |s| s.count(&s.m.evictions)),
    counter("folio_constraint_mask_seconds_total", "Seconds spent computing and applying structured-output token masks.", |s| s.count(&s.m.constraint_mask_ns) / 1e9),
    counter("folio_constraint_masks_total", "Structured-output token masks computed (sampled, drafted and verified positions).", |s| s.count(&s.m.constraint_masks)),
    counter("folio_constraint_commit_seconds_total", "Seconds spent committing tokens to structured-output grammars.", |s| s.count(&s.m.constraint_commit_ns) / 1e9),
    counter("folio_spec_rounds_total", "Verification steps with drafts.", |s| s.spec.rounds as f64),
    counter("folio_spec_draft_tokens_total", "Draft tokens proposed.", |s| s.spec.drafted as f64),
    counter("folio_spec_accepted_tokens_total", "Draft tokens accepted.", |s| s.spec.accepted as f64),
    counter("folio_spec_emitted_tokens_total", "Tokens fixed by verification steps.", |s| s.spec.emitted as f64),
    counter("folio_spec_rule_considered_total", "Speculating decodes the draft-length rule planned for.", |s| s.spec.rule_considered as f64),
    counter("folio_spec_rule_declined_total", "Of those, decodes the rule gave no draft (speculation turned down).", |s| s.spec.rule_declined as f64),
    counter("folio_spec_rule_planned_tokens_total", "Draft tokens the rule planned.", |s| s.spec.rule_planned_tokens as f64),
    counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", |s| s.spec.rounds as f64),
    counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", |s| s.spec.drafted as f64),
    counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", |s| s.spec.accepted as f64),
    gauge("folio_spec_tokens_per_step", "Mean tokens fixed per verification step (sum over sum).", |s| s.spec.tokens_per_round()),
    counter("folio_preemptions_total", "Requests preempted to free KV.", |s| s.count(&s.m.preemptions)),
    counter("folio_requests_rejected_total", "Requests rejected by the engine's admission control.", |s| s.count(&s.m.rejected)),
    counter("folio_engine_steps_total", "Engine steps (model executions).", |s| s.count(&s.m.steps)),
    counter("folio_prompt_tokens_total", "Prompt tokens of admitted requests, prefix-cache hits included (folio_prefix_cache_hits_tokens_total is the cached share).", |s| s.count(&s.m.prompt_tokens)),
    counter("folio_generation_tokens_total", "Tokens generated.", |s| s.count(&s.m.generation_tokens)),
    counter("folio_recomputed_tokens_total", "Tokens recomputed after preemption.", |s| s.count(&s.m.recomputed_tokens)),
    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", |s| s.gauge(&s.m.num_running)),
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", |s| s.gauge(&s.m.num_waiting)),
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", |s| s.usage()),
    gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older name). 1 means 100 percent usage.", |s| s.usage()),
    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", |s| s.count(&s.m.prefix_queries_tokens)),
    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", |s| s.count(&s.m.prefix_hits_tokens)),
    counter("vllm:num_preemptions_total", "Cumulative number of preemptions.", |s| s.count(&s.m.preemptions)),
    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", |s| s.count(&s.m.prompt_tokens)),
    counter("vllm:generation_tokens_total", "Number of generation tokens processed.", |s| s.count(&s.m.generation_tokens)),
];

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
            kv_bytes_per_token: 60,
            kv_bytes_per_token_uncompressed: 240,
            kv_format: "f16".into(),
            kv_k_bytes_per_token: 23_040,
            kv_v_bytes_per_token: 23_040,
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
        let r = Rejections::default();
        r.rejected(429);
        let text = s.render(&info(), &m, "smol\"lm", &r);
        for line in [
            "folio_requests_running 3.0",
            "folio_kv_blocks_used 2.0",
            "folio_kv_bytes_used 2000.0",
            "folio_kv_bytes_per_token 60.0",
            "folio_kv_bytes_per_token_uncompressed 240.0",
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
