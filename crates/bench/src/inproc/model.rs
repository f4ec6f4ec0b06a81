//! `folio bench model`: raw forward-pass speed on this machine (no scheduler, no HTTP).
//!
//! Mirrors llama-bench: pp512 is one 512-token prefill from an empty cache; tg128 decodes 128
//! tokens one at a time from an empty cache. Batched rows decode `b` sequences that each
//! already hold `ctx` tokens of context, all in one forward per step, and report aggregate
//! tokens/s (median round, as `folio profile` measures it): the figure continuous batching
//! turns into throughput.
//!
//! Each row also says which matmul kernels ran and its memory-bandwidth utilization: weight
//! bytes the kernels read per step (the packed matrices' real size) times steps per second,
//! over this machine's DRAM read bandwidth, probed first with a streaming read of a buffer
//! several times larger than the last-level cache, and its model FLOPs utilization: the int8
//! multiply-accumulates of its tokens per second over the host's int8 peak, probed first
//! with chains of the widest int8 dot-product instruction the CPU has (`profile::peak`).

use crate::error::Result;
use crate::profile::rounds::tokens;
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormats, Model};
use serde::Serialize;
use std::time::Instant;

#[derive(Serialize)]
pub struct Row {
    pub test: String,
    /// The KV formats of the row's cache (`q8_0`, or `q8_0:q4h` with K and V apart).
    pub kv_format: String,
    pub batch: usize,
    pub context: usize,
    pub tokens: usize,
    pub seconds: f64,
    pub tok_s: f64,
    pub weight_bytes_per_step: usize,
    pub weight_gb_s: f64,
    /// `weight_gb_s` over the probed DRAM read bandwidth.
    pub mbu: f64,
    /// Model FLOPs utilization: the int8 multiply-accumulates the row's tokens cost in the
    /// weight matrices per second, over the host's probed int8 peak ([`Report::int8_peak`]).
    pub mfu: Option<f64>,
    /// The same MACs over the vector units' peak ([`Report::vector_peak`]): on a host with
    /// AMX tiles, how far the row is from what the vector kernels alone could reach.
    pub mfu_vector: Option<f64>,
    /// The quantized matmul kernels the row ran (`avx512-vnni`, `avx2`, `scalar`).
    pub kernel: String,
    /// Decode rows: aggregate tok/s over the batch-1 decode row's at the same context (when
    /// the run has one): what batching buys on this machine.
    pub vs_batch_1: Option<f64>,
    /// MoE models: mean rows per expert that got any in the row's last step (each such
    /// expert's weights are read once per step for all its rows); `weight_bytes_per_step`
    /// then counts the experts that step read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_per_expert: Option<f64>,
}

const BLOCK: usize = 16;

fn best_of<F: FnMut() -> Result<f64>>(reps: usize, mut f: F) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        best = best.min(f()?);
    }
    Ok(best)
}

pub fn prefill(model: &Model, n: usize, reps: usize, format: KvFormats) -> Result<f64> {
    let pool = ThreadPool::global();
    let blocks = n.div_ceil(BLOCK);
    let mut kv = model.new_kv_cache(BLOCK, blocks, format);
    let toks = tokens(n, 1, model.config.vocab_size);
    best_of(reps, || {
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, (0..blocks as u32).collect(), 1);
        let t = Instant::now();
        model.forward(&b, &mut kv, pool)?;
        Ok(t.elapsed().as_secs_f64())
    })
}

