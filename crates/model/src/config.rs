//! Model hyper-parameters from GGUF metadata.

use crate::ModelError;
use folio_gguf::GgufFile;

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
            Arch::GptOss => "gpt-oss",
        }
    }
    /// NeoX RoPE rotates (x[i], x[i + d/2]); llama's GGUF layout rotates adjacent pairs.
    pub fn rope_neox(&self) -> bool {
        !matches!(self, Arch::Llama)
    }
    /// Per-head RMSNorm of Q and K before RoPE.
    pub fn qk_norm(&self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }
    /// Gemma's block: √d embeddings and norms after attention and after the FFN too.
    pub fn gemma(&self) -> bool {
        matches!(self, Arch::Gemma3 | Arch::Gemma2)
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

/// The gate activation of a gated FFN: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU (llama, qwen).
    Silu,
    /// GeGLU with the tanh GELU (gemma).
    Gelu,
    /// GPT-OSS's clamped SwiGLU, `x·σ(1.702x)·(y + 1)` ([`folio_kernels::ops::swiglu_oai_mul`]).
    SwigluOai,
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
        attn_factor = if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
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
/// GPT-OSS's layout when the file names no pattern: every other layer windowed, layer 0
/// first (llama.cpp's `load_swa_pattern(ml, 2)`).
const GPT_OSS_WINDOW_PATTERN: usize = 2;
/// Gemma 3's RoPE base for its sliding-window layers (llama.cpp's `rope_freq_base_train_swa`
/// default, which Gemma 3 files do not override).
const GEMMA3_WINDOW_ROPE_BASE: f32 = 10_000.0;

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
        // folio's cache and attention use one head size for K and V.
        if has("attention.value_length") {
            let v = get("attention.value_length", MAX_HEAD_DIM)?;
            if v != head_dim {
                return Err(meta_err(
                    &key("attention.value_length"),
                    format!("{v} differs from the key head size {head_dim} (attention.key_length or embedding_length / head_count)"),
                ));
            }
        }
        let context_length = get("context_length", MAX_CONTEXT_LENGTH)?;
        let rms_eps = positive_f32(f, &key("attention.layer_norm_rms_epsilon"), 1e-5)?;
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
        let sliding_window = match f.get(&key("attention.sliding_window")) {
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
            (Some(_), Arch::Gemma3 | Arch::Gemma2 | Arch::GptOss) => {
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
            _ => rope_base,
        };
        // Gemma's 27B models scale scores by 1/√(d / heads), the others by 1/√head_dim
        // (llama.cpp, after gemma_pytorch's `query_pre_attn_scalar`).
        let big_gemma = matches!((arch, n_layers), (Arch::Gemma2, 46) | (Arch::Gemma3, 62));
        let attn_scale = match big_gemma {
            true => 1.0 / ((d_model / n_heads) as f32).sqrt(),
            false => 1.0 / (head_dim as f32).sqrt(),
        };
        let embed_scale = match arch.gemma() {
            true => (d_model as f32).sqrt(),
            false => 1.0,
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

    /// Bytes of K and V per token at `bytes_per_value` (DESIGN.md §requests: k = 2 × layers × kv_heads × head_dim × bytes).
    pub fn kv_bytes_per_token(&self, bytes_per_value: f64) -> f64 {
        2.0 * self.n_layers as f64 * self.n_kv_heads as f64 * self.head_dim as f64 * bytes_per_value
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
        let per_layer = d * q + 2.0 * d * kv + q * d + ffn;
        2.0 * (self.n_layers as f64 * per_layer + d * self.vocab_size as f64)
    }
}
