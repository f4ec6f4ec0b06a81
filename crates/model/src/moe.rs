//! Mixture-of-experts FFN: `qwen2moe` (with a sigmoid-gated shared expert), `qwen3moe` and
//! `llama` with `expert_count > 0` (Mixtral), following llama.cpp's `build_moe_ffn`.
//!
//! Per token: router logits (`ffn_gate_inp`, one row per expert), softmax over all experts in
//! f32, the `expert_used_count` largest probabilities (ties to the lower index) as the
//! token's experts in descending order, their probabilities as weights (renormalized to sum
//! 1 for qwen3moe and Mixtral, as llama.cpp's `norm_w`). The FFN output is
//! `Σ_j w_j · down_j(silu(gate_j h) · up_j h)` summed in that order, plus for qwen2moe
//! `sigmoid(gate_inp_shexp · h) · shared(h)`.
//!
//! GPT-OSS (llama.cpp's `SOFTMAX_WEIGHT` gating) differs in three places: the router has a
//! bias, the top k are taken on the biased logits and the softmax runs over those k only;
//! every expert has biases on gate, up and down (added after each matmul, the down bias
//! before the routing weight); and the activation is [`Activation::SwigluOai`].
//!
//! Compute is grouped by expert: after routing every row of the step, each expert that got
//! at least one row runs once over all its rows gathered into one buffer (one read of its
//! weights per step, shared by all its rows); each row's result is independent of the other
//! rows, so a sequence gets the same bits batched as alone. Every expert run is counted
//! ([`MoeStats`]) so tests and `folio bench model` can see which experts a step read.

use crate::par::{self, Rows};
use crate::weights::{info, matrix, stacked, vector, weight_type};
use crate::{Activation, Arch, Model, ModelConfig, ModelError};
use folio_gguf::GgufFile;
use folio_kernels::matmul::{QMatrix, Sums, WeightType};
use folio_kernels::ops;
use folio_kernels::pool::ThreadPool;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The MoE hyper-parameters of a model (`{arch}.expert_*` keys).
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// `expert_count`: experts per layer.
    pub n_expert: usize,
    /// `expert_used_count`: experts each token runs through.
    pub n_expert_used: usize,
    /// `expert_feed_forward_length` (llama: `feed_forward_length`; Qwen:
    /// `feed_forward_length / expert_used_count` when absent, as llama.cpp).
    pub expert_ffn_dim: usize,
    /// `expert_shared_feed_forward_length`; 0 = no shared expert (qwen2moe defaults to
    /// `feed_forward_length`).
    pub shared_ffn_dim: usize,
    /// Renormalize the selected experts' weights to sum 1 (qwen3moe, Mixtral; not qwen2moe).
    pub norm_top_k: bool,
    /// `leading_dense_block_count` (deepseek2): the first layers keep a dense FFN.
    pub dense_lead: usize,
    /// `expert_gating_func` = 2: sigmoid router probabilities instead of the softmax
    /// (DeepSeek-V3), each expert scored alone.
    pub gating_sigmoid: bool,
    /// `expert_weights_scale`: factor on the selected experts' weights (1 = none).
    pub weights_scale: f32,
    /// `expert_group_count` / `expert_group_used_count`: group-limited routing (DeepSeek-V3)
    /// picks the `n_group_used` groups with the largest sum of their two best scores and
    /// selects experts from those only; `n_group` ≤ 1 = off.
    pub n_group: usize,
    pub n_group_used: usize,
    /// Top k on the router logits, then a softmax over the k (GPT-OSS, llama.cpp's
    /// `SOFTMAX_WEIGHT`); else a softmax over all experts, then the top k.
    pub softmax_after_top_k: bool,
    /// The experts' gate activation (the architecture's, [`Arch::activation`]).
    pub activation: Activation,
}

/// Upper bound on `expert_count` (the largest released models have 256-384).
const MAX_EXPERTS: usize = 4096;

/// The dense architecture whose attention a MoE architecture name shares.
pub(crate) fn dense_arch(name: &str) -> Option<Arch> {
    match name {
        "qwen2moe" => Some(Arch::Qwen2),
        "qwen3moe" => Some(Arch::Qwen3),
        _ => None,
    }
}

