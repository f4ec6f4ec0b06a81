//! What `folio plan` prints: each section computed for the reference case by default, or for
//! the user's model, hardware and workload when given.

use serde::Serialize;

use crate::cache::{prefix_value, CacheValue};
use crate::capacity::{self, branches, lora, paging, sharing_tables, Shape};
use crate::compress::{compression, crossover, read_saving, unified_fit};
use crate::desk::{desk, reference_candidates, DeskCalibration, DeskWorkload};
use crate::efficiency::EfficiencyTable;
use crate::error::{PlanError, Result};
use crate::hardware::{HardwareProfile, MachineProfile};
use crate::machine::predict;
use crate::model::{self, ModelProfile};
use crate::offload::{compressed_transfer, offload};
use crate::roofline::roofline;
use crate::schedule::{reference_modes, reference_workload, schedule, Mode, WorkItem};
use crate::spec::{draft_length, draft_sources, payback, spec_row, DraftCost, Spec};
use crate::table::Table;
use crate::units::{GB, MIB};
use folio_gguf::{KvFormat, KvFormats};

/// A section of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    Capacity,
    Roofline,
    Schedule,
    Cache,
    Compress,
    Offload,
    Spec,
    Desk,
    Serving,
    Machine,
}

impl Section {
    pub const ALL: [Section; 10] = [
        Section::Capacity,
        Section::Roofline,
        Section::Schedule,
        Section::Cache,
        Section::Compress,
        Section::Offload,
        Section::Spec,
        Section::Desk,
        Section::Serving,
        Section::Machine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Section::Capacity => "capacity",
            Section::Roofline => "roofline",
            Section::Schedule => "schedule",
            Section::Cache => "cache",
            Section::Compress => "compress",
            Section::Offload => "offload",
            Section::Spec => "spec",
            Section::Desk => "desk",
            Section::Serving => "serving",
            Section::Machine => "machine",
        }
    }

    /// A section name or alias (`kv`/`memory` = capacity, `little`/`goodput`/`cost` = serving).
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.to_ascii_lowercase();
        let alias = match s.as_str() {
            "kv" | "memory" => "capacity",
            "little" | "goodput" | "amdahl" | "cost" => "serving",
            "speculative" => "spec",
            "compression" => "compress",
            other => other,
        };
        Self::ALL
            .into_iter()
            .find(|x| x.name() == alias)
            .ok_or_else(|| PlanError::Invalid {
                field: "section",
                value: s.clone(),
                why: "expected capacity|kv, roofline, schedule, cache, compress, offload, spec, desk, serving, machine",
            })
    }
}

/// Everything a plan may be asked about. `None` means "the reference value for this section".
#[derive(Debug, Clone)]
pub struct PlanInput {
    pub model: ModelProfile,
    pub hardware: HardwareProfile,
    /// Present when the hardware came from a measured machine profile.
    pub machine: Option<MachineProfile>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub batch: Option<u64>,
    pub shared_prefix: Option<u64>,
    pub kv_budget_bytes: Option<u64>,
    /// K's and V's formats (default: the model profile's, both sides).
    pub kv_format: Option<KvFormats>,
    /// Tokens of KV a request holds at its longest, for the formats' fit table (default 8,192).
    pub context: Option<u64>,
    pub block: u64,
    pub deadline_s: Option<f64>,
    pub hit_rate: f64,
    /// Scheduling workload; empty = the reference r0–r3.
    pub requests: Vec<WorkItem>,
    pub max_running: Option<usize>,
    pub token_budget: Option<usize>,
    pub max_chunk: Option<usize>,
    /// Draft acceptance rates to evaluate.
    pub accept: Vec<f64>,
    pub draft_len: u64,
}

impl Default for PlanInput {
    fn default() -> Self {
        Self::reference()
    }
}

