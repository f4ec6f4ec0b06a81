//! LoRA adapters over a loaded base model (DESIGN.md §batching, "Multi-LoRA: shared base weights,
//! grouped low-rank compute").
//!
//! An adapter adds `scale · B·A` to some of the base model's linear layers. folio never
//! merges it into the weights: the base matmul runs once over every row of the batch, then
//! each row adds its own adapter's low-rank product ([`LoraRows::apply`]). Rows are ordered
//! by adapter so one adapter's `A` and `B` stay in cache across its rows, the shape of
//! Punica's SGMV kernel; a batch may mix any adapters and rows with none.
//!
//! Files are llama.cpp's LoRA GGUF (`general.type = adapter`, `adapter.type = lora`,
//! `adapter.lora.alpha`, tensors `<base tensor>.lora_a` with dims `[in, rank]` and
//! `<base tensor>.lora_b` with dims `[rank, out]`, stored as F32, F16, BF16 or Q8_0). The
//! scale of one pair is llama.cpp's: `user_scale · alpha / rank`, or `user_scale` when
//! `alpha` is 0.

use crate::par::{self, Rows};
use crate::{Arch, ModelConfig, ModelError};
use folio_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use folio_kernels::ops;
use folio_kernels::pool::ThreadPool;
use std::path::Path;
use std::sync::Arc;

/// Which of folio's fused matrices a pair updates (see `weights.rs`: Q/K/V are one
/// matrix, gate/up another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraMatrix {
    Qkv,
    O,
    GateUp,
    Down,
}

/// The base tensors an adapter may target, as llama.cpp names them.
pub const TARGETS: [&str; 8] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// The attention tensors of multi-head latent attention (`deepseek2`), none of which an
/// adapter may target: [`crate::mla`] runs its own projections (the latent KV, the absorbed
/// `attn_k_b`/`attn_v_b`, `attn_output` over the heads' latent values), which have no
/// LoRA step, so an adapter on them would load and change nothing.
const MLA_ATTENTION: &str =
    "attn_q, attn_q_a, attn_q_b, attn_kv_a_mqa, attn_kv_b, attn_k_b, attn_v_b, attn_output";

/// Where `blk.N.<kind>.weight` of `cfg` lands: matrix, first output row, input and output
/// widths. `None` when the model has no such tensor or folio applies no LoRA to it
/// ([`why_not`] says which).
fn place(cfg: &ModelConfig, kind: &str) -> Option<(LoraMatrix, usize, usize, usize)> {
    let (d, qd, kvd, f) = (
        cfg.d_model,
        cfg.n_heads * cfg.head_dim,
        cfg.n_kv_heads * cfg.head_dim,
        cfg.ffn_dim,
    );
    let phi3 = cfg.arch == Arch::Phi3;
    let dense = cfg.moe.is_none();
    let fused_up = cfg.arch.fused_gate_up();
    if cfg.mla.is_some() && kind.starts_with("attn_") {
        return None;
    }
    Some(match kind {
        "attn_q" if !phi3 => (LoraMatrix::Qkv, 0, d, qd),
        "attn_k" if !phi3 => (LoraMatrix::Qkv, qd, d, kvd),
        "attn_v" if !phi3 => (LoraMatrix::Qkv, qd + kvd, d, kvd),
        "attn_qkv" if phi3 => (LoraMatrix::Qkv, 0, d, qd + 2 * kvd),
        "attn_output" => (LoraMatrix::O, 0, qd, d),
        "ffn_gate" if dense && !fused_up => (LoraMatrix::GateUp, 0, d, f),
        "ffn_up" if dense && !fused_up => (LoraMatrix::GateUp, f, d, f),
        // Phi-3's and GLM-4's `ffn_up` holds gate then up.
        "ffn_up" if dense => (LoraMatrix::GateUp, 0, d, 2 * f),
        "ffn_down" if dense => (LoraMatrix::Down, 0, f, d),
        _ => return None,
    })
}