impl MoeConfig {
    /// Reads the expert keys of `arch_name`; `None` for a dense model (llama without
    /// `expert_count`, or with 0).
    pub(crate) fn from_gguf(
        f: &GgufFile,
        arch_name: &str,
        ffn_dim: usize,
    ) -> Result<Option<MoeConfig>, ModelError> {
        let key = |k: &str| format!("{arch_name}.{k}");
        let gpt_oss = arch_name == "gpt-oss";
        let moe_arch = dense_arch(arch_name).is_some() || gpt_oss;
        let opt = |k: &str| -> Result<Option<usize>, ModelError> {
            match f.get(&key(k)) {
                Some(_) => Ok(Some(f.get_u64(&key(k))? as usize)),
                None => Ok(None),
            }
        };
        let bad = |k: &str, what: String| ModelError::Metadata { key: key(k), what };
        let n_expert = opt("expert_count")?.unwrap_or(0);
        if n_expert == 0 {
            if moe_arch {
                return Err(bad(
                    "expert_count",
                    format!("must be > 0 for {arch_name}, got 0"),
                ));
            }
            return Ok(None);
        }
        if n_expert > MAX_EXPERTS {
            return Err(bad(
                "expert_count",
                format!("{n_expert} exceeds the limit {MAX_EXPERTS}"),
            ));
        }
        let n_expert_used = opt("expert_used_count")?
            .ok_or_else(|| bad("expert_used_count", "missing (expert_count > 0)".into()))?;
        if n_expert_used == 0 || n_expert_used > n_expert {
            return Err(bad(
                "expert_used_count",
                format!("{n_expert_used} must be in 1..=expert_count {n_expert}"),
            ));
        }
        let expert_ffn_dim = match opt("expert_feed_forward_length")? {
            Some(v) => v,
            // llama.cpp reads gpt-oss's as a required key.
            None if gpt_oss => {
                return Err(bad(
                    "expert_feed_forward_length",
                    "missing (required for gpt-oss)".into(),
                ))
            }
            None if moe_arch => ffn_dim / n_expert_used,
            None => ffn_dim,
        };
        if expert_ffn_dim == 0 {
            return Err(bad(
                "expert_feed_forward_length",
                "must be > 0, got 0".into(),
            ));
        }
        let deepseek = arch_name == "deepseek2";
        let shared_ffn_dim = match opt("expert_shared_feed_forward_length")? {
            Some(v) => v,
            None if arch_name == "qwen2moe" => ffn_dim,
            // llama.cpp's deepseek2: `expert_shared_count` experts of the expert width.
            None if deepseek => opt("expert_shared_count")?.unwrap_or(0) * expert_ffn_dim,
            None => 0,
        };
        let gating_key = key("expert_gating_func");
        let gating_sigmoid = match opt("expert_gating_func")? {
            None | Some(0) | Some(1) => false,
            Some(2) => true,
            Some(v) => {
                return Err(bad(
                    "expert_gating_func",
                    format!("{v} is not supported (1 softmax, 2 sigmoid) in {gating_key}"),
                ))
            }
        };
        let weights_scale = match f.get(&key("expert_weights_scale")) {
            Some(_) => {
                let v = f.get_f32(&key("expert_weights_scale"))?;
                if !v.is_finite() || v < 0.0 {
                    return Err(bad(
                        "expert_weights_scale",
                        format!("{v} must be a finite number >= 0"),
                    ));
                }
                // 0 means unset to llama.cpp.
                if v == 0.0 {
                    1.0
                } else {
                    v
                }
            }
            None => 1.0,
        };
        let norm_top_k = match f.get(&key("expert_weights_norm")).and_then(|v| v.as_bool()) {
            Some(b) if deepseek => b,
            _ if deepseek => false,
            // GPT-OSS's softmax over the top k already sums to 1.
            _ => arch_name != "qwen2moe" && !gpt_oss,
        };
        let n_group = opt("expert_group_count")?.unwrap_or(0);
        let n_group_used = opt("expert_group_used_count")?.unwrap_or(0);
        if n_group > 1
            && (!n_expert.is_multiple_of(n_group) || n_group_used == 0 || n_group_used >= n_group)
        {
            return Err(bad(
                "expert_group_used_count",
                format!("{n_group_used} must be in 1..expert_group_count {n_group}, which must divide expert_count {n_expert}"),
            ));
        }
        let dense_lead = opt("leading_dense_block_count")?.unwrap_or(0);
        Ok(Some(MoeConfig {
            n_expert,
            n_expert_used,
            expert_ffn_dim,
            shared_ffn_dim,
            norm_top_k,
            dense_lead,
            gating_sigmoid,
            weights_scale,
            n_group,
            n_group_used,
            softmax_after_top_k: gpt_oss,
            activation: match gpt_oss {
                true => Activation::SwigluOai,
                false => Activation::Silu,
            },
        }))
    }

