//! KV compression (DESIGN.md §compression): sizes per format, capacity, `ΔT = ΔD/β − T_c`, the crossover of
//! two linear ITL fits, and whether a weight file fits unified memory beside a request.

use serde::Serialize;

use crate::capacity::{final_tokens, Shape};
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, gib, mib, GB};
use folio_gguf::KvFormat;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FormatRow {
    pub format: KvFormat,
    pub bytes_per_token: u64,
    /// KV of the prompt alone.
    pub input_bytes: u64,
    /// KV of one request at its final length (block-rounded).
    pub final_bytes: u64,
    /// KV of `batch` independent requests.
    pub batch_bytes: u64,
    pub fits: bool,
    /// Requests that fit the budget at final length.
    pub capacity: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compression {
    pub model: String,
    pub shape: Shape,
    pub batch: u64,
    pub budget_bytes: u64,
    pub rows: Vec<FormatRow>,
    pub saving: ReadSaving,
    pub crossover: Crossover,
}

/// Whether reading less KV outruns the conversion: `ΔT = ΔD/β_eff − T_c`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadSaving {
    pub from: KvFormat,
    pub to: KvFormat,
    pub saved_bytes: u64,
    pub eff_bw_bytes_s: f64,
    pub saved_s: f64,
    /// `(T_c, ΔT)` for each conversion cost.
    pub net: Vec<(f64, f64)>,
}

/// Two linear ITL fits `a + b·L` (ms) and where they cross.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Crossover {
    pub fits: [(String, f64, f64); 2],
    /// `(a₂ − a₁)/(b₁ − b₂)` tokens.
    pub crossover_tokens: f64,
    /// `(L, ITL₁, ITL₂)` at sample lengths.
    pub samples: Vec<(u64, f64, f64)>,
}

pub fn crossover(f1: (&str, f64, f64), f2: (&str, f64, f64), at: &[u64]) -> Crossover {
    let itl = |f: (&str, f64, f64), l: u64| f.1 + f.2 * l as f64;
    Crossover {
        fits: [(f1.0.into(), f1.1, f1.2), (f2.0.into(), f2.1, f2.2)],
        crossover_tokens: (f2.1 - f1.1) / (f1.2 - f2.2),
        samples: at.iter().map(|&l| (l, itl(f1, l), itl(f2, l))).collect(),
    }
}

