//! Rotary position embedding.
//!
//! NOTE: no SIMD version: one token rotates (9 + 3) heads x 32 pairs per layer, a few
//! hundred multiply-adds; the cost that matters is sin/cos, which is cached per position.

use std::sync::RwLock;

/// Positions whose cos/sin rows are cached; beyond this they are computed per call so a
/// huge position cannot force a huge table.
const MAX_CACHED_POS: usize = 1 << 17;

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
    /// Row p: `[cos(p f_0), sin(p f_0), cos(p f_1), sin(p f_1), ...]`.
    table: RwLock<Vec<f32>>,
}

impl Rope {
    /// `rope_dim <= head_dim` leading dims of each head rotate (rounded down to even);
    /// `scale` is a linear frequency scale (1.0 = none); `neox` selects the pairing
    /// (false: adjacent pairs `(x[2i], x[2i+1])`, llama in GGUF; true: `(x[i], x[i+rope_dim/2])`,
    /// qwen2/qwen3).
    pub fn new(head_dim: usize, rope_dim: usize, base: f32, scale: f32, neox: bool) -> Rope {
        let rope_dim = rope_dim.min(head_dim) & !1;
        Rope {
            head_dim,
            rope_dim,
            neox,
            theta_scale: base.powf(-2.0 / rope_dim.max(1) as f32),
            freq_scale: scale,
            table: RwLock::new(Vec::new()),
        }
    }

    /// Dimensions per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// cos/sin of every pair's angle at `pos`, computed as llama.cpp does (its
    /// `ggml_rope_cache_init`): the angle starts at `pos` and is multiplied by
    /// `theta_scale` in f32 from one pair to the next, then `cosf`/`sinf` of
    /// `freq_scale · angle`. Exact angles in f64 would be closer to the true rotation, but
    /// differ from llama.cpp's in the last bits, and this model amplifies last bits.
    fn row(&self, pos: usize, out: &mut [f32]) {
        let mut theta = pos as f32;
        for i in 0..self.rope_dim / 2 {
            let t = self.freq_scale * theta;
            out[2 * i] = t.cos();
            out[2 * i + 1] = t.sin();
            theta *= self.theta_scale;
        }
    }

    /// Rotates `x` (`n_heads * head_dim` values of one token) for position `pos`.
    ///
    /// # Panics
    /// If `x.len() != n_heads * head_dim`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, pos: u32) {
        assert_eq!(
            x.len(),
            n_heads * self.head_dim,
            "rope: x.len() must be n_heads * head_dim = {n_heads} * {}",
            self.head_dim
        );
        let w = self.rope_dim; // cos/sin floats per position row
        if w == 0 {
            return;
        }
        let pos = pos as usize;
        if pos >= MAX_CACHED_POS {
            let mut cs = vec![0f32; w];
            self.row(pos, &mut cs);
            return self.rotate(x, n_heads, &cs);
        }
        {
            let t = self.table.read().unwrap_or_else(|e| e.into_inner());
            if t.len() >= (pos + 1) * w {
                return self.rotate(x, n_heads, &t[pos * w..(pos + 1) * w]);
            }
        }
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        let have = t.len() / w;
        if have <= pos {
            let want = (pos + 1).max(have * 2).clamp(1024, MAX_CACHED_POS);
            t.resize(want * w, 0.0);
            for p in have..want {
                let (a, b) = (p * w, (p + 1) * w);
                let mut row = vec![0f32; w];
                self.row(p, &mut row);
                t[a..b].copy_from_slice(&row);
            }
        }
        self.rotate(x, n_heads, &t[pos * w..(pos + 1) * w]);
    }

    fn rotate(&self, x: &mut [f32], n_heads: usize, cs: &[f32]) {
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
