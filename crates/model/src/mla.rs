//! Multi-head latent attention (MLA): `deepseek2` (DeepSeek-V2/V2-Lite/V3/R1, Kimi K2).
//!
//! Each token's K and V for all heads come from one compressed vector: `attn_kv_a_mqa`
//! projects the normed hidden row to `kv_lora_rank` latent values plus a `qk_rope` key
//! part shared by every head; the latent is RMS-normed (`attn_kv_a_norm`), the shared part
//! RoPE'd. The paged cache keeps exactly that row, `kv_lora_rank + qk_rope` values per
//! token per layer ([`crate::KvCache::new_latent`]), instead of the
//! `n_heads × (qk_nope + qk_rope + v_head_dim)` values of the decompressed K and V.
//!
//! Attention runs on the latent directly (the "absorbed" form, llama.cpp's deepseek2 graph
//! with `attn_k_b`/`attn_v_b`):
//! - per head, `q_nope · W_UK` (`attn_k_b`, `[qk_nope → kv_lora_rank]`) turns the non-rotary
//!   query part into a query against the latent; with the rotary part appended, the query
//!   row is `[absorbed | q_pe]`, the layout of the cached `[latent | k_pe]` row;
//! - every head attends over the one cached row per position (MQA, one KV head); the values
//!   are the latent part of the same row, so nothing else is stored;
//! - per head, the attention output (a latent) times `W_UV` (`attn_v_b`,
//!   `[kv_lora_rank → v_head_dim]`) gives the head's value, then `attn_output` as usual.
//!
//! Prefill and decode take the same path, so a chunked prompt gives the bits of a whole
//! one. Q is either direct (`attn_q`, V2-Lite) or low-rank (`attn_q_a`, `attn_q_a_norm`,
//! `attn_q_b`). Older files carry the fused `attn_kv_b` (`[kv_lora_rank → n_heads ×
//! (qk_nope + v_head_dim)]`): it is split at load, its K part transposed into W_UK.
//! The score scale is llama.cpp's: `mscale² / √(qk_nope + qk_rope)` with YaRN's mscale.

use crate::attention::{attention, AttnShape};
use crate::config::RopeYarn;
use crate::weights::{info, matrix, stacked, vector, weight_type};
use crate::{ForwardBatch, KvCache, ModelConfig, ModelError};
use folio_gguf::GgufFile;
use folio_kernels::matmul::{QMatrix, Sums, WeightType};
use folio_kernels::ops::{self, RopeRows};
use folio_kernels::pool::ThreadPool;

/// The MLA hyper-parameters (`deepseek2.attention.*` keys, llama.cpp's names).
#[derive(Clone, Debug, PartialEq)]
pub struct MlaConfig {
    /// `attention.q_lora_rank`: the low-rank Q width; 0 = direct `attn_q` (V2-Lite).
    pub q_lora_rank: usize,
    /// `attention.kv_lora_rank`: the cached latent width.
    pub kv_lora_rank: usize,
    /// Non-rotary part of a head's query/key (`key_length_mla − rope.dimension_count`).
    pub qk_nope: usize,
    /// Rotary part (`rope.dimension_count`), one key part shared by all heads.
    pub qk_rope: usize,
    /// `attention.value_length_mla`: a head's value width after decompression.
    pub v_head_dim: usize,
}

/// Upper bound on the low-rank widths (DeepSeek-V3: q 1,536, kv 512).
const MAX_RANK: u64 = 1 << 16;

fn meta_err(key: &str, what: String) -> ModelError {
    ModelError::Metadata {
        key: key.into(),
        what,
    }
}

/// `rope.scaling.yarn_log_multiplier` as llama.cpp's deepseek2 reads it (the converter
/// writes `0.1 × mscale_all_dim`; llama.cpp divides the 0.1 back out); 0 when absent or
/// for another architecture.
pub(crate) fn yarn_log_mul(f: &GgufFile, arch: &str) -> Result<f32, ModelError> {
    let key = format!("{arch}.rope.scaling.yarn_log_multiplier");
    if arch != "deepseek2" || f.get(&key).is_none() {
        return Ok(0.0);
    }
    let v = f.get_f32(&key)?;
    if !v.is_finite() || v < 0.0 {
        return Err(meta_err(&key, format!("{v} must be a finite number >= 0")));
    }
    Ok(v / 0.1)
}

