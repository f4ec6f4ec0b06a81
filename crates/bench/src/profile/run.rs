//! The profile run and its table.

use crate::error::Result;
use folio_kernels::pool::ThreadPool;
use folio_model::{KvFormat, Model};
use folio_plan::{MachineProfile, RoundFit};
use serde::{Deserialize, Serialize};

use super::fit::{least_squares, round_fit};
use super::probe;
use super::rounds::{self, DecodePoint, PrefillPoint};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    pub batches: Vec<usize>,
    pub contexts: Vec<usize>,
    /// Fewer steps and repetitions (a smoke run).
    pub quick: bool,
    /// Size of the bandwidth probe's buffer (far above the last-level cache).
    pub bandwidth_bytes: usize,
    /// The model's name for `decode_fit.model` (the GGUF file name: the planner matches
    /// its own model name, e.g. `SmolLM2-135M`, as a case-insensitive substring).
    pub model_name: String,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            batches: vec![1, 4, 16, 64],
            contexts: vec![256, 2048],
            quick: false,
            bandwidth_bytes: 512 << 20,
            model_name: "model".into(),
        }
    }
}

/// Everything `folio profile` measured, plus the machine profile derived from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProfileReport {
    pub threads: usize,
    pub mem_bw_bytes_s: f64,
    pub peak_flops: f64,
    /// The int8 dot-product instructions' peaks on all threads, widest first.
    #[serde(default)]
    pub int8_peaks: Vec<super::peak::Peak>,
    pub kv_bytes_per_token: usize,
    pub decode: Vec<DecodePoint>,
    pub prefill: Vec<PrefillPoint>,
    pub machine: MachineProfile,
}

/// Decode rounds timed per configuration: enough for a stable median, few where a round
/// is long, so the whole profile stays within about two minutes on two cores.
fn steps_for(batch: usize, context: usize, quick: bool) -> usize {
    let base: usize = match batch {
        0..=4 => 24,
        5..=16 => 12,
        _ => 6,
    };
    let base = if context >= 2048 { base / 2 } else { base };
    if quick {
        (base / 4).max(2)
    } else {
        base.max(3)
    }
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "this machine".into())
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(1 << 30, |kb| kb * 1024)
}

/// Runs the probes and the model; `log` receives one line per finished measurement.
pub fn run(
    model: &Model,
    opts: &ProfileOptions,
    mut log: impl FnMut(&str),
) -> Result<ProfileReport> {
    let pool = ThreadPool::global();
    let threads = pool.n_threads();
    let reps = if opts.quick { 2 } else { 5 };
    let bw = probe::read_bandwidth(opts.bandwidth_bytes, threads, reps);
    log(&format!(
        "memory read bandwidth: {:.1} GB/s ({threads} threads)",
        bw / 1e9
    ));
    let int8 = super::peak::int8_peaks(threads, reps);
    for p in &int8 {
        log(&format!(
            "int8 peak ({}): {:.1} GMAC/s ({threads} threads)",
            p.instruction,
            p.macs_s / 1e9
        ));
    }
    if int8.is_empty() {
        log("int8 peak: no int8 dot-product instruction this CPU has is probed");
    }
    if !folio_kernels::matmul::amx_available() {
        log(if super::peak::has_amx_int8() {
            "int8 peak (AMX tdpbssd): present, but the OS does not grant the tile state (or FOLIO_AMX=0)"
        } else {
            "int8 peak (AMX tdpbssd): not present on this CPU"
        });
    }
    let peak = probe::matmul_flops(2048, 2048, 256, reps, pool);
    log(&format!(
        "matmul peak (Q4_1, batch 256): {:.1} GFLOP/s",
        peak / 1e9
    ));
    let kv_bpt = model
        .new_kv_cache(16, 1, folio_model::KvFormat::F16)
        .bytes_per_token();
    let mut prefill = Vec::new();
    for &c in &opts.contexts {
        let p = rounds::prefill(model, pool, c, if opts.quick || c > 1024 { 1 } else { 2 })?;
        log(&format!("prefill {c}: {:.3} s", p.seconds));
        prefill.push(p);
    }
    let mut decode = Vec::new();
    for &c in &opts.contexts {
        for &b in &opts.batches {
            let d = rounds::decode_round(
                model,
                pool,
                b,
                c,
                steps_for(b, c, opts.quick),
                KvFormat::F16.into(),
                &|_| None,
            )?;
            log(&format!(
                "decode b={b} L={c}: {:.2} ms/round",
                d.round_s * 1e3
            ));
            decode.push(d);
        }
    }
    let machine = machine_profile(opts, threads, bw, peak, &decode, &prefill);
    Ok(ProfileReport {
        threads,
        mem_bw_bytes_s: bw,
        peak_flops: peak,
        int8_peaks: int8,
        kv_bytes_per_token: kv_bpt,
        decode,
        prefill,
        machine,
    })
}

