//! Weight offload (DESIGN.md §compression): memory freed with prefetch buffers, per-step copy time over each
//! link, and when compressing before the transfer pays.

use serde::Serialize;

use crate::error::{at_least_one, positive, Result};
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, mib, GB};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkCopy {
    pub link: String,
    pub bytes_s: f64,
    /// Offloaded bytes / link rate: copies must cross the link every step.
    pub per_step_s: f64,
    /// `steps × max(copy, decode round)`: prefetch overlaps, never removes bytes.
    pub total_s: f64,
    pub meets_deadline: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offload {
    pub model: String,
    pub every: u64,
    pub layers_offloaded: u64,
    pub bytes_per_layer: u64,
    pub offloaded_bytes: u64,
    /// `(buffers, net bytes freed)`.
    pub net: Vec<(u64, u64)>,
    /// `(buffers, extra prompt states, extra full states)` fitting the freed space.
    pub extra_states: Vec<(u64, u64, u64)>,
    pub decode_round_s: f64,
    pub steps: u64,
    pub deadline_s: f64,
    pub links: Vec<LinkCopy>,
    /// Link rate needed to copy all steps within `copy_budget_s`.
    pub copy_budget_s: f64,
    pub min_link_bytes_s: f64,
}

/// Offloads the FFN of one layer in every `every` layers.
#[allow(clippy::too_many_arguments)]
pub fn offload(
    model: &ModelProfile,
    every: u64,
    buffers: &[u64],
    state_bytes: (u64, u64),
    decode_round_s: f64,
    steps: u64,
    deadline_s: f64,
    links: &[(&str, f64)],
    copy_budget_s: f64,
) -> Result<Offload> {
    at_least_one("offload every", every)?;
    positive("decode round", decode_round_s)?;
    let layers_offloaded = model.layers / every;
    let bytes_per_layer = (model.ffn_params_per_expert() as f64 * model.weight_bytes_per_param)
        as u64
        * model.experts.max(1);
    let offloaded = layers_offloaded * bytes_per_layer;
    let net: Vec<(u64, u64)> = buffers
        .iter()
        .map(|&b| (b, offloaded.saturating_sub(b * bytes_per_layer)))
        .collect();
    Ok(Offload {
        model: model.name.clone(),
        every,
        layers_offloaded,
        bytes_per_layer,
        offloaded_bytes: offloaded,
        extra_states: net
            .iter()
            .map(|&(b, n)| (b, n / state_bytes.0.max(1), n / state_bytes.1.max(1)))
            .collect(),
        net,
        decode_round_s,
        steps,
        deadline_s,
        links: links
            .iter()
            .map(|&(name, bw)| {
                let per_step_s = offloaded as f64 / bw;
                let total_s = steps as f64 * per_step_s.max(decode_round_s);
                LinkCopy {
                    link: name.into(),
                    bytes_s: bw,
                    per_step_s,
                    total_s,
                    meets_deadline: total_s <= deadline_s,
                }
            })
            .collect(),
        copy_budget_s,
        min_link_bytes_s: steps as f64 * offloaded as f64 / copy_budget_s,
    })
}

/// Compress-then-transfer: pays only if `R_dec > B_link / (1 − r)`, `r` = compressed/original.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompressedTransfer {
    pub bytes: u64,
    pub ratio: f64,
    pub link_bytes_s: f64,
    pub direct_s: f64,
    pub compressed_s: f64,
    pub saved_s: f64,
    pub min_decompress_bytes_s: f64,
}

pub fn compressed_transfer(
    bytes: u64,
    ratio: f64,
    link_bytes_s: f64,
) -> Result<CompressedTransfer> {
    if !(ratio > 0.0 && ratio < 1.0) {
        return Err(crate::error::PlanError::Invalid {
            field: "compression ratio",
            value: ratio.to_string(),
            why: "compressed size / original must lie in (0, 1)",
        });
    }
    let direct_s = bytes as f64 / link_bytes_s;
    let compressed_s = direct_s * ratio;
    let saved_s = direct_s - compressed_s;
    Ok(CompressedTransfer {
        bytes,
        ratio,
        link_bytes_s,
        direct_s,
        compressed_s,
        saved_s,
        min_decompress_bytes_s: bytes as f64 / saved_s,
    })
}

impl Offload {
    pub fn tables(&self, ct: &CompressedTransfer) -> Vec<Table> {
        let mut m = Table::new(
            format!(
                "Weight offload: FFN of 1 in {} layers of {} = {} × {} MiB = {} MiB",
                self.every,
                self.model,
                self.layers_offloaded,
                fx(mib(self.bytes_per_layer as f64), 0),
                fx(mib(self.offloaded_bytes as f64), 0)
            ),
            &[
                "prefetch buffers",
                "net freed MiB",
                "extra prompt states",
                "extra full states",
            ],
        );
        for ((b, n), (_, a, f)) in self.net.iter().zip(&self.extra_states) {
            m.push(vec![
                b.to_string(),
                fx(mib(*n as f64), 0),
                a.to_string(),
                f.to_string(),
            ]);
        }
        let m =
            m.explain("net = offloaded − buffers × layer bytes; states = floor(net / state bytes)");
        let mut l = Table::new(
            format!(
                "Copy per step ({} GB) vs a {} ms decode round, {} steps, {} s deadline",
                fx(self.offloaded_bytes as f64 / GB, 2),
                fx(self.decode_round_s * 1e3, 2),
                self.steps,
                fx(self.deadline_s, 0)
            ),
            &["link", "GB/s", "copy ms/step", "total s", "meets deadline"],
        );
        for c in &self.links {
            l.push(vec![
                c.link.clone(),
                fx(c.bytes_s / GB, 0),
                fx(c.per_step_s * 1e3, 1),
                fx(c.total_s, 1),
                if c.meets_deadline { "yes" } else { "no" }.into(),
            ]);
        }
        let mut l = l.explain("copy ≥ bytes/B_link per step; step ≥ max(copy, round): prefetch overlaps copies, never removes bytes");
        l.explanation.push_str(&format!(
            "; all copies in {} s need ≥ {} GB/s",
            fx(self.copy_budget_s, 0),
            fx(self.min_link_bytes_s / GB, 0)
        ));
        let c = Table::new(
            format!(
                "Compress then transfer {} MiB at r = {} over {} GB/s",
                fx(mib(ct.bytes as f64), 0),
                fx(ct.ratio, 2),
                fx(ct.link_bytes_s / GB, 0)
            ),
            &[
                "direct ms",
                "compressed ms",
                "saved ms",
                "decompress must exceed GB/s",
            ],
        )
        .row(vec![
            fx(ct.direct_s * 1e3, 2),
            fx(ct.compressed_s * 1e3, 2),
            fx(ct.saved_s * 1e3, 2),
            fx(ct.min_decompress_bytes_s / GB, 1),
        ])
        .explain("pays only if R_dec > B_link/(1 − r)");
        vec![m, l, c]
    }
}
