//! Bytes per output token, the batch where KV reads match weight reads, the step-time bound
//! and MBU/MFU (DESIGN.md §batching, §serving).

use serde::Serialize;

use crate::efficiency::EfficiencyTable;
use crate::error::{at_least_one, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, gib, GB, TFLOP};

/// One batch size at one context length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoofRow {
    pub batch: u64,
    pub context: u64,
    /// `D_w + b·L·k`.
    pub bytes_read: u64,
    /// `d(b, L) = D_w/b + L·k` per output token.
    pub bytes_per_token: f64,
    pub read_bound_s: f64,
    pub compute_bound_s: f64,
    /// `max(b·F/P, (D_w + b·L·k)/β)`.
    pub step_bound_s: f64,
    /// Measured round (when the efficiency table is for this model and hardware).
    pub measured_s: Option<f64>,
    /// `read bound / measured`.
    pub mbu: Option<f64>,
    pub prefill_mfu: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    pub model: String,
    pub hardware: String,
    pub weight_bytes: u64,
    pub kv_bytes_per_token: u64,
    pub rows: Vec<RoofRow>,
    /// `(L, b_KV = ceil(D_w / (L·k)))`.
    pub b_kv: Vec<(u64, u64)>,
}

/// `b_KV = ceil(D_w / (L·k))`: the batch at which KV reads equal the weight read.
pub fn b_kv(model: &ModelProfile, l: u64) -> u64 {
    model
        .weight_read_bytes()
        .div_ceil((l * model.kv_bytes_per_token()).max(1))
}

/// `d(b, L) = D_w/b + L·k`.
pub fn bytes_per_token(model: &ModelProfile, b: u64, l: u64) -> f64 {
    model.weight_read_bytes() as f64 / b as f64 + (l * model.kv_bytes_per_token()) as f64
}

pub fn roofline(
    model: &ModelProfile,
    hw: &HardwareProfile,
    table: &EfficiencyTable,
    batches: &[u64],
    contexts: &[u64],
) -> Result<Roofline> {
    let mut rows = Vec::new();
    for &l in contexts {
        at_least_one("context tokens", l)?;
        for &b in batches {
            at_least_one("batch", b)?;
            let bytes = EfficiencyTable::bytes_read(model, b, l);
            let read = bytes as f64 / hw.mem_bw_bytes_s;
            let compute = b as f64 * model.decode_flops(l) / hw.peak_flops;
            let measured = (table.matches(model, hw) && l == table.context)
                .then(|| table.points.iter().find(|p| p.batch == b))
                .flatten();
            rows.push(RoofRow {
                batch: b,
                context: l,
                bytes_read: bytes,
                bytes_per_token: bytes_per_token(model, b, l),
                read_bound_s: read,
                compute_bound_s: compute,
                step_bound_s: read.max(compute),
                measured_s: measured.map(|p| p.round_s),
                mbu: measured.map(|p| read / p.round_s),
                prefill_mfu: measured.map(|p| p.prefill_mfu),
            });
        }
    }
    Ok(Roofline {
        model: model.name.clone(),
        hardware: hw.name.clone(),
        weight_bytes: model.weight_read_bytes(),
        kv_bytes_per_token: model.kv_bytes_per_token(),
        rows,
        b_kv: contexts.iter().map(|&l| (l, b_kv(model, l))).collect(),
    })
}

impl Roofline {
    pub fn tables(&self) -> Vec<Table> {
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or("-".into());
        let mut t = Table::new(
            format!(
                "Roofline: {} on {} (D_w = {} GB, k = {} B/token)",
                self.model,
                self.hardware,
                fx(self.weight_bytes as f64 / GB, 2),
                self.kv_bytes_per_token
            ),
            &[
                "batch",
                "context",
                "read GB/round",
                "GiB per token",
                "read bound ms",
                "compute bound ms",
                "measured ms",
                "decode MBU",
                "prefill MFU",
            ],
        );
        for r in &self.rows {
            t.push(vec![
                r.batch.to_string(),
                r.context.to_string(),
                fx(r.bytes_read as f64 / GB, 2),
                fx(gib(r.bytes_per_token), 2),
                fx(r.read_bound_s * 1e3, 2),
                fx(r.compute_bound_s * 1e3, 3),
                opt(r.measured_s, &|v| fx(v * 1e3, 2)),
                opt(r.mbu, &|v| format!("{}%", fx(v * 100.0, 0))),
                opt(r.prefill_mfu, &|v| format!("{}%", fx(v * 100.0, 0))),
            ]);
        }
        let t = t.explain(
            "d(b,L) = D_w/b + L·k; T_step ≥ max(b·F/P, (D_w + b·L·k)/β); MBU = read bound / measured",
        );
        let mut k = Table::new(
            "Batch where KV reads reach weight reads",
            &["context", "b_KV"],
        );
        for (l, b) in &self.b_kv {
            k.push(vec![l.to_string(), b.to_string()]);
        }
        vec![
            t,
            k.explain("b_KV = ceil(D_w / (L·k)); batching amortizes weights, not KV"),
        ]
    }
}

/// Prefill time of `flops` at `mfu` of peak.
pub fn compute_time_s(flops: f64, hw: &HardwareProfile, mfu: f64) -> f64 {
    flops / (hw.peak_flops * mfu)
}

/// FLOPs in TFLOP (display helper).
pub fn tflop(f: f64) -> f64 {
    f / TFLOP
}
