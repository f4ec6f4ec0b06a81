//! The design desk (DESIGN.md §serving): candidate configurations checked in the reference order —
//! fits in memory, then meets the deadline, then GPU-seconds and energy per good result.

use serde::Serialize;

use crate::capacity::{final_tokens, Shape};
use crate::efficiency::EfficiencyTable;
use crate::error::{at_least_one, positive, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, gib, mib, round_up, TFLOP};
use folio_gguf::KvFormat;

/// A batch of requests arriving together, all sharing the first `shared_prefix` tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeskWorkload {
    pub requests: u64,
    pub input: u64,
    pub shared_prefix: u64,
    pub output: u64,
    pub deadline_s: f64,
    /// Memory for KV and auxiliary buffers (after weights and base workspace).
    pub kv_budget_bytes: u64,
    pub block: u64,
}

impl DeskWorkload {
    /// 16 long requests, 8192 in (6144 shared), 256 out, 7 s, 12 GiB, 16-token blocks.
    pub fn reference() -> Self {
        Self {
            requests: 16,
            input: 8192,
            shared_prefix: 6144,
            output: 256,
            deadline_s: 7.0,
            kv_budget_bytes: 12 << 30,
            block: 16,
        }
    }

    fn validate(&self) -> Result<()> {
        at_least_one("requests", self.requests)?;
        at_least_one("input tokens", self.input)?;
        at_least_one("output tokens", self.output)?;
        at_least_one("block size", self.block)?;
        positive("deadline", self.deadline_s)?;
        Ok(())
    }
}

/// Measurements the desk reuses (the reference efficiency table, DESIGN.md §roofline): the shared-prefix batch's prefill time
/// (which fixes the prefill MFU for every variant) and its decode round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeskCalibration {
    /// Whole-batch prefill with the prefix cached (B: 2.04 s).
    pub shared_prefill_s: Option<f64>,
    /// Decode round of the shared-prefix batch (B: 27.35 ms).
    pub shared_round_s: Option<f64>,
}

impl DeskCalibration {
    pub fn reference() -> Self {
        Self {
            shared_prefill_s: Some(2.04),
            shared_round_s: Some(0.02735),
        }
    }

    pub fn none() -> Self {
        Self {
            shared_prefill_s: None,
            shared_round_s: None,
        }
    }
}

/// A speculation source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Draft {
    pub source: String,
    /// Average output tokens per verify round.
    pub tokens_per_round: f64,
    /// Device memory the drafter adds (weights, its KV, buffers).
    pub extra_bytes: u64,
    /// Prefill time multiplier (the drafter reads the prompt too).
    pub prefill_factor: f64,
    /// Positions verified per request per round.
    pub verify_positions: u64,
    /// Time added to every round (e.g. host lookup).
    pub extra_round_s: f64,
}

/// One configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub name: String,
    pub label: String,
    pub shared_prefix: bool,
    pub format: KvFormat,
    pub draft: Option<Draft>,
}

/// The reference variants A–D and variant E (context-lookup drafts).
pub fn reference_candidates() -> Vec<Candidate> {
    let c = |name: &str, label: &str, shared, format, draft| Candidate {
        name: name.into(),
        label: label.into(),
        shared_prefix: shared,
        format,
        draft,
    };
    vec![
        c("A", "BF16, independent", false, KvFormat::Bf16, None),
        c("B", "BF16, shared prefix", true, KvFormat::Bf16, None),
        c("C", "q8_0, independent", false, KvFormat::Q8_0, None),
        c(
            "D",
            "BF16, shared + DFlash drafts",
            true,
            KvFormat::Bf16,
            Some(Draft {
                source: "DFlash draft model".into(),
                tokens_per_round: 3.0,
                // Peak memory 17,706 → 20,894 MiB with the drafter (the reference speculation measurement).
                extra_bytes: 3188 << 20,
                prefill_factor: 1.094,
                verify_positions: 8,
                extra_round_s: 0.0,
            }),
        ),
        c(
            "E",
            "BF16, shared + context lookup (ex. 8-9)",
            true,
            KvFormat::Bf16,
            Some(Draft {
                source: "context n-gram lookup (host index)".into(),
                tokens_per_round: 2.0,
                extra_bytes: 0,
                prefill_factor: 1.0,
                verify_positions: 3,
                extra_round_s: 0.1e-3,
            }),
        ),
    ]
}

/// Why a candidate is out, or that it is feasible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Does not fit the KV budget (checked first).
    Memory,
    /// Fits but finishes after the deadline.
    Late,
    Feasible,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeskRow {
    pub name: String,
    pub label: String,
    pub kv_bytes: u64,
    pub fits: bool,
    pub prefill_flops: f64,
    pub prefill_s: f64,
    pub rounds: u64,
    /// Decode round before verification is considered.
    pub decode_round_s: f64,
    /// Compute time of verifying the drafts of the whole batch in one round.
    pub verify_s: Option<f64>,
    /// `max(decode, verify) + extra`.
    pub round_s: f64,
    pub total_s: f64,
    pub on_time: bool,
    pub verdict: Verdict,
    /// `total / good results` (only when feasible).
    pub gpu_s_per_good: Option<f64>,
    /// `power × total / good results` (an upper bound at the power limit).
    pub energy_j_per_good: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Desk {
    pub workload: DeskWorkload,
    pub model: String,
    pub hardware: String,
    /// Prefill MFU used (from the calibration, or the efficiency table).
    pub prefill_mfu: f64,
    pub rows: Vec<DeskRow>,
}

impl Desk {
    pub fn row(&self, name: &str) -> Option<&DeskRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    pub fn feasible(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Feasible)
            .map(|r| r.name.as_str())
            .collect()
    }
}