impl MlaConfig {
    /// The MLA keys of a `deepseek2` file; `None` for other architectures. `key_length` is
    /// the file's `attention.key_length` (or `embedding_length / head_count`).
    pub(crate) fn from_gguf(
        f: &GgufFile,
        arch: &str,
        n_heads: usize,
        key_length: usize,
    ) -> Result<Option<MlaConfig>, ModelError> {
        if arch != "deepseek2" {
            return Ok(None);
        }
        let key = |k: &str| format!("{arch}.{k}");
        let get = |k: &str| -> Result<Option<usize>, ModelError> {
            match f.get(&key(k)) {
                None => Ok(None),
                Some(_) => {
                    let v = f.get_u64(&key(k))?;
                    if v == 0 || v > MAX_RANK {
                        return Err(meta_err(&key(k), format!("{v} is outside 1..={MAX_RANK}")));
                    }
                    Ok(Some(v as usize))
                }
            }
        };
        let kv_lora_rank = get("attention.kv_lora_rank")?.ok_or_else(|| {
            meta_err(
                &key("attention.kv_lora_rank"),
                "missing (required for deepseek2)".into(),
            )
        })?;
        // 0 (or absent) = direct `attn_q`: llama.cpp requires the key outside V2-Lite's
        // shapes, and a converter writes 0 for a model without low-rank Q.
        let q_lora_rank = match f.get(&key("attention.q_lora_rank")) {
            Some(_) if f.get_u64(&key("attention.q_lora_rank"))? == 0 => 0,
            Some(_) => get("attention.q_lora_rank")?.unwrap_or(0),
            None => 0,
        };
        let rope_key = key("rope.dimension_count");
        let qk_rope = get("rope.dimension_count")?
            .ok_or_else(|| meta_err(&rope_key, "missing (required for deepseek2)".into()))?;
        let value_length = get("attention.value_length")?;
        let (qk_head, v_head_dim) = match (
            get("attention.key_length_mla")?,
            get("attention.value_length_mla")?,
        ) {
            // The MLA layout: key_length is the cached row, value_length its latent part.
            (Some(k), Some(v)) => {
                if key_length != kv_lora_rank + qk_rope {
                    return Err(meta_err(
                        &key("attention.key_length"),
                        format!("{key_length} differs from kv_lora_rank {kv_lora_rank} + rope.dimension_count {qk_rope}"),
                    ));
                }
                if let Some(vl) = value_length.filter(|&vl| vl != kv_lora_rank) {
                    return Err(meta_err(
                        &key("attention.value_length"),
                        format!("{vl} differs from kv_lora_rank {kv_lora_rank}"),
                    ));
                }
                (k, v)
            }
            (None, None) => (key_length, value_length.unwrap_or(key_length)),
            (k, _) => {
                let missing = if k.is_none() {
                    "key_length_mla"
                } else {
                    "value_length_mla"
                };
                return Err(meta_err(
                    &key(&format!("attention.{missing}")),
                    "missing (the file has the other of key_length_mla / value_length_mla)".into(),
                ));
            }
        };
        if qk_rope % 2 != 0 || qk_rope >= qk_head {
            return Err(meta_err(
                &rope_key,
                format!("{qk_rope} must be even and below the head's key width {qk_head}"),
            ));
        }
        let _ = n_heads;
        Ok(Some(MlaConfig {
            q_lora_rank,
            kv_lora_rank,
            qk_nope: qk_head - qk_rope,
            qk_rope,
            v_head_dim,
        }))
    }

    /// A head's query/key width when decompressed (`qk_nope + qk_rope`).
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope + self.qk_rope
    }

    /// The cached row: `kv_lora_rank + qk_rope` values per token per layer.
    pub fn row_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope
    }

    /// The score scale of llama.cpp's deepseek2 graph: YaRN's attention factor with its
    /// adjustment cancelled, times `1 + 0.1 · log_mul · ln(1 / freq_scale)`, squared, over
    /// √(qk_nope + qk_rope).
    pub(crate) fn kq_scale(
        &self,
        f: &GgufFile,
        arch: &str,
        freq_scale: f32,
        yarn: &RopeYarn,
    ) -> Result<f32, ModelError> {
        let log_mul = yarn_log_mul(f, arch)?;
        let ln = (1.0 / freq_scale).ln();
        let attn_factor_org = yarn.attn_factor * (1.0 + 0.1 * ln);
        let mscale = attn_factor_org * (1.0 + 0.1 * log_mul * ln);
        Ok(mscale * mscale / (self.qk_head_dim() as f32).sqrt())
    }

    /// Weights of one layer's attention projections (for FLOP figures).
    pub fn attn_params(&self, d_model: usize, n_heads: usize) -> usize {
        let q = match self.q_lora_rank {
            0 => d_model * n_heads * self.qk_head_dim(),
            r => d_model * r + r * n_heads * self.qk_head_dim(),
        };
        q + d_model * self.row_dim()
            + n_heads * self.kv_lora_rank * (self.qk_nope + self.v_head_dim)
            + n_heads * self.v_head_dim * d_model
    }
}

