//! Model hyper-parameters from GGUF metadata.

use crate::ModelError;
use folio_gguf::GgufFile;
pub use folio_kernels::ops::Activation;

/// Architecture variant; the three share one forward pass and differ in a few switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama / SmolLM / Mistral: no biases, "normal" RoPE on adjacent pairs (GGUF conversion
    /// permutes Q and K so that this matches HF's rotate-half).
    Llama,
    /// Qwen2: biases on Q, K and V; NeoX-style RoPE (rotate halves).
    Qwen2,
    /// Qwen3: per-head RMSNorm on Q and K before RoPE; NeoX-style RoPE; no QKV bias.
    Qwen3,
    /// Gemma 3: embeddings scaled by √d, per-head Q/K norms, norms after attention and
    /// after the FFN as well as before, GELU-gated FFN, NeoX RoPE, and sliding-window
    /// layers (five of every six) with their own RoPE base. The GGUF conversion already
    /// folds Gemma's `(1 + w)` into the norm weights, so every norm is a plain RMSNorm.
    Gemma3,
    /// Gemma 2: Gemma 3's block without the Q/K norms, with attention logit soft-capping,
    /// every other layer windowed (4,096 tokens) and the same RoPE base for both kinds.
    Gemma2,
    /// Phi-3: Q/K/V fused in `attn_qkv` and gate/up in `ffn_up` (gate first); NeoX-style
    /// RoPE, LongRoPE factors in the 128k files.
    Phi3,
    /// SmolLM3: llama's block with no RoPE in every fourth layer (NoPE, llama.cpp's
    /// `n_no_rope_layer_step` = 4).
    SmolLM3,
    /// Granite (3.x dense): llama's block with multipliers on the embeddings
    /// (`embedding_scale`), on each branch before its residual add (`residual_scale`), on
    /// the attention scores (`attention.scale`) and a divisor on the logits (`logit_scale`).
    Granite,
    /// OLMo 2 (and OLMo 3's windowed layers): no norms before attention or the FFN, RMSNorm
    /// after each instead (before its residual add); Q and K normed over the whole
    /// projection, not per head; NeoX RoPE.
    Olmo2,
    /// ERNIE 4.5 dense (0.3B): llama's block.
    Ernie4_5,
    /// Mistral Small 3 / Ministral 3 / Devstral: llama's block, YaRN with
    /// `rope.scaling.yarn_log_multiplier`, and Llama 4's attention temperature
    /// (`attention.temperature_scale`) on the queries.
    Mistral3,
    /// GLM-4-0414: RMS post-norms after attention and after the FFN (as Gemma), gate/up
    /// fused in `ffn_up` (as Phi-3), QKV biases, "normal" RoPE on the first
    /// `rope.dimension_count` (half) of each head.
    Glm4,
    /// Command R7B: a parallel block (attention and FFN both read the one `attn_norm`
    /// output and both add to the residual), LayerNorm without bias (not RMSNorm), three
    /// sliding-window layers with RoPE then one global layer without RoPE, logits times
    /// `logit_scale`, the output head always tied to the embeddings.
    Cohere2,
    /// DeepSeek-V2/V3, Kimi K2: multi-head latent attention ([`crate::mla`]), leading dense
    /// layers, then MoE layers with shared experts; "normal" RoPE on the rotary part only.
    Deepseek2,
    /// GPT-OSS (`gpt-oss`): Q/K/V/O biases, a learned attention sink per head, every other
    /// layer windowed (layer 0 first), YaRN NeoX RoPE, and a MoE FFN with router and
    /// expert biases, top-k on the router logits then a softmax over the k, and the
    /// clamped `swiglu_oai` activation. Its pre-FFN norm is `post_attention_norm`.
    GptOss,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, ModelError> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "gemma3" => Ok(Arch::Gemma3),
            "gemma2" => Ok(Arch::Gemma2),
            "phi3" => Ok(Arch::Phi3),
            "smollm3" => Ok(Arch::SmolLM3),
            "granite" => Ok(Arch::Granite),
            "olmo2" => Ok(Arch::Olmo2),
            "ernie4_5" => Ok(Arch::Ernie4_5),
            "mistral3" => Ok(Arch::Mistral3),
            "glm4" => Ok(Arch::Glm4),
            "cohere2" => Ok(Arch::Cohere2),
            "deepseek2" => Ok(Arch::Deepseek2),
            "gpt-oss" => Ok(Arch::GptOss),
            other => Err(ModelError::UnsupportedArch(other.to_string())),
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma2 => "gemma2",
            Arch::Phi3 => "phi3",
            Arch::SmolLM3 => "smollm3",
            Arch::Granite => "granite",
            Arch::Olmo2 => "olmo2",
            Arch::Ernie4_5 => "ernie4_5",
            Arch::Mistral3 => "mistral3",
            Arch::Glm4 => "glm4",
            Arch::Cohere2 => "cohere2",
            Arch::Deepseek2 => "deepseek2",
            Arch::GptOss => "gpt-oss",
        }
    }
    /// NeoX RoPE rotates (x[i], x[i + d/2]); llama's GGUF layout rotates adjacent pairs.
    pub fn rope_neox(&self) -> bool {
        !matches!(
            self,
            Arch::Llama
                | Arch::SmolLM3
                | Arch::Granite
                | Arch::Ernie4_5
                | Arch::Mistral3
                | Arch::Glm4
                | Arch::Cohere2
                | Arch::Deepseek2
        )
    }
    /// Per-head RMSNorm of Q and K before RoPE.
    pub fn qk_norm(&self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }
    /// RMSNorm of the whole Q and the whole K projection (one weight of `n_heads·hd` and
    /// one of `n_kv_heads·hd`) before RoPE (OLMo 2).
    pub fn qk_norm_whole(&self) -> bool {
        matches!(self, Arch::Olmo2)
    }
    /// Norms before attention and before the FFN (`attn_norm`, `ffn_norm`); OLMo 2 has
    /// none and norms after each instead.
    pub fn pre_norms(&self) -> bool {
        !matches!(self, Arch::Olmo2)
    }
    /// Norms of the attention output and of the FFN output before each residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub fn post_norms(&self) -> bool {
        self.gemma() || matches!(self, Arch::Olmo2 | Arch::Glm4)
    }
    /// Gemma's block: √d embeddings and norms after attention and after the FFN too.
    pub fn gemma(&self) -> bool {
        matches!(self, Arch::Gemma3 | Arch::Gemma2)
    }
    /// Gate and up fused in one `ffn_up` tensor (gate first) instead of `ffn_gate` + `ffn_up`.
    pub fn fused_gate_up(&self) -> bool {
        matches!(self, Arch::Phi3 | Arch::Glm4)
    }
    /// The FFN's gate activation.
    pub fn activation(&self) -> Activation {
        match self {
            Arch::Gemma3 | Arch::Gemma2 => Activation::Gelu,
            Arch::GptOss => Activation::SwigluOai,
            _ => Activation::Silu,
        }
    }
}

