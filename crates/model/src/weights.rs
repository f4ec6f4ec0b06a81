//! Model tensors, loaded once from the GGUF and repacked for the kernels.
//!
//! NOTE: Q, K and V are fused into one matrix (rows stacked), and so are the FFN gate and
//! up projections: one matmul call instead of three (two) halves the thread-pool
//! dispatches per layer, which matters at decode where each matmul is microseconds.

use crate::{Arch, ModelConfig, ModelError};
use folio_gguf::{GgmlType, GgufFile, TensorInfo};
use folio_kernels::matmul::{QMatrix, WeightType};

/// One transformer block.
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    /// Rows: n_heads·hd (Q) then n_kv·hd (K) then n_kv·hd (V).
    pub wqkv: QMatrix,
    /// Qwen2 biases for the fused QKV output (same row order); empty when absent.
    pub bqkv: Vec<f32>,
    /// Qwen3 per-head RMSNorm weights (head_dim each); empty when absent.
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub wo: QMatrix,
    /// `attn_output.bias` (GPT-OSS); empty when absent.
    pub bo: Vec<f32>,
    /// `attn_sinks.weight` (GPT-OSS): one logit per query head; empty when absent.
    pub attn_sinks: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    /// Gemma's and GLM-4's norms of the attention output and of the FFN output, applied before each is
    /// added to the residual stream; empty when absent.
    pub post_attn_norm: Vec<f32>,
    pub post_ffn_norm: Vec<f32>,
    /// Rows: ffn gate then ffn up.
    pub w_gate_up: QMatrix,
    pub w_down: QMatrix,
    /// The MoE FFN, in place of `w_gate_up`/`w_down` (then 1×1 placeholders).
    pub moe: Option<crate::moe::MoeWeights>,
    /// Multi-head latent attention's matrices beside `wqkv` (then `attn_q`/`attn_q_a` rows
    /// and `attn_kv_a_mqa` rows) and `wo` (see [`crate::mla`]).
    pub mla: Option<crate::mla::MlaWeights>,
}

/// All weights of a model.
pub struct Weights {
    pub token_embd: QMatrix,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    /// `None` when the output head is tied to `token_embd`.
    pub output: Option<QMatrix>,
}

pub(crate) fn weight_type(name: &str, t: GgmlType) -> Result<WeightType, ModelError> {
    Ok(match t {
        GgmlType::F32 => WeightType::F32,
        GgmlType::F16 => WeightType::F16,
        GgmlType::BF16 => WeightType::BF16,
        GgmlType::Q4_0 => WeightType::Q4_0,
        GgmlType::Q4_1 => WeightType::Q4_1,
        GgmlType::Q8_0 => WeightType::Q8_0,
        GgmlType::Q5_0 => WeightType::Q5_0,
        GgmlType::Q5_1 => WeightType::Q5_1,
        GgmlType::IQ4_NL => WeightType::IQ4_NL,
        GgmlType::Q2_K => WeightType::Q2_K,
        GgmlType::Q3_K => WeightType::Q3_K,
        GgmlType::Q4_K => WeightType::Q4_K,
        GgmlType::Q5_K => WeightType::Q5_K,
        GgmlType::Q6_K => WeightType::Q6_K,
        GgmlType::IQ4_XS => WeightType::IQ4_XS,
        GgmlType::MXFP4 => WeightType::MXFP4,
        GgmlType::TQ1_0 => WeightType::TQ1_0,
        GgmlType::TQ2_0 => WeightType::TQ2_0,
        GgmlType::IQ1_S => WeightType::IQ1_S,
        GgmlType::IQ1_M => WeightType::IQ1_M,
        GgmlType::IQ2_XXS => WeightType::IQ2_XXS,
        GgmlType::IQ2_XS => WeightType::IQ2_XS,
        GgmlType::IQ3_XXS => WeightType::IQ3_XXS,
        GgmlType::IQ3_S => WeightType::IQ3_S,
        GgmlType::IQ2_S => WeightType::IQ2_S,
        other => {
            return Err(ModelError::Tensor {
                name: name.into(),
                what: format!("unsupported tensor type {other} (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S MXFP4 TQ1_0 TQ2_0 IQ1_S IQ1_M)"),
            })
        }
    })
}

pub(crate) fn info<'a>(f: &'a GgufFile, name: &str) -> Result<&'a TensorInfo, ModelError> {
    f.tensor(name).ok_or_else(|| ModelError::Tensor {
        name: name.into(),
        what: "missing".into(),
    })
}

fn check_shape(name: &str, t: &TensorInfo, cols: usize, rows: usize) -> Result<(), ModelError> {
    if t.cols() != cols || t.rows() != rows {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!("shape {:?}, expected [{cols}, {rows}]", t.dims),
        });
    }
    Ok(())
}

pub(crate) fn vector(f: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = info(f, name)?;
    if t.n_elements() != len as u64 {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!("{} elements, expected {len}", t.n_elements()),
        });
    }
    Ok(f.tensor_f32(name)?)
}