/// Why [`place`] refuses `kind` on `cfg`, for the load error.
fn why_not(cfg: &ModelConfig, kind: &str) -> String {
    let arch = cfg.arch.name();
    if cfg.mla.is_some() && kind.starts_with("attn_") {
        format!("the base model ({arch}) uses multi-head latent attention, and folio applies no LoRA to its attention tensors ({MLA_ATTENTION}); an adapter for it may target none of them")
    } else if cfg.moe.is_some() && kind.starts_with("ffn_") {
        format!("the base model ({arch}, mixture of experts) has no {kind} tensor an adapter can target")
    } else {
        format!(
            "the base model ({arch}) has no {kind} tensor an adapter can target (targets: {})",
            TARGETS.join(", ")
        )
    }
}

/// One low-rank pair on one base tensor.
pub struct LoraPair {
    pub rank: usize,
    /// First row of the fused output this pair adds to, and how many rows.
    pub row_offset: usize,
    pub out_dim: usize,
    /// `rank × in` row-major.
    pub a: Vec<f32>,
    /// `B` transposed: `rank × out` row-major (the kernel streams its rows).
    pub bt: Vec<f32>,
    /// `alpha / rank`, or 1 when the file's alpha is 0 (llama.cpp's rule).
    pub alpha_scale: f32,
}

/// The pairs of one transformer block, per fused matrix.
#[derive(Default)]
pub struct LayerLora {
    pub qkv: Vec<LoraPair>,
    pub o: Vec<LoraPair>,
    pub gate_up: Vec<LoraPair>,
    pub down: Vec<LoraPair>,
}

impl LayerLora {
    fn pairs(&self, m: LoraMatrix) -> &[LoraPair] {
        match m {
            LoraMatrix::Qkv => &self.qkv,
            LoraMatrix::O => &self.o,
            LoraMatrix::GateUp => &self.gate_up,
            LoraMatrix::Down => &self.down,
        }
    }

    fn pairs_mut(&mut self, m: LoraMatrix) -> &mut Vec<LoraPair> {
        match m {
            LoraMatrix::Qkv => &mut self.qkv,
            LoraMatrix::O => &mut self.o,
            LoraMatrix::GateUp => &mut self.gate_up,
            LoraMatrix::Down => &mut self.down,
        }
    }
}

/// A loaded adapter, checked against the base model it was loaded for.
pub struct LoraAdapter {
    /// The name it is served under (set by whoever registers it; empty otherwise).
    pub name: String,
    /// Identity of the adapter's content (the caller's hash of the file): the prefix cache
    /// keys blocks by it, so the same tokens under two adapters are two entries.
    pub id: u64,
    pub alpha: f32,
    /// Largest rank of its pairs.
    pub rank: usize,
    pub layers: Vec<LayerLora>,
    /// Base tensors it updates.
    pub n_pairs: usize,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter")
            .field("name", &self.name)
            .field("id", &format_args!("{:016x}", self.id))
            .field("alpha", &self.alpha)
            .field("rank", &self.rank)
            .field("n_pairs", &self.n_pairs)
            .finish()
    }
}

fn meta_err(key: &str, what: String) -> ModelError {
    ModelError::Metadata {
        key: key.into(),
        what,
    }
}

fn tensor_err(name: &str, what: String) -> ModelError {
    ModelError::Tensor {
        name: name.into(),
        what,
    }
}

impl LoraAdapter {
    /// Reads and checks the adapter at `path` for a base model shaped `cfg`; `id` is the
    /// caller's identity of its content.
    pub fn load(
        path: &Path,
        cfg: &ModelConfig,
        max_rank: usize,
        id: u64,
    ) -> Result<LoraAdapter, ModelError> {
        LoraAdapter::from_gguf(&GgufFile::open(path)?, cfg, max_rank, id)
    }

