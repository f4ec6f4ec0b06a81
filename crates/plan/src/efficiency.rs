//! Measured efficiency: the reference efficiency table (RTX PRO 6000, Qwen3-8B, 2K context, CUDA
//! Graph off) and the two ways the planner turns it into time estimates.

use serde::Serialize;

use crate::hardware::HardwareProfile;
use crate::model::ModelProfile;

/// One batch size of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffPoint {
    pub batch: u64,
    /// Measured decode round (engine log, rounds without prefill).
    pub round_s: f64,
    /// Prefill MFU at this batch.
    pub prefill_mfu: f64,
}

/// A measured efficiency table for one model on one machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EfficiencyTable {
    pub model: String,
    pub hardware: String,
    pub context: u64,
    pub points: Vec<EffPoint>,
}

impl EfficiencyTable {
    /// The reference efficiency table (DESIGN.md §roofline). The batch-1 prefill MFU is 0.622 (printed as 62%): the reference
    /// 307.9 ms for a 6144-token prefix and 94.7 ms for a 2048-token one both need it.
    pub fn reference() -> Self {
        let p = |batch, round_ms: f64, mfu| EffPoint {
            batch,
            round_s: round_ms * 1e-3,
            prefill_mfu: mfu,
        };
        Self {
            model: "Qwen3-8B".into(),
            hardware: "RTX-PRO-6000".into(),
            context: 2048,
            points: vec![
                p(1, 26.26, 0.622),
                p(4, 26.62, 0.61),
                p(16, 27.44, 0.61),
                p(64, 29.63, 0.58),
            ],
        }
    }

    /// Whether the table was measured for this model on this hardware.
    pub fn matches(&self, model: &ModelProfile, hw: &HardwareProfile) -> bool {
        self.model == model.name && self.hardware == hw.name
    }

    /// Bytes one decode round reads at batch `b` and context `l`: `D_w + b·l·k`.
    pub fn bytes_read(model: &ModelProfile, b: u64, l: u64) -> u64 {
        model.weight_read_bytes() + b * l * model.kv_bytes_per_token()
    }

    /// `(bytes read, measured round)` of each point.
    pub fn byte_points(&self, model: &ModelProfile) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .map(|p| {
                (
                    Self::bytes_read(model, p.batch, self.context) as f64,
                    p.round_s,
                )
            })
            .collect()
    }

    /// Decode MBU of each point: `(bytes/β) / measured`.
    pub fn mbu(&self, model: &ModelProfile, hw: &HardwareProfile) -> Vec<f64> {
        self.byte_points(model)
            .iter()
            .map(|(b, t)| b / hw.mem_bw_bytes_s / t)
            .collect()
    }

    /// Round time for a round reading `bytes`, interpolated (linearly in bytes, extrapolated
    /// from the end segments) between the measured rounds: the reference rule for variants
    /// A and C of the design desk.
    pub fn round_s_by_bytes(&self, model: &ModelProfile, bytes: f64) -> f64 {
        interp(&self.byte_points(model), bytes)
    }

    /// MBU at batch `b` interpolated between the table's batches (for other hardware).
    pub fn mbu_at_batch(&self, model: &ModelProfile, hw: &HardwareProfile, b: u64) -> f64 {
        let pts: Vec<(f64, f64)> = self
            .points
            .iter()
            .zip(self.mbu(model, hw))
            .map(|(p, m)| (p.batch as f64, m))
            .collect();
        interp_clamped(&pts, b as f64)
    }

    /// Prefill MFU at batch `b` (clamped to the table's range).
    pub fn prefill_mfu_at(&self, b: u64) -> f64 {
        let pts: Vec<(f64, f64)> = self
            .points
            .iter()
            .map(|p| (p.batch as f64, p.prefill_mfu))
            .collect();
        interp_clamped(&pts, b as f64)
    }

    /// Decode round time at batch `b` reading `bytes`: interpolated measurements when the
    /// table belongs to this model and hardware, otherwise `bytes / (β · MBU(b))`.
    pub fn round_s(&self, model: &ModelProfile, hw: &HardwareProfile, b: u64, bytes: f64) -> f64 {
        if self.matches(model, hw) {
            self.round_s_by_bytes(model, bytes)
        } else {
            let reference_model = crate::model::qwen3_8b();
            let reference_hw = crate::hardware::rtx_pro_6000();
            bytes / (hw.mem_bw_bytes_s * self.mbu_at_batch(&reference_model, &reference_hw, b))
        }
    }
}

/// Piecewise-linear interpolation over points sorted by x; extrapolates from end segments.
pub fn interp(pts: &[(f64, f64)], x: f64) -> f64 {
    match pts.len() {
        0 => f64::NAN,
        1 => pts[0].1,
        n => {
            let i = pts.windows(2).position(|w| x <= w[1].0).unwrap_or(n - 2);
            let (x0, y0) = pts[i];
            let (x1, y1) = pts[i + 1];
            y0 + (x - x0) / (x1 - x0) * (y1 - y0)
        }
    }
}

fn interp_clamped(pts: &[(f64, f64)], x: f64) -> f64 {
    let lo = pts.first().map(|p| p.0).unwrap_or(x);
    let hi = pts.last().map(|p| p.0).unwrap_or(x);
    interp(pts, x.clamp(lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_hits_points_and_segments() {
        let pts = [(0.0, 0.0), (10.0, 1.0), (20.0, 3.0)];
        assert_eq!(interp(&pts, 10.0), 1.0);
        assert_eq!(interp(&pts, 15.0), 2.0);
        assert_eq!(interp(&pts, 30.0), 5.0);
        assert_eq!(interp_clamped(&pts, 30.0), 3.0);
    }
}
