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
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, ModelError> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "gemma3" => Ok(Arch::Gemma3),
            other => Err(ModelError::UnsupportedArch(other.to_string())),
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
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
    /// The FFN's gate activation.
    pub fn activation(&self) -> Activation {
        match self {
            Arch::Gemma3 => Activation::Gelu,
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
    /// Linear RoPE frequency scale (1.0 = none); from `rope.scaling.factor` when the
    /// scaling type is linear.
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
    /// Mixture-of-experts FFN (`qwen2moe`, `qwen3moe`, llama with `expert_count` > 0).
    pub moe: Option<crate::moe::MoeConfig>,
}

/// Most transformer blocks a model may have: far above any published model (the largest
/// have ~130), low enough that per-layer tables sized from the file stay small.
pub const MAX_LAYERS: usize = 4096;

/// Gemma 3's layout when the file names no pattern: of every 6 layers the first 5 use the
/// sliding window and the 6th is global (llama.cpp's `set_swa_pattern(6)`).
const GEMMA3_WINDOW_PATTERN: usize = 6;
/// Gemma 3's RoPE base for its sliding-window layers (llama.cpp's `rope_freq_base_train_swa`
/// default, which Gemma 3 files do not override).
const GEMMA3_WINDOW_ROPE_BASE: f32 = 10_000.0;

impl ModelConfig {
    /// Reads `{arch}.*` keys. Missing optional keys take llama.cpp's defaults.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch_name = f.get_str("general.architecture")?.to_string();
        let arch = match crate::moe::dense_arch(&arch_name) {
            Some(a) => a,
            None => Arch::from_name(&arch_name)?,
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let get = |k: &str| -> Result<usize, ModelError> { Ok(f.get_u64(&key(k))? as usize) };
        let n_layers = get("block_count")?;
        if n_layers > MAX_LAYERS {
            return Err(ModelError::Metadata {
                key: key("block_count"),
                what: format!("{n_layers} exceeds the limit of {MAX_LAYERS} layers"),
            });
        }
        let d_model = get("embedding_length")?;
        let n_heads = get("attention.head_count")?;
        let n_kv_heads = if f.get(&key("attention.head_count_kv")).is_some() {
            get("attention.head_count_kv")?
        } else {
            n_heads
        };
        let ffn_dim = get("feed_forward_length")?;
        let head_dim = if f.get(&key("attention.key_length")).is_some() {
            get("attention.key_length")?
        } else {
            if n_heads == 0 || d_model % n_heads != 0 {
                return Err(ModelError::Metadata {
                    key: key("attention.head_count"),
                    what: format!("{n_heads} does not divide embedding_length {d_model}"),
                });
            }
            d_model / n_heads
        };
        let context_length = get("context_length")?;
        let rms_eps = f
            .get_f32(&key("attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5);
        let rope_base = f.get_f32(&key("rope.freq_base")).unwrap_or(10000.0);
        let rope_dim = if f.get(&key("rope.dimension_count")).is_some() {
            get("rope.dimension_count")?
        } else {
            head_dim
        };
        let mut rope_freq_scale = 1.0;
        if let Ok(kind) = f.get_str(&key("rope.scaling.type")) {
            match kind {
                "none" => {}
                "linear" => {
                    let factor = f.get_f32(&key("rope.scaling.factor")).unwrap_or(1.0);
                    if factor > 0.0 {
                        rope_freq_scale = 1.0 / factor;
                    }
                }
                other => {
                    return Err(ModelError::Metadata {
                        key: key("rope.scaling.type"),
                        what: format!("unsupported value '{other}' (supported: none, linear)"),
                    })
                }
            }
        }
        let tokens = f
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .map(|a| a.len());
        let vocab_size = match f.get(&key("vocab_size")) {
            Some(_) => get("vocab_size")?,
            None => tokens.unwrap_or(0),
        };
        let sliding_window = match f.get(&key("attention.sliding_window")) {
            Some(_) => Some(get("attention.sliding_window")?).filter(|&w| w > 0),
            None => None,
        };
        let window_layers: Vec<bool> = match (sliding_window, arch) {
            (None, _) => vec![false; n_layers],
            (Some(_), Arch::Gemma3) => {
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
                            Some(_) => get("attention.sliding_window_pattern")?,
                            None => GEMMA3_WINDOW_PATTERN,
                        };
                        (0..n_layers)
                            .map(|l| pattern == 0 || l % pattern < pattern - 1)
                            .collect()
                    }
                }
            }
            // Mistral-style: the window applies to every layer.
            (Some(_), _) => vec![true; n_layers],
        };
        let rope_base_window = match arch {
            Arch::Gemma3 => f
                .get_f32(&key("rope.freq_base_swa"))
                .unwrap_or(GEMMA3_WINDOW_ROPE_BASE),
            _ => rope_base,
        };
        let attn_scale = 1.0 / (head_dim as f32).sqrt();
        let embed_scale = match arch {
            Arch::Gemma3 => (d_model as f32).sqrt(),
            _ => 1.0,
        };
        let final_softcap = f
            .get_f32(&key("final_logit_softcapping"))
            .ok()
            .filter(|&c| c != 0.0);
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
            moe,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |k: &str, what: String| {
            Err(ModelError::Metadata {
                key: k.into(),
                what,
            })
        };
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(
                "attention.head_count_kv",
                format!(
                    "{} must divide head_count {}",
                    self.n_kv_heads, self.n_heads
                ),
            );
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) || self.head_dim > 1024 {
            return bad(
                "attention.key_length",
                format!("{} must be even and in 2..=1024", self.head_dim),
            );
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return bad(
                "rope.dimension_count",
                format!(
                    "{} must be even and <= head_dim {}",
                    self.rope_dim, self.head_dim
                ),
            );
        }
        for (k, v) in [
            ("block_count", self.n_layers),
            ("embedding_length", self.d_model),
            ("feed_forward_length", self.ffn_dim),
            ("context_length", self.context_length),
        ] {
            if v == 0 {
                return bad(k, "must be > 0, got 0".into());
            }
        }
        Ok(())
    }

    /// Whether layer `l` attends through the sliding window.
    pub fn is_window_layer(&self, l: usize) -> bool {
        self.window_layers.get(l).copied().unwrap_or(false)
    }

    /// The first position a query at `pos` sees in layer `l` (0 for global layers).
    pub fn first_visible(&self, l: usize, pos: usize) -> usize {
        match self.sliding_window {
            Some(w) if self.is_window_layer(l) => (pos + 1).saturating_sub(w),
            _ => 0,
        }
    }

    /// Bytes of K and V per token at `bytes_per_value` (chapter 8.1: k = 2 × layers × kv_heads × head_dim × bytes).
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