pub fn read_saving(
    model: &ModelProfile,
    tokens: u64,
    from: KvFormat,
    to: KvFormat,
    eff_bw_bytes_s: f64,
    conversions_s: &[f64],
) -> ReadSaving {
    let saved_bytes = tokens
        * model
            .kv_bytes_per_token_in(from)
            .saturating_sub(model.kv_bytes_per_token_in(to));
    let saved_s = saved_bytes as f64 / eff_bw_bytes_s;
    ReadSaving {
        from,
        to,
        saved_bytes,
        eff_bw_bytes_s,
        saved_s,
        net: conversions_s.iter().map(|&c| (c, saved_s - c)).collect(),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn compression(
    model: &ModelProfile,
    shape: Shape,
    batch: u64,
    block: u64,
    budget_bytes: u64,
    formats: &[KvFormat],
    saving: ReadSaving,
    crossover: Crossover,
) -> Compression {
    let rows = formats
        .iter()
        .map(|&f| {
            let k = model.kv_bytes_per_token_in(f);
            let final_bytes = final_tokens(shape, block) * k;
            let batch_bytes = final_bytes * batch;
            FormatRow {
                format: f,
                bytes_per_token: k,
                input_bytes: shape.input * k,
                final_bytes,
                batch_bytes,
                fits: batch_bytes <= budget_bytes,
                capacity: budget_bytes / final_bytes.max(1),
            }
        })
        .collect();
    Compression {
        model: model.name.clone(),
        shape,
        batch,
        budget_bytes,
        rows,
        saving,
        crossover,
    }
}

impl Compression {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!(
                "KV formats: {}, {} in / {} out, {} requests, {} GiB budget",
                self.model,
                self.shape.input,
                self.shape.output,
                self.batch,
                fx(gib(self.budget_bytes as f64), 0)
            ),
            &[
                "format",
                "bit/value",
                "B/token",
                "input MiB",
                "final MiB",
                "batch GiB",
                "fits",
                "capacity",
            ],
        );
        for r in &self.rows {
            t.push(vec![
                r.format.name().into(),
                fx(r.format.bits_per_value(), 1),
                r.bytes_per_token.to_string(),
                fx(mib(r.input_bytes as f64), 3),
                fx(mib(r.final_bytes as f64), 3),
                fx(gib(r.batch_bytes as f64), 2),
                if r.fits { "yes" } else { "no" }.into(),
                r.capacity.to_string(),
            ]);
        }
        let t = t.explain("per 32 values: bf16 64 B, q8_0 32 + 2 = 34 B, q4_0 16 + 2 = 18 B; size = tokens·k_format");
        let s = &self.saving;
        let mut d = Table::new(
            format!(
                "Is {} → {} faster? {} MiB less read at {} GB/s effective = {} ms",
                s.from.name(),
                s.to.name(),
                fx(mib(s.saved_bytes as f64), 0),
                fx(s.eff_bw_bytes_s / GB, 0),
                fx(s.saved_s * 1e3, 3)
            ),
            &["conversion ms", "ΔT ms", "verdict"],
        );
        for (c, net) in &s.net {
            d.push(vec![
                fx(c * 1e3, 1),
                fx(net * 1e3, 3),
                if *net > 0.0 { "saves" } else { "slower" }.into(),
            ]);
        }
        let d = d.explain("ΔT = ΔD/β_eff − T_c (β_eff = β × measured decode MBU)");
        let c = &self.crossover;
        let mut x = Table::new(
            format!(
                "ITL fits {} {} + {:e}·L vs {} {} + {:e}·L ms: crossover ≈ {} tokens",
                c.fits[0].0,
                c.fits[0].1,
                c.fits[0].2,
                c.fits[1].0,
                c.fits[1].1,
                c.fits[1].2,
                fx(c.crossover_tokens, 0)
            ),
            &[
                "context",
                &format!("{} ms", c.fits[0].0),
                &format!("{} ms", c.fits[1].0),
            ],
        );
        for (l, a, b) in &c.samples {
            x.push(vec![l.to_string(), fx(*a, 2), fx(*b, 2)]);
        }
        vec![t, d, x.explain("L* = (a₂ − a₁)/(b₁ − b₂)")]
    }
}

/// A weight file beside one request in unified memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnifiedFit {
    pub memory_bytes: u64,
    pub reserve_bytes: u64,
    pub request_bytes: u64,
    /// `(format, file bytes, left after weights (may be negative), request fits)`.
    pub files: Vec<(String, u64, f64, bool)>,
}

pub fn unified_fit(
    model: &ModelProfile,
    memory: u64,
    reserve: u64,
    request_tokens: u64,
) -> UnifiedFit {
    let usable = memory as f64 - reserve as f64;
    let request_bytes = request_tokens * model.kv_bytes_per_token();
    UnifiedFit {
        memory_bytes: memory,
        reserve_bytes: reserve,
        request_bytes,
        files: model
            .weight_files
            .iter()
            .map(|f| {
                let left = usable - f.bytes as f64;
                (
                    f.format.clone(),
                    f.bytes,
                    left,
                    left >= request_bytes as f64,
                )
            })
            .collect(),
    }
}

impl UnifiedFit {
    pub fn table(&self, model: &str) -> Table {
        let mut t = Table::new(
            format!(
                "{model} in {} GiB unified memory − {} GiB reserve = {} GiB; one request's KV {} GiB",
                fx(gib(self.memory_bytes as f64), 2),
                fx(gib(self.reserve_bytes as f64), 0),
                fx(gib(self.memory_bytes as f64 - self.reserve_bytes as f64), 2),
                fx(gib(self.request_bytes as f64), 2)
            ),
            &["weights", "GiB", "left GiB", "request fits"],
        );
        for (f, b, left, fits) in &self.files {
            t.push(vec![
                f.clone(),
                fx(gib(*b as f64), 2),
                fx(gib(*left), 2),
                if *fits { "yes" } else { "no" }.into(),
            ]);
        }
        t.explain("left = memory − reserve − weights; a negative left means the weights do not fit")
    }
}
