//! Value of keeping a cached prefix (DESIGN.md §kv-cache): `V_h = p_h(T_r − T_f) − T_m`, the break-even
//! hit rate `T_m/(T_r − T_f)` and the expected saving per MiB used to rank prefixes.

use serde::Serialize;

use crate::error::{fraction, positive, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, mib, GB, TFLOP};

/// One cached prefix under one link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefixValue {
    pub label: String,
    pub tokens: u64,
    pub bytes: u64,
    /// FLOPs to recompute it (no output head: nothing is sampled).
    pub flops: f64,
    pub recompute_s: f64,
    pub link_bytes_s: f64,
    pub fetch_s: f64,
    /// Maintenance: one swap-out copy over the same link.
    pub maintain_s: f64,
    pub hit_rate: f64,
    /// `V_h = p_h(T_r − T_f) − T_m`.
    pub value_s: f64,
    /// `T_m / (T_r − T_f)`; keeping pays above it.
    pub threshold: f64,
    pub value_per_mib_s: f64,
}

/// Values a `tokens`-token prefix held in host memory behind a `link_bytes_s` link, recomputed
/// at `mfu` of peak otherwise.
pub fn prefix_value(
    label: &str,
    model: &ModelProfile,
    hw: &HardwareProfile,
    tokens: u64,
    hit_rate: f64,
    link_bytes_s: f64,
    mfu: f64,
) -> Result<PrefixValue> {
    fraction("hit rate", hit_rate)?;
    positive("link bandwidth", link_bytes_s)?;
    positive("mfu", mfu)?;
    let bytes = tokens * model.kv_bytes_per_token();
    let flops = model.forward_flops(0, tokens, 0);
    let recompute_s = flops / (hw.peak_flops * mfu);
    let fetch_s = bytes as f64 / link_bytes_s;
    let maintain_s = fetch_s;
    let value_s = hit_rate * (recompute_s - fetch_s) - maintain_s;
    Ok(PrefixValue {
        label: label.into(),
        tokens,
        bytes,
        flops,
        recompute_s,
        link_bytes_s,
        fetch_s,
        maintain_s,
        hit_rate,
        value_s,
        threshold: maintain_s / (recompute_s - fetch_s),
        value_per_mib_s: value_s / mib(bytes as f64),
    })
}

/// Several prefixes, and how many of the smallest fit in the largest one's space.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheValue {
    pub entries: Vec<PrefixValue>,
    /// `(large label, small label, n = floor(large/small), n·V_small, V_large)`.
    pub same_space: Option<(String, String, u64, f64, f64)>,
}

impl CacheValue {
    pub fn new(entries: Vec<PrefixValue>, large: usize, small: usize) -> Self {
        let same_space = match (entries.get(large), entries.get(small)) {
            (Some(a), Some(b)) if b.bytes > 0 => {
                let n = a.bytes / b.bytes;
                Some((
                    a.label.clone(),
                    b.label.clone(),
                    n,
                    n as f64 * b.value_s,
                    a.value_s,
                ))
            }
            _ => None,
        };
        Self {
            entries,
            same_space,
        }
    }

    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Value of keeping a cached prefix",
            &[
                "prefix",
                "tokens",
                "MiB",
                "recompute TFLOP",
                "T_r ms",
                "link GB/s",
                "T_f ms",
                "T_m ms",
                "p_h",
                "V_h ms",
                "threshold",
                "ms per MiB",
            ],
        );
        for e in &self.entries {
            t.push(vec![
                e.label.clone(),
                e.tokens.to_string(),
                fx(mib(e.bytes as f64), 0),
                fx(e.flops / TFLOP, 1),
                fx(e.recompute_s * 1e3, 1),
                fx(e.link_bytes_s / GB, 0),
                fx(e.fetch_s * 1e3, 1),
                fx(e.maintain_s * 1e3, 1),
                format!("{}%", fx(e.hit_rate * 100.0, 0)),
                fx(e.value_s * 1e3, 1),
                format!("{}%", fx(e.threshold * 100.0, 1)),
                fx(e.value_per_mib_s * 1e3, 3),
            ]);
        }
        let mut t = t.explain(
            "V_h = p_h(T_r − T_f) − T_m; keep when p_h > T_m/(T_r − T_f); rank by V_h per MiB",
        );
        if let Some((a, b, n, nb, va)) = &self.same_space {
            t.explanation.push_str(&format!(
                "; in {a}'s space: {n} × {b} = {} ms vs one {a} = {} ms",
                fx(nb * 1e3, 1),
                fx(va * 1e3, 1)
            ));
        }
        vec![t]
    }
}