/// The MLA tensors of layer `i` that are present, against the keys (before any is loaded;
/// the 3-D `attn_k_b`/`attn_v_b` are checked whole as they load).
pub(crate) fn check_shapes(
    f: &GgufFile,
    cfg: &ModelConfig,
    m: &MlaConfig,
    i: usize,
) -> Result<(), ModelError> {
    use crate::shapes::expect;
    let k = |s: &str| format!("{}.{s}", cfg.arch.name());
    let n = |s: &str| format!("blk.{i}.{s}");
    let d = (cfg.d_model, k("embedding_length"));
    let q = (
        cfg.n_heads * m.qk_head_dim(),
        format!(
            "{} × {}",
            k("attention.head_count"),
            k("attention.key_length_mla")
        ),
    );
    let qr = (m.q_lora_rank, k("attention.q_lora_rank"));
    let kvr = (m.kv_lora_rank, k("attention.kv_lora_rank"));
    let row = (
        m.row_dim(),
        format!("{} + {}", kvr.1, k("rope.dimension_count")),
    );
    let o = (
        cfg.n_heads * m.v_head_dim,
        format!(
            "{} × {}",
            k("attention.head_count"),
            k("attention.value_length_mla")
        ),
    );
    expect(f, &n("attn_q.weight"), &[d.clone(), q.clone()])?;
    expect(f, &n("attn_q_a.weight"), &[d.clone(), qr.clone()])?;
    expect(f, &n("attn_q_b.weight"), &[qr.clone(), q])?;
    expect(f, &n("attn_q_a_norm.weight"), std::slice::from_ref(&qr))?;
    expect(f, &n("attn_kv_a_mqa.weight"), &[d.clone(), row])?;
    expect(f, &n("attn_kv_a_norm.weight"), std::slice::from_ref(&kvr))?;
    expect(f, &n("attn_output.weight"), &[o, d])?;
    Ok(())
}

/// One layer's MLA weights besides the two in [`crate::weights::LayerWeights`]: its
/// `wqkv` holds `attn_q` (or `attn_q_a`) rows then `attn_kv_a_mqa` rows, and `wo` is
/// `attn_output`.
pub struct MlaWeights {
    /// Low-rank Q: `attn_q_a_norm` and `attn_q_b`.
    pub q_b: Option<(Vec<f32>, QMatrix)>,
    pub kv_a_norm: Vec<f32>,
    /// Per head W_UK: `kv_lora_rank` rows of `qk_nope`.
    pub k_b: Vec<QMatrix>,
    /// Per head W_UV: `v_head_dim` rows of `kv_lora_rank`.
    pub v_b: Vec<QMatrix>,
}

/// An f32 matrix from values (the split of a fused `attn_kv_b`).
fn f32_matrix(name: &str, rows: usize, cols: usize, v: &[f32]) -> Result<QMatrix, ModelError> {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    QMatrix::from_ggml(WeightType::F32, rows, cols, &raw).map_err(|e| ModelError::Tensor {
        name: name.into(),
        what: e.to_string(),
    })
}

/// Per-head matrices of a 3-D `[cols, rows, n_heads]` tensor.
fn per_head(
    f: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
    n_heads: usize,
) -> Result<Vec<QMatrix>, ModelError> {
    let (wt, parts) = crate::moe::experts_of(f, name, cols, rows, n_heads)?;
    parts
        .into_iter()
        .map(|raw| {
            QMatrix::from_ggml(wt, rows, cols, raw).map_err(|e| ModelError::Tensor {
                name: name.into(),
                what: e.to_string(),
            })
        })
        .collect()
}