impl PlanInput {
    /// Qwen3-8B on the RTX PRO 6000 with the reference workloads.
    pub fn reference() -> Self {
        Self {
            model: model::qwen3_8b(),
            hardware: crate::hardware::rtx_pro_6000(),
            machine: None,
            input_tokens: None,
            output_tokens: None,
            batch: None,
            shared_prefix: None,
            kv_budget_bytes: None,
            kv_format: None,
            context: None,
            block: 16,
            deadline_s: None,
            hit_rate: 0.5,
            requests: Vec::new(),
            max_running: None,
            token_budget: None,
            max_chunk: None,
            accept: Vec::new(),
            draft_len: 4,
        }
    }

    fn table(&self) -> EfficiencyTable {
        EfficiencyTable::reference()
    }

    fn is_reference_hw(&self) -> bool {
        self.table().matches(&self.model, &self.hardware)
    }

    fn budget(&self) -> u64 {
        self.kv_budget_bytes.unwrap_or(12 << 30)
    }

    fn format(&self) -> KvFormats {
        self.kv_format.unwrap_or(self.model.kv_format.into())
    }

    fn out(&self) -> u64 {
        self.output_tokens.unwrap_or(256)
    }

    /// Plain decode round at batch 1 and `l` context: the reference measurement, the machine
    /// profile's fit or prediction, or the roofline at the reference efficiency.
    fn plain_round_s(&self, l: u64) -> f64 {
        if let Some(m) = &self.machine {
            let shape = Shape {
                input: l,
                output: 1,
            };
            if let Ok(p) = predict(&self.model, m, 1, l, 1 << 30, self.block, shape) {
                return p.fit_round_s.unwrap_or(p.predicted_round_s);
            }
        }
        let t = self.table();
        let bytes = EfficiencyTable::bytes_read(&self.model, 1, l) as f64;
        t.round_s(&self.model, &self.hardware, 1, bytes)
    }

    /// The simulator's round-time model: the reference fit, a measured fit for this model in
    /// the machine profile, or one derived from the roofline.
    pub fn cost_model(&self) -> folio_core::CostModel {
        if self.is_reference_hw() {
            return folio_core::CostModel::REFERENCE;
        }
        if let Some(f) = self.machine.as_ref().and_then(|m| m.decode_fit.as_ref()) {
            let same = f
                .model
                .as_deref()
                .is_none_or(|n| n.to_lowercase().contains(&self.model.name.to_lowercase()));
            if same {
                return f.cost_model();
            }
        }
        round_cost_model(self)
    }
}

/// One computed section: the tables to print and the analysis as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct SectionOutput {
    pub section: Section,
    pub tables: Vec<Table>,
    pub data: serde_json::Value,
}

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("analysis structs serialize (plain numbers and strings)")
}

