//! Memory and KV arithmetic (DESIGN.md §requests, §kv-cache): bytes per token, per-request KV at its final
//! length rounded to blocks, how many requests fit (reserving the final length vs the wrong
//! post-prefill sizing), prefix sharing, paging slot counts, branch sharing, adapters.

use serde::Serialize;

use crate::error::{at_least_one, Result};
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, gib, group, mib, round_up, GIB};
use folio_gguf::KvFormats;

/// A request's shape: prompt tokens and output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shape {
    pub input: u64,
    pub output: u64,
}

/// KV tokens a request holds when it ends: `L_in + G − 1` (the last output is never fed back),
/// rounded up to the block size.
pub fn final_tokens(s: Shape, block: u64) -> u64 {
    round_up(s.input + s.output.saturating_sub(1), block)
}

/// One request shape against the KV budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityRow {
    pub label: String,
    pub shape: Shape,
    pub prefill_tokens: u64,
    pub prefill_bytes: u64,
    pub final_tokens: u64,
    pub final_bytes: u64,
    /// `floor(budget / final_bytes)`: admission reserving the final length.
    pub capacity: u64,
    /// `floor(budget / prefill_bytes)`: the wrong sizing by post-prefill KV.
    pub capacity_post_prefill: u64,
    /// What the wrongly admitted requests need by the end.
    pub post_prefill_final_bytes: u64,
}

/// One shared prefix plus private parts: `M_KV = shared + private·b`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedRow {
    pub shape: Shape,
    /// Prompt tokens common to all requests (only whole blocks are shared).
    pub prefix_tokens: u64,
    pub shared_tokens: u64,
    pub shared_bytes: u64,
    pub private_tokens: u64,
    pub private_bytes: u64,
    pub batch: u64,
    pub total_bytes: u64,
    /// Same batch with independent contexts.
    pub independent_bytes: u64,
    pub capacity: u64,
}

/// The capacity analysis for one model, KV format and budget (a report; the server's
/// `Capacity` is one request's token limit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    pub model: String,
    pub format: KvFormats,
    pub block: u64,
    pub budget_bytes: u64,
    /// `k = 2 × layers × kv_heads × head_dim × bytes per value` (MLA: the latent row).
    pub bytes_per_token: u64,
    /// K's part of `bytes_per_token` (MLA: the whole latent row).
    pub k_bytes_per_token: u64,
    /// V's part of `bytes_per_token` (MLA: 0, values are read from the latent row).
    pub v_bytes_per_token: u64,
    /// MLA: the bytes per token of the decompressed K and V it saves against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncompressed_bytes_per_token: Option<u64>,
    pub rows: Vec<CapacityRow>,
    pub shared: Option<SharedRow>,
}

fn row(label: &str, s: Shape, k: u64, block: u64, budget: u64) -> CapacityRow {
    let prefill_tokens = round_up(s.input, block);
    let prefill_bytes = prefill_tokens * k;
    let ft = final_tokens(s, block);
    let final_bytes = ft * k;
    let capacity_post_prefill = budget / prefill_bytes.max(1);
    CapacityRow {
        label: label.into(),
        shape: s,
        prefill_tokens,
        prefill_bytes,
        final_tokens: ft,
        final_bytes,
        capacity: budget / final_bytes.max(1),
        capacity_post_prefill,
        post_prefill_final_bytes: capacity_post_prefill * final_bytes,
    }
}

/// `M_KV = shared + private·b` for `batch` requests sharing `prefix` prompt tokens.
pub fn shared(
    model: &ModelProfile,
    format: KvFormats,
    s: Shape,
    prefix: u64,
    batch: u64,
    block: u64,
    budget: u64,
) -> SharedRow {
    let k = model.kv_bytes_per_token_in(format);
    let shared_tokens = prefix.min(s.input) / block * block;
    let private_tokens = round_up(s.input + s.output.saturating_sub(1) - shared_tokens, block);
    let shared_bytes = shared_tokens * k;
    let private_bytes = private_tokens * k;
    SharedRow {
        shape: s,
        prefix_tokens: prefix,
        shared_tokens,
        shared_bytes,
        private_tokens,
        private_bytes,
        batch,
        total_bytes: shared_bytes + private_bytes * batch,
        independent_bytes: final_tokens(s, block) * k * batch,
        capacity: budget.saturating_sub(shared_bytes) / private_bytes.max(1),
    }
}

