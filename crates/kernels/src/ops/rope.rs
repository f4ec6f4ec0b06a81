//! Rotary position embedding.
//!
//! NOTE: no hand-written SIMD version: one token rotates (9 + 3) heads x 32 pairs per layer,
//! a few hundred multiply-adds, and sin/cos are cached per position. The rotation is compiled
//! once more with FMA enabled and chosen at run time: without it, `f32::mul_add` is a call to
//! libm's `fmaf` per value, which cost 5% of a 16-sequence decode step.

use std::sync::{RwLock, RwLockReadGuard};

/// Positions whose cos/sin rows are cached; beyond this they are computed per call so a
/// huge position cannot force a huge table.
const MAX_CACHED_POS: usize = 1 << 17;

/// Frequency scaling of a [`Rope`], ggml's `rope_ext` parameters: linear scale, YaRN
/// (`ext_factor != 0`) and per-pair frequency factors (Llama 3's `rope_freqs`, Phi-3's
/// LongRoPE factors). [`RopeScaling::default`] is plain RoPE.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// Linear frequency scale, `1 / rope.scaling.factor` (1.0 = none).
    pub freq_scale: f32,
    /// YaRN's mix of interpolated and extrapolated angles (0 = no YaRN, 1 = full ramp).
    pub ext_factor: f32,
    /// Magnitude scale of cos and sin (ggml's `attn_factor`, its `mscale`).
    pub attn_factor: f32,
    /// YaRN's ramp bounds, in rotations over the original context.
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// Context length the model was trained at before scaling (YaRN's `n_ctx_orig`).
    pub n_ctx_orig: usize,
    /// `rope_dim / 2` factors; pair i's angle is divided by factor i.
    pub freq_factors: Option<Vec<f32>>,
}

impl Default for RopeScaling {
    fn default() -> Self {
        RopeScaling {
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 0,
            freq_factors: None,
        }
    }
}

/// ggml's `ggml_rope_yarn_corr_dims`: the first and last pair dims of YaRN's ramp, in f32.
pub fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

/// ggml's `rope_yarn_ramp` for dim `i0` (even): 1 below `low`, 0 above `high`.
fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Rotary embedding for one model: frequencies fixed at construction, cos/sin rows cached
/// per position on first use (shared by all layers and threads).
#[derive(Debug)]
pub struct Rope {
    head_dim: usize,
    rope_dim: usize,
    neox: bool,
    /// `base^(-2/rope_dim)` in f32: angle i is `pos · theta_scale^i`, multiplied up in f32.
    theta_scale: f32,
    /// Linear frequency scale (1.0 = none).
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    /// YaRN's ramp bounds (see [`yarn_corr_dims`]); unused when `ext_factor == 0`.
    corr_dims: [f32; 2],
    /// One divisor per pair; empty when the model has none.
    freq_factors: Vec<f32>,
    /// Row p: `[cos(p f_0), sin(p f_0), cos(p f_1), sin(p f_1), ...]`.
    table: RwLock<Vec<f32>>,
}

impl Rope {
    /// `rope_dim <= head_dim` leading dims of each head rotate (rounded down to even);
    /// `scale` is a linear frequency scale (1.0 = none); `neox` selects the pairing
    /// (false: adjacent pairs `(x[2i], x[2i+1])`, llama in GGUF; true: `(x[i], x[i+rope_dim/2])`,
    /// qwen2/qwen3).
    pub fn new(head_dim: usize, rope_dim: usize, base: f32, scale: f32, neox: bool) -> Rope {
        let scaling = RopeScaling {
            freq_scale: scale,
            ..RopeScaling::default()
        };
        Rope::with_scaling(head_dim, rope_dim, base, neox, &scaling)
    }

    /// [`Rope::new`] with YaRN and frequency factors, as ggml's `rope_ext`.
    ///
    /// # Panics
    /// If `scaling.freq_factors` is present with fewer than `rope_dim / 2` values.
    pub fn with_scaling(
        head_dim: usize,
        rope_dim: usize,
        base: f32,
        neox: bool,
        scaling: &RopeScaling,
    ) -> Rope {
        let rope_dim = rope_dim.min(head_dim) & !1;
        let freq_factors = match &scaling.freq_factors {
            Some(f) => {
                assert!(
                    f.len() >= rope_dim / 2,
                    "rope: {} freq factors for {} pairs",
                    f.len(),
                    rope_dim / 2
                );
                f[..rope_dim / 2].to_vec()
            }
            None => Vec::new(),
        };
        Rope {
            head_dim,
            rope_dim,
            neox,
            theta_scale: base.powf(-2.0 / rope_dim.max(1) as f32),
            freq_scale: scaling.freq_scale,
            ext_factor: scaling.ext_factor,
            attn_factor: scaling.attn_factor,
            corr_dims: yarn_corr_dims(
                rope_dim,
                scaling.n_ctx_orig,
                base,
                scaling.beta_fast,
                scaling.beta_slow,
            ),
            freq_factors,
            table: RwLock::new(Vec::new()),
        }
    }

