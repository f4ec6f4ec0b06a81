//! The measurement behind `folio bench lora`: decode throughput with LoRA adapters in
//! the batch.
//!
//! Every row decodes `batch` sequences of 256 tokens of context, one token each per
//! step, with `adapters` distinct random adapters spread over the batch (sequence `s` runs
//! adapter `s mod adapters`; 0 = the base model alone). The base weights are read once per
//! step whatever the mix; each adapter adds its own `A` and `B` reads and its rows' low-rank
//! products, so the more adapters in one batch, the fewer rows share each adapter's read.
//! Rows are measured interleaved, `rounds` times, and the median kept (the DRAM is shared
//! and noisy).

use crate::error::Result;
use crate::profile::rounds::decode_round;
use folio_kernels::pool::ThreadPool;
use folio_model::{LoraAdapter, LoraSet, Model};
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
pub struct Row {
    pub batch: usize,
    pub adapters: usize,
    pub rows_per_adapter: f64,
    pub step_ms: f64,
    pub tok_s: f64,
    /// tok/s over the same batch with no adapter.
    pub vs_base: f64,
    /// Adapter bytes the step reads (every distinct adapter's A and B once).
    pub adapter_mb_per_step: f64,
}

/// Random adapters for `model` (fixed seeds, llama.cpp's LoRA GGUF layout, in memory).
pub fn random_adapters(model: &Model, n: usize, rank: usize) -> Result<Vec<Arc<LoraAdapter>>> {
    let cfg = &model.config;
    let targets = folio_model::lora::default_targets(cfg);
    (0..n)
        .map(|i| {
            let w = folio_model::lora::random_adapter(
                cfg,
                &targets,
                rank,
                2.0 * rank as f32,
                0.05,
                i as u64,
            )?;
            let f = folio_gguf::GgufFile::from_bytes(w.try_to_bytes()?)?;
            let mut a = LoraAdapter::from_gguf(&f, cfg, rank, 1 + i as u64)?;
            a.name = format!("bench-{i}");
            Ok(Arc::new(a))
        })
        .collect()
}
/// Measures every (batch, adapters) cell of the grid on `model`, `rounds` times interleaved,
/// and keeps each cell's median round.
pub fn run(
    model: &Model,
    batches: &[usize],
    adapter_counts: &[usize],
    rank: usize,
    steps: usize,
    rounds: usize,
) -> Result<Vec<Row>> {
    let most = adapter_counts.iter().copied().max().unwrap_or(0);
    let pool = ThreadPool::global();
    let adapters = random_adapters(model, most, rank)?;
    let sets: Vec<LoraSet> = adapters
        .iter()
        .map(|x| LoraSet::new(vec![(x.clone(), 1.0)]))
        .collect();
    let mut cells: Vec<(usize, usize, Vec<f64>)> = batches
        .iter()
        .flat_map(|&b| adapter_counts.iter().map(move |&n| (b, n, Vec::new())))
        .collect();
    for _ in 0..rounds.max(1) {
        for (b, n, times) in cells.iter_mut() {
            let n = *n;
            let p = decode_round(
                model,
                pool,
                *b,
                256,
                steps,
                folio_model::KvFormat::F16.into(),
                &|s| (n > 0).then(|| sets[s % n].clone()),
            )?;
            times.push(p.round_s);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let per_adapter = adapters.first().map_or(0, |x| x.bytes()) as f64;
    let mut rows: Vec<Row> = cells
        .iter_mut()
        .map(|(b, n, times)| {
            let s = median(times);
            Row {
                batch: *b,
                adapters: *n,
                rows_per_adapter: if *n == 0 {
                    0.0
                } else {
                    *b as f64 / (*n).min(*b) as f64
                },
                step_ms: s * 1e3,
                tok_s: *b as f64 / s,
                vs_base: 0.0,
                adapter_mb_per_step: (*n).min(*b) as f64 * per_adapter / 1e6,
            }
        })
        .collect();
    let base: Vec<(usize, f64)> = rows
        .iter()
        .filter(|r| r.adapters == 0)
        .map(|r| (r.batch, r.tok_s))
        .collect();
    for r in &mut rows {
        if let Some(&(_, t)) = base.iter().find(|(b, _)| *b == r.batch) {
            r.vs_base = r.tok_s / t;
        }
    }
    Ok(rows)
}
pub fn print(rows: &[Row], rank: usize) {
    println!("LoRA decode throughput, rank {rank}, 256 tokens of context per sequence");
    println!(
        "{:>5} {:>8} {:>9} {:>9} {:>9} {:>8} {:>13}",
        "batch", "adapters", "rows/adp", "step ms", "tok/s", "vs base", "adapter MB/st"
    );
    for r in rows {
        println!(
            "{:>5} {:>8} {:>9.1} {:>9.2} {:>9.1} {:>7.0}% {:>13.1}",
            r.batch,
            r.adapters,
            r.rows_per_adapter,
            r.step_ms,
            r.tok_s,
            r.vs_base * 100.0,
            r.adapter_mb_per_step
        );
    }
}
