//! The fused forward pass of the llama family over a [`ForwardBatch`].

use crate::attention::{attention, AttnShape};
use crate::lora::{LoraMatrix, LoraRows};
use crate::norm::Norm;
use crate::par::{self, Rows};
use crate::weights::Weights;
use crate::{
    Arch, ForwardBatch, ForwardOutput, KvCache, KvFormat, KvFormats, KvLayout, ModelConfig,
    ModelError,
};
use folio_gguf::GgufFile;
use folio_kernels::lines::{Kept, Lines};
use folio_kernels::matmul::Sums;
use folio_kernels::ops::{self, Rope};
use folio_kernels::pool::ThreadPool;
use std::cell::RefCell;
use std::path::Path;

thread_local! {
    /// The FFN's gate-up output (`[tokens][2 · ffn_dim]`), kept by the thread that runs
    /// forwards: the gate-up matmul overwrites all of it each layer.
    static GATE_UP: RefCell<Lines> = RefCell::new(Lines::default());
}

/// A loaded model: configuration, repacked weights and RoPE tables.
pub struct Model {
    pub config: ModelConfig,
    pub weights: Weights,
    rope: Rope,
    /// The sliding-window layers' RoPE when their base differs (Gemma 3).
    rope_window: Option<Rope>,
    /// How the queries are rounded before attention (compute precision).
    attn_precision: AttnPrecision,
}

/// Compute precision of attention scores, independent of the KV storage format: the
/// precision the queries are rounded to before they meet the cached keys (DESIGN.md §compression
/// separates the storage effect from the compute effect this way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttnPrecision {
    /// Queries rounded to f16 whatever the storage format (what llama.cpp does against an
    /// f16 cache; the default, so greedy outputs keep llama.cpp's parity).
    #[default]
    F16,
    /// Queries kept in f32: only the storage format rounds.
    F32,
    /// Queries rounded to the storage format's precision: f16 → f16, bf16 → bf16, q8_0 →
    /// q8_0 groups. q4_0 → q8_0 groups too: ggml's CPU dot product quantizes the
    /// activations against both q8_0 and q4_0 rows to q8_0 (its `vec_dot_type`), and a
    /// 4-bit query is a rounding no implementation applies.
    Kv,
}

impl AttnPrecision {
    /// Parses `f16`, `f32` or `kv`.
    pub fn parse(s: &str) -> Option<AttnPrecision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f16" => Some(AttnPrecision::F16),
            "f32" => Some(AttnPrecision::F32),
            "kv" => Some(AttnPrecision::Kv),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AttnPrecision::F16 => "f16",
            AttnPrecision::F32 => "f32",
            AttnPrecision::Kv => "kv",
        }
    }

    /// The format the queries are rounded to against a cache stored as `kv`; `None`: f32.
    pub fn query_format(self, kv: KvFormat) -> Option<KvFormat> {
        match (self, kv) {
            (AttnPrecision::F32, _) => None,
            (AttnPrecision::F16, _) => Some(KvFormat::F16),
            (AttnPrecision::Kv, KvFormat::Q4_0 | KvFormat::Iq4Nl) => Some(KvFormat::Q8_0),
            (AttnPrecision::Kv, KvFormat::Q4h) => Some(KvFormat::Q8h),
            // Per-channel keys have no per-row form to round a query to.
            (AttnPrecision::Kv, KvFormat::Q4c) => Some(KvFormat::F16),
            (AttnPrecision::Kv, f) => Some(f),
        }
    }
}

/// Work done by one forward call, for bandwidth and FLOP figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForwardStats {
    pub tokens: usize,
    pub weight_bytes: usize,
    pub kv_bytes_read: usize,
    pub flops: f64,
}

