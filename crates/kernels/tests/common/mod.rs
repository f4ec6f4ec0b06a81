//! The paged layer buffer the attention tests share (`attn.rs`, `attn_formats.rs`): K and
//! V rows in their formats behind a shuffled block table, the kernel run over it, and
//! plain f64 attention over its decoded rows.
#![allow(dead_code)]

use folio_kernels::attn::{self, KvFormat, PagedKv, Paging, SumOrder};
use folio_kernels::Isa;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

pub fn rand_vec(n: usize, r: &mut StdRng, lim: f32) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-lim..lim)).collect()
}

/// Keys like Qwen2's: small values plus a few outlier channels (same channels every row).
pub fn outlier_row(hd: usize, r: &mut StdRng) -> Vec<f32> {
    let mut k = rand_vec(hd, r, 1.0);
    for c in [3, hd / 2 + 1] {
        k[c] = 40.0 + r.gen_range(-2.0..2.0);
    }
    k
}

/// One layer buffer of `heads` heads × `bs` slots per block, K in `kf` and V in `vf`, every
/// row random, and a shuffled block table.
pub struct Cache {
    pub k: Vec<u8>,
    pub v: Vec<u8>,
    pub kf: KvFormat,
    pub vf: KvFormat,
    pub hd: usize,
    pub bs: usize,
    pub heads: usize,
    pub table: Vec<u32>,
}

impl Cache {
    /// K and V both in `format`, keys without outliers.
    pub fn one(
        format: KvFormat,
        hd: usize,
        bs: usize,
        heads: usize,
        n_ctx: usize,
        seed: u64,
    ) -> Cache {
        Cache::new(format, format, hd, bs, heads, n_ctx, seed, false)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kf: KvFormat,
        vf: KvFormat,
        hd: usize,
        bs: usize,
        heads: usize,
        n_ctx: usize,
        seed: u64,
        outliers: bool,
    ) -> Cache {
        let mut r = StdRng::seed_from_u64(seed);
        let n_blocks = n_ctx.div_ceil(bs) + 2;
        let (kr, vr) = (kf.row_bytes(hd), vf.row_bytes(hd));
        let rows = n_blocks * heads * bs;
        let (mut k, mut v) = (vec![0u8; rows * kr], vec![0u8; rows * vr]);
        for i in 0..rows {
            let krow = if outliers {
                outlier_row(hd, &mut r)
            } else {
                rand_vec(hd, &mut r, 2.0)
            };
            let vrow = rand_vec(hd, &mut r, 1.0);
            attn::store_row_scalar(kf, &krow, &mut k[i * kr..(i + 1) * kr]);
            attn::store_row_scalar(vf, &vrow, &mut v[i * vr..(i + 1) * vr]);
        }
        let mut table: Vec<u32> = (0..n_blocks as u32).collect();
        table.shuffle(&mut r);
        Cache {
            k,
            v,
            kf,
            vf,
            hd,
            bs,
            heads,
            table,
        }
    }

    pub fn view(&self, head: usize) -> PagedKv<'_> {
        PagedKv::new(
            &self.k,
            &self.v,
            (self.kf, self.vf),
            self.hd,
            Paging {
                block_size: self.bs,
                block_rows: self.heads * self.bs,
                head_row: head * self.bs,
            },
        )
    }

    /// (K, V) of position `j` as written, up to rounding (rotation undone).
    pub fn row(&self, head: usize, j: usize) -> (Vec<f32>, Vec<f32>) {
        let kv = self.view(head);
        let (b, s) = (self.table[j / self.bs] as usize, j % self.bs);
        let (ko, vo) = (kv.k_offset(b, s), kv.v_offset(b, s));
        let (mut k, mut v) = (vec![0.0; self.hd], vec![0.0; self.hd]);
        attn::load_row_unrotated(self.kf, &self.k[ko..ko + kv.k_row_bytes()], &mut k);
        attn::load_row_unrotated(self.vf, &self.v[vo..vo + kv.v_row_bytes()], &mut v);
        (k, v)
    }

    /// Attention of head 1 over every position (the formats' tests).
    pub fn attend(
        &self,
        isa: Isa,
        order: SumOrder,
        n_ctx: usize,
        q: &[f32],
        n_q: usize,
    ) -> Vec<f32> {
        run_window(isa, order, self, 1, 0, n_ctx, q, n_q, None)
    }

    /// Plain f64 attention of head 1 over the decoded, unrotated rows.
    pub fn plain(&self, n_ctx: usize, q: &[f32], n_q: usize) -> Vec<f32> {
        plain_window(self, 1, 0, n_ctx, q, n_q, None)
    }
}

/// Attention of the queries over positions `first..n_ctx` only (a sliding window).
#[allow(clippy::too_many_arguments)]
pub fn run_window(
    isa: Isa,
    order: SumOrder,
    c: &Cache,
    head: usize,
    first: usize,
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
    softcap: Option<f32>,
) -> Vec<f32> {
    let scale = 1.0 / (c.hd as f32).sqrt();
    let mut out = vec![f32::NAN; n_q * c.hd];
    let mut scratch = Vec::new();
    attn::attend_with(
        isa,
        &c.view(head),
        &c.table,
        n_ctx,
        &attn::Queries {
            q,
            n: n_q,
            scale,
            order,
            first,
            softcap,
            sinks: None,
        },
        &mut scratch,
        &mut out,
    );
    out
}

/// Plain attention in f64 over the decoded rows (no f16 rounding of the weights).
fn plain(c: &Cache, head: usize, n_ctx: usize, q: &[f32], n_q: usize) -> Vec<f32> {
    plain_window(c, head, 0, n_ctx, q, n_q, None)
}

/// Plain f64 attention over the decoded rows of positions `first..n_ctx`.
pub fn plain_window(
    c: &Cache,
    head: usize,
    first: usize,
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
    softcap: Option<f32>,
) -> Vec<f32> {
    let hd = c.hd;
    let rows: Vec<_> = (first..n_ctx).map(|j| c.row(head, j)).collect();
    let mut out = vec![0f32; n_q * hd];
    for g in 0..n_q {
        let qg = &q[g * hd..(g + 1) * hd];
        let s: Vec<f64> = rows
            .iter()
            .map(|(k, _)| {
                qg.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    / (hd as f64).sqrt()
            })
            .map(|x| match softcap {
                Some(cap) => (x / cap as f64).tanh() * cap as f64,
                None => x,
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for d in 0..hd {
            out[g * hd + d] = rows
                .iter()
                .zip(&e)
                .map(|((_, v), w)| w / z * v[d] as f64)
                .sum::<f64>() as f32;
        }
    }
    out
}