/// Capacity of each shape (and optionally a shared-prefix batch) in `budget` bytes of KV.
pub fn capacity(
    model: &ModelProfile,
    format: impl Into<KvFormats>,
    shapes: &[(&str, Shape)],
    block: u64,
    budget: u64,
    sharing: Option<(Shape, u64, u64)>,
) -> Result<CapacityReport> {
    at_least_one("block size", block)?;
    for (_, s) in shapes {
        at_least_one("input tokens", s.input)?;
        at_least_one("output tokens", s.output)?;
    }
    let format = format.into();
    let k = model.kv_bytes_per_token_in(format);
    Ok(CapacityReport {
        model: model.name.clone(),
        format,
        block,
        budget_bytes: budget,
        bytes_per_token: k,
        k_bytes_per_token: model.kv_k_bytes_per_token_in(format),
        v_bytes_per_token: model.kv_v_bytes_per_token_in(format),
        uncompressed_bytes_per_token: model
            .mla
            .as_ref()
            .map(|_| model.kv_bytes_per_token_uncompressed_in(format)),
        rows: shapes
            .iter()
            .map(|(l, s)| row(l, *s, k, block, budget))
            .collect(),
        shared: sharing.map(|(s, prefix, b)| shared(model, format, s, prefix, b, block, budget)),
    })
}

impl CapacityReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!(
                "KV capacity: {} {} KV, K {} B + V {} B = {} B = {} KiB per token{}, {} GiB budget, {}-token blocks",
                self.model,
                self.format.name(),
                group(self.k_bytes_per_token),
                group(self.v_bytes_per_token),
                group(self.bytes_per_token),
                fx(self.bytes_per_token as f64 / 1024.0, 2),
                // MLA: the latent row against the decompressed K and V.
                match self.uncompressed_bytes_per_token {
                    Some(u) => format!(
                        " (MLA latent; uncompressed K+V {} B = {} KiB, {}x)",
                        group(u),
                        fx(u as f64 / 1024.0, 2),
                        fx(u as f64 / self.bytes_per_token.max(1) as f64, 1)
                    ),
                    None => String::new(),
                },
                fx(gib(self.budget_bytes as f64), 2),
                self.block
            ),
            &[
                "request",
                "in",
                "out",
                "after prefill MiB",
                "final tokens",
                "final MiB",
                "fit (reserve final)",
                "fit (post-prefill, wrong)",
                "wrong needs MiB",
            ],
        );
        for r in &self.rows {
            t.push(vec![
                r.label.clone(),
                r.shape.input.to_string(),
                r.shape.output.to_string(),
                fx(mib(r.prefill_bytes as f64), 3),
                r.final_tokens.to_string(),
                fx(mib(r.final_bytes as f64), 3),
                r.capacity.to_string(),
                r.capacity_post_prefill.to_string(),
                fx(mib(r.post_prefill_final_bytes as f64), 0),
            ]);
        }
        let mut out = vec![t.explain(
            "k = 2·layers·kv_heads·head_dim·bytes; final = ceil((L_in + G − 1)/p)·p tokens; \
             fit = floor(budget / final); sizing by post-prefill KV overcommits by the right column",
        )];
        if let Some(s) = &self.shared {
            out.push(
                Table::new(
                    format!(
                        "Shared prefix: {} of {} prompt tokens common, batch {}",
                        s.prefix_tokens, s.shape.input, s.batch
                    ),
                    &["part", "tokens", "MiB"],
                )
                .row(vec![
                    "shared (once)".into(),
                    s.shared_tokens.to_string(),
                    fx(mib(s.shared_bytes as f64), 0),
                ])
                .row(vec![
                    "private (each)".into(),
                    s.private_tokens.to_string(),
                    fx(mib(s.private_bytes as f64), 0),
                ])
                .row(vec![
                    format!("total, b = {}", s.batch),
                    String::new(),
                    format!(
                        "{} ({} GiB)",
                        fx(mib(s.total_bytes as f64), 0),
                        fx(gib(s.total_bytes as f64), 2)
                    ),
                ])
                .row(vec![
                    format!("independent, b = {}", s.batch),
                    String::new(),
                    fx(mib(s.independent_bytes as f64), 0),
                ])
                .row(vec![
                    "capacity".into(),
                    String::new(),
                    format!("{} requests", s.capacity),
                ])
                .explain(
                    "M_KV = shared + private·b; private = ceil((L_in − prefix + G − 1)/p)·p tokens; \
                     capacity = floor((budget − shared)/private)",
                ),
            );
        }
        out
    }
}