pub(crate) fn matrix(
    f: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<QMatrix, ModelError> {
    stacked(f, &[(name, rows)], cols)
}

/// Stacks the rows of several tensors into one matrix: one packed matrix when they share a
/// type, else a stack of per-type parts (Q4_K_M files mix Q4_K and Q6_K in Q/K/V), each
/// still in its own exact layout.
pub(crate) fn stacked(
    f: &GgufFile,
    parts: &[(&str, usize)],
    cols: usize,
) -> Result<QMatrix, ModelError> {
    let first = info(f, parts[0].0)?;
    let ty = first.ggml_type;
    let mut same = true;
    for &(name, rows) in parts {
        let t = info(f, name)?;
        check_shape(name, t, cols, rows)?;
        weight_type(name, t.ggml_type)?;
        same &= t.ggml_type == ty;
    }
    if parts.len() == 1 || !same {
        let mats = parts
            .iter()
            .map(|&(name, rows)| {
                let t = info(f, name)?;
                let wt = weight_type(name, t.ggml_type)?;
                Ok(QMatrix::from_ggml(wt, rows, cols, f.tensor_data(t))?)
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        return Ok(if mats.len() == 1 {
            mats.into_iter().next().expect("one part")
        } else {
            QMatrix::stack(mats)?
        });
    }
    let mut raw = Vec::new();
    for &(name, _) in parts {
        raw.extend_from_slice(f.tensor_data(info(f, name)?));
    }
    let total_rows = parts.iter().map(|p| p.1).sum();
    Ok(QMatrix::from_ggml(
        weight_type(parts[0].0, ty)?,
        total_rows,
        cols,
        &raw,
    )?)
}

impl Weights {
    pub fn load(f: &GgufFile, cfg: &ModelConfig) -> Result<Weights, ModelError> {
        crate::shapes::check(f, cfg)?;
        let d = cfg.d_model;
        let q_rows = cfg.n_heads * cfg.head_dim;
        let kv_rows = cfg.n_kv_heads * cfg.head_dim;
        let token_embd = matrix(f, "token_embd.weight", d, cfg.vocab_size)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let (q, k, v) = (n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight"));
            // Phi-3 stores Q, K and V pre-fused in the same row order.
            let fused_qkv = n("attn_qkv.weight");
            let (mla_qkv, mla_wo, mla) = match &cfg.mla {
                Some(m) => {
                    let (qkv, wo, rest) = crate::mla::MlaWeights::load(f, cfg, m, i)?;
                    (Some(qkv), Some(wo), Some(rest))
                }
                None => (None, None, None),
            };
            let wqkv = if let Some(x) = mla_qkv {
                x
            } else if f.tensor(&fused_qkv).is_some() {
                matrix(f, &fused_qkv, d, q_rows + 2 * kv_rows)?
            } else {
                stacked(f, &[(&q, q_rows), (&k, kv_rows), (&v, kv_rows)], d)?
            };
            let mut bqkv = Vec::new();
            let fused_bias = n("attn_qkv.bias");
            if f.tensor(&fused_bias).is_some() {
                // A fused QKV's bias (llama.cpp's `create_tensor_qkv`), same row order.
                bqkv = vector(f, &fused_bias, q_rows + 2 * kv_rows)?;
            } else if cfg.arch == Arch::Qwen2 || f.tensor(&n("attn_q.bias")).is_some() {
                bqkv.extend(vector(f, &n("attn_q.bias"), q_rows)?);
                bqkv.extend(vector(f, &n("attn_k.bias"), kv_rows)?);
                bqkv.extend(vector(f, &n("attn_v.bias"), kv_rows)?);
            }
            let (mut q_norm, mut k_norm) = (Vec::new(), Vec::new());
            if cfg.arch.qk_norm() {
                q_norm = vector(f, &n("attn_q_norm.weight"), cfg.head_dim)?;
                k_norm = vector(f, &n("attn_k_norm.weight"), cfg.head_dim)?;
            }
            if cfg.arch.qk_norm_whole() {
                q_norm = vector(f, &n("attn_q_norm.weight"), q_rows)?;
                k_norm = vector(f, &n("attn_k_norm.weight"), kv_rows)?;
            }
            // Granite and Mistral 3 add these when present; folio's block has no place for
            // them, so a file with one is refused rather than run without it.
            if matches!(cfg.arch, Arch::Granite | Arch::Mistral3) {
                for b in [
                    "attn_output.bias",
                    "ffn_gate.bias",
                    "ffn_up.bias",
                    "ffn_down.bias",
                ] {
                    if f.tensor(&n(b)).is_some() {
                        return Err(ModelError::Tensor {
                            name: n(b),
                            what: format!(
                                "present, but {} output biases are not supported",
                                cfg.arch.name()
                            ),
                        });
                    }
                }
            }
            let pre_norm = |name: &str| match cfg.arch.pre_norms() {
                true => vector(f, &n(name), d),
                false => Ok(Vec::new()),
            };
            let (mut post_attn_norm, mut post_ffn_norm) = (Vec::new(), Vec::new());
            if cfg.arch.post_norms() {
                post_attn_norm = vector(f, &n("post_attention_norm.weight"), d)?;
                post_ffn_norm = vector(f, &n("post_ffw_norm.weight"), d)?;
            }
            // GPT-OSS: the output bias and the sinks are required, as llama.cpp loads them.
            let gpt_oss = cfg.arch == Arch::GptOss;
            let bo = match gpt_oss || f.tensor(&n("attn_output.bias")).is_some() {
                true => vector(f, &n("attn_output.bias"), d)?,
                false => Vec::new(),
            };
            let attn_sinks = match gpt_oss {
                true => vector(f, &n("attn_sinks.weight"), cfg.n_heads)?,
                false => Vec::new(),
            };
            // GPT-OSS names its pre-FFN norm `post_attention_norm` (llama.cpp's
            // `attn_post_norm`, applied to the residual stream before the MoE).
            let ffn_norm_name = match gpt_oss {
                true => "post_attention_norm.weight",
                false => "ffn_norm.weight",
            };
            let (g, u) = (n("ffn_gate.weight"), n("ffn_up.weight"));
            let moe = match &cfg.moe {
                Some(m) if i >= m.dense_lead => Some(crate::moe::MoeWeights::load(f, cfg, m, i)?),
                _ => None,
            };
            let dense = |m: &Option<_>| -> Result<_, ModelError> {
                if m.is_some() {
                    return Ok((crate::moe::unused(), crate::moe::unused()));
                }
                // Phi-3 has no ffn_gate: its ffn_up holds gate then up (llama.cpp's swiglu
                // takes the first half as the gate).
                let gate_up = if f.tensor(&g).is_none() && cfg.arch.fused_gate_up() {
                    matrix(f, &u, d, 2 * cfg.ffn_dim)?
                } else {
                    stacked(f, &[(&g, cfg.ffn_dim), (&u, cfg.ffn_dim)], d)?
                };
                Ok((gate_up, matrix(f, &n("ffn_down.weight"), cfg.ffn_dim, d)?))
            };
            let (w_gate_up, w_down) = dense(&moe)?;
            layers.push(LayerWeights {
                attn_norm: pre_norm("attn_norm.weight")?,
                wqkv,
                bqkv,
                q_norm,
                k_norm,
                wo: match mla_wo {
                    Some(x) => x,
                    None => matrix(f, &n("attn_output.weight"), q_rows, d)?,
                },
                bo,
                attn_sinks,
                // A parallel block's FFN reads the attention norm's output.
                ffn_norm: match cfg.parallel_block {
                    true => Vec::new(),
                    false => pre_norm(ffn_norm_name)?,
                },
                post_attn_norm,
                post_ffn_norm,
                w_gate_up,
                w_down,
                moe,
                mla,
            });
        }
        // OLMo 2's head is never tied (llama.cpp requires `output.weight`); cohere2's head is
        // always the embedding (llama.cpp ignores an `output.weight`).
        let output = if (f.tensor("output.weight").is_some() || cfg.arch == Arch::Olmo2)
            && cfg.arch != Arch::Cohere2
        {
            Some(matrix(f, "output.weight", d, cfg.vocab_size)?)
        } else {
            None
        };
        Ok(Weights {
            token_embd,
            layers,
            output_norm: vector(f, "output_norm.weight", d)?,
            output,
        })
    }

    /// The output head: `output.weight`, or the tied embedding.
    pub fn head(&self) -> &QMatrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Bytes of weights one forward step streams (every matrix once, embedding rows aside).
    /// MoE layers count every expert (the upper bound; `Model::moe_stats` has the bytes the
    /// last step actually read).
    pub fn bytes_per_step(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.wqkv.weight_bytes()
                    + l.wo.weight_bytes()
                    + l.mla.as_ref().map_or(0, |m| m.bytes())
                    + match &l.moe {
                        Some(m) => m.all_bytes(),
                        None => l.w_gate_up.weight_bytes() + l.w_down.weight_bytes(),
                    }
            })
            .sum();
        layers + self.head().weight_bytes()
    }

    /// Multiply-accumulates one token's forward costs in the weight matrices (the output
    /// head included, the embedding lookup not; MoE layers count the experts a token runs):
    /// what an MFU figure divides by the host's int8 peak.
    pub fn macs_per_token(&self) -> u64 {
        use crate::moe::macs;
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                macs(&l.wqkv)
                    + macs(&l.wo)
                    + match &l.moe {
                        Some(m) => m.macs_per_token(),
                        None => macs(&l.w_gate_up) + macs(&l.w_down),
                    }
            })
            .sum();
        layers + macs(self.head())
    }
}