/// Seconds for `steps` greedy decode steps of one sequence from an empty cache (tg, as
/// llama-bench measures it).
pub fn tg(model: &Model, steps: usize, format: KvFormats) -> Result<f64> {
    let pool = ThreadPool::global();
    let blocks = (steps + 1).div_ceil(BLOCK);
    let mut kv = model.new_kv_cache(BLOCK, blocks, format);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut next = tokens(1, 99, model.config.vocab_size)[0];
    let t = Instant::now();
    for step in 0..steps {
        let mut b = ForwardBatch::new();
        b.push(&[next], step, table.clone(), 1);
        let logits = model.forward(&b, &mut kv, pool)?;
        next = folio_engine::sampler::argmax(&logits) as u32;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The whole report: the bandwidth probe and one row per test.
#[derive(Serialize)]
pub struct Report {
    /// Streaming read bandwidth of this machine's DRAM (GB/s), all pool threads.
    pub dram_gb_s: f64,
    /// Bytes of the probe's buffer.
    pub probe_bytes: usize,
    /// The host's int8 dot-product peak on the pool's threads (the fastest instruction it
    /// has), what `mfu` divides by.
    pub int8_peak: Option<crate::profile::peak::Peak>,
    /// The vector units' int8 peak (`vpdpbusd`, `vpmaddubsw`), the same as `int8_peak` on a
    /// host without tiles; what `mfu_vector` divides by.
    pub vector_peak: Option<crate::profile::peak::Peak>,
    /// Multiply-accumulates one token costs in the weight matrices, the output head's
    /// included (a prefill row counts the head once, for its one logit row).
    pub macs_per_token: u64,
    pub rows: Vec<Row>,
}

/// The probe's buffer: 2 GiB, several times any last-level cache of the CPUs folio targets
/// (this machine's L3 is 480 MiB), so the read comes from DRAM.
const PROBE_BYTES: usize = 2 << 30;

pub fn run(
    model: &Model,
    quick: bool,
    batches: &[usize],
    context: usize,
    decode_only: bool,
    formats: &[KvFormats],
) -> Result<Report> {
    let threads = ThreadPool::global().n_threads();
    let dram = crate::profile::probe::read_bandwidth(PROBE_BYTES, threads, 3);
    let dram_gb_s = dram / 1e9;
    let peaks = crate::profile::peak::int8_peaks(threads, 3);
    let vector_peak = crate::profile::peak::vector_best(&peaks);
    let int8_peak = crate::profile::peak::best(peaks);
    let macs_per_token = model.weights.macs_per_token();
    // The output head runs only for the rows that need logits: one per sequence per step
    // (a 512-token prefill asks one), so a row's MACs are its tokens through the layers
    // plus its logit rows through the head.
    let head = model.weights.head();
    let head_macs = (head.rows() * head.cols()) as u64;
    let macs = |tokens: usize, logit_rows: usize| {
        tokens as f64 * (macs_per_token - head_macs) as f64 + logit_rows as f64 * head_macs as f64
    };
    let kernel = folio_kernels::cpu::matmul_path(folio_kernels::cpu::isa()).to_string();
    let dense_wb = model.weights.bytes_per_step();
    let mut rows = Vec::new();
    let row = |test: &str,
               format: KvFormats,
               batch,
               context,
               tokens: usize,
               seconds: f64,
               steps: usize| {
        let moe = model.moe_stats();
        let wb = moe.as_ref().map_or(dense_wb, |m| m.last_step_weight_bytes);
        let macs_s = macs(tokens, batch * steps) / seconds;
        Row {
            test: test.into(),
            kv_format: kv_label(format),
            batch,
            context,
            tokens,
            seconds,
            tok_s: tokens as f64 / seconds,
            weight_bytes_per_step: wb,
            weight_gb_s: wb as f64 * steps as f64 / seconds / 1e9,
            mbu: wb as f64 * steps as f64 / seconds / dram,
            mfu: int8_peak.as_ref().map(|p| macs_s / p.macs_s),
            mfu_vector: vector_peak.as_ref().map(|p| macs_s / p.macs_s),
            kernel: kernel.clone(),
            vs_batch_1: None,
            rows_per_expert: moe.map(|m| m.last_rows_per_expert()),
        }
    };
    let reps = if quick { 1 } else { 3 };
    for &format in formats {
        if !decode_only {
            let s = prefill(model, 512, reps, format)?;
            rows.push(row("pp512", format, 1, 0, 512, s, 1));
            let n_tg = if quick { 32 } else { 128 };
            let s = best_of(reps.min(2), || tg(model, n_tg, format))?;
            rows.push(row(&format!("tg{n_tg}"), format, 1, 0, n_tg, s, n_tg));
        }
        // Batched rows: the same measurement as `folio profile` (median round of `steps`
        // rounds at a fixed context, 256 tokens unless asked), so the two commands agree by
        // method.
        let steps = if quick { 8 } else { 32 };
        for &b in batches {
            let p = crate::profile::rounds::decode_round(
                model,
                ThreadPool::global(),
                b,
                context,
                steps,
                format,
                &|_| None,
            )?;
            rows.push(row(
                "decode",
                format,
                b,
                context,
                b * steps,
                p.round_s * steps as f64,
                steps,
            ));
        }
    }
    // Each format's decode rows against its own batch-1 row.
    let base: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.test == "decode" && r.batch == 1)
        .map(|r| (r.kv_format.clone(), r.tok_s))
        .collect();
    for r in rows.iter_mut().filter(|r| r.test == "decode") {
        r.vs_batch_1 = base
            .iter()
            .find(|(f, _)| *f == r.kv_format)
            .map(|(_, b)| r.tok_s / b);
    }
    Ok(Report {
        dram_gb_s,
        probe_bytes: PROBE_BYTES,
        int8_peak,
        vector_peak,
        macs_per_token,
        rows,
    })
}

/// `q8_0`, or `q8_0:q4h` when K and V differ (no comma: `--kv-format` is a comma list).
pub fn kv_label(f: KvFormats) -> String {
    if f.k == f.v {
        f.k.name().to_string()
    } else {
        format!("{}:{}", f.k.name(), f.v.name())
    }
}

pub fn print_table(report: &Report) {
    println!(
        "DRAM read bandwidth (probe: {} MiB streamed by {} threads): {:.1} GB/s",
        report.probe_bytes >> 20,
        ThreadPool::global().n_threads(),
        report.dram_gb_s
    );
    match &report.int8_peak {
        Some(p) => println!(
            "int8 peak ({}, {} threads): {:.1} GMAC/s; the model costs {:.3} GMAC a token",
            p.instruction,
            p.threads,
            p.macs_s / 1e9,
            report.macs_per_token as f64 / 1e9
        ),
        None => println!("int8 peak: no int8 dot-product instruction probed on this CPU"),
    }
    // With AMX the tiles' peak is far above the vector units'; "MFU vec" says the same
    // row's share of the vector units' peak, the figure a host without tiles reports.
    let tiles = report.int8_peak.as_ref().is_some_and(|p| p.tile);
    if let (true, Some(v)) = (tiles, &report.vector_peak) {
        println!(
            "vector int8 peak ({}, {} threads): {:.1} GMAC/s (MFU vec)",
            v.instruction,
            v.threads,
            v.macs_s / 1e9
        );
    }
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.0}%", x * 100.0));
    let rows = &report.rows;
    println!(
        "{:<8} {:<10} {:>5} {:>7} {:>7} {:>9} {:>10} {:>12} {:>9} {:>5} {:>5}{} {:>6}  kernel",
        "test",
        "kv",
        "batch",
        "context",
        "tokens",
        "seconds",
        "tok/s",
        "weight MB/st",
        "weight GB/s",
        "MBU",
        "MFU",
        if tiles { " MFU vec" } else { "" },
        "x b1",
    );
    for r in rows {
        let vs = r.vs_batch_1.map_or(String::new(), |x| format!("{x:.2}x"));
        let mfu_vec = if tiles {
            format!(" {:>7}", pct(r.mfu_vector))
        } else {
            String::new()
        };
        println!(
            "{:<8} {:<10} {:>5} {:>7} {:>7} {:>9.3} {:>10.1} {:>12.1} {:>9.1} {:>4.0}% {:>5}{} {:>6}  {}",
            r.test,
            r.kv_format,
            r.batch,
            r.context,
            r.tokens,
            r.seconds,
            r.tok_s,
            r.weight_bytes_per_step as f64 / 1e6,
            r.weight_gb_s,
            r.mbu * 100.0,
            pct(r.mfu),
            mfu_vec,
            vs,
            r.kernel
        );
    }
    let moe: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let x = r.rows_per_expert?;
            Some(format!("{} b{} {x:.1}", r.test, r.batch))
        })
        .collect();
    if !moe.is_empty() {
        println!(
            "MoE rows per active expert (last step; weight MB/st counts the experts read): {}",
            moe.join(", ")
        );
    }
}