/// Computes one section.
pub fn run_section(section: Section, p: &PlanInput) -> Result<SectionOutput> {
    p.model.validate()?;
    p.hardware.validate()?;
    let table = p.table();
    let (tables, data) = match section {
        Section::Capacity => {
            let out = p.out();
            let shapes: Vec<(String, Shape)> = match p.input_tokens {
                Some(i) => vec![(
                    format!("{i} in"),
                    Shape {
                        input: i,
                        output: out,
                    },
                )],
                None => vec![
                    (
                        "2K".into(),
                        Shape {
                            input: 2048,
                            output: out,
                        },
                    ),
                    (
                        "8K".into(),
                        Shape {
                            input: 8192,
                            output: out,
                        },
                    ),
                ],
            };
            let refs: Vec<(&str, Shape)> = shapes.iter().map(|(l, s)| (l.as_str(), *s)).collect();
            let long = shapes.last().expect("at least one shape").1;
            let sharing = Some((
                long,
                p.shared_prefix.unwrap_or(6144).min(long.input),
                p.batch.unwrap_or(16),
            ));
            let cap =
                capacity::capacity(&p.model, p.format(), &refs, p.block, p.budget(), sharing)?;
            let pages: Vec<_> = [2, 4, 8, 16]
                .iter()
                .map(|&b| paging(&[9, 13, 5, 15], 16, b, 8, 2))
                .collect::<Result<_>>()?;
            let br = branches(95, 4, 9);
            let lo = lora(&p.model, 16, 100, 8192);
            let mut t = cap.tables();
            let contexts: Vec<u64> = shapes
                .iter()
                .map(|(_, s)| s.input)
                .chain([32_768])
                .collect();
            let win = capacity::window(&p.model, p.format(), &contexts, p.block);
            t.extend(win.as_ref().map(|w| w.table()));
            let fit = crate::kv_fit::kv_fit(
                &p.model,
                p.format(),
                p.context.unwrap_or(8192),
                p.block,
                p.budget(),
            )?;
            t.push(fit.table());
            t.extend(sharing_tables(&pages, &br, &lo));
            (
                t,
                serde_json::json!({"capacity": json(&cap), "kv_fit": json(&fit), "window": json(&win), "paging": json(&pages), "branches": json(&br), "lora": json(&lo)}),
            )
        }
        Section::Roofline => {
            let contexts = p.input_tokens.map_or(vec![2048, 8192], |i| vec![i]);
            let batches = p.batch.map_or(vec![1, 4, 16, 64], |b| vec![b]);
            let r = roofline(&p.model, &p.hardware, &table, &batches, &contexts)?;
            (r.tables(), json(&r))
        }
        Section::Schedule => {
            let work = if p.requests.is_empty() {
                reference_workload()
            } else {
                p.requests.clone()
            };
            let modes = match (p.token_budget, p.max_chunk) {
                (None, None) => reference_modes(),
                (b, c) => {
                    let mut m = reference_modes();
                    m.push(Mode {
                        name: "user",
                        policy: folio_core::sched::BatchPolicy::Continuous,
                        token_budget: b.unwrap_or(usize::MAX),
                        max_chunk: c.unwrap_or(usize::MAX),
                    });
                    m
                }
            };
            let cost = p.cost_model();
            let k = p.model.kv_bytes_per_token_in(p.format()).max(1);
            let blocks = (p.budget() / (k * p.block)).max(1) as usize;
            let s = schedule(
                &work,
                &modes,
                p.max_running.unwrap_or(2),
                &cost,
                blocks,
                p.block as usize,
            )?;
            (s.tables(), json(&s))
        }
        Section::Cache => {
            let mfu = table.prefill_mfu_at(1);
            let link = p.hardware.host_link_bytes_s;
            let (large, small) = match p.input_tokens {
                Some(i) => (
                    p.shared_prefix.unwrap_or(i),
                    i.min(p.shared_prefix.unwrap_or(i) / 3).max(1),
                ),
                None => (6144, 2048),
            };
            let mut e = vec![
                prefix_value("A", &p.model, &p.hardware, large, p.hit_rate, link, mfu)?,
                prefix_value("B", &p.model, &p.hardware, small, p.hit_rate, link, mfu)?,
            ];
            if link > 32.0 * GB {
                e.push(prefix_value(
                    "A, Gen4 link",
                    &p.model,
                    &p.hardware,
                    large,
                    p.hit_rate,
                    32.0 * GB,
                    mfu,
                )?);
            }
            let c = CacheValue::new(e, 0, 1);
            (c.tables(), json(&c))
        }
        Section::Compress => {
            let shape = Shape {
                input: p.input_tokens.unwrap_or(8192),
                output: p.out(),
            };
            let reference_model = model::qwen3_8b();
            let reference_hw = crate::hardware::rtx_pro_6000();
            let mbu = table.mbu_at_batch(&reference_model, &reference_hw, 64);
            let saving = read_saving(
                &p.model,
                shape.input,
                KvFormat::Bf16,
                KvFormat::Q8_0,
                p.hardware.mem_bw_bytes_s * mbu,
                &[0.2e-3, 0.8e-3],
            );
            let cross = crossover(
                ("BF16", 6.44, 4.37e-5),
                ("FP8", 6.58, 2.37e-5),
                &[2048, 16384],
            );
            let c = compression(
                &p.model,
                shape,
                p.batch.unwrap_or(16),
                p.block,
                p.budget(),
                &[KvFormat::Bf16, KvFormat::Q8_0, KvFormat::Q4_0],
                saving,
                cross,
            );
            let mut t = c.tables();
            let (um, hw_mem) = if p.model.weight_files.is_empty() {
                (
                    model::qwen3_235b_a22b(),
                    crate::hardware::m2_max().memory_bytes,
                )
            } else {
                (p.model.clone(), p.hardware.memory_bytes)
            };
            let u = unified_fit(&um, hw_mem, 8 << 30, 8192);
            t.push(u.table(&um.name));
            (
                t,
                serde_json::json!({"compression": json(&c), "unified": json(&u)}),
            )
        }
        Section::Offload => {
            let shape = Shape {
                input: p.input_tokens.unwrap_or(8192),
                output: p.out(),
            };
            let k = p.model.kv_bytes_per_token();
            let states = (shape.input * k, capacity::final_tokens(shape, p.block) * k);
            let links: Vec<(&str, f64)> = if p.is_reference_hw() {
                vec![
                    ("PCIe Gen5 x16", 64.0 * GB),
                    ("NVLink-C2C (GH200)", 450.0 * GB),
                ]
            } else {
                vec![("host link", p.hardware.host_link_bytes_s)]
            };
            let o = offload(
                &p.model,
                4,
                &[1, 2],
                states,
                p.plain_round_s(2048),
                shape.output - 1,
                p.deadline_s.unwrap_or(7.0),
                &links,
                1.0,
            )?;
            let ct = compressed_transfer((96.0 * MIB) as u64, 0.25, links[0].1)?;
            (
                o.tables(&ct),
                serde_json::json!({"offload": json(&o), "compressed_transfer": json(&ct)}),
            )
        }
        Section::Spec => {
            let plain = p.plain_round_s(p.input_tokens.unwrap_or(2048));
            let m = p.draft_len;
            let accepts: Vec<(String, f64)> = if p.accept.is_empty() {
                vec![("AAAA".into(), 0.25), ("BBBB".into(), 0.75)]
            } else {
                p.accept.iter().map(|a| (format!("a = {a}"), *a)).collect()
            };
            let rows = accepts
                .iter()
                .map(|(l, a)| spec_row(l, *a, m, plain, 0.1e-3, plain))
                .collect::<Result<Vec<_>>>()?;
            let best = rows
                .iter()
                .max_by(|a, b| a.expected_tokens.total_cmp(&b.expected_tokens))
                .expect("at least one acceptance rate");
            let pb = payback(2.0, best, p.out());
            let a = accepts.last().expect("at least one acceptance rate").1;
            // The draft-length example: verify 26.3 ms, 3.6 ms per sequential draft (rounded reference data).
            let (verify, per_draft) = if p.is_reference_hw() {
                (26.3e-3, 3.6e-3)
            } else {
                (plain, plain * 3.6 / 26.3)
            };
            let lengths = vec![
                draft_length(
                    "sequential",
                    a,
                    DraftCost::Sequential {
                        verify_s: verify,
                        per_draft_s: per_draft,
                    },
                    &[1, 2, 4, 8],
                    16,
                )?,
                draft_length(
                    "grouped by 4",
                    a,
                    DraftCost::Grouped {
                        verify_s: verify,
                        per_draft_s: per_draft,
                        group: 4,
                    },
                    &[4, 5, 8],
                    16,
                )?,
            ];
            let sources = draft_sources(
                plain,
                3.57e-3,
                4,
                &[
                    ("sequential, 3 accepted", false, 3.0),
                    ("parallel, 3 accepted", true, 3.0),
                    ("parallel, 2 accepted", true, 2.0),
                ],
            );
            let s = Spec {
                rows,
                payback: pb,
                lengths,
                sources,
            };
            (s.tables(), json(&s))
        }
        Section::Desk => {
            let mut w = DeskWorkload::reference();
            if let Some(v) = p.batch {
                w.requests = v;
            }
            if let Some(v) = p.input_tokens {
                w.input = v;
            }
            if let Some(v) = p.shared_prefix {
                w.shared_prefix = v;
            }
            if let Some(v) = p.output_tokens {
                w.output = v;
            }
            if let Some(v) = p.deadline_s {
                w.deadline_s = v;
            }
            w.kv_budget_bytes = p.budget();
            w.block = p.block;
            let reference_w = DeskWorkload::reference();
            let cal = if p.is_reference_hw()
                && (w.requests, w.input, w.shared_prefix)
                    == (
                        reference_w.requests,
                        reference_w.input,
                        reference_w.shared_prefix,
                    ) {
                DeskCalibration::reference()
            } else {
                DeskCalibration::none()
            };
            let d = desk(
                &p.model,
                &p.hardware,
                &table,
                &cal,
                &w,
                &reference_candidates(),
            )?;
            (d.tables(), json(&d))
        }
        Section::Serving => {
            let s = crate::serving::reference();
            (s.tables(), json(&s))
        }
        Section::Machine => {
            let m = p.machine.clone().ok_or(PlanError::Invalid {
                field: "hardware",
                value: p.hardware.name.clone(),
                why: "the machine section needs --hardware PATH to a profile written by `folio profile`",
            })?;
            let shape = Shape {
                input: p.input_tokens.unwrap_or(256),
                output: p.output_tokens.unwrap_or(128),
            };
            let pr = predict(
                &p.model,
                &m,
                p.batch.unwrap_or(1),
                shape.input,
                p.kv_budget_bytes.unwrap_or(1 << 30),
                p.block,
                shape,
            )?;
            (pr.tables(), json(&pr))
        }
    };
    Ok(SectionOutput {
        section,
        tables,
        data,
    })
}