    /// Weights of the FFN a token runs through (router, its experts, the shared expert).
    pub fn active_ffn_params(&self, d_model: usize) -> usize {
        let shared_gate = if self.shared_ffn_dim > 0 { d_model } else { 0 };
        d_model * self.n_expert
            + 3 * d_model * (self.n_expert_used * self.expert_ffn_dim + self.shared_ffn_dim)
            + shared_gate
    }
}

/// One expert's FFN.
pub struct Expert {
    /// Rows: gate then up (`expert_ffn_dim` each).
    pub gate_up: QMatrix,
    pub down: QMatrix,
    /// GPT-OSS's biases: gate then up (as `gate_up`'s rows), and down; empty when absent.
    pub gate_up_bias: Vec<f32>,
    pub down_bias: Vec<f32>,
}

/// qwen2moe's shared expert, run on every token.
pub struct SharedExpert {
    pub ffn: Expert,
    /// `ffn_gate_inp_shexp`: the output is scaled by `sigmoid(gate · h)`; `None` = 1.
    pub gate: Option<Vec<f32>>,
}

/// The MoE FFN weights of one layer, and its read counters.
pub struct MoeWeights {
    /// `ffn_gate_inp`: one row of `d_model` per expert.
    pub router: QMatrix,
    /// `ffn_gate_inp.bias` (GPT-OSS), added to the router logits; empty when absent.
    pub router_bias: Vec<f32>,
    pub experts: Vec<Expert>,
    pub shared: Option<SharedExpert>,
    n_used: usize,
    ffn: usize,
    norm_top_k: bool,
    /// `exp_probs_b.bias` (DeepSeek-V3): added to the probabilities for choosing experts
    /// only; the weights stay unbiased.
    probs_bias: Option<Vec<f32>>,
    gating_sigmoid: bool,
    weights_scale: f32,
    n_group: usize,
    n_group_used: usize,
    softmax_after_top_k: bool,
    activation: Activation,
    /// Times each expert's weights were read (one per step it got rows), since load.
    reads: Vec<AtomicU64>,
    /// Rows each expert got in the layer's last step.
    last_rows: Vec<AtomicUsize>,
    /// The last step's experts of each row, `[row][k]` flattened.
    last_experts: Mutex<Vec<usize>>,
}

/// The matrix a MoE layer keeps in place of the dense FFN's (never multiplied, 4 bytes).
pub(crate) fn unused() -> QMatrix {
    QMatrix::from_ggml(WeightType::F32, 1, 1, &[0; 4]).expect("a 1x1 f32 matrix")
}

/// Each expert's bytes of a 3-D `[cols, rows, n_expert]` expert tensor (contiguous in the
/// file, expert after expert), as matrices of `rows × cols`.
pub(crate) fn experts_of<'a>(
    f: &'a GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
    n_expert: usize,
) -> Result<(WeightType, Vec<&'a [u8]>), ModelError> {
    let t = info(f, name)?;
    let want = [cols as u64, rows as u64, n_expert as u64];
    if t.dims[..] != want[..] {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!("shape {:?}, expected {want:?}", t.dims),
        });
    }
    let wt = weight_type(name, t.ggml_type)?;
    let data = f.tensor_data(t);
    if data.len() != t.n_bytes || !t.n_bytes.is_multiple_of(n_expert) {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!(
                "{} bytes in the file ({} declared) do not split into {n_expert} experts",
                data.len(),
                t.n_bytes
            ),
        });
    }
    Ok((wt, data.chunks_exact(t.n_bytes / n_expert).collect()))
}

