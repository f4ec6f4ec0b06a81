//! Model profiles: the shapes the arithmetic needs (layers, heads, sizes), built in or JSON.

use serde::{Deserialize, Serialize};

use crate::error::{PlanError, Result};
use folio_gguf::{KvFormat, KvFormats, KvRows};

/// A weight file of the model in some format (used by the unified-memory fit check).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightFile {
    pub format: String,
    pub bytes: u64,
}

/// A transformer's shape. Parameter counts are derived from it, so a user profile needs only
/// the shape (and, for a quantized file, the bytes actually read per step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelProfile {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// FFN width (of one expert for MoE models).
    pub ffn: u64,
    pub vocab: u64,
    /// Output head shares the embedding matrix.
    #[serde(default)]
    pub tied_embeddings: bool,
    /// Per-head RMSNorm on Q and K (Qwen3).
    #[serde(default)]
    pub qk_norm: bool,
    /// Experts per layer; 0 or 1 = dense.
    #[serde(default)]
    pub experts: u64,
    /// Experts each token uses.
    #[serde(default)]
    pub active_experts: u64,
    /// Bytes per weight value in the planned format (2 for BF16).
    #[serde(default = "two")]
    pub weight_bytes_per_param: f64,
    /// Bytes read per decode step when known directly (e.g. a quantized file), overriding
    /// `read_params × weight_bytes_per_param`.
    #[serde(default)]
    pub weight_read_bytes: Option<u64>,
    /// KV storage format of the engine being planned.
    #[serde(default = "bf16")]
    pub kv_format: KvFormat,
    /// Known weight files (format and size).
    #[serde(default)]
    pub weight_files: Vec<WeightFile>,
    /// Tokens a sliding-window layer attends to (`attention.sliding_window`); 0 = none.
    #[serde(default)]
    pub sliding_window: u64,
    /// How many of the layers attend through that window (Gemma 3: 5 of every 6).
    #[serde(default)]
    pub window_layers: u64,
    /// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the cache holds one latent
    /// row per token per layer instead of every head's K and V.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<MlaKv>,
}

/// The shapes of multi-head latent attention's KV (`deepseek2.attention.*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlaKv {
    /// `kv_lora_rank`: the cached latent width.
    pub kv_lora_rank: u64,
    /// `rope.dimension_count`: the shared rotary key part, cached beside the latent.
    pub rope_dim: u64,
    /// `key_length_mla`: a head's decompressed key width (non-rotary + rotary).
    pub qk_head_dim: u64,
    /// `value_length_mla`: a head's decompressed value width.
    pub v_head_dim: u64,
}

fn two() -> f64 {
    2.0
}

fn bf16() -> KvFormat {
    KvFormat::Bf16
}

impl ModelProfile {
    fn is_moe(&self) -> bool {
        self.experts > 1
    }

    /// Attention projections of one layer: Q, K, V, O.
    pub fn attn_params_per_layer(&self) -> u64 {
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        self.hidden * q + 2 * self.hidden * kv + q * self.hidden
    }

    /// Gate, up and down projections of one FFN (one expert).
    pub fn ffn_params_per_expert(&self) -> u64 {
        3 * self.hidden * self.ffn
    }

    /// Matrix parameters one token multiplies through in one layer.
    pub fn active_matmul_params_per_layer(&self) -> u64 {
        if self.is_moe() {
            self.attn_params_per_layer()
                + self.active_experts * self.ffn_params_per_expert()
                + self.hidden * self.experts
        } else {
            self.attn_params_per_layer() + self.ffn_params_per_expert()
        }
    }

    /// Matrix parameters stored per layer.
    pub fn matmul_params_per_layer(&self) -> u64 {
        if self.is_moe() {
            self.attn_params_per_layer()
                + self.experts * self.ffn_params_per_expert()
                + self.hidden * self.experts
        } else {
            self.active_matmul_params_per_layer()
        }
    }