    /// Dimensions per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// cos/sin of every pair's angle at `pos`, computed as llama.cpp does (its
    /// `ggml_rope_cache_init` and `rope_yarn`): the angle starts at `pos` and is multiplied
    /// by `theta_scale` in f32 from one pair to the next; pair i's extrapolated angle is
    /// that over its frequency factor, the interpolated one `freq_scale` times it, YaRN
    /// mixes the two along its ramp, and cos/sin are scaled by `attn_factor` (times YaRN's
    /// magnitude correction). Exact angles in f64 would be closer to the true rotation, but
    /// differ from llama.cpp's in the last bits, and this model amplifies last bits.
    fn row(&self, pos: usize, out: &mut [f32]) {
        let mut theta = pos as f32;
        for i in 0..self.rope_dim / 2 {
            let ff = self.freq_factors.get(i).copied().unwrap_or(1.0);
            let extrap = theta / ff;
            let interp = self.freq_scale * extrap;
            let (mut t, mut mscale) = (interp, self.attn_factor);
            if self.ext_factor != 0.0 {
                let [low, high] = self.corr_dims;
                let mix = yarn_ramp(low, high, 2 * i) * self.ext_factor;
                t = interp * (1.0 - mix) + extrap * mix;
                mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
            }
            out[2 * i] = t.cos() * mscale;
            out[2 * i + 1] = t.sin() * mscale;
            theta *= self.theta_scale;
        }
    }

    /// Rotates `x` (`n_heads * head_dim` values of one token) for position `pos`.
    ///
    /// # Panics
    /// If `x.len() != n_heads * head_dim`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, pos: u32) {
        self.rows(pos as usize).apply(x, n_heads, pos)
    }

    /// Caches the cos/sin rows of positions `0..=max_pos` (up to the cache's cap) and holds
    /// them for reading: a forward pass takes them once, not once per token and layer (two
    /// threads taking the lock per token bounced its counter between the cores).
    pub fn rows(&self, max_pos: usize) -> RopeRows<'_> {
        let w = self.rope_dim;
        // A position past the cap does not grow the table (its row is computed per call).
        let need = if max_pos < MAX_CACHED_POS {
            (max_pos + 1) * w
        } else {
            0
        };
        {
            let t = self.table.read().unwrap_or_else(|e| e.into_inner());
            if t.len() >= need {
                return RopeRows {
                    rope: self,
                    table: t,
                };
            }
        }
        {
            let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
            let have = t.len() / w.max(1);
            let want_rows = need / w.max(1);
            if have < want_rows {
                let want = want_rows.max(have * 2).clamp(1024, MAX_CACHED_POS);
                t.resize(want * w, 0.0);
                for p in have..want {
                    self.row(p, &mut t[p * w..(p + 1) * w]);
                }
            }
        }
        RopeRows {
            rope: self,
            table: self.table.read().unwrap_or_else(|e| e.into_inner()),
        }
    }

    fn rotate(&self, x: &mut [f32], n_heads: usize, cs: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::isa() != crate::cpu::Isa::Scalar {
            // SAFETY: every non-scalar ISA implies FMA (see `cpu::best`).
            return unsafe { self.rotate_fma(x, n_heads, cs) };
        }
        self.rotate_body(x, n_heads, cs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn rotate_fma(&self, x: &mut [f32], n_heads: usize, cs: &[f32]) {
        self.rotate_body(x, n_heads, cs)
    }

    /// `mul_add` is an exact fused multiply-add with or without the FMA instruction, so both
    /// compilations give the same bits.
    #[inline(always)]
    fn rotate_body(&self, x: &mut [f32], n_heads: usize, cs: &[f32]) {
        let half = self.rope_dim / 2;
        for h in 0..n_heads {
            let head = &mut x[h * self.head_dim..(h + 1) * self.head_dim];
            for i in 0..half {
                let (c, s) = (cs[2 * i], cs[2 * i + 1]);
                let (a, b) = if self.neox {
                    (i, i + half)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x0, x1) = (head[a], head[b]);
                // llama.cpp's `x0*cos - x1*sin` and `x0*sin + x1*cos` as its compiler
                // contracts them: the first product of each fused into the FMA.
                head[a] = x0.mul_add(c, -(x1 * s));
                head[b] = x0.mul_add(s, x1 * c);
            }
        }
    }
}

/// The cached cos/sin rows of a [`Rope`], held for reading (see [`Rope::rows`]).
pub struct RopeRows<'a> {
    rope: &'a Rope,
    table: RwLockReadGuard<'a, Vec<f32>>,
}

impl RopeRows<'_> {
    /// Rotates `x` (`n_heads * head_dim` values of one token) for position `pos`; a position
    /// past the cached rows gets its row computed on the spot.
    ///
    /// # Panics
    /// If `x.len() != n_heads * head_dim`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, pos: u32) {
        let r = self.rope;
        assert_eq!(
            x.len(),
            n_heads * r.head_dim,
            "rope: x.len() must be n_heads * head_dim = {n_heads} * {}",
            r.head_dim
        );
        let w = r.rope_dim; // cos/sin floats per position row
        if w == 0 {
            return;
        }
        let pos = pos as usize;
        if self.table.len() >= (pos + 1) * w {
            return r.rotate(x, n_heads, &self.table[pos * w..(pos + 1) * w]);
        }
        let mut cs = vec![0f32; w];
        r.row(pos, &mut cs);
        r.rotate(x, n_heads, &cs)
    }
}