impl MlaWeights {
    /// Layer `i`'s attention: `(wqkv, wo, the rest)`.
    pub(crate) fn load(
        f: &GgufFile,
        cfg: &ModelConfig,
        m: &MlaConfig,
        i: usize,
    ) -> Result<(QMatrix, QMatrix, MlaWeights), ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let (d, nh) = (cfg.d_model, cfg.n_heads);
        let q_rows = nh * m.qk_head_dim();
        let kv_a = n("attn_kv_a_mqa.weight");
        let (wqkv, q_b) = if m.q_lora_rank > 0 {
            let r = m.q_lora_rank;
            let q_a = n("attn_q_a.weight");
            let wqkv = stacked(f, &[(&q_a, r), (&kv_a, m.row_dim())], d)?;
            let norm = vector(f, &n("attn_q_a_norm.weight"), r)?;
            (
                wqkv,
                Some((norm, matrix(f, &n("attn_q_b.weight"), r, q_rows)?)),
            )
        } else {
            let q = n("attn_q.weight");
            (stacked(f, &[(&q, q_rows), (&kv_a, m.row_dim())], d)?, None)
        };
        let wo = matrix(f, &n("attn_output.weight"), nh * m.v_head_dim, d)?;
        let kv_a_norm = vector(f, &n("attn_kv_a_norm.weight"), m.kv_lora_rank)?;
        let (r, nope, vd) = (m.kv_lora_rank, m.qk_nope, m.v_head_dim);
        let fused = n("attn_kv_b.weight");
        let (k_b, v_b) = if f.tensor(&n("attn_k_b.weight")).is_none() && f.tensor(&fused).is_some()
        {
            // Older files: per head, `qk_nope` K rows then `v_head_dim` V rows, each a row
            // of `kv_lora_rank`; W_UK is the K rows transposed.
            let t = info(f, &fused)?;
            let rows = nh * (nope + vd);
            if t.cols() != r || t.rows() != rows {
                return Err(ModelError::Tensor {
                    name: fused,
                    what: format!(
                        "shape {:?}, expected [kv_lora_rank = {r}, head_count × (key_length_mla − rope.dimension_count + value_length_mla) = {rows}]",
                        t.dims
                    ),
                });
            }
            weight_type(&fused, t.ggml_type)?;
            let w = f.tensor_f32(&fused)?;
            let (mut k_b, mut v_b) = (Vec::with_capacity(nh), Vec::with_capacity(nh));
            for h in 0..nh {
                let base = h * (nope + vd) * r;
                let mut kt = vec![0f32; r * nope];
                for j in 0..nope {
                    for c in 0..r {
                        kt[c * nope + j] = w[base + j * r + c];
                    }
                }
                k_b.push(f32_matrix(&fused, r, nope, &kt)?);
                let v = &w[base + nope * r..base + (nope + vd) * r];
                v_b.push(f32_matrix(&fused, vd, r, v)?);
            }
            (k_b, v_b)
        } else {
            (
                per_head(f, &n("attn_k_b.weight"), nope, r, nh)?,
                per_head(f, &n("attn_v_b.weight"), r, vd, nh)?,
            )
        };
        Ok((
            wqkv,
            wo,
            MlaWeights {
                q_b,
                kv_a_norm,
                k_b,
                v_b,
            },
        ))
    }

    pub(crate) fn set_sums(&mut self, sums: Sums) {
        if let Some((_, q_b)) = self.q_b.as_mut() {
            q_b.set_sums(sums);
        }
        for x in self.k_b.iter_mut().chain(self.v_b.iter_mut()) {
            x.set_sums(sums);
        }
    }

    /// Bytes of the matrices beside `wqkv` and `wo`.
    pub fn bytes(&self) -> usize {
        self.q_b.as_ref().map_or(0, |q| q.1.weight_bytes())
            + self
                .k_b
                .iter()
                .chain(&self.v_b)
                .map(QMatrix::weight_bytes)
                .sum::<usize>()
    }
}

/// What one layer's MLA step reads besides its weights.
pub(crate) struct MlaStep<'a> {
    pub cfg: &'a ModelConfig,
    pub m: &'a MlaConfig,
    pub layer: usize,
    pub batch: &'a ForwardBatch,
    pub token_pos: &'a [(usize, usize)],
    pub rope: &'a RopeRows<'a>,
    pub shape: AttnShape<'a>,
    pub llama_orders: bool,
}