    /// Non-embedding matrix parameters one token uses (`P` in `2·P` FLOP per token).
    pub fn active_matmul_params(&self) -> u64 {
        self.layers * self.active_matmul_params_per_layer()
    }

    /// Norm weights: two RMSNorms per layer (+ Q/K norms), one final.
    pub fn norm_params(&self) -> u64 {
        let qk = if self.qk_norm { 2 * self.head_dim } else { 0 };
        self.layers * (2 * self.hidden + qk) + self.hidden
    }

    /// Output head (`vocab × hidden`).
    pub fn lm_head_params(&self) -> u64 {
        self.vocab * self.hidden
    }

    /// Parameters read for one decode step: every active matrix, the norms and the output
    /// head; the input embedding table is only indexed, not read (unless tied).
    pub fn read_params(&self) -> u64 {
        self.active_matmul_params() + self.norm_params() + self.lm_head_params()
    }

    /// All stored parameters.
    pub fn total_params(&self) -> u64 {
        let emb = if self.tied_embeddings {
            0
        } else {
            self.vocab * self.hidden
        };
        self.layers * self.matmul_params_per_layer()
            + self.norm_params()
            + self.lm_head_params()
            + emb
    }

    /// `D_w`: weight bytes read per decode step.
    pub fn weight_read_bytes(&self) -> u64 {
        self.weight_read_bytes
            .unwrap_or_else(|| (self.read_params() as f64 * self.weight_bytes_per_param) as u64)
    }

    /// Values of K and V per token over all layers: `2 × layers × kv_heads × head_dim`; for
    /// MLA the cached latent row, `layers × (kv_lora_rank + rope_dim)`.
    pub fn kv_values_per_token(&self) -> u64 {
        match &self.mla {
            Some(m) => self.layers * (m.kv_lora_rank + m.rope_dim),
            None => 2 * self.layers * self.kv_heads * self.head_dim,
        }
    }

    /// Values per token of the uncompressed K and V: for MLA every head's decompressed K and
    /// V, `layers × heads × (qk_head_dim + v_head_dim)` (what the latent saves against);
    /// otherwise [`ModelProfile::kv_values_per_token`].
    pub fn kv_values_per_token_uncompressed(&self) -> u64 {
        match &self.mla {
            Some(m) => self.layers * self.heads * (m.qk_head_dim + m.v_head_dim),
            None => self.kv_values_per_token(),
        }
    }

    /// What one token stores in folio's cache: `layers × kv_heads` rows of `head_dim`, or
    /// MLA's one latent row of `kv_lora_rank + rope_dim` per layer (read as K and V).
    pub fn kv_rows(&self) -> KvRows {
        match &self.mla {
            Some(m) => KvRows {
                layers: self.layers as usize,
                kv_heads: 1,
                head_dim: (m.kv_lora_rank + m.rope_dim) as usize,
                latent: true,
            },
            None => KvRows {
                layers: self.layers as usize,
                kv_heads: self.kv_heads as usize,
                head_dim: self.head_dim as usize,
                latent: false,
            },
        }
    }

    /// The uncompressed form's KV bytes per token in `format`: MLA's every head's K in K's
    /// format and V in V's.
    pub fn kv_bytes_per_token_uncompressed_in(&self, format: impl Into<KvFormats>) -> u64 {
        let f = format.into();
        match &self.mla {
            Some(m) => {
                self.layers
                    * self.heads
                    * (f.k.row_bytes(m.qk_head_dim as usize) + f.v.row_bytes(m.v_head_dim as usize))
                        as u64
            }
            None => self.kv_bytes_per_token_in(f),
        }
    }

    /// `k`: KV bytes per token in `format` (a format or K and V apart), the bytes the
    /// engine's cache allocates ([`KvRows`]: rows padded to whole groups).
    pub fn kv_bytes_per_token_in(&self, format: impl Into<KvFormats>) -> u64 {
        self.kv_rows().bytes_per_token(format.into())
    }