/// Evaluates `candidates` for `w` on `model`/`hw`.
pub fn desk(
    model: &ModelProfile,
    hw: &HardwareProfile,
    table: &EfficiencyTable,
    cal: &DeskCalibration,
    w: &DeskWorkload,
    candidates: &[Candidate],
) -> Result<Desk> {
    w.validate()?;
    let n = w.requests;
    let shared_tokens = w.shared_prefix.min(w.input) / w.block * w.block;
    let prefill_flops = |shared: bool| {
        let h = if shared { shared_tokens } else { 0 };
        n as f64 * model.forward_flops(h, w.input - h, 1)
    };
    let mfu = match cal.shared_prefill_s {
        Some(t) => prefill_flops(true) / (positive("calibration prefill", t)? * hw.peak_flops),
        None => table.prefill_mfu_at(n),
    };
    let shape = Shape {
        input: w.input,
        output: w.output,
    };
    let power = hw.power_w;
    let mut rows = Vec::new();
    for c in candidates {
        let k = model.kv_bytes_per_token_in(c.format);
        let kv_state = if c.shared_prefix {
            let private = round_up(w.input + w.output - 1 - shared_tokens, w.block);
            shared_tokens * k + n * private * k
        } else {
            n * final_tokens(shape, w.block) * k
        };
        let draft = c.draft.as_ref();
        let kv_bytes = kv_state + draft.map_or(0, |d| d.extra_bytes);
        let fits = kv_bytes <= w.kv_budget_bytes;
        let pf = prefill_flops(c.shared_prefix);
        let prefill_s = pf / (mfu * hw.peak_flops) * draft.map_or(1.0, |d| d.prefill_factor);
        // KV read per round at the prompt length, as DESIGN.md sizes rounds.
        let kv_read = if c.shared_prefix {
            (shared_tokens + n * (w.input - shared_tokens)) * k
        } else {
            n * w.input * k
        };
        let decode_round_s = match (
            c.shared_prefix && c.format == KvFormat::Bf16,
            cal.shared_round_s,
        ) {
            (true, Some(t)) => t,
            _ => table.round_s(model, hw, n, (model.weight_read_bytes() + kv_read) as f64),
        };
        let verify_s = draft.map(|d| {
            let p = d.verify_positions;
            n as f64 * model.forward_flops(w.input, p, p) / (mfu * hw.peak_flops)
        });
        let round_s =
            decode_round_s.max(verify_s.unwrap_or(0.0)) + draft.map_or(0.0, |d| d.extra_round_s);
        let per_round = draft.map_or(1.0, |d| d.tokens_per_round);
        let rounds = ((w.output - 1) as f64 / per_round).ceil() as u64;
        let total_s = prefill_s + rounds as f64 * round_s;
        let on_time = total_s <= w.deadline_s;
        let verdict = if !fits {
            Verdict::Memory
        } else if !on_time {
            Verdict::Late
        } else {
            Verdict::Feasible
        };
        let good = verdict == Verdict::Feasible;
        rows.push(DeskRow {
            name: c.name.clone(),
            label: c.label.clone(),
            kv_bytes,
            fits,
            prefill_flops: pf,
            prefill_s,
            rounds,
            decode_round_s,
            verify_s,
            round_s,
            total_s,
            on_time,
            verdict,
            gpu_s_per_good: good.then(|| total_s / n as f64),
            energy_j_per_good: good
                .then(|| power.map(|p| p * total_s / n as f64))
                .flatten(),
        });
    }
    Ok(Desk {
        workload: w.clone(),
        model: model.name.clone(),
        hardware: hw.name.clone(),
        prefill_mfu: mfu,
        rows,
    })
}

impl Desk {
    pub fn tables(&self) -> Vec<Table> {
        let w = &self.workload;
        let mut t = Table::new(
            format!(
                "Design desk: {} × ({} in, {} shared, {} out), {} s deadline, {} GiB for KV; {} on {}",
                w.requests,
                w.input,
                w.shared_prefix,
                w.output,
                fx(w.deadline_s, 1),
                fx(gib(w.kv_budget_bytes as f64), 1),
                self.model,
                self.hardware
            ),
            &[
                "cfg",
                "state",
                "KV MiB",
                "GiB",
                "fits",
                "prefill TFLOP",
                "prefill s",
                "rounds × ms",
                "verify ms",
                "total s",
                "verdict",
                "GPU·s/good",
                "J/good",
            ],
        );
        for r in &self.rows {
            t.push(vec![
                r.name.clone(),
                r.label.clone(),
                fx(mib(r.kv_bytes as f64), 0),
                fx(gib(r.kv_bytes as f64), 2),
                if r.fits { "yes" } else { "no" }.into(),
                fx(r.prefill_flops / TFLOP, 1),
                fx(r.prefill_s, 2),
                format!("{} × {}", r.rounds, fx(r.round_s * 1e3, 2)),
                r.verify_s.map_or("-".into(), |v| fx(v * 1e3, 1)),
                fx(r.total_s, 2),
                match r.verdict {
                    Verdict::Memory => "out: memory".into(),
                    Verdict::Late => format!("late (> {} s)", fx(w.deadline_s, 1)),
                    Verdict::Feasible => "feasible".into(),
                },
                r.gpu_s_per_good.map_or("-".into(), |v| fx(v, 3)),
                r.energy_j_per_good
                    .map_or("-".into(), |v| format!("≤ {}", fx(v, 0))),
            ]);
        }
        vec![t.explain(format!(
            "check order: KV ≤ budget → prefill + ceil((G−1)/tokens per round)·max(T_round, T_verify) ≤ deadline \
             → GPU·s and energy per good result; prefill at MFU {}%",
            fx(self.prefill_mfu * 100.0, 1)
        ))]
    }
}