/// The planner's profile: measured peaks, efficiencies and the round-time fit.
///
/// `mbu` and `round_overhead_s` come from `round = overhead + bytes/(β·MBU)` fitted to the
/// rounds of batch ≤ 4 (where reads, not math, bound a decode round); `mfu` is the prefill
/// MFU of the longest prompt measured; `decode_fit` is fitted to every decode round.
pub fn machine_profile(
    opts: &ProfileOptions,
    threads: usize,
    bw: f64,
    peak: f64,
    decode: &[DecodePoint],
    prefill: &[PrefillPoint],
) -> MachineProfile {
    let small: Vec<&DecodePoint> = decode.iter().filter(|d| d.batch <= 4).collect();
    let lin = least_squares(
        &small
            .iter()
            .map(|d| vec![1.0, (d.weight_bytes + d.kv_bytes) as f64])
            .collect::<Vec<_>>(),
        &small.iter().map(|d| d.round_s).collect::<Vec<_>>(),
        &vec![1.0; small.len()],
    );
    let best_mbu = decode
        .iter()
        .map(|d| (d.weight_bytes + d.kv_bytes) as f64 / bw / d.round_s)
        .fold(0.0f64, f64::max);
    let (mbu, overhead) = match lin {
        Some(a) if small.len() >= 2 && a[0] >= 0.0 && a[1] > 0.0 && 1.0 / (a[1] * bw) <= 1.0 => {
            (1.0 / (a[1] * bw), a[0])
        }
        _ => (best_mbu.min(1.0), 0.0),
    };
    let mfu = prefill
        .iter()
        .max_by_key(|p| p.tokens)
        .map(|p| (p.flops / p.seconds / peak).min(1.0));
    // NOTE: decode rounds only. Prefill attention runs a different kernel path whose cost
    // per pair differs; mixing it in skewed the decode fit by up to 30 % on this machine.
    let pts: Vec<(f64, f64, f64)> = decode
        .iter()
        .map(|d| (d.new_tokens as f64, d.pairs as f64, d.round_s))
        .collect();
    let decode_fit = round_fit(&pts).map(|(f, t, p)| RoundFit {
        model: Some(opts.model_name.clone()),
        fixed_s: f,
        per_token_s: t,
        per_pair_s: p,
    });
    MachineProfile {
        name: format!("{} ({threads} threads)", cpu_name()),
        mem_bw_bytes_s: bw,
        peak_flops: peak,
        memory_bytes: memory_bytes(),
        host_link_bytes_s: None,
        power_w: None,
        threads: Some(threads as u32),
        mbu: (mbu > 0.0).then_some(mbu),
        mfu: mfu.filter(|m| *m > 0.0),
        round_overhead_s: Some(overhead),
        decode_fit,
    }
}

impl ProfileReport {
    /// The reference efficiency table for this machine.
    pub fn table(&self) -> String {
        let mut t = format!(
            "Machine: {}\nmeasured read bandwidth β = {:.1} GB/s, matmul peak P = {:.1} GFLOP/s, KV {} B/token\n\n",
            self.machine.name,
            self.mem_bw_bytes_s / 1e9,
            self.peak_flops / 1e9,
            self.kv_bytes_per_token
        );
        t.push_str(&format!(
            "{:>5} {:>7} {:>10} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7} {:>9} {:>11}\n",
            "batch",
            "context",
            "read MB",
            "bound ms",
            "math ms",
            "round ms",
            "best ms",
            "tok/s",
            "MBU %",
            "MFU %",
            "prefill MFU"
        ));
        for d in &self.decode {
            let bytes = (d.weight_bytes + d.kv_bytes) as f64;
            let bound = bytes / self.mem_bw_bytes_s;
            let math = d.flops / self.peak_flops;
            let pre = self
                .prefill
                .iter()
                .find(|p| p.tokens == d.context)
                .map_or("-".into(), |p| {
                    format!("{:.0} %", 100.0 * p.flops / p.seconds / self.peak_flops)
                });
            t.push_str(&format!(
                "{:>5} {:>7} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>8.2} {:>10.1} {:>7.0} {:>9.0} {:>11}\n",
                d.batch,
                d.context,
                bytes / 1e6,
                bound * 1e3,
                math * 1e3,
                d.round_s * 1e3,
                d.best_round_s * 1e3,
                d.batch as f64 / d.round_s,
                100.0 * bound / d.round_s,
                100.0 * math / d.round_s,
                pre
            ));
        }
        t.push_str(
            "\nread MB = weights + b·L·k per decode round; bound = read/β; math = b·F/P; \
             MBU = bound/round (median round); MFU = math/round;\nprefill MFU = FLOPs of one L-token prefill / (time·P).\n",
        );
        for p in &self.prefill {
            t.push_str(&format!(
                "prefill {:>5} tokens: {:>8.3} s  {:>7.1} tok/s  {:>6.1} GFLOP/s\n",
                p.tokens,
                p.seconds,
                p.tokens as f64 / p.seconds,
                p.flops / p.seconds / 1e9
            ));
        }
        let m = &self.machine;
        t.push_str(&format!(
            "profile: mbu {} mfu {} round overhead {}\n",
            m.mbu.map_or("-".into(), |v| format!("{:.2}", v)),
            m.mfu.map_or("-".into(), |v| format!("{:.2}", v)),
            m.round_overhead_s
                .map_or("-".into(), |v| format!("{:.2} ms", v * 1e3)),
        ));
        if let Some(f) = &m.decode_fit {
            t.push_str(&format!(
                "decode fit: round = {:.3} ms + {:.1} µs/token + {:.3} ns/pair\n",
                f.fixed_s * 1e3,
                f.per_token_s * 1e6,
                f.per_pair_s * 1e9
            ));
            let cm = f.cost_model();
            for d in &self.decode {
                let pred = cm.round_s((0..d.batch).map(|_| (d.context, 1usize)));
                t.push_str(&format!(
                    "  b={:<3} L={:<5} measured {:>8.2} ms  fit {:>8.2} ms ({:+.0} %)\n",
                    d.batch,
                    d.context,
                    d.round_s * 1e3,
                    pred * 1e3,
                    100.0 * (pred / d.round_s - 1.0)
                ));
            }
        }
        t
    }
}