/// A round-time model from the roofline: the weight read as the fixed part, FLOPs per token
/// and per attention pair as the rest, at the machine profile's measured MBU/MFU when given,
/// else the reference batch-1 efficiencies.
pub fn round_cost_model(p: &PlanInput) -> folio_core::CostModel {
    let t = EfficiencyTable::reference();
    let reference_mbu = t.mbu_at_batch(&model::qwen3_8b(), &crate::hardware::rtx_pro_6000(), 1);
    let mbu = p
        .machine
        .as_ref()
        .and_then(|m| m.mbu)
        .unwrap_or(reference_mbu);
    let mfu = p
        .machine
        .as_ref()
        .and_then(|m| m.mfu)
        .unwrap_or(t.prefill_mfu_at(1));
    let overhead = p
        .machine
        .as_ref()
        .and_then(|m| m.round_overhead_s)
        .unwrap_or(0.0);
    let m = &p.model;
    let bw = p.hardware.mem_bw_bytes_s * mbu;
    let flops = p.hardware.peak_flops * mfu;
    folio_core::CostModel {
        fixed_s: m.weight_read_bytes() as f64 / bw + overhead,
        per_token_s: 2.0 * m.active_matmul_params() as f64 / flops,
        per_pair_s: 4.0 * (m.layers * m.heads * m.head_dim) as f64 / flops,
    }
}

/// All sections that apply (the machine section only with a machine profile).
pub fn run_all(p: &PlanInput) -> Result<Vec<SectionOutput>> {
    Section::ALL
        .into_iter()
        .filter(|s| *s != Section::Machine || p.machine.is_some())
        .map(|s| run_section(s, p))
        .collect()
}

/// The sections as text.
pub fn render(outs: &[SectionOutput]) -> String {
    let mut s = String::new();
    for o in outs {
        s.push_str(&format!("== {} ==\n", o.section.name()));
        for t in &o.tables {
            s.push_str(&t.to_string());
            s.push('\n');
        }
    }
    s
}

/// The sections as one JSON object keyed by section name.
pub fn render_json(outs: &[SectionOutput]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for o in outs {
        m.insert(o.section.name().into(), o.data.clone());
    }
    serde_json::Value::Object(m)
}
