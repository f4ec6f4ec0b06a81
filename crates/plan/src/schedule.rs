//! The scheduling simulator section: folio's own scheduler (folio-core) driven by a cost
//! model — the reference r0–r3 example as a preset, and any user workload.

use serde::Serialize;

use folio_core::kv::KvConfig;
use folio_core::sched::{BatchPolicy, SchedulerConfig};
use folio_core::sim::{simulate, SimRequest};
use folio_core::CostModel;

use crate::error::{PlanError, Result};
use crate::table::Table;
use crate::units::fx;

/// One request of a workload: arrival, prompt and output length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkItem {
    pub arrival_s: f64,
    pub input: usize,
    pub output: usize,
}

impl WorkItem {
    /// Parses `arrival_ms:input:output`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why| PlanError::Invalid {
            field: "request",
            value: s.into(),
            why,
        };
        let p: Vec<&str> = s.split(':').collect();
        if p.len() != 3 {
            return Err(bad("expected arrival_ms:input_tokens:output_tokens"));
        }
        let arrival_ms: f64 = p[0]
            .trim()
            .parse()
            .map_err(|_| bad("arrival_ms is not a number"))?;
        let input: usize = p[1]
            .trim()
            .parse()
            .map_err(|_| bad("input tokens is not an integer"))?;
        let output: usize = p[2]
            .trim()
            .parse()
            .map_err(|_| bad("output tokens is not an integer"))?;
        if !(arrival_ms.is_finite() && arrival_ms >= 0.0) || input == 0 || output == 0 {
            return Err(bad("need arrival ≥ 0, input ≥ 1, output ≥ 1"));
        }
        Ok(Self {
            arrival_s: arrival_ms * 1e-3,
            input,
            output,
        })
    }
}

/// The reference r0–r3: r0, r1 at 0 ms (2048 in; 8 and 2 out), r2 at 20 ms (8192 in, 2 out),
/// r3 at 30 ms (2048 in, 4 out).
pub fn reference_workload() -> Vec<WorkItem> {
    let w = |ms: f64, input, output| WorkItem {
        arrival_s: ms * 1e-3,
        input,
        output,
    };
    vec![
        w(0.0, 2048, 8),
        w(0.0, 2048, 2),
        w(20.0, 8192, 2),
        w(30.0, 2048, 4),
    ]
}

/// A scheduling mode to compare.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mode {
    pub name: &'static str,
    #[serde(skip)]
    pub policy: BatchPolicy,
    pub token_budget: usize,
    pub max_chunk: usize,
}

/// Fixed, continuous, and chunked (2048-token chunks, ≤ 4096 tokens per round).
pub fn reference_modes() -> Vec<Mode> {
    vec![
        Mode {
            name: "fixed",
            policy: BatchPolicy::Fixed,
            token_budget: usize::MAX,
            max_chunk: usize::MAX,
        },
        Mode {
            name: "continuous",
            policy: BatchPolicy::Continuous,
            token_budget: usize::MAX,
            max_chunk: usize::MAX,
        },
        Mode {
            name: "chunked",
            policy: BatchPolicy::Continuous,
            token_budget: 4096,
            max_chunk: 2048,
        },
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    pub id: u64,
    pub arrival_s: f64,
    pub ttft_s: Option<f64>,
    pub max_itl_s: f64,
    pub e2e_s: Option<f64>,
    pub rejected: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeResult {
    pub mode: Mode,
    pub makespan_s: f64,
    pub max_itl_s: f64,
    pub rounds: usize,
    pub preemptions: u64,
    pub requests: Vec<RequestRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    pub max_running: usize,
    pub fixed_s: f64,
    pub per_token_s: f64,
    pub per_pair_s: f64,
    pub results: Vec<ModeResult>,
}

impl Schedule {
    pub fn mode(&self, name: &str) -> Option<&ModeResult> {
        self.results.iter().find(|r| r.mode.name == name)
    }
}

/// Runs `work` under each mode through `folio_core::sim::simulate`.
pub fn schedule(
    work: &[WorkItem],
    modes: &[Mode],
    max_running: usize,
    cost: &CostModel,
    kv_blocks: usize,
    block: usize,
) -> Result<Schedule> {
    let reqs: Vec<SimRequest> = work
        .iter()
        .enumerate()
        .map(|(i, w)| SimRequest::unique(i as u64, w.arrival_s, w.input, w.output))
        .collect();
    let mut results = Vec::new();
    for m in modes {
        let cfg = SchedulerConfig {
            policy: m.policy,
            token_budget: m.token_budget,
            max_chunk: m.max_chunk,
            max_running,
            kv: KvConfig {
                num_blocks: kv_blocks,
                block_size: block,
                cost: *cost,
                ..KvConfig::default()
            },
            ..SchedulerConfig::default()
        };
        let r = simulate(cfg, cost, &reqs)?;
        results.push(ModeResult {
            mode: *m,
            makespan_s: r.makespan_s,
            max_itl_s: r.max_itl_s,
            rounds: r.rounds.len(),
            preemptions: r.preemptions,
            requests: r
                .requests
                .iter()
                .map(|q| RequestRow {
                    id: q.id,
                    arrival_s: q.arrival_s,
                    ttft_s: q.ttft_s(),
                    max_itl_s: q.itls_s().into_iter().fold(0.0, f64::max),
                    e2e_s: q.e2e_s(),
                    rejected: q.rejected.is_some(),
                })
                .collect(),
        });
    }
    Ok(Schedule {
        max_running,
        fixed_s: cost.fixed_s,
        per_token_s: cost.per_token_s,
        per_pair_s: cost.per_pair_s,
        results,
    })
}

impl Schedule {
    pub fn tables(&self) -> Vec<Table> {
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| fx(v * 1e3, 1));
        let mut s = Table::new(
            format!(
                "Scheduling simulator (folio's scheduler), ≤ {} running, round = {} ms + {} µs/token + {} ns/pair",
                self.max_running,
                fx(self.fixed_s * 1e3, 2),
                fx(self.per_token_s * 1e6, 1),
                fx(self.per_pair_s * 1e9, 1)
            ),
            &["mode", "budget", "chunk", "total ms", "max ITL ms", "rounds", "preemptions"],
        );
        let lim = |v: usize| {
            if v == usize::MAX {
                "∞".into()
            } else {
                v.to_string()
            }
        };
        for r in &self.results {
            s.push(vec![
                r.mode.name.into(),
                lim(r.mode.token_budget),
                lim(r.mode.max_chunk),
                fx(r.makespan_s * 1e3, 1),
                fx(r.max_itl_s * 1e3, 1),
                r.rounds.to_string(),
                r.preemptions.to_string(),
            ]);
        }
        let mut out = vec![s.explain(
            "round = a + b·new tokens + c·Σ(c_i·h_i + c_i(c_i+1)/2); decodes first, then prefill chunks within the budget",
        )];
        let mut d = Table::new(
            "Per request",
            &[
                "mode",
                "req",
                "arrival ms",
                "TTFT ms",
                "max ITL ms",
                "completion ms",
            ],
        );
        for r in &self.results {
            for q in &r.requests {
                d.push(vec![
                    r.mode.name.into(),
                    format!("r{}", q.id),
                    fx(q.arrival_s * 1e3, 0),
                    if q.rejected {
                        "rejected".into()
                    } else {
                        ms(q.ttft_s)
                    },
                    fx(q.max_itl_s * 1e3, 1),
                    ms(q.e2e_s),
                ]);
            }
        }
        out.push(d.explain("TTFT = t_1 − t_a; ITL_j = t_{j+1} − t_j; completion = t_G − t_a"));
        out
    }
}