/// `out` (`[n][d_model]`) = the attention block of layer `s.layer` over the normed rows `h`:
/// writes every token's latent row into `kv` first, then attends in the absorbed form.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward(
    s: &MlaStep,
    wqkv: &QMatrix,
    wo: &QMatrix,
    w: &MlaWeights,
    kv: &mut KvCache,
    h: &[f32],
    out: &mut [f32],
    pool: &ThreadPool,
) {
    let (cfg, m) = (s.cfg, s.m);
    let n = s.token_pos.len();
    let (nh, eps) = (cfg.n_heads, cfg.rms_eps);
    let (r, rd, nope, qk, vd) = (
        m.kv_lora_rank,
        m.qk_rope,
        m.qk_nope,
        m.qk_head_dim(),
        m.v_head_dim,
    );
    let row = m.row_dim();
    let a_dim = wqkv.rows();
    let q_in = a_dim - row;
    let mut a = vec![0f32; n * a_dim];
    wqkv.matmul(h, n, &mut a, pool);
    let q: Vec<f32> = match &w.q_b {
        Some((norm, q_b)) => {
            let mut qa = vec![0f32; n * q_in];
            for t in 0..n {
                let x = &a[t * a_dim..t * a_dim + q_in];
                ops::rmsnorm(x, norm, eps, &mut qa[t * q_in..(t + 1) * q_in]);
            }
            let mut q = vec![0f32; n * nh * qk];
            q_b.matmul(&qa, n, &mut q, pool);
            q
        }
        None => (0..n)
            .flat_map(|t| a[t * a_dim..t * a_dim + q_in].iter().copied())
            .collect(),
    };
    // The cached row: [rmsnorm(latent) | rope(k_pe)].
    let (bs, group) = (kv.block_size, kv.layout.group(s.layer));
    let mut kv_row = vec![0f32; row];
    for (t, &(seq, pos)) in s.token_pos.iter().enumerate() {
        let base = t * a_dim + q_in;
        ops::rmsnorm(&a[base..base + r], &w.kv_a_norm, eps, &mut kv_row[..r]);
        kv_row[r..].copy_from_slice(&a[base + r..base + row]);
        s.rope.apply(&mut kv_row[r..], 1, pos as u32);
        let slot = s.batch.seqs[seq].slot(group, pos, bs);
        kv.write_latent(s.layer, slot / bs, slot % bs, &kv_row);
    }
    // Queries against the row: [q_nope · W_UK | rope(q_pe)] per head.
    let mut qf = vec![0f32; n * nh * row];
    let (mut x, mut y) = (vec![0f32; n * nope], vec![0f32; n * r]);
    for (hd, k_b) in w.k_b.iter().enumerate() {
        for t in 0..n {
            let src = t * nh * qk + hd * qk;
            x[t * nope..(t + 1) * nope].copy_from_slice(&q[src..src + nope]);
        }
        k_b.matmul(&x, n, &mut y, pool);
        for t in 0..n {
            let dst = t * nh * row + hd * row;
            qf[dst..dst + r].copy_from_slice(&y[t * r..(t + 1) * r]);
        }
    }
    let mut pe = vec![0f32; nh * rd];
    for (t, &(_, pos)) in s.token_pos.iter().enumerate() {
        for hd in 0..nh {
            let src = t * nh * qk + hd * qk + nope;
            pe[hd * rd..(hd + 1) * rd].copy_from_slice(&q[src..src + rd]);
        }
        s.rope.apply(&mut pe, nh, pos as u32);
        for hd in 0..nh {
            let dst = t * nh * row + hd * row + r;
            qf[dst..dst + rd].copy_from_slice(&pe[hd * rd..(hd + 1) * rd]);
        }
    }
    // Every head over the one latent row per position; the values are its latent part
    // (the last `qk_rope` outputs of each head are unused).
    let mut o = vec![0f32; n * nh * row];
    attention(
        s.batch,
        s.token_pos,
        kv,
        s.layer,
        s.shape,
        s.llama_orders,
        &qf,
        &mut o,
        pool,
    );
    // Decompress each head's latent output through W_UV.
    let (mut z, mut v) = (vec![0f32; n * r], vec![0f32; n * vd]);
    let mut att = vec![0f32; n * nh * vd];
    for (hd, v_b) in w.v_b.iter().enumerate() {
        for t in 0..n {
            let src = t * nh * row + hd * row;
            z[t * r..(t + 1) * r].copy_from_slice(&o[src..src + r]);
        }
        v_b.matmul(&z, n, &mut v, pool);
        for t in 0..n {
            let dst = t * nh * vd + hd * vd;
            att[dst..dst + vd].copy_from_slice(&v[t * vd..(t + 1) * vd]);
        }
    }
    wo.matmul(&att, n, out, pool);
}