/// Each expert's slice of a 2-D `[len, n_expert]` bias tensor, as f32 vectors.
fn expert_biases(
    f: &GgufFile,
    name: &str,
    len: usize,
    n_expert: usize,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let v = vector(f, name, len * n_expert)?;
    Ok(v.chunks_exact(len).map(<[f32]>::to_vec).collect())
}

fn in_tensor(name: &str) -> impl Fn(folio_kernels::matmul::KernelError) -> ModelError + '_ {
    move |e| ModelError::Tensor {
        name: name.into(),
        what: e.to_string(),
    }
}

impl MoeWeights {
    pub(crate) fn load(
        f: &GgufFile,
        cfg: &ModelConfig,
        m: &MoeConfig,
        layer: usize,
    ) -> Result<MoeWeights, ModelError> {
        let n = |s: &str| format!("blk.{layer}.{s}");
        let (d, e, ff) = (cfg.d_model, m.n_expert, m.expert_ffn_dim);
        let router = matrix(f, &n("ffn_gate_inp.weight"), d, e)?;
        let (gn, un, dn) = (
            n("ffn_gate_exps.weight"),
            n("ffn_up_exps.weight"),
            n("ffn_down_exps.weight"),
        );
        let (gt, gates) = experts_of(f, &gn, d, ff, e)?;
        let (ut, ups) = experts_of(f, &un, d, ff, e)?;
        let (dt, downs) = experts_of(f, &dn, ff, d, e)?;
        // GPT-OSS's biases (required there, as llama.cpp loads them).
        let biased = cfg.arch == Arch::GptOss;
        let bias = |name: &str, len: usize| -> Result<Vec<Vec<f32>>, ModelError> {
            match biased {
                true => expert_biases(f, &n(name), len, e),
                false => Ok(vec![Vec::new(); e]),
            }
        };
        let (gate_b, up_b, down_b) = (
            bias("ffn_gate_exps.bias", ff)?,
            bias("ffn_up_exps.bias", ff)?,
            bias("ffn_down_exps.bias", d)?,
        );
        let router_bias = match biased {
            true => vector(f, &n("ffn_gate_inp.bias"), e)?,
            false => Vec::new(),
        };
        let mut experts = Vec::with_capacity(e);
        for i in 0..e {
            let gate_up = if gt == ut {
                let raw = [gates[i], ups[i]].concat();
                QMatrix::from_ggml(gt, 2 * ff, d, &raw).map_err(in_tensor(&gn))?
            } else {
                QMatrix::stack(vec![
                    QMatrix::from_ggml(gt, ff, d, gates[i]).map_err(in_tensor(&gn))?,
                    QMatrix::from_ggml(ut, ff, d, ups[i]).map_err(in_tensor(&un))?,
                ])?
            };
            let down = QMatrix::from_ggml(dt, d, ff, downs[i]).map_err(in_tensor(&dn))?;
            experts.push(Expert {
                gate_up,
                down,
                gate_up_bias: [&gate_b[i][..], &up_b[i][..]].concat(),
                down_bias: down_b[i].clone(),
            });
        }
        let shared = if m.shared_ffn_dim > 0 {
            let sf = m.shared_ffn_dim;
            let (g, u) = (n("ffn_gate_shexp.weight"), n("ffn_up_shexp.weight"));
            let gate_name = n("ffn_gate_inp_shexp.weight");
            let gate = if cfg.arch == Arch::Qwen2 || f.tensor(&gate_name).is_some() {
                Some(vector(f, &gate_name, d)?)
            } else {
                None
            };
            Some(SharedExpert {
                ffn: Expert {
                    gate_up: stacked(f, &[(&g, sf), (&u, sf)], d)?,
                    down: matrix(f, &n("ffn_down_shexp.weight"), sf, d)?,
                    gate_up_bias: Vec::new(),
                    down_bias: Vec::new(),
                },
                gate,
            })
        } else {
            None
        };
        Ok(MoeWeights {
            router,
            router_bias,
            experts,
            shared,
            n_used: m.n_expert_used,
            ffn: ff,
            norm_top_k: m.norm_top_k,
            probs_bias: match f.tensor(&n("exp_probs_b.bias")) {
                Some(_) => Some(vector(f, &n("exp_probs_b.bias"), e)?),
                None => None,
            },
            gating_sigmoid: m.gating_sigmoid,
            weights_scale: m.weights_scale,
            n_group: m.n_group,
            n_group_used: m.n_group_used,
            softmax_after_top_k: m.softmax_after_top_k,
            activation: m.activation,
            reads: (0..e).map(|_| AtomicU64::new(0)).collect(),
            last_rows: (0..e).map(|_| AtomicUsize::new(0)).collect(),
            last_experts: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn set_sums(&mut self, sums: Sums) {
        self.router.set_sums(sums);
        for x in self
            .experts
            .iter_mut()
            .chain(self.shared.as_mut().map(|s| &mut s.ffn))
        {
            x.gate_up.set_sums(sums);
            x.down.set_sums(sums);
        }
    }

    /// Bytes of every matrix of the layer's FFN (all experts: the dense upper bound).
    pub fn all_bytes(&self) -> usize {
        self.router.weight_bytes()
            + self.experts.iter().map(Expert::bytes).sum::<usize>()
            + self.shared.as_ref().map_or(0, |s| s.ffn.bytes())
    }

    /// Multiply-accumulates one token costs in this layer's FFN: the router, the
    /// `expert_used_count` experts it runs and the shared expert.
    pub fn macs_per_token(&self) -> u64 {
        let expert = self.experts.first().map_or(0, Expert::macs);
        macs(&self.router)
            + self.n_used as u64 * expert
            + self.shared.as_ref().map_or(0, |s| s.ffn.macs())
    }

    /// Bytes the layer's last step read: the router, the experts that got rows, the shared
    /// expert.
    pub fn last_step_bytes(&self) -> usize {
        let active: usize = self
            .experts
            .iter()
            .zip(&self.last_rows)
            .filter(|(_, r)| r.load(Ordering::Relaxed) > 0)
            .map(|(x, _)| x.bytes())
            .sum();
        self.router.weight_bytes() + active + self.shared.as_ref().map_or(0, |s| s.ffn.bytes())
    }

    /// Routes one token: its experts in descending probability and their weights.
    fn route(&self, logits: &[f32], sel: &mut [(usize, f32)]) {
        if self.softmax_after_top_k {
            return route_top_k_then_softmax(logits, sel);
        }
        let probs: Vec<f32> = if self.gating_sigmoid {
            logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect()
        } else {
            let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut probs: Vec<f32> = logits.iter().map(|&l| (l - m).exp()).collect();
            let z: f32 = probs.iter().sum();
            for p in &mut probs {
                *p /= z;
            }
            probs
        };
        // What experts are chosen by: the probabilities plus the selection bias, with the
        // groups outside the best `n_group_used` masked out.
        let mut score = probs.clone();
        if let Some(b) = &self.probs_bias {
            score.iter_mut().zip(b).for_each(|(s, b)| *s += b);
        }
        if self.n_group > 1 {
            let per = score.len() / self.n_group;
            let top2 = |g: &[f32]| {
                let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                for &x in g {
                    if x > a {
                        (a, b) = (x, a);
                    } else if x > b {
                        b = x;
                    }
                }
                a + b
            };
            let gs: Vec<f32> = score.chunks(per).map(top2).collect();
            let mut groups: Vec<usize> = (0..self.n_group).collect();
            groups.sort_by(|&a, &b| gs[b].total_cmp(&gs[a]));
            for &g in &groups[self.n_group_used..] {
                score[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
            }
        }
        let mut order: Vec<usize> = (0..probs.len()).collect();
        // Stable: equal probabilities keep the lower expert first.
        order.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
        for (s, &e) in sel.iter_mut().zip(&order) {
            *s = (e, probs[e]);
        }
        if self.norm_top_k {
            // llama.cpp clamps the sum at f16's smallest normal.
            let sum = sel.iter().map(|s| s.1).sum::<f32>().max(6.103_515_6e-5);
            for s in sel.iter_mut() {
                s.1 /= sum;
            }
        }
        if self.weights_scale != 1.0 {
            sel.iter_mut().for_each(|s| s.1 *= self.weights_scale);
        }
    }

    /// The FFN over `n` normed rows `h` (`[n][d]`), into `out` (`[n][d]`, overwritten).
    pub(crate) fn forward(&self, h: &[f32], n: usize, out: &mut [f32], pool: &ThreadPool) {
        let n_exp = self.experts.len();
        let d = self.router.cols();
        let k = self.n_used;
        let mut logits = vec![0f32; n * n_exp];
        self.router.matmul(h, n, &mut logits, pool);
        if !self.router_bias.is_empty() {
            logits
                .chunks_exact_mut(n_exp)
                .for_each(|row| ops::add_inplace(row, &self.router_bias));
        }
        let mut sel = vec![(0usize, 0f32); n * k];
        for (t, s) in sel.chunks_exact_mut(k).enumerate() {
            self.route(&logits[t * n_exp..(t + 1) * n_exp], s);
        }
        if let Ok(mut last) = self.last_experts.lock() {
            last.clear();
            last.extend(sel.iter().map(|s| s.0));
        }
        // Rows of each expert, in token order: (token, slot among its k).
        let mut rows_of: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_exp];
        for (i, &(e, _)) in sel.iter().enumerate() {
            rows_of[e].push((i / k, i % k));
        }
        // Each (token, slot)'s expert output, weighted; summed per token in slot order below.
        let mut outk = vec![0f32; n * k * d];
        let (mut x, mut gu, mut y) = (Vec::new(), Vec::new(), Vec::new());
        for (e, rows) in rows_of.iter().enumerate() {
            self.last_rows[e].store(rows.len(), Ordering::Relaxed);
            if rows.is_empty() {
                continue;
            }
            self.reads[e].fetch_add(1, Ordering::Relaxed);
            let m = rows.len();
            x.clear();
            for &(t, _) in rows {
                x.extend_from_slice(&h[t * d..(t + 1) * d]);
            }
            let act_fn = self.activation;
            self.experts[e].run(&x, m, self.ffn, act_fn, &mut gu, &mut y, pool);
            for (i, &(t, j)) in rows.iter().enumerate() {
                let w = sel[t * k + j].1;
                let o = &mut outk[(t * k + j) * d..(t * k + j + 1) * d];
                for (o, v) in o.iter_mut().zip(&y[i * d..(i + 1) * d]) {
                    *o = v * w;
                }
            }
        }
        for (t, o) in out.chunks_exact_mut(d).take(n).enumerate() {
            o.copy_from_slice(&outk[t * k * d..(t * k + 1) * d]);
            for j in 1..k {
                ops::add_inplace(o, &outk[(t * k + j) * d..(t * k + j + 1) * d]);
            }
        }
        if let Some(s) = &self.shared {
            let sf = s.ffn.down.cols();
            s.ffn.run(h, n, sf, Activation::Silu, &mut gu, &mut y, pool);
            for (t, o) in out.chunks_exact_mut(d).take(n).enumerate() {
                let g = s.gate.as_ref().map_or(1.0, |g| {
                    let z: f32 = g
                        .iter()
                        .zip(&h[t * d..(t + 1) * d])
                        .map(|(a, b)| a * b)
                        .sum();
                    1.0 / (1.0 + (-z).exp())
                });
                for (o, v) in o.iter_mut().zip(&y[t * d..(t + 1) * d]) {
                    *o += v * g;
                }
            }
        }
    }
}

impl Expert {
    fn bytes(&self) -> usize {
        self.gate_up.weight_bytes() + self.down.weight_bytes()
    }

    fn macs(&self) -> u64 {
        macs(&self.gate_up) + macs(&self.down)
    }

    /// `y = down(act(gate x) · up x)` over `m` rows of `x`, `ffn` the hidden width (each
    /// projection plus its bias where the expert has them).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        x: &[f32],
        m: usize,
        ffn: usize,
        act_fn: Activation,
        gu: &mut Vec<f32>,
        y: &mut Vec<f32>,
        pool: &ThreadPool,
    ) {
        gu.resize(m * 2 * ffn, 0.0);
        y.resize(m * self.down.rows(), 0.0);
        self.gate_up.matmul(x, m, gu, pool);
        if !self.gate_up_bias.is_empty() {
            let gu_rows = Rows::new(gu, 2 * ffn);
            par::ranges(pool, m, &|r| {
                for t in r {
                    // SAFETY: row t belongs to this task alone.
                    ops::add_inplace(unsafe { gu_rows.row(t) }, &self.gate_up_bias);
                }
            });
        }
        // The activation runs inside the down projection's quantization.
        self.down.matmul_gated(gu, act_fn, m, y, pool);
        if !self.down_bias.is_empty() {
            y.chunks_exact_mut(self.down_bias.len())
                .for_each(|row| ops::add_inplace(row, &self.down_bias));
        }
    }
}

/// GPT-OSS's routing (llama.cpp's `SOFTMAX_WEIGHT`): the `sel.len()` largest logits in
/// descending order (ties to the lower index), weighted by a softmax over those alone as
/// ggml's `soft_max` computes a row shorter than 16: libm `expf` of `l − max`, summed in
/// f64, then each times `(1 / sum) as f32`.
fn route_top_k_then_softmax(logits: &[f32], sel: &mut [(usize, f32)]) {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let max = sel
        .iter()
        .zip(&order)
        .fold(f32::NEG_INFINITY, |m, (_, &e)| m.max(logits[e]));
    let mut sum = 0f64;
    for (s, &e) in sel.iter_mut().zip(&order) {
        let v = (logits[e] - max).exp();
        sum += v as f64;
        *s = (e, v);
    }
    let inv = (1.0 / sum) as f32;
    for s in sel.iter_mut() {
        s.1 *= inv;
    }
}

/// What the MoE layers read: cumulative expert reads and the last step's routing.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeStats {
    /// `[layer][expert]`: steps in which the expert's weights were read, since load.
    pub reads: Vec<Vec<u64>>,
    /// `[layer][expert]`: rows the expert got in the last step.
    pub last_rows: Vec<Vec<usize>>,
    /// `[layer][row · k + j]`: the last step's experts of each row, in descending weight.
    pub last_experts: Vec<Vec<usize>>,
    /// Weight bytes the last step read: attention, the head, and per MoE layer the router,
    /// the experts that got rows and the shared expert (`Weights::bytes_per_step` counts
    /// every expert: the dense upper bound).
    pub last_step_weight_bytes: usize,
}

impl MoeStats {
    /// Experts with at least one row in the last step, summed over layers.
    pub fn last_active_experts(&self) -> usize {
        self.last_rows.iter().flatten().filter(|&&r| r > 0).count()
    }

