//! "This machine, measured": predictions for a model on a machine profile written by
//! `folio profile` — the decode round time and how much KV fits — to compare with what folio
//! measures (issue 8, acceptance 3).

use serde::Serialize;

use crate::capacity::{final_tokens, Shape};
use crate::error::{at_least_one, Result};
use crate::hardware::MachineProfile;
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, mib};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachinePrediction {
    pub model: String,
    pub machine: String,
    pub batch: u64,
    pub context: u64,
    pub weight_bytes: u64,
    pub kv_bytes_per_token: u64,
    /// `D_w + b·L·k`.
    pub bytes_read: u64,
    /// `b·F(L)`.
    pub flops: f64,
    /// `bytes / β`.
    pub read_bound_s: f64,
    /// `flops / P`.
    pub compute_bound_s: f64,
    /// `max(read/MBU, compute/MFU) + overhead` with the profile's measured efficiencies
    /// (1 when absent, i.e. the bound).
    pub predicted_round_s: f64,
    /// The profile's measured decode fit evaluated at this batch and context, when it was
    /// measured with this model.
    pub fit_round_s: Option<f64>,
    pub kv_budget_bytes: u64,
    pub block: u64,
    pub capacity_blocks: u64,
    pub capacity_tokens: u64,
    pub shape: Shape,
    /// Requests of `shape` that fit at their final length.
    pub capacity_requests: u64,
}

/// Predicts one decode round of `batch` requests at context `context`, and the KV capacity of
/// `kv_budget_bytes` (folio's `kv_cache_bytes`) for requests of `shape`.
pub fn predict(
    model: &ModelProfile,
    m: &MachineProfile,
    batch: u64,
    context: u64,
    kv_budget_bytes: u64,
    block: u64,
    shape: Shape,
) -> Result<MachinePrediction> {
    m.validate()?;
    at_least_one("batch", batch)?;
    at_least_one("block size", block)?;
    let k = model.kv_bytes_per_token();
    let bytes_read = model.weight_read_bytes() + batch * context * k;
    let flops = batch as f64 * model.decode_flops(context);
    let read = bytes_read as f64 / m.mem_bw_bytes_s;
    let compute = flops / m.peak_flops;
    let predicted = (read / m.mbu.unwrap_or(1.0)).max(compute / m.mfu.unwrap_or(1.0))
        + m.round_overhead_s.unwrap_or(0.0);
    let fit_round_s = m.decode_fit.as_ref().and_then(|f| {
        let same = f
            .model
            .as_deref()
            .is_none_or(|n| n.to_lowercase().contains(&model.name.to_lowercase()));
        same.then(|| {
            f.cost_model()
                .round_s((0..batch).map(|_| (context as usize, 1usize)))
        })
    });
    let capacity_blocks = kv_budget_bytes / (block * k).max(1);
    let per_request_blocks = final_tokens(shape, block) / block;
    Ok(MachinePrediction {
        model: model.name.clone(),
        machine: m.name.clone(),
        batch,
        context,
        weight_bytes: model.weight_read_bytes(),
        kv_bytes_per_token: k,
        bytes_read,
        flops,
        read_bound_s: read,
        compute_bound_s: compute,
        predicted_round_s: predicted,
        fit_round_s,
        kv_budget_bytes,
        block,
        capacity_blocks,
        capacity_tokens: capacity_blocks * block,
        shape,
        capacity_requests: capacity_blocks / per_request_blocks.max(1),
    })
}

impl MachinePrediction {
    pub fn tables(&self) -> Vec<Table> {
        let t = Table::new(
            format!("{} on {} (measured profile)", self.model, self.machine),
            &[
                "batch",
                "context",
                "read MB",
                "read bound ms",
                "compute bound ms",
                "roofline round ms",
                "predicted round ms",
            ],
        )
        .row(vec![
            self.batch.to_string(),
            self.context.to_string(),
            fx(self.bytes_read as f64 / 1e6, 1),
            fx(self.read_bound_s * 1e3, 2),
            fx(self.compute_bound_s * 1e3, 2),
            fx(self.predicted_round_s * 1e3, 2),
            fx(self.fit_round_s.unwrap_or(self.predicted_round_s) * 1e3, 2),
        ])
        .explain(
            "roofline = max(bytes/(β·MBU), b·F/(P·MFU)) + overhead, bytes = D_w + b·L·k; predicted = the \
             profile's measured round model a + b·tokens + c·pairs (the reference form) when it was fitted \
             for this model, else the roofline",
        );
        let c = Table::new(
            format!(
                "KV capacity in {} MiB at {} B/token, {}-token blocks",
                fx(mib(self.kv_budget_bytes as f64), 0),
                self.kv_bytes_per_token,
                self.block
            ),
            &[
                "blocks",
                "tokens",
                "request (in/out)",
                "requests at final length",
            ],
        )
        .row(vec![
            self.capacity_blocks.to_string(),
            self.capacity_tokens.to_string(),
            format!("{}/{}", self.shape.input, self.shape.output),
            self.capacity_requests.to_string(),
        ])
        .explain("blocks = floor(budget/(p·k)); requests = floor(blocks / ceil((L_in + G − 1)/p))");
        vec![t, c]
    }
}
