//! The model's [`Rope`]: configuration plus the frequency-factor tensors.
//!
//! Llama 3.1/3.2 files carry `rope_freqs.weight` (the Llama 3 scaling baked into one divisor
//! per pair); Phi-3 128k files carry LongRoPE's `rope_factors_short.weight` and
//! `rope_factors_long.weight`. As llama.cpp's `get_rope_factors`: `rope_freqs` when present,
//! else the long factors when the context exceeds the original one, else the short ones;
//! where llama.cpp compares its runtime context, folio compares `context_length` (the
//! positions it accepts), which is llama.cpp's default context.

use crate::{ModelConfig, ModelError};
use folio_gguf::GgufFile;
use folio_kernels::ops::{Rope, RopeScaling};

/// The frequency factors of the file, if any, checked: `rope_dim / 2` finite values > 0.
pub(crate) fn freq_factors(
    f: &GgufFile,
    cfg: &ModelConfig,
) -> Result<Option<Vec<f32>>, ModelError> {
    let long = cfg.context_length > cfg.rope_yarn.orig_ctx;
    let candidates = [
        "rope_freqs.weight",
        if long {
            "rope_factors_long.weight"
        } else {
            "rope_factors_short.weight"
        },
    ];
    let Some(name) = candidates.into_iter().find(|n| f.tensor(n).is_some()) else {
        return Ok(None);
    };
    let t = f.tensor(name).expect("found above");
    let want = cfg.rope_dim / 2;
    if t.n_elements() != want as u64 {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!(
                "{} elements, expected {}.rope.dimension_count / 2 = {want}",
                t.n_elements(),
                cfg.arch.name()
            ),
        });
    }
    let v = f.tensor_f32(name)?;
    if let Some((i, x)) = v
        .iter()
        .enumerate()
        .find(|(_, x)| !x.is_finite() || **x <= 0.0)
    {
        return Err(ModelError::Tensor {
            name: name.into(),
            what: format!("factor {i} is {x}: must be a finite number > 0"),
        });
    }
    Ok(Some(v))
}

/// The rotary embedding `cfg` and the file's factor tensors describe.
pub(crate) fn build(f: &GgufFile, cfg: &ModelConfig) -> Result<Rope, ModelError> {
    build_base(f, cfg, cfg.rope_base)
}

/// [`build`] with another base and the same scaling: GPT-OSS's window layers, whose
/// `rope.freq_base_swa` keeps the global layers' frequency scale and YaRN (llama.cpp's
/// `rope_freq_scale_train_swa = rope_freq_scale_train`).
pub(crate) fn build_base(f: &GgufFile, cfg: &ModelConfig, base: f32) -> Result<Rope, ModelError> {
    let y = &cfg.rope_yarn;
    let scaling = RopeScaling {
        freq_scale: cfg.rope_freq_scale,
        ext_factor: y.ext_factor,
        attn_factor: y.attn_factor,
        beta_fast: y.beta_fast,
        beta_slow: y.beta_slow,
        n_ctx_orig: y.orig_ctx,
        freq_factors: freq_factors(f, cfg)?,
    };
    // MLA ropes its rotary parts on their own: heads of `rope_dim` values.
    let head = cfg.mla.as_ref().map_or(cfg.head_dim, |m| m.qk_rope);
    Ok(Rope::with_scaling(
        head,
        cfg.rope_dim,
        base,
        cfg.rope_neox,
        &scaling,
    ))
}
