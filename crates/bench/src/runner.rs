//! Sends a workload to a server on its arrival schedule and records every request.
//!
//! Arrivals are fixed before the run (open loop); each conversation is a task that sleeps
//! until its arrival, then sends its turns one after another (turn k + 1 "arrives" when
//! turn k's answer has arrived). An optional semaphore caps requests in flight; time spent
//! waiting for it counts in the latencies, which are measured from the scheduled arrival.
//! Conversations take their first slot in workload order (a relay from each to the next):
//! tasks woken together reach the semaphore in whatever order the runtime polls them, and
//! a workload whose order matters (rounds of distinct prefixes) would be sent shuffled.

use crate::error::Result;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

use crate::arrivals;
use crate::client::{self, BaseUrl, SseParser};
use crate::prom::{self, PrefixCacheDelta};
use crate::record::RequestRecord;
use crate::report::{MonitorSummary, RunReport, RunSetup};
use crate::slo::Slo;
use crate::workload::{self, Conversation};

/// How to drive the server.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub base: BaseUrl,
    pub model: String,
    /// Use `/v1/chat/completions` (the prompt as one user message) instead of
    /// `/v1/completions`.
    pub chat: bool,
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    /// Send `ignore_eos: true` (vLLM, folio and llama.cpp honour it) for fixed lengths.
    pub ignore_eos: bool,
    pub slo: Slo,
    pub seed: u64,
    /// Longest silence tolerated from the server within one request.
    pub timeout: Duration,
    pub progress: bool,
    /// Probe `/health` and `/metrics` at this interval during the run.
    pub monitor: Option<Duration>,
    /// Send nothing new after this long (a soak: many requests, bounded time); requests
    /// not sent by then are left out of the report, not counted as failures.
    pub duration: Option<Duration>,
}

/// What one streamed request returned.
#[derive(Debug, Default)]
struct Outcome {
    sent: Option<Instant>,
    chunks: Vec<Instant>,
    end: Option<Instant>,
    text: String,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    error: Option<String>,
}

/// The model id the server lists first (`GET /v1/models`), if any.
pub async fn detect_model(base: &BaseUrl) -> Option<String> {
    let (status, body) = client::get(base, "/v1/models", Duration::from_secs(10))
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"][0]["id"].as_str().map(str::to_string)
}

/// Reads the prefix-cache counters, if the server exposes them.
pub async fn prefix_counters(base: &BaseUrl) -> Option<prom::PrefixCounters> {
    let (status, body) = client::get(base, "/metrics", Duration::from_secs(10))
        .await
        .ok()?;
    (status == 200)
        .then(|| prom::prefix_counters(&body))
        .flatten()
}

fn request_body(cfg: &RunConfig, prompt: &str, max_tokens: usize, schema: Option<&Value>) -> Value {
    let mut body = if cfg.chat {
        json!({"model": cfg.model, "messages": [{"role": "user", "content": prompt}]})
    } else {
        json!({"model": cfg.model, "prompt": prompt})
    };
    body["max_tokens"] = json!(max_tokens);
    body["temperature"] = json!(0.0);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    if cfg.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if let Some(s) = schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": s, "strict": true},
        });
    }
    body
}

async fn stream_one(
    cfg: &RunConfig,
    prompt: &str,
    max_tokens: usize,
    schema: Option<&Value>,
) -> Outcome {
    let mut out = Outcome::default();
    if let Err(e) = stream_into(cfg, prompt, max_tokens, schema, &mut out).await {
        out.error = Some(format!("{e:#}"));
    }
    out.end = Some(Instant::now());
    out
}