    /// [`LoraAdapter::load`] from an open file. Every error names the key or tensor, what
    /// was expected and what was found.
    pub fn from_gguf(
        f: &GgufFile,
        cfg: &ModelConfig,
        max_rank: usize,
        id: u64,
    ) -> Result<LoraAdapter, ModelError> {
        let ty = f.get_str("general.type").unwrap_or("");
        if ty != "adapter" {
            return Err(meta_err(
                "general.type",
                format!("{ty:?}, expected \"adapter\" (is this a base model rather than a LoRA adapter?)"),
            ));
        }
        let at = f.get_str("adapter.type").unwrap_or("");
        if at != "lora" {
            return Err(meta_err(
                "adapter.type",
                format!("{at:?}, expected \"lora\""),
            ));
        }
        let arch = f.get_str("general.architecture").unwrap_or("");
        if arch != cfg.arch.name() {
            return Err(meta_err(
                "general.architecture",
                format!(
                    "adapter is for {arch:?}, the base model is {:?}",
                    cfg.arch.name()
                ),
            ));
        }
        let alpha = match f.get("adapter.lora.alpha") {
            None => 0.0,
            Some(_) => f.get_f32("adapter.lora.alpha")?,
        };
        if !alpha.is_finite() || alpha < 0.0 {
            return Err(meta_err(
                "adapter.lora.alpha",
                format!("{alpha}, expected a finite value >= 0"),
            ));
        }
        let mut layers: Vec<LayerLora> = (0..cfg.n_layers).map(|_| LayerLora::default()).collect();
        let (mut rank_max, mut n_pairs) = (0, 0);
        for t in f.tensors() {
            let Some(base) = t.name.strip_suffix(".lora_a") else {
                if t.name.ends_with(".lora_b") {
                    let base = t.name.trim_end_matches(".lora_b");
                    if f.tensor(&format!("{base}.lora_a")).is_none() {
                        return Err(tensor_err(&t.name, format!("no matching {base}.lora_a")));
                    }
                    continue;
                }
                return Err(tensor_err(
                    &t.name,
                    "not a LoRA tensor (names end in .lora_a or .lora_b)".into(),
                ));
            };
            let b_name = format!("{base}.lora_b");
            let b = f
                .tensor(&b_name)
                .ok_or_else(|| tensor_err(&t.name, format!("no matching {b_name}")))?;
            let (layer, kind) = base
                .strip_prefix("blk.")
                .and_then(|r| r.strip_suffix(".weight"))
                .and_then(|r| r.split_once('.'))
                .and_then(|(l, k)| Some((l.parse::<usize>().ok()?, k)))
                .ok_or_else(|| {
                    tensor_err(
                        &t.name,
                        format!(
                            "unsupported LoRA target (supported: blk.N.{{{}}}.weight)",
                            TARGETS.join(",")
                        ),
                    )
                })?;
            if layer >= cfg.n_layers {
                return Err(tensor_err(
                    &t.name,
                    format!("layer {layer}, the base model has {}", cfg.n_layers),
                ));
            }
            let (m, off, n_in, n_out) =
                place(cfg, kind).ok_or_else(|| tensor_err(&t.name, why_not(cfg, kind)))?;
            for (name, info) in [(&t.name, t), (&b_name, b)] {
                if !matches!(
                    info.ggml_type,
                    GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0
                ) {
                    return Err(tensor_err(
                        name,
                        format!("type {}, expected F32, F16, BF16 or Q8_0", info.ggml_type),
                    ));
                }
                if info.dims.len() != 2 {
                    return Err(tensor_err(
                        name,
                        format!("dims {:?}, expected 2", info.dims),
                    ));
                }
            }
            let rank = t.rows();
            if t.cols() != n_in || b.rows() != n_out || b.cols() != rank {
                return Err(tensor_err(
                    base,
                    format!(
                        "lora_a {:?} and lora_b {:?}, expected [{n_in}, rank] and [rank, {n_out}] for the base tensor (in {n_in}, out {n_out})",
                        t.dims, b.dims
                    ),
                ));
            }
            if rank == 0 || rank > max_rank {
                return Err(tensor_err(
                    &t.name,
                    format!("rank {rank}, expected 1..={max_rank} (--max-lora-rank)"),
                ));
            }
            let a = f.tensor_f32(&t.name)?;
            let bm = f.tensor_f32(&b_name)?;
            if let Some(i) = a.iter().chain(&bm).position(|v| !v.is_finite()) {
                return Err(tensor_err(base, format!("value {i} is not finite")));
            }
            // B is stored `out` rows of `rank`; the kernel wants it transposed.
            let mut bt = vec![0f32; rank * n_out];
            for j in 0..n_out {
                for k in 0..rank {
                    bt[k * n_out + j] = bm[j * rank + k];
                }
            }
            let pairs = layers[layer].pairs_mut(m);
            if pairs.iter().any(|p| p.row_offset == off) {
                return Err(tensor_err(base, "targeted twice".into()));
            }
            pairs.push(LoraPair {
                rank,
                row_offset: off,
                out_dim: n_out,
                a,
                bt,
                alpha_scale: if alpha != 0.0 {
                    alpha / rank as f32
                } else {
                    1.0
                },
            });
            rank_max = rank_max.max(rank);
            n_pairs += 1;
        }
        if n_pairs == 0 {
            return Err(meta_err(
                "tensors",
                "the adapter has no .lora_a/.lora_b pairs".into(),
            ));
        }
        Ok(LoraAdapter {
            name: String::new(),
            id,
            alpha,
            rank: rank_max,
            layers,
            n_pairs,
        })
    }

