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
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, ModelError> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            other => Err(ModelError::UnsupportedArch(other.to_string())),
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }
    /// NeoX RoPE rotates (x[i], x[i + d/2]); llama's GGUF layout rotates adjacent pairs.
    pub fn rope_neox(&self) -> bool {
        !matches!(self, Arch::Llama)
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
    /// Linear RoPE frequency scale (1.0 = none); from `rope.scaling.factor` when the
    /// scaling type is linear.
    pub rope_freq_scale: f32,
    pub rope_dim: usize,
    /// Mixture-of-experts FFN (`qwen2moe`, `qwen3moe`, llama with `expert_count` > 0).
    pub moe: Option<crate::moe::MoeConfig>,
}

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