/// Slots of KV a set of sequences occupies under three layouts (DESIGN.md §kv-cache, the paging example).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paging {
    pub lengths: Vec<u64>,
    pub max_len: u64,
    pub block: u64,
    /// Whole-segment reservation of `max_len` per sequence.
    pub reserved_slots: u64,
    /// `Σ p·ceil(L/p)`.
    pub paged_slots: u64,
    /// Paged, with `sharers` sequences sharing the full blocks of a common prefix.
    pub shared_slots: u64,
    /// Tokens actually stored.
    pub stored: u64,
    /// Unused slots in tail blocks, `Σ (p·ceil(L/p) − L)`.
    pub tail_waste: u64,
    /// Block-table entries over all sequences.
    pub table_entries: u64,
    /// Whole blocks of the common prefix that can be shared.
    pub shared_blocks: u64,
}

/// Paging of `lengths` with block `p`; the first `sharers` sequences have `common` equal
/// leading tokens, of which only whole blocks can be shared.
pub fn paging(lengths: &[u64], max_len: u64, p: u64, common: u64, sharers: u64) -> Result<Paging> {
    at_least_one("block size", p)?;
    let blocks: Vec<u64> = lengths.iter().map(|l| l.div_ceil(p)).collect();
    let paged: u64 = blocks.iter().sum::<u64>() * p;
    let stored: u64 = lengths.iter().sum();
    let shared_blocks = common / p;
    let saved = sharers.saturating_sub(1) * shared_blocks * p;
    Ok(Paging {
        lengths: lengths.to_vec(),
        max_len,
        block: p,
        reserved_slots: lengths.len() as u64 * max_len,
        paged_slots: paged,
        shared_slots: paged - saved,
        stored,
        tail_waste: paged - stored,
        table_entries: blocks.iter().sum(),
        shared_blocks,
    })
}

/// Block references vs physical blocks for branches of one prefix (copy-on-write tails).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Branches {
    pub prefix_blocks: u64,
    pub branches: u64,
    pub private_blocks: u64,
    pub references: u64,
    pub physical: u64,
    /// `1 − physical / references`.
    pub saving: f64,
}

pub fn branches(prefix_blocks: u64, branches: u64, private_blocks: u64) -> Branches {
    let references = branches * (prefix_blocks + private_blocks);
    let physical = prefix_blocks + branches * private_blocks;
    Branches {
        prefix_blocks,
        branches,
        private_blocks,
        references,
        physical,
        saving: 1.0 - physical as f64 / references.max(1) as f64,
    }
}

/// LoRA adapter memory: the reference rank `r` on Q and V of every layer in BF16, and
/// what folio holds for an adapter on every q/k/v/o and FFN projection (f32).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lora {
    pub rank: u64,
    pub adapters: u64,
    pub bytes_per_adapter: u64,
    pub total_bytes: u64,
    /// KV of the same number of independent contexts of `context` tokens, for comparison.
    pub context: u64,
    pub contexts_kv_bytes: u64,
    /// folio's in-memory adapter at `rank` on q, k, v, o, gate, up and down (f32 `A` and
    /// `B`, the form its low-rank kernel reads).
    pub all_projections_f32_bytes: u64,
}

/// Bytes of one BF16 adapter value (the reference figures).
const ADAPTER_BYTES_PER_VALUE: f64 = 2.0;

