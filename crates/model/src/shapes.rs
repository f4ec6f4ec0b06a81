//! Tensor shapes against the configuration, checked for the whole file before any tensor is
//! repacked.
//!
//! WHY: the shape keys are bounded (see [`crate::config::limits`]), but a file whose
//! tensors disagree with its keys must fail before the loader allocates and repacks the
//! first matrices, and the error must say which key the tensor disagrees with: a wrong
//! `embedding_length` shows up as every tensor being "wrong". Only the tensors present are
//! checked here (a missing one is reported by the loader); names other layouts use
//! (mixture-of-experts, extra norms) are left to their loaders.

use crate::{ModelConfig, ModelError};
use folio_gguf::GgufFile;

/// One expected dimension: its size and the metadata that sets it.
pub(crate) type Dim = (usize, String);

pub(crate) fn expect(f: &GgufFile, name: &str, dims: &[Dim]) -> Result<(), ModelError> {
    let Some(t) = f.tensor(name) else {
        return Ok(());
    };
    let got = if dims.len() == 1 {
        vec![t.n_elements() as usize]
    } else {
        vec![t.cols(), t.rows()]
    };
    if got.iter().zip(dims).all(|(g, (want, _))| g == want) {
        return Ok(());
    }
    let want: Vec<String> = dims.iter().map(|(v, k)| format!("{k} = {v}")).collect();
    Err(ModelError::Tensor {
        name: name.into(),
        what: format!("shape {:?}, expected [{}]", t.dims, want.join(", ")),
    })
}

/// Checks every present tensor of the shared layout against `cfg`.
pub(crate) fn check(f: &GgufFile, cfg: &ModelConfig) -> Result<(), ModelError> {
    let k = |s: &str| format!("{}.{s}", cfg.arch.name());
    let d = (cfg.d_model, k("embedding_length"));
    let vocab = (cfg.vocab_size, k("vocab_size"));
    let hd = k("attention.key_length");
    let q = (
        cfg.n_heads * cfg.head_dim,
        format!("{} × {hd}", k("attention.head_count")),
    );
    let kv = (
        cfg.n_kv_heads * cfg.head_dim,
        format!("{} × {hd}", k("attention.head_count_kv")),
    );
    let ffn = (cfg.ffn_dim, k("feed_forward_length"));
    expect(f, "token_embd.weight", &[d.clone(), vocab.clone()])?;
    expect(f, "output.weight", &[d.clone(), vocab])?;
    expect(f, "output_norm.weight", std::slice::from_ref(&d))?;
    for i in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        expect(f, &n("attn_norm.weight"), std::slice::from_ref(&d))?;
        expect(f, &n("ffn_norm.weight"), std::slice::from_ref(&d))?;
        if let Some(m) = &cfg.mla {
            crate::mla::check_shapes(f, cfg, m, i)?;
        } else {
            expect(f, &n("attn_q.weight"), &[d.clone(), q.clone()])?;
            expect(f, &n("attn_k.weight"), &[d.clone(), kv.clone()])?;
            expect(f, &n("attn_v.weight"), &[d.clone(), kv.clone()])?;
            let qkv = (q.0 + 2 * kv.0, format!("{} + 2 × {}", q.1, kv.1));
            expect(f, &n("attn_qkv.weight"), &[d.clone(), qkv])?;
            expect(f, &n("attn_output.weight"), &[q.clone(), d.clone()])?;
        }
        expect(f, &n("ffn_gate.weight"), &[d.clone(), ffn.clone()])?;
        if f.tensor(&n("ffn_gate.weight")).is_some() {
            expect(f, &n("ffn_up.weight"), &[d.clone(), ffn.clone()])?;
        } else {
            // Phi-3's fused gate-and-up.
            let up2 = (2 * ffn.0, format!("2 × {}", ffn.1));
            expect(f, &n("ffn_up.weight"), &[d.clone(), up2])?;
        }
        expect(f, &n("ffn_down.weight"), &[ffn.clone(), d.clone()])?;
    }
    Ok(())
}