async fn stream_into(
    cfg: &RunConfig,
    prompt: &str,
    max_tokens: usize,
    schema: Option<&Value>,
    out: &mut Outcome,
) -> Result<()> {
    let path = if cfg.chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    let body = request_body(cfg, prompt, max_tokens, schema).to_string();
    out.sent = Some(Instant::now());
    let mut resp = client::send(&cfg.base, "POST", path, body.as_bytes(), cfg.timeout).await?;
    if resp.head.status != 200 {
        let status = resp.head.status;
        let text = resp.text(cfg.timeout).await.unwrap_or_default();
        return Err(crate::BenchError::msg(format!(
            "HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        )));
    }
    let mut sse = SseParser::default();
    let mut done = false;
    while let Some((bytes, at)) = resp.next_bytes(cfg.timeout).await? {
        for data in sse.push(&bytes) {
            if data.trim() == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(&data)
                .map_err(|e| crate::BenchError::msg(format!("bad SSE data {data:?}: {e}")))?;
            if !v["error"].is_null() {
                return Err(crate::BenchError::msg(format!(
                    "server error in stream: {}",
                    v["error"]
                )));
            }
            let choice = &v["choices"][0];
            let text = choice["text"]
                .as_str()
                .or_else(|| choice["delta"]["content"].as_str())
                .unwrap_or("");
            if !text.is_empty() {
                out.chunks.push(at);
                out.text.push_str(text);
            }
            let u = &v["usage"];
            if u.is_object() {
                out.prompt_tokens = u["prompt_tokens"].as_u64();
                out.completion_tokens = u["completion_tokens"].as_u64();
                out.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].as_u64();
            }
        }
    }
    if !done {
        return Err(crate::BenchError::msg("stream ended without data: [DONE]"));
    }
    Ok(())
}

/// Sends `convs` per `cfg` and returns the report (records, figures, prefix-cache delta).
pub async fn run(cfg: &RunConfig, setup: RunSetup, convs: Vec<Conversation>) -> Result<RunReport> {
    let cfg = Arc::new(cfg.clone());
    let before = prefix_counters(&cfg.base).await;
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_a771);
    let arrivals = arrivals::schedule(convs.len(), cfg.request_rate, cfg.burstiness, &mut rng);
    let total: usize = convs.iter().map(|c| c.turns.len()).sum();
    let pb = if cfg.progress {
        let pb = ProgressBar::new(total as u64);
        pb.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
                .expect("static template is valid")
                .progress_chars("=> "),
        );
        pb
    } else {
        ProgressBar::hidden()
    };
    let sem = cfg
        .max_concurrency
        .map(|c| Arc::new(Semaphore::new(c.max(1))));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let monitor = cfg
        .monitor
        .map(|every| tokio::spawn(monitor_loop(cfg.base.clone(), every, stop_rx)));
    let start = Instant::now();
    let secs = move |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let mut tasks = Vec::new();
    let mut next_id = 0;
    // The relay: conversation i takes its first slot after conversation i - 1 took its own.
    let (go, mut prev_rx) = tokio::sync::oneshot::channel::<()>();
    let _ = go.send(());
    for (ci, (conv, at)) in convs.into_iter().zip(arrivals).enumerate() {
        let first_id = next_id;
        next_id += conv.turns.len();
        let (cfg, sem, pb) = (cfg.clone(), sem.clone(), pb.clone());
        let (next_tx, next_rx) = tokio::sync::oneshot::channel::<()>();
        let my_turn = std::mem::replace(&mut prev_rx, next_rx);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((start + Duration::from_secs_f64(at)).into()).await;
            let mut history = String::new();
            let mut scheduled = at;
            let mut recs = Vec::new();
            // Err only when the previous task ended without sending: go ahead then too.
            let _ = my_turn.await;
            // Sent (or dropped, if this task ends early) once the first turn holds its slot.
            let mut next_tx = Some(next_tx);
            for (ti, turn) in conv.turns.iter().enumerate() {
                history.push_str(&turn.append);
                let permit = match &sem {
                    Some(s) => Some(s.clone().acquire_owned().await.expect("never closed")),
                    None => None,
                };
                if let Some(tx) = next_tx.take() {
                    let _ = tx.send(());
                }
                if cfg.duration.is_some_and(|d| start.elapsed() > d) {
                    pb.inc((conv.turns.len() - ti) as u64);
                    break;
                }
                let o = stream_one(&cfg, &history, turn.max_tokens, turn.schema.as_ref()).await;
                drop(permit);
                pb.inc(1);
                let end = o.end.expect("set by stream_one");
                let rec = RequestRecord {
                    id: first_id + ti,
                    conversation: ci,
                    turn: ti,
                    scheduled_s: scheduled,
                    sent_s: o.sent.map_or(secs(end), secs),
                    chunk_times_s: o.chunks.iter().map(|&t| secs(t)).collect(),
                    end_s: secs(end),
                    prompt_tokens: o.prompt_tokens,
                    cached_tokens: o.cached_tokens,
                    output_tokens: o.completion_tokens.unwrap_or(o.chunks.len() as u64),
                    ok: o.error.is_none(),
                    error: o.error.clone(),
                    correct: match (&turn.schema, &turn.expected) {
                        (Some(s), _) => Some(workload::grade_json(&o.text, s)),
                        (None, Some(e)) => Some(workload::grade(&o.text, e)),
                        (None, None) => None,
                    },
                };
                let failed = !rec.ok;
                recs.push(rec);
                if failed {
                    break;
                }
                history.push_str(&o.text);
                scheduled = secs(end);
            }
            recs
        }));
    }
    let mut records = Vec::with_capacity(total);
    for t in tasks {
        records.extend(t.await?);
    }
    pb.finish_and_clear();
    let duration = records.iter().map(|r| r.end_s).fold(0.0f64, f64::max);
    records.sort_by_key(|r| r.id);
    let mut report = RunReport::from_records(setup, records, duration, cfg.slo);
    let _ = stop_tx.send(());
    if let Some(m) = monitor {
        let mut summary = m.await?;
        let (r, w, k) = gauges(&cfg.base).await;
        summary.after_running = r;
        summary.after_waiting = w;
        summary.after_kv_usage = k;
        report.monitor = Some(summary);
    }
    if let (Some(b), Some(a)) = (before, prefix_counters(&cfg.base).await) {
        report.prefix_cache = Some(PrefixCacheDelta::between(b, a));
    }
    Ok(report)
}

/// vLLM-named gauges: requests running, waiting, KV cache usage (fraction).
async fn gauges(base: &BaseUrl) -> (Option<f64>, Option<f64>, Option<f64>) {
    match client::get(base, "/metrics", Duration::from_secs(10)).await {
        Ok((200, text)) => (
            prom::sum_metric(&text, &["vllm:num_requests_running"]),
            prom::sum_metric(&text, &["vllm:num_requests_waiting"]),
            prom::sum_metric(
                &text,
                &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
            ),
        ),
        _ => (None, None, None),
    }
}

async fn monitor_loop(
    base: BaseUrl,
    every: Duration,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> MonitorSummary {
    let mut m = MonitorSummary::default();
    let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    loop {
        tokio::select! {
            _ = &mut stop => return m,
            _ = tokio::time::sleep(every) => {}
        }
        m.samples += 1;
        match client::get(&base, "/health", Duration::from_secs(5)).await {
            Ok((200, _)) => {}
            _ => m.health_failures += 1,
        }
        let (r, w, k) = gauges(&base).await;
        m.max_running = max(m.max_running, r);
        m.max_waiting = max(m.max_waiting, w);
        m.max_kv_usage = max(m.max_kv_usage, k);
    }
}