pub fn lora(model: &ModelProfile, rank: u64, adapters: u64, context: u64) -> Lora {
    let (d, q) = (model.hidden, model.heads * model.head_dim);
    let v = model.kv_heads * model.head_dim;
    let per_layer = rank * (d + q) + rank * (d + v);
    // Adapters are stored apart from the base weights' (maybe quantized) format.
    let bytes = (model.layers * per_layer) as f64 * ADAPTER_BYTES_PER_VALUE;
    // q, k, v, o, then gate, up (d → ffn) and down (ffn → d).
    let all = rank * ((d + q) + 2 * (d + v) + (q + d) + 3 * (d + model.ffn));
    Lora {
        rank,
        adapters,
        bytes_per_adapter: bytes as u64,
        total_bytes: bytes as u64 * adapters,
        context,
        contexts_kv_bytes: adapters * context * model.kv_bytes_per_token(),
        all_projections_f32_bytes: model.layers * all * 4,
    }
}

/// Paging, branch and adapter tables.
pub fn sharing_tables(pages: &[Paging], br: &Branches, lo: &Lora) -> Vec<Table> {
    let mut t = Table::new(
        "Paging: slots occupied (the paging example)",
        &[
            "p",
            "reserve max",
            "paged",
            "paged + shared prefix",
            "stored",
            "tail waste",
            "table entries",
        ],
    );
    for p in pages {
        t.push(vec![
            p.block.to_string(),
            p.reserved_slots.to_string(),
            p.paged_slots.to_string(),
            p.shared_slots.to_string(),
            p.stored.to_string(),
            p.tail_waste.to_string(),
            p.table_entries.to_string(),
        ]);
    }
    let t = t.explain(
        "reserve = n·max; paged = Σ p·ceil(L/p); shared = paged − (sharers − 1)·floor(common/p)·p \
         (only whole blocks can be shared)",
    );
    let b = Table::new(
        "Copy-on-write branches of one prefix",
        &[
            "prefix blocks",
            "branches",
            "private each",
            "references",
            "physical",
            "saving",
        ],
    )
    .row(vec![
        br.prefix_blocks.to_string(),
        br.branches.to_string(),
        br.private_blocks.to_string(),
        br.references.to_string(),
        br.physical.to_string(),
        format!("{}%", fx(br.saving * 100.0, 0)),
    ])
    .explain("references = branches·(prefix + private); physical = prefix + branches·private");
    let kv = format!(
        "{} ({} tokens each)",
        fx(lo.contexts_kv_bytes as f64 / GIB, 1),
        lo.context
    );
    let l = Table::new(
        format!("Multi-LoRA: rank {}, {} adapters", lo.rank, lo.adapters),
        &[
            "adapter",
            "MiB each",
            "adapters GiB",
            "KV of as many contexts GiB",
        ],
    )
    .row(vec![
        "Q and V, BF16".into(),
        fx(mib(lo.bytes_per_adapter as f64), 1),
        fx(gib(lo.total_bytes as f64), 2),
        kv.clone(),
    ])
    .row(vec![
        "q/k/v/o/FFN, f32 (folio)".into(),
        fx(mib(lo.all_projections_f32_bytes as f64), 1),
        fx(gib((lo.all_projections_f32_bytes * lo.adapters) as f64), 2),
        kv,
    ])
    .explain("Q and V: per layer r·(d + q_dim) + r·(d + kv_dim) values; folio's form adds k, o and the FFN's r·(d + ffn) ×3, held in f32. Adapter slots (--max-loras) and request (KV) slots are sized separately");
    vec![t, b, l]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_length_drops_the_last_token() {
        assert_eq!(
            final_tokens(
                Shape {
                    input: 2048,
                    output: 256
                },
                16
            ),
            2304
        );
        assert_eq!(
            final_tokens(
                Shape {
                    input: 2048,
                    output: 1
                },
                16
            ),
            2048
        );
    }

    #[test]
    fn paging_p16_cannot_share_eight_tokens() {
        let p = paging(&[9, 13, 5, 15], 16, 16, 8, 2).unwrap();
        assert_eq!((p.paged_slots, p.shared_slots), (64, 64));
        assert!(paging(&[1], 16, 0, 0, 0).is_err());
    }
}