    /// Mean rows per active expert in the last step.
    pub fn last_rows_per_expert(&self) -> f64 {
        let rows: usize = self.last_rows.iter().flatten().sum();
        rows as f64 / self.last_active_experts().max(1) as f64
    }
}

impl Model {
    /// Expert read counters and the last step's routing; `None` for a dense model.
    pub fn moe_stats(&self) -> Option<MoeStats> {
        self.config.moe.as_ref()?;
        let w = &self.weights;
        let mut s = MoeStats {
            reads: Vec::new(),
            last_rows: Vec::new(),
            last_experts: Vec::new(),
            last_step_weight_bytes: w.head().weight_bytes(),
        };
        for l in &w.layers {
            s.last_step_weight_bytes += l.wqkv.weight_bytes() + l.wo.weight_bytes();
            match &l.moe {
                Some(m) => {
                    s.reads
                        .push(m.reads.iter().map(|r| r.load(Ordering::Relaxed)).collect());
                    s.last_rows.push(
                        m.last_rows
                            .iter()
                            .map(|r| r.load(Ordering::Relaxed))
                            .collect(),
                    );
                    let last = m.last_experts.lock().map(|v| v.clone()).unwrap_or_default();
                    s.last_experts.push(last);
                    s.last_step_weight_bytes += m.last_step_bytes();
                }
                None => {
                    s.last_step_weight_bytes += l.w_gate_up.weight_bytes() + l.w_down.weight_bytes()
                }
            }
        }
        Some(s)
    }
}

/// Multiply-accumulates of one activation row through matrix `m`.
pub(crate) fn macs(m: &QMatrix) -> u64 {
    (m.rows() * m.cols()) as u64
}
