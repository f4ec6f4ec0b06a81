//! `folio bench engine`: continuous batching through the engine (no HTTP): N concurrent
//! requests with fixed prompt and output lengths; aggregate output tok/s, TTFT and ITL
//! (mean, p99) per concurrency level.

use crate::engine_args::EngineArgs;
use anyhow::Result;
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

pub fn run(
    args: &EngineArgs,
    levels: &[usize],
    prompt_len: usize,
    output_len: usize,
) -> Result<Vec<EngineRow>> {
    let h = args.start()?;
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
        let t0 = Instant::now();
        let streams: Vec<_> = prompts
            .into_iter()
            .map(|p| {
                let mut r = GenerateRequest::new(p, output_len);
                r.ignore_eos = true;
                h.submit(r)
            })
            .collect::<Result<_, _>>()?;
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
        });
    }
    h.shutdown();
    Ok(rows)
}

pub fn print(rows: &[EngineRow]) {
    println!(
        "{:>11} {:>7} {:>8} {:>12} {:>12} {:>12} {:>11} {:>7}",
        "concurrency",
        "tokens",
        "seconds",
        "output tok/s",
        "TTFT mean ms",
        "ITL mean ms",
        "ITL p99 ms",
        "vs 1"
    );
    for r in rows {
        println!(
            "{:>11} {:>7} {:>8.2} {:>12.1} {:>12.1} {:>12.2} {:>11.2} {:>6.2}x",
            r.concurrency,
            r.output_tokens,
            r.seconds,
            r.output_tok_s,
            r.ttft_mean_ms,
            r.itl_mean_ms,
            r.itl_p99_ms,
            r.speedup_vs_1
        );
    }
    println!("= output tok/s = all output tokens / (last token − submit); ITL over every consecutive token pair of every request");
}