/// Everything the forward pass needs to know about the shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Linear RoPE frequency scale (1.0 = none): `1 / rope.scaling.factor` for every
    /// scaling type but `none` and `llama3`, as llama.cpp.
    pub rope_freq_scale: f32,
    pub rope_dim: usize,
    /// NeoX RoPE (rotates `(x[i], x[i + rope_dim/2])`) rather than adjacent pairs: the
    /// architecture's style ([`Arch::rope_neox`]), or multimodal RoPE on text (GLM-4V's
    /// `rope.dimension_sections`, see `from_gguf`).
    pub rope_neox: bool,
    /// Tokens a sliding-window layer sees (itself included): `attention.sliding_window`.
    /// `None`: every layer is global.
    pub sliding_window: Option<usize>,
    /// Per layer, whether it attends through the sliding window (all false without one).
    pub window_layers: Vec<bool>,
    /// RoPE base of the sliding-window layers (Gemma 3: 10,000, while global layers use
    /// `rope.freq_base`); equals `rope_base` where the model has a single base.
    pub rope_base_window: f32,
    /// Attention score scale; `1 / √head_dim` unless the model says otherwise.
    pub attn_scale: f32,
    /// Factor on the token embeddings (Gemma: √d_model), 1 elsewhere.
    pub embed_scale: f32,
    /// `final_logit_softcapping`: logits become `c · tanh(logits / c)`.
    pub final_softcap: Option<f32>,
    /// `attn_logit_softcapping` (Gemma 2): each attention score becomes `c · tanh(s / c)`.
    pub attn_softcap: Option<f32>,
    /// Mixture-of-experts FFN (`qwen2moe`, `qwen3moe`, llama with `expert_count` > 0).
    pub moe: Option<crate::moe::MoeConfig>,
    /// YaRN and the rest of `rope.scaling.*` (see [`RopeYarn`]).
    pub rope_yarn: RopeYarn,
    /// `pooling_type` (llama.cpp's enum: 1 mean, 2 cls, 3 last, 4 rank), which embedding
    /// models set; `None` when absent (generative models).
    pub pooling_type: Option<u64>,
    /// Per layer, whether it skips RoPE (SmolLM3's NoPE layers; every layer of a Granite
    /// file with `rope.scaling.finetuned = false`; cohere2's global layers); all false
    /// elsewhere.
    pub nope_layers: Vec<bool>,
    /// Factor on the attention and FFN outputs before each residual add (Granite's
    /// `residual_scale`); 1 elsewhere.
    pub residual_scale: f32,
    /// Factor on the logits (Granite: `1 / logit_scale`; cohere2: `logit_scale`); 1
    /// elsewhere.
    pub logit_mul: f32,
    /// Llama 4's attention temperature (Mistral 3's `attention.temperature_scale`).
    pub attn_temp: Option<AttnTemp>,
    /// Every norm is a LayerNorm without bias (mean removed, `attention.layer_norm_epsilon`
    /// in `rms_eps`) instead of an RMSNorm (cohere2).
    pub layer_norm: bool,
    /// Attention and FFN in parallel from the same normed input, both added to the
    /// residual (cohere2); no `ffn_norm`.
    pub parallel_block: bool,
    /// Multi-head latent attention (`deepseek2`): then `n_kv_heads` is 1 and `head_dim` is
    /// the cached latent row, `kv_lora_rank + rope_dim` (see [`crate::mla`]).
    pub mla: Option<crate::mla::MlaConfig>,
}

