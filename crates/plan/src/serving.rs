//! Serving under load (DESIGN.md §requests, §serving): request latency, throughput, Little's law, goodput,
//! Amdahl, GPU-seconds per request, cost per token and MBU from a token rate.

use serde::Serialize;

use crate::table::Table;
use crate::units::fx;

/// `n̄ = λ·T̄`.
pub fn little(arrival_per_s: f64, time_in_system_s: f64) -> f64 {
    arrival_per_s * time_in_system_s
}

/// `R_good = Σ Q_i·D_i / T_obs` from counts of correct-and-on-time results.
pub fn goodput(good: u64, observed_s: f64) -> f64 {
    good as f64 / observed_s
}

/// `S = 1/((1 − f) + f/s)`.
pub fn amdahl(f: f64, s: f64) -> f64 {
    1.0 / ((1.0 - f) + f / s)
}

/// `t_GPU = L/r_P + (G − 1)/r_D`.
pub fn gpu_seconds(l: u64, g: u64, r_prefill: f64, r_decode: f64) -> f64 {
    l as f64 / r_prefill + g.saturating_sub(1) as f64 / r_decode
}

/// Dollars per million output tokens at `usd_per_hour` and `tokens_per_s`.
pub fn usd_per_million(usd_per_hour: f64, tokens_per_s: f64) -> f64 {
    usd_per_hour / 3600.0 / tokens_per_s * 1e6
}

/// `MBU = params × bytes/param × tokens/s ÷ peak bandwidth`.
pub fn mbu(params: f64, bytes_per_param: f64, tokens_per_s: f64, bw: f64) -> f64 {
    params * bytes_per_param * tokens_per_s / bw
}

/// `T = queue + prefill + (G − 1)·ITL`.
pub fn request_time(queue_s: f64, prefill_s: f64, g: u64, itl_s: f64) -> f64 {
    queue_s + prefill_s + g.saturating_sub(1) as f64 * itl_s
}

/// The section's worked numbers, recomputed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Serving {
    /// `(λ, T, n̄)`.
    pub little: Vec<(f64, f64, f64)>,
    /// `(queue, prefill, G, ITL, T, with one foreign prefill, deadline)`.
    pub request: (f64, f64, u64, f64, f64, f64, f64),
    /// `(batch, round s, tokens/s)`.
    pub throughput: Vec<(u64, f64, f64)>,
    /// `(f, s, speed-up, new total of a 100 s task)`.
    pub amdahl: Vec<(f64, f64, f64, f64)>,
    /// `(L, G, r_P, r_D, t_GPU)`.
    pub gpu_s: (u64, u64, f64, f64, f64),
    /// `($/h, tok/s, $/M tokens)`.
    pub cost: (f64, f64, f64),
    /// `(params, bytes/param, tok/s, bandwidth, MBU)`.
    pub mbu: (f64, f64, f64, f64, f64),
    /// `(answers, correct, correct and on time)`.
    pub goodput_counts: (u64, u64, u64),
}

pub fn reference() -> Serving {
    let req = request_time(0.1, 0.096, 256, 0.0265);
    let (rp, rd) = (16_059.0, 16.0 / 0.02735);
    Serving {
        little: vec![(4.0, 0.5, little(4.0, 0.5)), (4.0, 2.0, little(4.0, 2.0))],
        request: (0.1, 0.096, 256, 0.0265, req, req + 0.096, 7.0),
        throughput: vec![(16, 0.02744, 16.0 / 0.02744), (1, 0.02626, 1.0 / 0.02626)],
        amdahl: [(0.5, 4.0), (0.2, 4.0)]
            .iter()
            .map(|&(f, s)| {
                let sp = amdahl(f, s);
                (f, s, sp, 100.0 / sp)
            })
            .collect(),
        gpu_s: (2048, 256, rp, rd, gpu_seconds(2048, 256, rp, rd)),
        cost: (2.0, 100.0, usd_per_million(2.0, 100.0)),
        mbu: (7e9, 2.0, 100.0, 2e12, mbu(7e9, 2.0, 100.0, 2e12)),
        goodput_counts: (336, 294, 155),
    }
}

impl Serving {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new("Serving arithmetic", &["quantity", "inputs", "result"]);
        for (l, tt, n) in &self.little {
            t.push(vec![
                "Little's law".into(),
                format!("λ = {l}/s, T = {tt} s"),
                format!("n̄ = {n}"),
            ]);
        }
        let (q, p, g, itl, tot, late, dl) = self.request;
        t.push(vec![
            "request time".into(),
            format!("{q} s queue + {p} s prefill + {} × {} ms", g - 1, itl * 1e3),
            format!(
                "{} s; one foreign prefill → {} s ({} the {} s deadline)",
                fx(tot, 2),
                fx(late, 2),
                if late > dl { "misses" } else { "meets" },
                dl
            ),
        ]);
        for (b, r, tps) in &self.throughput {
            t.push(vec![
                "throughput".into(),
                format!("batch {b}, round {} ms", fx(r * 1e3, 2)),
                format!("{} tok/s", fx(*tps, 0)),
            ]);
        }
        for (f, s, sp, new) in &self.amdahl {
            t.push(vec![
                "Amdahl".into(),
                format!("f = {f}, s = {s}"),
                format!("{} s of 100 s ({}×)", fx(*new, 1), fx(*sp, 2)),
            ]);
        }
        let (l, g, rp, rd, tg) = self.gpu_s;
        t.push(vec![
            "GPU-seconds".into(),
            format!("L = {l}, G = {g}, r_P = {rp}, r_D = {}", fx(rd, 0)),
            format!("t_GPU = {} GPU·s", fx(tg, 3)),
        ]);
        let (usd, tps, per_m) = self.cost;
        t.push(vec![
            "cost".into(),
            format!("${usd}/h at {tps} tok/s"),
            format!("${} per M tokens", fx(per_m, 2)),
        ]);
        let (pp, bpp, tps, bw, m) = self.mbu;
        t.push(vec![
            "MBU".into(),
            format!(
                "{} B params × {bpp} B × {tps} tok/s / {} TB/s",
                pp / 1e9,
                bw / 1e12
            ),
            format!("{}%", fx(m * 100.0, 0)),
        ]);
        let (a, c, g) = self.goodput_counts;
        t.push(vec![
            "goodput".into(),
            format!("{a} answers, {c} correct"),
            format!("{g} correct and on time count"),
        ]);
        vec![t.explain(
            "n̄ = λT; S = 1/((1−f) + f/s); t_GPU = L/r_P + (G−1)/r_D; R_good = ΣQ·D/T_obs; MBU = bytes·tok/s/β",
        )]
    }
}