impl Model {
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let f = GgufFile::open(path)?;
        Model::from_gguf(&f)
    }

    pub fn from_gguf(f: &GgufFile) -> Result<Model, ModelError> {
        let config = ModelConfig::from_gguf(f)?;
        let rope = crate::rope::build(f, &config)?;
        let weights = Weights::load(f, &config)?;
        let has_window = config.window_layers.iter().any(|&w| w);
        // OLMo 3's window layers rope plainly (no YaRN) with the same base; GPT-OSS's with
        // the window base and the same YaRN.
        let plain_window = config.arch == crate::Arch::Olmo2;
        let rope_window =
            match has_window && (plain_window || config.rope_base_window != config.rope_base) {
                false => None,
                true if config.arch == Arch::GptOss => Some(crate::rope::build_base(
                    f,
                    &config,
                    config.rope_base_window,
                )?),
                true => Some(Rope::new(
                    config.head_dim,
                    config.rope_dim,
                    config.rope_base_window,
                    1.0,
                    config.rope_neox,
                )),
            };
        Ok(Model {
            config,
            weights,
            rope,
            rope_window,
            attn_precision: AttnPrecision::default(),
        })
    }

    /// How the queries are rounded before attention ([`AttnPrecision`]; default f16).
    pub fn set_attn_precision(&mut self, p: AttnPrecision) {
        self.attn_precision = p;
    }

    pub fn attn_precision(&self) -> AttnPrecision {
        self.attn_precision
    }

    /// How every quantized matmul accumulates: [`Sums::Ggml`] gives llama.cpp's exact bits
    /// (every other operation already follows llama.cpp's reference arithmetic: no flash
    /// attention, no repacked or tiled matmuls) for Q4_0, Q4_1, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K,
    /// IQ2_XXS, TQ1_0, TQ2_0, IQ1_S and IQ1_M weights with an f16 KV cache on an AVX-512 CPU
    /// (llama.cpp's own arithmetic differs on other CPUs); [`Sums::Block`] (the default)
    /// runs batched steps ~1.6x faster with last-bit differences.
    ///
    /// Attention follows: with `Ggml` it reproduces llama.cpp's per-token summation orders
    /// too, with `Block` every token sums in the batched order (no f64 tail).
    pub fn set_sums(&mut self, sums: Sums) {
        let w = &mut self.weights;
        w.token_embd.set_sums(sums);
        if let Some(o) = w.output.as_mut() {
            o.set_sums(sums);
        }
        for l in &mut w.layers {
            for m in [&mut l.wqkv, &mut l.wo, &mut l.w_gate_up, &mut l.w_down] {
                m.set_sums(sums);
            }
            if let Some(m) = l.moe.as_mut() {
                m.set_sums(sums);
            }
            if let Some(m) = l.mla.as_mut() {
                m.set_sums(sums);
            }
        }
    }

    /// A KV cache shaped for this model, single layout (one page per block of all layers).
    pub fn new_kv_cache(
        &self,
        block_size: usize,
        num_blocks: usize,
        format: impl Into<KvFormats>,
    ) -> KvCache {
        self.new_kv_cache_with(
            KvLayout::single(self.config.n_layers),
            block_size,
            num_blocks,
            format,
        )
    }

    /// A KV cache of `num_blocks` pages in `layout`.
    pub fn new_kv_cache_with(
        &self,
        layout: KvLayout,
        block_size: usize,
        num_blocks: usize,
        format: impl Into<KvFormats>,
    ) -> KvCache {
        let c = &self.config;
        let formats: KvFormats = format.into();
        if c.mla.is_some() {
            // One latent row per token, in K's format.
            return KvCache::new_latent(layout, c.head_dim, block_size, num_blocks, formats.k);
        }
        KvCache::new(
            layout,
            c.n_kv_heads,
            c.head_dim,
            block_size,
            num_blocks,
            formats,
        )
    }

    /// The hybrid layout for this model's sliding-window layers (full layers in group 0,
    /// window layers in groups beside it), or `None` if it does not have both kinds.
    pub fn hybrid_kv_layout(&self) -> Option<KvLayout> {
        let c = &self.config;
        c.sliding_window?;
        let window: Vec<bool> = (0..c.n_layers).map(|l| c.is_window_layer(l)).collect();
        KvLayout::hybrid(&window)
    }

    /// Checks a batch against the model and cache before touching anything.
    fn validate(&self, batch: &ForwardBatch, kv: &KvCache) -> Result<(), ModelError> {
        let vocab = self.config.vocab_size;
        if let Some((i, &t)) = batch
            .tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(ModelError::Batch(format!(
                "token {i}: id {t} >= vocab_size {vocab}"
            )));
        }
        let mut expect = 0;
        for (i, s) in batch.seqs.iter().enumerate() {
            if s.start != expect || s.len == 0 || s.n_logits > s.len || s.n_hidden > s.len {
                return Err(ModelError::Batch(format!(
                    "seq {i}: start {} len {} n_logits {} n_hidden {} (expected start {expect}, len > 0, n_logits and n_hidden <= len)",
                    s.start, s.len, s.n_logits, s.n_hidden
                )));
            }
            expect += s.len;
            let end = s.pos + s.len;
            if end > self.config.context_length {
                return Err(ModelError::Batch(format!(
                    "seq {i}: positions up to {end} exceed context_length {}",
                    self.config.context_length
                )));
            }
            let need = end.div_ceil(kv.block_size);
            let groups = kv.layout.n_groups();
            if s.tables.len() < groups {
                return Err(ModelError::Batch(format!(
                    "seq {i}: {} window block tables, the cache layout has {} window groups",
                    s.tables.len().saturating_sub(1),
                    groups - 1
                )));
            }
            for g in 0..groups {
                let table = s.table(g);
                let name = match g {
                    0 => "block table".to_string(),
                    g => format!("window block table {g}"),
                };
                if table.len() < need {
                    return Err(ModelError::Batch(format!(
                        "seq {i}: {name} has {} blocks, {need} needed for {end} tokens",
                        table.len()
                    )));
                }
                // Window groups: blocks behind the first query's window are never read.
                let first = match (g, self.config.sliding_window) {
                    (0, _) | (_, None) => 0,
                    (_, Some(w)) => (s.pos + 1).saturating_sub(w) / kv.block_size,
                };
                if let Some(&b) = table[first.min(need)..need]
                    .iter()
                    .find(|&&b| b as usize >= kv.num_blocks)
                {
                    return Err(ModelError::Batch(format!(
                        "seq {i}: {name}: block {b} >= num_blocks {}",
                        kv.num_blocks
                    )));
                }
            }
        }
        if expect != batch.tokens.len() {
            return Err(ModelError::Batch(format!(
                "spans cover {expect} tokens, batch has {}",
                batch.tokens.len()
            )));
        }
        Ok(())
    }

    /// Runs every layer over all tokens of the batch, writing their K/V into `kv` and
    /// returning logits for the requested rows: `[n_logit_rows][vocab]`, in span order.
    pub fn forward(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        pool: &ThreadPool,
    ) -> Result<Vec<f32>, ModelError> {
        self.forward_layers(batch, kv, pool, self.config.n_layers)
    }

    /// [`Model::forward`], also returning the final hidden rows each span asks for
    /// (`SeqSpan::n_hidden`; `[n_hidden_rows][d_model]` after the output norm, in span
    /// order): what embeddings are pooled from.
    pub fn forward_with_hidden(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        pool: &ThreadPool,
    ) -> Result<ForwardOutput, ModelError> {
        self.forward_inner(batch, kv, pool, self.config.n_layers)
    }

    /// Like [`Model::forward`] but through the first `n_layers` blocks only, then the final
    /// norm and head: the self-draft of speculative decoding. Its KV for those layers is
    /// exactly the target's (same weights, same inputs), so it reads the target's cache.
    pub fn forward_layers(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        pool: &ThreadPool,
        n_layers: usize,
    ) -> Result<Vec<f32>, ModelError> {
        self.forward_inner(batch, kv, pool, n_layers)
            .map(|o| o.logits)
    }

    fn forward_inner(
        &self,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        pool: &ThreadPool,
        n_layers: usize,
    ) -> Result<ForwardOutput, ModelError> {
        self.validate(batch, kv)?;
        let c = &self.config;
        let (d, hd, nh, nkv) = (c.d_model, c.head_dim, c.n_heads, c.n_kv_heads);
        let (qd, kvd) = (nh * hd, nkv * hd);
        let qkv_dim = qd + 2 * kvd;
        let n = batch.n_tokens();
        let token_pos: Vec<(usize, usize)> = batch
            .seqs
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..s.len).map(move |j| (i, s.pos + j)))
            .collect();

        let mut x = vec![0f32; n * d];
        for (t, &id) in batch.tokens.iter().enumerate() {
            self.weights
                .token_embd
                .row_f32(id as usize, &mut x[t * d..(t + 1) * d]);
        }
        if c.embed_scale != 1.0 {
            x.iter_mut().for_each(|v| *v *= c.embed_scale);
        }
        let mut h = vec![0f32; n * d];
        // MLA sizes its own buffers (crate::mla): these stay empty.
        let gqa_rows = if c.mla.is_some() { 0 } else { n };
        let mut qkv = vec![0f32; gqa_rows * qkv_dim];
        let mut q = vec![0f32; gqa_rows * qd];
        let mut attn = vec![0f32; gqa_rows * qd];
        let mut proj = vec![0f32; n * d];
        // On a cache line, so the gate-up matmul may stream its output there; reused across
        // forwards (36 MB at 512 tokens of Qwen2.5 1.5B: no fresh pages or zeroing per call).
        let mut gu = Kept::take(&GATE_UP, n * 2 * c.ffn_dim);
        // The down projection's input in f32: filled only for LoRA adapters.
        let mut act = Vec::new();
        // Gemma's post-norms need a second row buffer (the norm cannot run in place).
        let post_norms = self
            .weights
            .layers
            .iter()
            .any(|l| !l.post_attn_norm.is_empty());
        let mut normed = if post_norms {
            vec![0f32; n * d]
        } else {
            Vec::new()
        };
        // A parallel block (cohere2) keeps the attention output until the FFN's is added.
        let mut attn_out = if c.parallel_block {
            vec![0f32; n * d]
        } else {
            Vec::new()
        };
        let norm = c.norm();

        // llama.cpp's arithmetic (`set_sums(Sums::Ggml)`) includes its two attention orders
        // (batched for prompt tokens, lone-query for decoded ones, see
        // `SeqSpan::decode_from`); otherwise every token uses the batched order, which needs
        // no f64 tail (~10% faster decode attention). The matmuls hold the setting.
        let llama_orders = self.weights.head().sums() == Sums::Ggml;
        let max_pos = token_pos.iter().map(|&(_, p)| p).max().unwrap_or(0);
        let rope_global = self.rope.rows(max_pos);
        let rope_window = self.rope_window.as_ref().map(|r| r.rows(max_pos));
        let layers = &self.weights.layers[..n_layers.min(self.weights.layers.len())];
        if let Some(first) = layers.first() {
            rmsnorm_rows(pool, &x, &first.attn_norm, norm, &mut h, d);
        }
        let bs = kv.block_size;
        // Each token's K/V rows are written by the task that ropes it, which needs every
        // (block, slot) written this step to be distinct. The engine's batches are (a block
        // shared between sequences is copied before it is written); a batch that is not gets
        // its rows written one after another in token order, as the model always did.
        let slot_of =
            |group: usize, &(seq, pos): &(usize, usize)| batch.seqs[seq].slot(group, pos, bs);
        // (A per-channel K format stages rows a page at a time: one writer.)
        let parallel_writes = !kv.formats.k.per_channel()
            && (0..kv.layout.n_groups()).all(|g| {
                let mut slots: Vec<usize> = token_pos.iter().map(|tp| slot_of(g, tp)).collect();
                slots.sort_unstable();
                slots.windows(2).all(|w| w[0] != w[1])
            });
        let lora = LoraRows::of(batch);
        let qk_whole = c.arch.qk_norm_whole();
        // Gemma's graph in llama.cpp multiplies the queries by the scale (after RoPE) and the
        // scores by 1: the scale then acts before the queries are rounded to f16, which
        // differs from scaling the scores where a query value is an f16 subnormal.
        let (q_scale, score_scale) = match c.arch.gemma() {
            true => (Some(c.attn_scale), 1.0),
            false => (None, c.attn_scale),
        };
        for (l, w) in layers.iter().enumerate() {
            let window = c.is_window_layer(l);
            let no_rope = c.is_no_rope_layer(l);
            let group = kv.layout.group(l);
            let rope = match (&rope_window, window) {
                (Some(r), true) => r,
                _ => &rope_global,
            };
            let shape = AttnShape {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: score_scale,
                window: if window { c.sliding_window } else { None },
                softcap: c.attn_softcap,
                q_round: self.attn_precision.query_format(kv.formats.k),
                sinks: (!w.attn_sinks.is_empty()).then_some(&w.attn_sinks[..]),
            };
            if let (Some(m), Some(mw)) = (&c.mla, &w.mla) {
                // Multi-head latent attention over the latent cache (crate::mla).
                let step = crate::mla::MlaStep {
                    cfg: c,
                    m,
                    layer: l,
                    batch,
                    token_pos: &token_pos,
                    rope,
                    shape,
                    llama_orders,
                };
                crate::mla::forward(&step, &w.wqkv, &w.wo, mw, kv, &h, &mut proj, pool);
            } else {
                w.wqkv.matmul(&h, n, &mut qkv, pool);
                if let Some(lr) = &lora {
                    lr.apply(pool, l, LoraMatrix::Qkv, &h, d, &mut qkv, qkv_dim);
                }
                // A rotated K format stores `k - b_k` (Qwen2's K bias, a few channels of large,
                // nearly position-independent values that 4 bits cannot hold beside the rest):
                // `q·b_k` is the same for every key of a query, so the softmax is unchanged
                // (not under a soft-cap, whose tanh is not shift-invariant).
                let k_shift =
                    (kv.formats.k.rotated() && c.attn_softcap.is_none() && !w.bqkv.is_empty())
                        .then(|| &w.bqkv[qd..qd + kvd]);
                {
                    let (qkv_rows, q_rows) = (Rows::new(&mut qkv, qkv_dim), Rows::new(&mut q, qd));
                    let cache = kv.layer_writer(l);
                    par::ranges(pool, n, &|r| {
                        let mut tmp = Vec::new();
                        for t in r {
                            // SAFETY: row t belongs to this task alone.
                            let (row, q_out) = unsafe { (qkv_rows.row(t), q_rows.row(t)) };
                            if !w.bqkv.is_empty() {
                                ops::add_inplace(row, &w.bqkv);
                            }
                            let (qr, rest) = row.split_at_mut(qd);
                            let (kr, vr) = rest.split_at_mut(kvd);
                            if qk_whole {
                                // OLMo 2: one norm over all heads of Q, one over all of K.
                                for (s, norm) in [(&mut *qr, &w.q_norm), (&mut *kr, &w.k_norm)] {
                                    tmp.clear();
                                    tmp.extend_from_slice(s);
                                    ops::rmsnorm(&tmp, norm, c.rms_eps, s);
                                }
                            } else if !w.q_norm.is_empty() {
                                for (s, norm) in qr
                                    .chunks_exact_mut(hd)
                                    .map(|s| (s, &w.q_norm))
                                    .chain(kr.chunks_exact_mut(hd).map(|s| (s, &w.k_norm)))
                                {
                                    tmp.clear();
                                    tmp.extend_from_slice(s);
                                    ops::rmsnorm(&tmp, norm, c.rms_eps, s);
                                }
                            }
                            let pos = token_pos[t].1;
                            if !no_rope {
                                rope.apply(qr, nh, pos as u32);
                                rope.apply(kr, nkv, pos as u32);
                            }
                            if let Some(b) = k_shift {
                                for (x, y) in kr.iter_mut().zip(b) {
                                    *x -= y;
                                }
                            }
                            q_out.copy_from_slice(qr);
                            if let Some(f) = q_scale {
                                q_out.iter_mut().for_each(|v| *v *= f);
                            }
                            if let Some(temp) = &c.attn_temp {
                                let f = temp.factor(pos);
                                q_out.iter_mut().for_each(|v| *v *= f);
                            }
                            // The token's K and V rows go to its cache slot from this task
                            // when every slot of the step is distinct (checked above).
                            if parallel_writes {
                                let s = slot_of(group, &token_pos[t]);
                                let rows = kr.chunks_exact(hd).zip(vr.chunks_exact(hd));
                                for (kh, (k, v)) in rows.enumerate() {
                                    // SAFETY: slot s is this token's alone.
                                    unsafe { cache.write_row(s / bs, kh, s % bs, k, v) };
                                }
                            }
                        }
                    });
                }
                if !parallel_writes {
                    for (t, tp) in token_pos.iter().enumerate() {
                        let s = slot_of(group, tp);
                        let (k, v) = qkv[t * qkv_dim + qd..(t + 1) * qkv_dim].split_at(kvd);
                        for (kh, (k, v)) in k.chunks_exact(hd).zip(v.chunks_exact(hd)).enumerate() {
                            kv.write_row(l, s / bs, kh, s % bs, k, v);
                        }
                    }
                }
                attention(
                    batch,
                    &token_pos,
                    kv,
                    l,
                    shape,
                    llama_orders,
                    &q,
                    &mut attn,
                    pool,
                );
                w.wo.matmul(&attn, n, &mut proj, pool);
                if let Some(lr) = &lora {
                    lr.apply(pool, l, LoraMatrix::O, &attn, qd, &mut proj, d);
                }
            }
            if !w.bo.is_empty() {
                proj.chunks_exact_mut(d)
                    .for_each(|row| ops::add_inplace(row, &w.bo));
            }
            scale_rows(&mut proj, c.residual_scale);
            let out = post_norm(pool, &proj, &w.post_attn_norm, norm, &mut normed, d);
            if c.parallel_block {
                // The FFN reads the same normed input (`h`); both add to `x` below.
                attn_out.copy_from_slice(out);
            } else {
                add_norm_rows(pool, &mut x, out, Some(&w.ffn_norm), norm, &mut h, d);
            }
            if let Some(moe) = &w.moe {
                // Mixture of experts (crate::moe), then the same residual add and norm.
                moe.forward(&h, n, &mut proj, pool);
                scale_rows(&mut proj, c.residual_scale);
                let next_norm = layers.get(l + 1).map(|next| &next.attn_norm[..]);
                add_norm_rows(pool, &mut x, &proj, next_norm, norm, &mut h, d);
                continue;
            }
            w.w_gate_up.matmul_lines(&h, n, &mut gu, pool);
            if let Some(lr) = &lora {
                lr.apply(pool, l, LoraMatrix::GateUp, &h, d, &mut gu, 2 * c.ffn_dim);
            }
            let (f, act_fn) = (c.ffn_dim, c.arch.activation());
            if let Some(lr) = &lora {
                // The adapters read the activated rows too: activated once, in f32, for the
                // down projection and the adapters (the same bits as the fused form below).
                act.resize(n * f, 0.0);
                let act_rows = Rows::new(&mut act, f);
                par::ranges(pool, n, &|r| {
                    for t in r {
                        // SAFETY: row t belongs to this task alone.
                        act_fn.apply_row(&gu, t, unsafe { act_rows.row(t) });
                    }
                });
                w.w_down.matmul(&act, n, &mut proj, pool);
                lr.apply(pool, l, LoraMatrix::Down, &act, f, &mut proj, d);
            } else {
                // The activation runs inside the down projection's quantization.
                w.w_down.matmul_gated(&gu, act_fn, n, &mut proj, pool);
            }
            scale_rows(&mut proj, c.residual_scale);
            let out = post_norm(pool, &proj, &w.post_ffn_norm, norm, &mut normed, d);
            // The residual add, then the next layer's attention norm in the same pass.
            let next_norm = layers.get(l + 1).map(|next| &next.attn_norm[..]);
            if c.parallel_block {
                // llama.cpp's order: (FFN + residual) + attention.
                add_norm_rows(pool, &mut x, out, None, norm, &mut h, d);
                add_norm_rows(pool, &mut x, &attn_out, next_norm, norm, &mut h, d);
            } else {
                add_norm_rows(pool, &mut x, out, next_norm, norm, &mut h, d);
            }
        }

        // Only the rows that need logits go through the final norm and the head.
        let rows: Vec<usize> = batch
            .seqs
            .iter()
            .flat_map(|s| (s.start + s.len - s.n_logits)..(s.start + s.len))
            .collect();
        let m = rows.len();
        let mut hn = vec![0f32; m * d];
        for (i, &r) in rows.iter().enumerate() {
            norm.row(
                &x[r * d..(r + 1) * d],
                &self.weights.output_norm,
                &mut hn[i * d..(i + 1) * d],
            );
        }
        let mut logits = vec![0f32; m * c.vocab_size];
        if m > 0 {
            self.weights.head().matmul(&hn, m, &mut logits, pool);
        }
        scale_rows(&mut logits, c.logit_mul);
        if let Some(cap) = c.final_softcap {
            logits.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
        }
        let hidden_rows = batch
            .seqs
            .iter()
            .flat_map(|s| (s.start + s.len - s.n_hidden)..(s.start + s.len));
        let mut hidden = vec![0f32; batch.n_hidden_rows() * d];
        for (out, r) in hidden.chunks_exact_mut(d).zip(hidden_rows) {
            norm.row(&x[r * d..(r + 1) * d], &self.weights.output_norm, out);
        }
        drop(gu);
        crate::attention::end_forward();
        Ok(ForwardOutput { logits, hidden })
    }

    /// Width of a hidden row (`d_model`): the length of an embedding.
    pub fn hidden_size(&self) -> usize {
        self.config.d_model
    }

    /// Weight bytes, KV bytes and FLOPs of one forward over `batch` (before it runs).
    pub fn stats(&self, batch: &ForwardBatch, kv_bytes_per_token: usize) -> ForwardStats {
        let kv_tokens: usize = batch
            .seqs
            .iter()
            .map(|s| (s.pos + s.len) * s.len.min(1))
            .sum();
        let c = &self.config;
        let attn_flops =
            4.0 * batch.attention_pairs() as f64 * (c.n_heads * c.head_dim * c.n_layers) as f64;
        ForwardStats {
            tokens: batch.n_tokens(),
            weight_bytes: self.weights.bytes_per_step(),
            kv_bytes_read: kv_tokens * kv_bytes_per_token,
            flops: c.matmul_flops_per_token() * batch.n_tokens() as f64 + attn_flops,
        }
    }
}