/// Llama 4's attention temperature tuning: each query (after RoPE) is multiplied by
/// `ln(⌊pos / floor⌋ + 1) · scale + 1` (llama.cpp's `llm_graph_input_attn_temp`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTemp {
    /// `attention.temperature_scale`.
    pub scale: f32,
    /// Positions per step of the factor: llama.cpp takes `rope.scaling.original_context_length`
    /// (else `context_length`).
    pub floor: usize,
}

impl AttnTemp {
    /// The factor at `pos`, in llama.cpp's precision (a float quotient, the log in double).
    pub fn factor(&self, pos: usize) -> f32 {
        let steps = (pos as f32 / self.floor as f32).floor() as f64;
        ((steps + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

/// The `rope.scaling.*` parameters besides the linear scale, as llama.cpp derives them
/// (llama-model.cpp's hparams, llama-context.cpp's cparams): YaRN only for
/// `rope.scaling.type = yarn`.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeYarn {
    /// 1 for YaRN (or `rope.scaling.yarn_ext_factor`), else 0.
    pub ext_factor: f32,
    /// The cos/sin magnitude ggml's rope receives: YaRN's `get_mscale` with its in-kernel
    /// correction cancelled, times `rope.scaling.attn_factor` (Phi-3 LongRoPE sets it).
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// `rope.scaling.original_context_length`, else `context_length`. Phi-3 takes its
    /// long LongRoPE factors when `context_length` exceeds it.
    pub orig_ctx: usize,
}

/// Upper bounds on the shape keys, checked before anything is sized from them. WHY: the
/// metadata is untrusted; a `block_count` of 2^31 must be an error naming the key, not an
/// allocation that aborts the process. Each is well above the largest released model
/// (Llama 3.1 405B: 126 layers, 16,384 wide, 128 heads, 53,248 FFN; Gemma 3: 262,144
/// vocabulary entries; Llama 4 Scout: 10M context).
pub mod limits {
    pub const MAX_BLOCK_COUNT: u64 = 1024;
    pub const MAX_EMBEDDING_LENGTH: u64 = 1 << 16;
    pub const MAX_HEAD_COUNT: u64 = 1024;
    pub const MAX_FEED_FORWARD_LENGTH: u64 = 1 << 18;
    pub const MAX_CONTEXT_LENGTH: u64 = 1 << 24;
    pub const MAX_VOCAB_SIZE: u64 = 1 << 22;
    pub const MAX_HEAD_DIM: u64 = 1024;
}

/// `ModelError::Metadata` for `key` (the full `{arch}.` key).
fn meta_err(key: &str, what: String) -> ModelError {
    ModelError::Metadata {
        key: key.into(),
        what,
    }
}

/// An integer key in `1..=limit`, or the error naming the key, the limit and the value.
fn bounded(f: &GgufFile, key: &str, limit: u64) -> Result<usize, ModelError> {
    let v = f.get_u64(key)?;
    if v == 0 || v > limit {
        return Err(meta_err(key, format!("{v} is outside 1..={limit}")));
    }
    Ok(v as usize)
}

/// An optional float key: `default` when absent, else it must be a finite number > 0.
fn positive_f32(f: &GgufFile, key: &str, default: f32) -> Result<f32, ModelError> {
    if f.get(key).is_none() {
        return Ok(default);
    }
    let v = f.get_f32(key)?;
    if !v.is_finite() || v <= 0.0 {
        return Err(meta_err(key, format!("{v} must be a finite number > 0")));
    }
    Ok(v)
}

/// A float key llama.cpp requires: present, finite and > 0.
fn required_f32(f: &GgufFile, key: &str) -> Result<f32, ModelError> {
    if f.get(key).is_none() {
        return Err(meta_err(key, "missing".into()));
    }
    positive_f32(f, key, 0.0)
}

/// `rope.scaling.*` as llama.cpp reads it: the type defaults to linear; `factor`
/// (or the older `rope.scale_linear`) gives the frequency scale `1 / factor` for every type
/// but `none`; `llama3` (an HF name, not a llama.cpp one) takes its scaling from the
/// `rope_freqs` tensor alone; `longrope` (Phi-3) from its factor tensors.
fn rope_scaling(
    f: &GgufFile,
    arch: &str,
    context_length: usize,
) -> Result<(f32, RopeYarn), ModelError> {
    let key = |k: &str| format!("{arch}.{k}");
    let type_key = key("rope.scaling.type");
    let kind = if f.get(&type_key).is_some() {
        f.get_str(&type_key)?
    } else {
        "linear"
    };
    let mut factor = 0.0;
    for k in ["rope.scaling.factor", "rope.scale_linear"] {
        if f.get(&key(k)).is_some() {
            let v = f.get_f32(&key(k))?;
            // 0 means "unset" to llama.cpp.
            if !v.is_finite() || v < 0.0 {
                return Err(meta_err(
                    &key(k),
                    format!("{v} must be a finite number >= 0"),
                ));
            }
            factor = v;
            break;
        }
    }
    let mut freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };
    let optional = |k: &str, default: f32| positive_f32(f, &key(k), default);
    let ext_key = key("rope.scaling.yarn_ext_factor");
    let mut ext_factor = match kind {
        "none" | "llama3" => {
            freq_scale = 1.0;
            0.0
        }
        "linear" | "longrope" => 0.0,
        "yarn" => 1.0,
        other => {
            return Err(meta_err(
                &type_key,
                format!(
                    "unsupported value '{other}' (supported: none, linear, yarn, longrope, llama3)"
                ),
            ))
        }
    };
    if kind == "yarn" && f.get(&ext_key).is_some() {
        ext_factor = f.get_f32(&ext_key)?;
        if !ext_factor.is_finite() || ext_factor < 0.0 {
            return Err(meta_err(
                &ext_key,
                format!("{ext_factor} must be a finite number >= 0"),
            ));
        }
    }
    let mut attn_factor = 1.0f32;
    if ext_factor != 0.0 {
        let factor = 1.0 / freq_scale;
        let mscale = |m: f32| {
            if factor <= 1.0 {
                1.0
            } else {
                0.1 * m * factor.ln() + 1.0
            }
        };
        // `rope.scaling.yarn_log_multiplier` (HF's `mscale_all_dim`): deepseek2 reads it its
        // own way ([`crate::mla::yarn_log_mul`]; with mscale taken equal to it the ratio is
        // 1, as llama.cpp's llama-context.cpp), the others with mscale taken as 1.
        let log_mul = if arch == "deepseek2" {
            crate::mla::yarn_log_mul(f, arch)?
        } else {
            let log_mul_key = key("rope.scaling.yarn_log_multiplier");
            let v = match f.get(&log_mul_key) {
                Some(_) => f.get_f32(&log_mul_key)?,
                None => 0.0,
            };
            if !v.is_finite() || v < 0.0 {
                return Err(meta_err(
                    &log_mul_key,
                    format!("{v} must be a finite number >= 0"),
                ));
            }
            v
        };
        attn_factor = if log_mul != 0.0 {
            let m = if arch == "deepseek2" && log_mul != 1.0 {
                log_mul
            } else {
                1.0
            };
            mscale(m) / mscale(log_mul)
        } else {
            mscale(1.0)
        };
        // ggml's rope_yarn multiplies by this again.
        attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
    }
    attn_factor *= optional("rope.scaling.attn_factor", 1.0)?;
    let orig_key = key("rope.scaling.original_context_length");
    let orig_ctx = if f.get(&orig_key).is_some() {
        bounded(f, &orig_key, limits::MAX_CONTEXT_LENGTH)?
    } else {
        context_length
    };
    Ok((
        freq_scale,
        RopeYarn {
            ext_factor,
            attn_factor,
            beta_fast: optional("rope.scaling.yarn_beta_fast", 32.0)?,
            beta_slow: optional("rope.scaling.yarn_beta_slow", 1.0)?,
            orig_ctx,
        },
    ))
}

/// Gemma 3's layout when the file names no pattern: of every 6 layers the first 5 use the
/// sliding window and the 6th is global (llama.cpp's `set_swa_pattern(6)`).
const GEMMA3_WINDOW_PATTERN: usize = 6;
/// Gemma 2's defaults where its file is silent (llama.cpp's gemma2 hparams): a 4,096-token
/// window on every other layer, scores capped at 50 and logits at 30.
const GEMMA2_WINDOW: usize = 4096;
const GEMMA2_WINDOW_PATTERN: usize = 2;
const GEMMA2_ATTN_SOFTCAP: f32 = 50.0;
const GEMMA2_FINAL_SOFTCAP: f32 = 30.0;
/// Command R7B's layout when the file names no pattern: three window layers, then one
/// global (llama.cpp's cohere2 `load_swa_pattern(ml, 4)`).
const COHERE2_WINDOW_PATTERN: usize = 4;
/// GPT-OSS's layout when the file names no pattern: every other layer windowed, layer 0
/// first (llama.cpp's `load_swa_pattern(ml, 2)`).
const GPT_OSS_WINDOW_PATTERN: usize = 2;
/// Gemma 3's RoPE base for its sliding-window layers (llama.cpp's `rope_freq_base_train_swa`
/// default, which Gemma 3 files do not override).
const GEMMA3_WINDOW_ROPE_BASE: f32 = 10_000.0;
/// OLMo 3's layout when the file names no pattern: three window layers, then a global one
/// (llama.cpp's olmo2 `load_swa_pattern(ml, 4)`).
const OLMO2_WINDOW_PATTERN: usize = 4;
/// SmolLM3: every fourth layer (the 4th, 8th, ...) has no RoPE (llama.cpp's
/// `n_no_rope_layer_step`, fixed for the architecture, not read from the file).
const SMOLLM3_NO_ROPE_STEP: usize = 4;

impl ModelConfig {
    /// Reads `{arch}.*` keys. Missing optional keys take llama.cpp's defaults. Every shape
    /// key is bounded (see [`limits`]) and every float checked finite and positive before
    /// anything is sized from them.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
        use limits::*;
        let arch_name = f.get_str("general.architecture")?.to_string();
        let arch = match crate::moe::dense_arch(&arch_name) {
            Some(a) => a,
            None => Arch::from_name(&arch_name)?,
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let has = |k: &str| f.get(&key(k)).is_some();
        let get = |k: &str, limit: u64| bounded(f, &key(k), limit);
        let n_layers = get("block_count", MAX_BLOCK_COUNT)?;
        let d_model = get("embedding_length", MAX_EMBEDDING_LENGTH)?;
        let n_heads = get("attention.head_count", MAX_HEAD_COUNT)?;
        let n_kv_heads = if has("attention.head_count_kv") {
            get("attention.head_count_kv", MAX_HEAD_COUNT)?
        } else {
            n_heads
        };
        let ffn_dim = get("feed_forward_length", MAX_FEED_FORWARD_LENGTH)?;
        let head_dim = if has("attention.key_length") {
            get("attention.key_length", MAX_HEAD_DIM)?
        } else {
            if !d_model.is_multiple_of(n_heads) {
                return Err(meta_err(
                    &key("attention.head_count"),
                    format!("{n_heads} does not divide embedding_length {d_model}"),
                ));
            }
            d_model / n_heads
        };
        let mla = crate::mla::MlaConfig::from_gguf(f, &arch_name, n_heads, head_dim)?;
        // folio's cache and attention use one head size for K and V (MLA: V is the latent
        // part of the K row, checked by MlaConfig).
        if has("attention.value_length") && mla.is_none() {
            let v = get("attention.value_length", MAX_HEAD_DIM)?;
            if v != head_dim {
                return Err(meta_err(
                    &key("attention.value_length"),
                    format!("{v} differs from the key head size {head_dim} (attention.key_length or embedding_length / head_count)"),
                ));
            }
        }
        let context_length = get("context_length", MAX_CONTEXT_LENGTH)?;
        let rms_eps = match arch {
            // LayerNorm's epsilon, which llama.cpp requires for cohere2.
            Arch::Cohere2 => required_f32(f, &key("attention.layer_norm_epsilon"))?,
            _ => positive_f32(f, &key("attention.layer_norm_rms_epsilon"), 1e-5)?,
        };
        let rope_base = positive_f32(f, &key("rope.freq_base"), 10000.0)?;
        let rope_dim = if has("rope.dimension_count") {
            let k = key("rope.dimension_count");
            let v = f.get_u64(&k)?;
            if v == 0 || v % 2 != 0 || v > head_dim as u64 {
                return Err(meta_err(
                    &k,
                    format!("{v} must be even and in 2..={head_dim} (the head size)"),
                ));
            }
            v as usize
        } else {
            head_dim
        };
        let (rope_freq_scale, rope_yarn) = rope_scaling(f, &arch_name, context_length)?;
        if let Some(m) = &mla {
            if rope_dim != m.qk_rope {
                return Err(meta_err(
                    &key("rope.dimension_count"),
                    format!(
                        "{rope_dim} differs from the MLA rotary head part {}",
                        m.qk_rope
                    ),
                ));
            }
        }
        let vocab_size = if has("vocab_size") {
            get("vocab_size", MAX_VOCAB_SIZE)?
        } else {
            let tokens = f
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map_or(0, |a| a.len());
            if tokens == 0 || tokens as u64 > MAX_VOCAB_SIZE {
                return Err(meta_err(
                    "tokenizer.ggml.tokens",
                    format!("{tokens} entries (no {arch_name}.vocab_size key) is outside 1..={MAX_VOCAB_SIZE}"),
                ));
            }
            tokens
        };
        // llama.cpp reads no window for these (a stray key must not change their attention).
        let windowless = matches!(
            arch,
            Arch::SmolLM3 | Arch::Granite | Arch::Ernie4_5 | Arch::Mistral3
        );
        let sliding_window = match f.get(&key("attention.sliding_window")) {
            Some(_) if windowless => None,
            Some(_) => Some(f.get_u64(&key("attention.sliding_window"))? as usize)
                .filter(|&w| w > 0)
                .map(|w| w.min(context_length)),
            None if arch == Arch::Gemma2 => Some(GEMMA2_WINDOW.min(context_length)),
            // llama.cpp reads gpt-oss's window as a required key.
            None if arch == Arch::GptOss => {
                return Err(meta_err(
                    &key("attention.sliding_window"),
                    "missing (required for gpt-oss)".into(),
                ))
            }
            None => None,
        };
        let window_layers: Vec<bool> = match (sliding_window, arch) {
            (None, _) => vec![false; n_layers],
            (Some(_), Arch::Gemma3 | Arch::Gemma2 | Arch::Olmo2 | Arch::Cohere2 | Arch::GptOss) => {
                let pattern_key = key("attention.sliding_window_pattern");
                match f.get(&pattern_key) {
                    // One flag per layer.
                    Some(v) if v.as_array().is_some() => {
                        let flags: Option<Vec<bool>> = v
                            .as_array()
                            .unwrap_or_default()
                            .iter()
                            .map(|x| x.as_bool())
                            .collect();
                        match flags {
                            Some(fl) if fl.len() == n_layers => fl,
                            _ => {
                                return Err(ModelError::Metadata {
                                    key: pattern_key,
                                    what: format!("must be {n_layers} booleans (one per layer)"),
                                })
                            }
                        }
                    }
                    other => {
                        let pattern = match other {
                            Some(_) => get("attention.sliding_window_pattern", MAX_BLOCK_COUNT)?,
                            None if arch == Arch::Gemma2 => GEMMA2_WINDOW_PATTERN,
                            None if arch == Arch::Olmo2 => OLMO2_WINDOW_PATTERN,
                            None if arch == Arch::Cohere2 => COHERE2_WINDOW_PATTERN,
                            None if arch == Arch::GptOss => GPT_OSS_WINDOW_PATTERN,
                            None => GEMMA3_WINDOW_PATTERN,
                        };
                        (0..n_layers).map(|l| l % pattern < pattern - 1).collect()
                    }
                }
            }
            // Mistral-style: the window applies to every layer.
            (Some(_), _) => vec![true; n_layers],
        };
        let rope_base_window = match arch {
            Arch::Gemma3 => positive_f32(f, &key("rope.freq_base_swa"), GEMMA3_WINDOW_ROPE_BASE)?,
            Arch::Gemma2 | Arch::GptOss => positive_f32(f, &key("rope.freq_base_swa"), rope_base)?,
            // OLMo 3's window layers rope with the global base (its graph reads no other).
            _ => rope_base,
        };
        // Gemma's 27B models scale scores by 1/√(d / heads), the others by 1/√head_dim
        // (llama.cpp, after gemma_pytorch's `query_pre_attn_scalar`).
        let big_gemma = matches!((arch, n_layers), (Arch::Gemma2, 46) | (Arch::Gemma3, 62));
        let mut attn_scale = match big_gemma {
            true => 1.0 / ((d_model / n_heads) as f32).sqrt(),
            false => 1.0 / (head_dim as f32).sqrt(),
        };
        let mut embed_scale = match arch.gemma() {
            true => (d_model as f32).sqrt(),
            false => 1.0,
        };
        let (mut residual_scale, mut logit_mul) = (1.0, 1.0);
        let mut nope_layers = vec![false; n_layers];
        if arch == Arch::SmolLM3 {
            nope_layers = (0..n_layers)
                .map(|l| (l + 1) % SMOLLM3_NO_ROPE_STEP == 0)
                .collect();
        }
        if arch == Arch::Granite {
            // llama.cpp requires `logit_scale`; the other three are optional (0 = none).
            let logit_key = key("logit_scale");
            if !has("logit_scale") {
                return Err(meta_err(
                    &logit_key,
                    "missing (required for granite)".into(),
                ));
            }
            logit_mul = 1.0 / positive_f32(f, &logit_key, 1.0)?;
            let unset_is_zero = |k: &str, default: f32| -> Result<f32, ModelError> {
                let v = match has(k) {
                    true => f.get_f32(&key(k))?,
                    false => 0.0,
                };
                if !v.is_finite() || v < 0.0 {
                    return Err(meta_err(
                        &key(k),
                        format!("{v} must be a finite number >= 0"),
                    ));
                }
                Ok(if v == 0.0 { default } else { v })
            };
            residual_scale = unset_is_zero("residual_scale", 1.0)?;
            embed_scale = unset_is_zero("embedding_scale", 1.0)?;
            attn_scale = unset_is_zero("attention.scale", attn_scale)?;
            // Granite takes `rope.scaling.finetuned` (default true) as its RoPE switch.
            let ft_key = key("rope.scaling.finetuned");
            if has("rope.scaling.finetuned") {
                let rope_on = f
                    .get(&ft_key)
                    .and_then(|v| v.as_bool())
                    .ok_or_else(|| meta_err(&ft_key, "must be a boolean".into()))?;
                nope_layers = vec![!rope_on; n_layers];
            }
        }
        let attn_temp = match (arch, f.get(&key("attention.temperature_scale"))) {
            (Arch::Mistral3, Some(_)) => {
                let k = key("attention.temperature_scale");
                let scale = f.get_f32(&k)?;
                if !scale.is_finite() || scale < 0.0 {
                    return Err(meta_err(
                        &k,
                        format!("{scale} must be a finite number >= 0"),
                    ));
                }
                (scale != 0.0).then_some(AttnTemp {
                    scale,
                    floor: rope_yarn.orig_ctx,
                })
            }
            _ => None,
        };
        // Soft-capping: Gemma 2 caps by default (llama.cpp's 50 and 30); 0 switches it off.
        let (attn_cap, final_cap) = match arch {
            Arch::Gemma2 => (GEMMA2_ATTN_SOFTCAP, GEMMA2_FINAL_SOFTCAP),
            _ => (0.0, 0.0),
        };
        let cap = |k: &str, default: f32| -> Result<Option<f32>, ModelError> {
            let c = match f.get(&key(k)) {
                Some(_) => f.get_f32(&key(k))?,
                None => default,
            };
            if !c.is_finite() || c < 0.0 {
                return Err(meta_err(
                    &key(k),
                    format!("{c} must be a finite number >= 0"),
                ));
            }
            Ok((c > 0.0).then_some(c))
        };
        let final_softcap = cap("final_logit_softcapping", final_cap)?;
        let attn_softcap = cap("attn_logit_softcapping", attn_cap)?;
        let moe = crate::moe::MoeConfig::from_gguf(f, &arch_name, ffn_dim)?;
        // GLM's NextN (multi-token prediction) blocks sit after the last layer in
        // `block_count`; the forward pass would run them as layers.
        let nextn_key = key("nextn_predict_layers");
        if arch == Arch::Glm4 && f.get(&nextn_key).is_some() && f.get_u64(&nextn_key)? > 0 {
            return Err(meta_err(
                &nextn_key,
                format!("{} NextN layers are not supported", f.get_u64(&nextn_key)?),
            ));
        }
        let cohere2 = arch == Arch::Cohere2;
        if cohere2 && sliding_window.is_none() {
            return Err(meta_err(
                &key("attention.sliding_window"),
                "missing (cohere2 needs its window size)".into(),
            ));
        }
        if cohere2 {
            logit_mul = required_f32(f, &key("logit_scale"))?;
        }
        // Multimodal RoPE (GLM-4V's `rope.dimension_sections`). On text llama.cpp gives the
        // temporal, height and width sections the token's position and the fourth ("extra",
        // vision-only) position 0, rotating pairs NeoX-style (`ggml_mrope_cache_init`): with
        // no fourth section every rotated pair then turns by the NeoX angle of its index.
        // A fourth section (its pairs left unrotated on text) is refused.
        let sections_key = key("rope.dimension_sections");
        let mut rope_neox = arch.rope_neox();
        if let Some(v) = f.get(&sections_key) {
            let sections: Vec<i64> = v
                .as_array()
                .unwrap_or_default()
                .iter()
                .map(|x| x.as_i64().unwrap_or(-1))
                .collect();
            if sections.len() != 4 || sections.iter().any(|&s| s < 0) {
                return Err(meta_err(
                    &sections_key,
                    format!("{sections:?}: expected 4 non-negative M-RoPE sections"),
                ));
            }
            if sections[3] != 0 {
                return Err(meta_err(
                    &sections_key,
                    format!("{sections:?}: an M-RoPE fourth (vision) section is not supported; expected it 0"),
                ));
            }
            rope_neox |= sections.iter().any(|&s| s > 0);
        }
        if cohere2 {
            nope_layers = window_layers.iter().map(|&w| !w).collect();
        }
        // MLA: one cached latent row per token (MQA over it), scaled as llama.cpp's deepseek2.
        let (n_kv_heads, head_dim, attn_scale) = match &mla {
            Some(m) => (
                1,
                m.row_dim(),
                m.kq_scale(f, &arch_name, rope_freq_scale, &rope_yarn)?,
            ),
            None => (n_kv_heads, head_dim, attn_scale),
        };
        let cfg = ModelConfig {
            arch,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab_size,
            context_length,
            rms_eps,
            rope_base,
            rope_freq_scale,
            rope_dim,
            rope_neox,
            sliding_window,
            window_layers,
            rope_base_window,
            attn_scale,
            embed_scale,
            final_softcap,
            attn_softcap,
            moe,
            rope_yarn,
            pooling_type: f.get_u64(&key("pooling_type")).ok(),
            nope_layers,
            residual_scale,
            logit_mul,
            attn_temp,
            layer_norm: cohere2,
            parallel_block: cohere2,
            mla,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let key = |k: &str| format!("{}.{k}", self.arch.name());
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(meta_err(
                &key("attention.head_count_kv"),
                format!(
                    "{} must divide head_count {}",
                    self.n_kv_heads, self.n_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(meta_err(
                &key("attention.key_length"),
                format!(
                    "{} must be even and in 2..={}",
                    self.head_dim,
                    limits::MAX_HEAD_DIM
                ),
            ));
        }
        Ok(())
    }

    /// Whether layer `l` attends through the sliding window.
    pub fn is_window_layer(&self, l: usize) -> bool {
        self.window_layers.get(l).copied().unwrap_or(false)
    }

    /// Whether layer `l` skips RoPE.
    pub fn is_no_rope_layer(&self, l: usize) -> bool {
        self.nope_layers.get(l).copied().unwrap_or(false)
    }

    /// The norm every block uses (RMSNorm, or cohere2's LayerNorm) with its epsilon.
    pub fn norm(&self) -> crate::norm::Norm {
        crate::norm::Norm {
            eps: self.rms_eps,
            layer: self.layer_norm,
        }
    }

    /// What one token stores in this model's KV cache (MLA: one latent row per layer, read
    /// as K and V): the rows [`crate::KvCache`] lays out, in whatever formats.
    pub fn kv_rows(&self) -> crate::KvRows {
        crate::KvRows {
            layers: self.n_layers,
            kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            latent: self.mla.is_some(),
        }
    }

    /// Bytes of K and V per token at `bytes_per_value` (DESIGN.md §requests: k = 2 × layers × kv_heads × head_dim × bytes).
    /// MLA caches one latent row (no V): see [`ModelConfig::kv_bytes_per_token_uncompressed`].
    pub fn kv_bytes_per_token(&self, bytes_per_value: f64) -> f64 {
        let kv = if self.mla.is_some() { 1.0 } else { 2.0 };
        kv * self.n_layers as f64 * self.n_kv_heads as f64 * self.head_dim as f64 * bytes_per_value
    }

    /// KV bytes per token of the uncompressed form: for MLA the K and V of every head
    /// (`n_heads × (qk_nope + qk_rope + v_head_dim)` values per layer), what the latent
    /// cache saves against; for the other models the same as [`ModelConfig::kv_bytes_per_token`].
    pub fn kv_bytes_per_token_uncompressed(&self, bytes_per_value: f64) -> f64 {
        match &self.mla {
            Some(m) => {
                let per_layer = self.n_heads * (m.qk_head_dim() + m.v_head_dim);
                (self.n_layers * per_layer) as f64 * bytes_per_value
            }
            None => self.kv_bytes_per_token(bytes_per_value),
        }
    }

    /// Multiply-accumulate FLOPs of the weight matmuls for one token (2 per weight).
    pub fn matmul_flops_per_token(&self) -> f64 {
        let d = self.d_model as f64;
        let q = (self.n_heads * self.head_dim) as f64;
        let kv = (self.n_kv_heads * self.head_dim) as f64;
        let ffn = match &self.moe {
            Some(m) => m.active_ffn_params(self.d_model) as f64,
            None => 3.0 * d * self.ffn_dim as f64,
        };
        let per_layer = match &self.mla {
            Some(m) => m.attn_params(self.d_model, self.n_heads) as f64 + ffn,
            None => d * q + 2.0 * d * kv + q * d + ffn,
        };
        2.0 * (self.n_layers as f64 * per_layer + d * self.vocab_size as f64)
    }
}