/// KV of one sequence at context `tokens` when sliding-window layers keep only the blocks
/// their window can still see (DESIGN.md §kv-cache; vLLM's hybrid allocator): global layers hold
/// every block, window layers at most `ceil(W / p) + 1` blocks (the window rarely starts on
/// a block boundary).
#[derive(Debug, Clone, Serialize)]
pub struct WindowRow {
    pub tokens: u64,
    /// Every layer global.
    pub all_global_bytes: u64,
    /// Window layers capped at their window's blocks.
    pub windowed_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub model: String,
    pub window: u64,
    pub window_layers: u64,
    pub layers: u64,
    pub block: u64,
    pub rows: Vec<WindowRow>,
}

/// The window table for `contexts`, or `None` for a model without window layers.
pub fn window(
    model: &ModelProfile,
    format: KvFormats,
    contexts: &[u64],
    block: u64,
) -> Option<Window> {
    if model.sliding_window == 0 || model.window_layers == 0 || model.layers == 0 || block == 0 {
        return None;
    }
    let per_layer = model.kv_bytes_per_token_in(format) / model.layers;
    let w = model.window_layers.min(model.layers);
    let rows = contexts
        .iter()
        .map(|&l| {
            let held = round_up(l, block);
            let window_held = held.min((model.sliding_window.div_ceil(block) + 1) * block);
            WindowRow {
                tokens: l,
                all_global_bytes: held * per_layer * model.layers,
                windowed_bytes: held * per_layer * (model.layers - w) + window_held * per_layer * w,
            }
        })
        .collect();
    Some(Window {
        model: model.name.clone(),
        window: model.sliding_window,
        window_layers: w,
        layers: model.layers,
        block,
        rows,
    })
}

impl Window {
    pub fn table(&self) -> Table {
        let mut t = Table::new(
            format!(
                "Sliding window: {} of {} layers see the last {} tokens ({}-token blocks)",
                self.window_layers, self.layers, self.window, self.block
            ),
            &["context", "all global MiB", "window released MiB", "ratio"],
        );
        for r in &self.rows {
            t.push(vec![
                group(r.tokens),
                fx(mib(r.all_global_bytes as f64), 1),
                fx(mib(r.windowed_bytes as f64), 1),
                format!(
                    "{}x",
                    fx(
                        r.all_global_bytes as f64 / r.windowed_bytes.max(1) as f64,
                        2
                    )
                ),
            ]);
        }
        t.explain(
            "global layers hold ceil(L/p)·p tokens, window layers min(ceil(L/p), ceil(W/p) + 1)·p; \
             what folio's engine holds while decoding (window layers' blocks behind the window \
             go back to the pool; `--swa-full` keeps them, the all-global column)",
        )
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;
    use crate::model::ModelProfile;
    use folio_gguf::KvFormat;

    #[test]
    fn gemma3_270m_window_layers_hold_at_most_their_window() {
        // Gemma 3 270M: 18 layers (15 window, 512 tokens), 1 KV head of 256, f16.
        let mut m = ModelProfile {
            sliding_window: 512,
            window_layers: 15,
            ..crate::model::smollm2_135m()
        };
        m.layers = 18;
        m.kv_heads = 1;
        m.head_dim = 256;
        let w = window(&m, KvFormat::F16.into(), &[100, 4000], 16).expect("window model");
        let per_layer = 2 * 256 * 2; // K and V, f16
                                     // 100 tokens: the window is not yet reached, nothing is saved.
        assert_eq!(w.rows[0].all_global_bytes, 112 * per_layer * 18);
        assert_eq!(w.rows[0].windowed_bytes, w.rows[0].all_global_bytes);
        // 4,000 tokens: window layers hold 33 blocks (528 tokens), global layers 250 blocks.
        assert_eq!(w.rows[1].all_global_bytes, 4000 * per_layer * 18);
        assert_eq!(w.rows[1].windowed_bytes, (4000 * 3 + 528 * 15) * per_layer);
        m.sliding_window = 0;
        assert!(window(&m, KvFormat::F16.into(), &[4000], 16).is_none());
    }
}
