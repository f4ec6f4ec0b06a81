//! `folio bench engine` (flags in the cli): continuous batching through the engine (no HTTP): N concurrent
//! requests with fixed prompt and output lengths; aggregate output tok/s, TTFT and ITL
//! (mean, p99) per concurrency level. `--json-mode` puts every request under a JSON schema
//! that never completes (an array of records), so each of its tokens is masked: the tok/s
//! against a run without it is the throughput cost of structured output, and the row gives
//! the mask time per masked token.

use crate::error::{BenchError, Result};
use folio_engine::{Event, GenerateRequest};
use serde::Serialize;
use std::time::Instant;

#[derive(Serialize)]
pub struct EngineRow {
    pub concurrency: usize,
    pub output_tokens: usize,
    pub seconds: f64,
    pub output_tok_s: f64,
    pub ttft_mean_ms: f64,
    pub itl_mean_ms: f64,
    pub itl_p99_ms: f64,
    pub speedup_vs_1: f64,
    /// Microseconds of grammar mask per masked position (0 without `--json-mode`).
    pub mask_us_per_token: f64,
    /// Microseconds committing the chosen token to the grammar, per masked position.
    pub commit_us_per_token: f64,
}

/// The schema of `--json-mode`: at least 64 records, more than any run's length holds, so
/// requests run to their length with every token masked.
fn endless_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "array",
        "minItems": 64,
        "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "value": {"type": "integer", "minimum": 0, "maximum": 100000},
                "tags": {"type": "array", "maxItems": 3, "items": {"enum": ["a", "b", "c"]}}
            },
            "required": ["name", "value", "tags"],
            "additionalProperties": false
        }
    })
}

/// Nearest-rank percentile of an unsorted sample.
fn percentile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q / 100.0) * xs.len() as f64).ceil().max(1.0) as usize;
    xs[rank.min(xs.len()) - 1]
}

/// One row per concurrency level on the running engine `h` (shut down at the end).
pub fn run(
    h: folio_engine::EngineHandle,
    levels: &[usize],
    prompt_len: usize,
    output_len: usize,
    json_mode: bool,
) -> Result<Vec<EngineRow>> {
    let masks = |h: &folio_engine::EngineHandle| {
        let m = &h.metrics;
        (
            m.constraint_mask_ns
                .load(std::sync::atomic::Ordering::Relaxed),
            m.constraint_masks
                .load(std::sync::atomic::Ordering::Relaxed),
            m.constraint_commit_ns
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    };
    // The token environment is built once per model, on first use, and the schema compiled
    // once, as the server does per call: neither is in the rows.
    let schema = if json_mode {
        let t = Instant::now();
        let c = h
            .grammars
            .compile(&folio_engine::Constraint::JsonSchema(endless_schema()))
            .map_err(|e| BenchError::msg(format!("--json-mode schema: {e}")))?;
        eprintln!(
            "json mode: token environment and first compile {:.0} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        Some(c)
    } else {
        None
    };
    let vocab = h.info.vocab_size as u32;
    let mut rows: Vec<EngineRow> = Vec::new();
    for &c in levels {
        // Distinct random-looking prompts (no shared prefix), fixed lengths.
        let prompts: Vec<Vec<u32>> = (0..c)
            .map(|i| {
                (0..prompt_len)
                    .map(|j| ((i * 7919 + j * 104729 + 17) as u32 % (vocab - 100)) + 50)
                    .collect()
            })
            .collect();
        let m0 = masks(&h);
        let t0 = Instant::now();
        let streams: Vec<_> = prompts
            .into_iter()
            .map(|p| {
                let mut r = GenerateRequest::new(p, output_len);
                r.ignore_eos = true;
                r.constraint = schema.clone();
                h.submit(r)
                    .map_err(|e| BenchError::msg(format!("submit: {e}")))
            })
            .collect::<Result<_>>()?;
        let (mut ttfts, mut itls, mut tokens) = (Vec::new(), Vec::new(), 0usize);
        let mut end = t0;
        for mut s in streams {
            let mut last: Option<Instant> = None;
            while let Some(ev) = s.next_blocking() {
                if let Event::Tokens { ids, at, .. } = ev {
                    if ids.is_empty() {
                        continue;
                    }
                    tokens += ids.len();
                    match last {
                        None => ttfts.push((at - t0).as_secs_f64() * 1e3),
                        Some(l) => itls.push((at - l).as_secs_f64() * 1e3),
                    }
                    last = Some(at);
                    end = end.max(at);
                }
            }
        }
        let secs = (end - t0).as_secs_f64();
        let m1 = masks(&h);
        let mask_us_per_token = (m1.0 - m0.0) as f64 / 1e3 / (m1.1 - m0.1).max(1) as f64;
        let commit_us_per_token = (m1.2 - m0.2) as f64 / 1e3 / (m1.1 - m0.1).max(1) as f64;
        let rate = tokens as f64 / secs;
        let base = rows
            .iter()
            .find(|r| r.concurrency == 1)
            .map(|r| r.output_tok_s);
        rows.push(EngineRow {
            concurrency: c,
            output_tokens: tokens,
            seconds: secs,
            output_tok_s: rate,
            ttft_mean_ms: ttfts.iter().sum::<f64>() / ttfts.len().max(1) as f64,
            itl_mean_ms: itls.iter().sum::<f64>() / itls.len().max(1) as f64,
            itl_p99_ms: percentile(&mut itls, 99.0),
            speedup_vs_1: base.map(|b| rate / b).unwrap_or(1.0),
            mask_us_per_token,
            commit_us_per_token,
        });
    }
    h.shutdown();
    Ok(rows)
}

pub fn print(rows: &[EngineRow]) {
    println!(
        "{:>11} {:>7} {:>8} {:>12} {:>12} {:>12} {:>11} {:>7} {:>9} {:>10}",
        "concurrency",
        "tokens",
        "seconds",
        "output tok/s",
        "TTFT mean ms",
        "ITL mean ms",
        "ITL p99 ms",
        "vs 1",
        "mask µs",
        "commit µs"
    );
    for r in rows {
        println!(
            "{:>11} {:>7} {:>8.2} {:>12.1} {:>12.1} {:>12.2} {:>11.2} {:>6.2}x {:>9.1} {:>10.1}",
            r.concurrency,
            r.output_tokens,
            r.seconds,
            r.output_tok_s,
            r.ttft_mean_ms,
            r.itl_mean_ms,
            r.itl_p99_ms,
            r.speedup_vs_1,
            r.mask_us_per_token,
            r.commit_us_per_token
        );
    }
    println!("= output tok/s = all output tokens / (last token − submit); ITL over every consecutive token pair of every request");
}