    /// Bytes of its `A` and `B` in memory (f32).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flat_map(|l| [&l.qkv, &l.o, &l.gate_up, &l.down])
            .flatten()
            .map(|p| 4 * (p.a.len() + p.bt.len()))
            .sum()
    }
}

/// One adapter of a request and the scale it runs at.
pub type LoraItem = (Arc<LoraAdapter>, f32);

/// The adapters one request runs with and their scales (usually one at 1.0; llama-server's
/// per-request `lora` list may give several).
#[derive(Clone)]
pub struct LoraSet {
    items: Arc<[LoraItem]>,
    key: u64,
}

impl std::fmt::Debug for LoraSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoraSet({:016x}, {} adapters)",
            self.key,
            self.items.len()
        )
    }
}

impl LoraSet {
    /// The set of `items`; adapters with scale 0 are dropped.
    pub fn new(items: Vec<LoraItem>) -> LoraSet {
        let items: Vec<_> = items.into_iter().filter(|(_, s)| *s != 0.0).collect();
        // splitmix64 over (id, scale bits): equal sets get equal keys in every run.
        let mut key = 0x6c6f_7261_u64;
        for (a, s) in &items {
            for w in [a.id, s.to_bits() as u64] {
                key = (key ^ w).wrapping_add(0x9e37_79b9_7f4a_7c15);
                key = (key ^ (key >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                key = (key ^ (key >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                key ^= key >> 31;
            }
        }
        LoraSet {
            items: items.into(),
            key,
        }
    }

    /// Identity of the adapters and scales: the same set has the same key. It is never 0
    /// unless the set is empty (0 is "no adapter" to the prefix cache).
    pub fn key(&self) -> u64 {
        if self.items.is_empty() {
            0
        } else {
            self.key.max(1)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn items(&self) -> &[LoraItem] {
        &self.items
    }
}

/// The token rows of one forward batch that carry adapters, ordered by adapter set.
pub(crate) struct LoraRows<'a> {
    rows: Vec<(usize, &'a [LoraItem])>,
}

impl<'a> LoraRows<'a> {
    /// The rows of `batch` with an adapter, grouped by set (`None` if there are none).
    pub(crate) fn of(batch: &'a crate::ForwardBatch) -> Option<LoraRows<'a>> {
        let mut spans: Vec<_> = batch
            .seqs
            .iter()
            .filter_map(|s| s.lora.as_ref().filter(|l| !l.is_empty()).map(|l| (l, s)))
            .collect();
        if spans.is_empty() {
            return None;
        }
        spans.sort_by_key(|(l, _)| l.key());
        let rows = spans
            .iter()
            .flat_map(|(l, s)| (s.start..s.start + s.len).map(move |t| (t, l.items())))
            .collect();
        Some(LoraRows { rows })
    }

    /// Adds every row's low-rank products for `matrix` of `layer`: `y[row] += Σ scale·B·A·x[row]`
    /// over the row's adapters. `x` rows are `x_width` wide, `y` rows `y_width`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        pool: &ThreadPool,
        layer: usize,
        matrix: LoraMatrix,
        x: &[f32],
        x_width: usize,
        y: &mut [f32],
        y_width: usize,
    ) {
        let ys = Rows::new(y, y_width);
        par::ranges(pool, self.rows.len(), &|r| {
            for &(t, items) in &self.rows[r] {
                let xr = &x[t * x_width..(t + 1) * x_width];
                // SAFETY: each token row appears once in `rows`; ranges are disjoint.
                let yr = unsafe { ys.row(t) };
                for (adapter, scale) in items {
                    for p in adapter.layers[layer].pairs(matrix) {
                        ops::lowrank_add(
                            xr,
                            &p.a,
                            &p.bt,
                            p.rank,
                            scale * p.alpha_scale,
                            &mut yr[p.row_offset..p.row_offset + p.out_dim],
                        );
                    }
                }
            }
        });
    }
}

/// A random adapter for a base model shaped `cfg`, as llama.cpp's LoRA GGUF with F32
/// tensors: every layer's `targets` (names from [`TARGETS`] the model has) at `rank`.
/// `A` entries are uniform in ±1/√in and `B` entries in ±`strength`, from a fixed `seed`:
/// test tooling and `folio bench lora` write these, and llama.cpp's `--lora` reads them.
pub fn random_adapter(
    cfg: &ModelConfig,
    targets: &[&str],
    rank: usize,
    alpha: f32,
    strength: f32,
    seed: u64,
) -> Result<GgufWriter, ModelError> {
    let mut w = GgufWriter::new();
    w.add_metadata(
        "general.architecture",
        Value::String(cfg.arch.name().into()),
    );
    w.add_metadata("general.type", Value::String("adapter".into()));
    w.add_metadata("adapter.type", Value::String("lora".into()));
    w.add_metadata("adapter.lora.alpha", Value::F32(alpha));
    let mut state = seed ^ 0x5eed_1e55_0000_0000;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    for l in 0..cfg.n_layers {
        for &kind in targets {
            let (_, _, n_in, n_out) = place(cfg, kind)
                .ok_or_else(|| tensor_err(kind, format!("not a target of {}", cfg.arch.name())))?;
            let sa = 1.0 / (n_in as f32).sqrt();
            let a: Vec<f32> = (0..rank * n_in).map(|_| uniform() * sa).collect();
            let b: Vec<f32> = (0..n_out * rank).map(|_| uniform() * strength).collect();
            let base = format!("blk.{l}.{kind}.weight");
            w.add_tensor_f32(
                &format!("{base}.lora_a"),
                &[n_in as u64, rank as u64],
                GgmlType::F32,
                &a,
            )?;
            w.add_tensor_f32(
                &format!("{base}.lora_b"),
                &[rank as u64, n_out as u64],
                GgmlType::F32,
                &b,
            )?;
        }
    }
    Ok(w)
}

/// The targets [`random_adapter`] can write for `cfg`: q/k/v (or fused qkv), o, and the
/// FFN projections of a dense model.
pub fn default_targets(cfg: &ModelConfig) -> Vec<&'static str> {
    TARGETS
        .iter()
        .copied()
        .filter(|k| place(cfg, k).is_some())
        .collect()
}

/// Writes `n` rank-8 [`random_adapter`]s for `cfg` (alpha 16, every target it has, seeds
/// `seed`, `seed + 1`, …) into `dir` as `a0.gguf`, `a1.gguf`, …; returns their paths.
pub fn write_random_adapters(
    cfg: &ModelConfig,
    dir: &Path,
    n: usize,
    strength: f32,
    seed: u64,
) -> Result<Vec<std::path::PathBuf>, ModelError> {
    std::fs::create_dir_all(dir).map_err(|e| meta_err("dir", format!("{}: {e}", dir.display())))?;
    let targets = default_targets(cfg);
    (0..n)
        .map(|i| {
            let p = dir.join(format!("a{i}.gguf"));
            random_adapter(cfg, &targets, 8, 16.0, strength, seed + i as u64)?
                .write(&p)
                .map_err(|e| meta_err("file", format!("{}: {e}", p.display())))?;
            Ok(p)
        })
        .collect()
}