/// `rmsnorm(y)` into `buf` when the layer has a post-norm (Gemma), else `y` itself: what
/// is added to the residual stream.
fn post_norm<'a>(
    pool: &ThreadPool,
    y: &'a [f32],
    weight: &[f32],
    norm: Norm,
    buf: &'a mut [f32],
    d: usize,
) -> &'a [f32] {
    if weight.is_empty() {
        return y;
    }
    rmsnorm_rows(pool, y, weight, norm, buf, d);
    buf
}

/// Granite's multipliers (residual branches) and the logit factors (Granite, cohere2):
/// `x · s`, skipped at 1.
fn scale_rows(x: &mut [f32], s: f32) {
    if s != 1.0 {
        x.iter_mut().for_each(|v| *v *= s);
    }
}

/// The block norm ([`Norm::rows`]) with the rows spread over the pool; an empty weight (a
/// model without that pre-norm, OLMo 2) copies the rows unchanged.
fn rmsnorm_rows(
    pool: &ThreadPool,
    x: &[f32],
    weight: &[f32],
    norm: Norm,
    out: &mut [f32],
    d: usize,
) {
    if weight.is_empty() {
        out.copy_from_slice(x);
        return;
    }
    let rows = Rows::new(out, d);
    par::ranges(pool, x.len() / d, &|r| {
        // SAFETY: these rows belong to this task alone.
        let o = unsafe { rows.range(r.clone()) };
        norm.rows(&x[r.start * d..r.end * d], weight, o);
    });
}

/// `x += y` row by row, then with a norm weight `out = rmsnorm(x)`: the residual add and the
/// norm after it in one pass over the pool (one hand-off instead of two).
#[allow(clippy::too_many_arguments)]
fn add_norm_rows(
    pool: &ThreadPool,
    x: &mut [f32],
    y: &[f32],
    norm_weight: Option<&[f32]>,
    norm: Norm,
    out: &mut [f32],
    d: usize,
) {
    let (xs, outs) = (Rows::new(x, d), Rows::new(out, d));
    par::ranges(pool, y.len() / d, &|r| {
        // SAFETY: these rows belong to this task alone.
        let x = unsafe { xs.range(r.clone()) };
        ops::add_inplace(x, &y[r.start * d..r.end * d]);
        match norm_weight {
            // No pre-norm (OLMo 2): the next input is the residual stream itself.
            // SAFETY: as above.
            Some([]) => unsafe { outs.range(r.clone()) }.copy_from_slice(x),
            // SAFETY: as above.
            Some(weight) => norm.rows(x, weight, unsafe { outs.range(r.clone()) }),
            None => {}
        }
    });
}