    /// K's part of [`ModelProfile::kv_bytes_per_token_in`] (MLA: the whole latent row).
    pub fn kv_k_bytes_per_token_in(&self, format: impl Into<KvFormats>) -> u64 {
        self.kv_rows().k_bytes_per_token(format.into())
    }

    /// V's part of [`ModelProfile::kv_bytes_per_token_in`] (MLA: 0, V is read from K).
    pub fn kv_v_bytes_per_token_in(&self, format: impl Into<KvFormats>) -> u64 {
        self.kv_rows().v_bytes_per_token(format.into())
    }

    /// `k` in the profile's own KV format.
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token_in(self.kv_format)
    }

    /// FLOPs of one forward over `c` new tokens after `h` cached ones, `sampled` of which go
    /// through the output head: `2·P·c + 4·layers·heads·head_dim·pairs(h, c) + 2·V·d·sampled`.
    pub fn forward_flops(&self, h: u64, c: u64, sampled: u64) -> f64 {
        let pairs = folio_core::CostModel::pairs(h as usize, c as usize) as f64;
        2.0 * self.active_matmul_params() as f64 * c as f64
            + 4.0 * (self.layers * self.heads * self.head_dim) as f64 * pairs
            + 2.0 * self.lm_head_params() as f64 * sampled as f64
    }

    /// FLOPs of one decode token at context `l` (the weight part and the attention part).
    pub fn decode_flops(&self, l: u64) -> f64 {
        self.forward_flops(l, 1, 1)
    }

    /// Checks the shape is usable.
    pub fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
        ] {
            crate::error::at_least_one(field, v)?;
        }
        crate::error::positive("weight_bytes_per_param", self.weight_bytes_per_param)?;
        if self.is_moe() && (self.active_experts == 0 || self.active_experts > self.experts) {
            return Err(PlanError::Invalid {
                field: "active_experts",
                value: self.active_experts.to_string(),
                why: "must lie in 1..=experts for a MoE model",
            });
        }
        Ok(())
    }

    /// Reads a JSON profile.
    pub fn from_json_file(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
            path: path.into(),
            source,
        })?;
        let m: Self = serde_json::from_str(&text).map_err(|source| PlanError::Json {
            path: path.into(),
            source,
        })?;
        m.validate()?;
        Ok(m)
    }

    /// A built-in name (case-insensitive) or a path to a JSON profile.
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        if let Some(m) = builtin_models()
            .into_iter()
            .find(|m| m.name.eq_ignore_ascii_case(name_or_path))
        {
            return Ok(m);
        }
        if std::path::Path::new(name_or_path).is_file() {
            return Self::from_json_file(name_or_path);
        }
        Err(PlanError::UnknownProfile {
            kind: "model",
            name: name_or_path.into(),
            known: builtin_models()
                .iter()
                .map(|m| m.name.to_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn dense(
    name: &str,
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    ffn: u64,
    vocab: u64,
) -> ModelProfile {
    ModelProfile {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        ffn,
        vocab,
        tied_embeddings: false,
        qk_norm: false,
        experts: 0,
        active_experts: 0,
        weight_bytes_per_param: 2.0,
        weight_read_bytes: None,
        kv_format: KvFormat::Bf16,
        weight_files: Vec::new(),
        sliding_window: 0,
        window_layers: 0,
        mla: None,
    }
}

/// Qwen3-8B in BF16, the reference model: `D_w` = 15,136,811,008 B, 144 KiB of KV per token.
pub fn qwen3_8b() -> ModelProfile {
    ModelProfile {
        qk_norm: true,
        ..dense("Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151_936)
    }
}

pub fn llama31_8b() -> ModelProfile {
    dense("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128_256)
}

/// Llama-2-13B: no GQA (40 KV heads), the companion notes' 54 GB KV example.
pub fn llama2_13b() -> ModelProfile {
    ModelProfile {
        kv_format: KvFormat::F16,
        ..dense("Llama-2-13B", 40, 5120, 40, 40, 128, 13824, 32_000)
    }
}

/// Qwen3-235B-A22B (MoE, 128 experts, 8 active) with two 2-bit GGUF files (Q2_K and UD-Q2_K_XL).
pub fn qwen3_235b_a22b() -> ModelProfile {
    ModelProfile {
        qk_norm: true,
        experts: 128,
        active_experts: 8,
        kv_format: KvFormat::F16,
        weight_files: vec![
            WeightFile {
                format: "Q2_K".into(),
                bytes: (79.81 * crate::units::GIB) as u64,
            },
            WeightFile {
                format: "UD-Q2_K_XL".into(),
                bytes: (81.97 * crate::units::GIB) as u64,
            },
        ],
        ..dense("Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 1536, 151_936)
    }
}

/// SmolLM2-135M-Instruct, folio's default model, as the Q4_1 GGUF file folio runs (tied
/// Q8_0 embedding read as the output head, so the whole file is read per step) with f16 KV.
pub fn smollm2_135m() -> ModelProfile {
    ModelProfile {
        tied_embeddings: true,
        weight_bytes_per_param: 2.0,
        weight_read_bytes: Some(98_362_432),
        kv_format: KvFormat::F16,
        weight_files: vec![WeightFile {
            format: "Q4_1".into(),
            bytes: 98_362_432,
        }],
        ..dense("SmolLM2-135M", 30, 576, 9, 3, 64, 1536, 49_152)
    }
}

pub fn builtin_models() -> Vec<ModelProfile> {
    vec![
        qwen3_8b(),
        llama31_8b(),
        llama2_13b(),
        qwen3_235b_a22b(),
        smollm2_135m(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_8b_counts() {
        let m = qwen3_8b();
        assert_eq!(m.weight_read_bytes(), 15_136_811_008);
        assert_eq!(m.total_params(), 8_190_735_360);
        assert_eq!(m.kv_bytes_per_token(), 147_456);
    }

    #[test]
    fn moe_active_is_about_22b_of_235b() {
        let m = qwen3_235b_a22b();
        let total = m.total_params() as f64 / 1e9;
        let active = m.read_params() as f64 / 1e9;
        assert!((234.0..236.0).contains(&total), "{total}");
        assert!((21.0..23.0).contains(&active), "{active}");
        assert_eq!(m.kv_bytes_per_token(), 192_512);
    }

    #[test]
    fn smollm2_kv() {
        assert_eq!(smollm2_135m().kv_bytes_per_token(), 23_040);
    }

    #[test]
    fn mla_caches_the_latent_row() {
        // DeepSeek-V2-Lite: 27 layers, 16 heads, kv_lora_rank 512, rope 64, K 192, V 128.
        let mut m = dense("DeepSeek-V2-Lite", 27, 2048, 16, 1, 576, 1408, 102_400);
        m.kv_format = KvFormat::F16;
        m.mla = Some(MlaKv {
            kv_lora_rank: 512,
            rope_dim: 64,
            qk_head_dim: 192,
            v_head_dim: 128,
        });
        assert_eq!(m.kv_bytes_per_token(), 27 * 576 * 2);
        assert_eq!(
            m.kv_bytes_per_token_uncompressed_in(KvFormat::F16),
            27 * 16 * (192 + 128) * 2
        );
        let r = crate::capacity::capacity(&m, KvFormat::F16, &[], 16, 1 << 30, None).unwrap();
        assert_eq!(r.uncompressed_bytes_per_token, Some(276_480));
        assert!(r.tables()[0].title.contains("uncompressed K+V 276,480 B"));
        m.mla = None;
        assert_eq!(
            m.kv_bytes_per_token_uncompressed_in(KvFormat::F16),
            m.kv_bytes_per_token()
        );
    }

    #[test]
    fn resolve_rejects_unknown() {
        let e = ModelProfile::resolve("gpt-9").unwrap_err().to_string();
        assert!(e.contains("gpt-9") && e.contains("qwen3-8b"), "{e}");
    }
}
