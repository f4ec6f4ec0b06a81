//! Attention for any ISA and any head size: each row is decoded to f32 (one row at a time,
//! never the whole context) and fed to the `ops` kernels of the chosen ISA. With
//! [`Isa::Scalar`] this is the reference the AVX-512 kernel is tested against.

use super::{load_row_scalar, PagedKv};
use crate::cpu::Isa;
use crate::ops;
use half::f16;

#[allow(clippy::too_many_arguments)]
pub fn attend(
    isa: Isa,
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
    scale: f32,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (hd, bs, rb) = (kv.head_dim, kv.block_size, kv.row_bytes());
    scratch.resize(n_q * n_ctx + hd, 0.0);
    let (scores, row) = scratch.split_at_mut(n_q * n_ctx);
    let at = |j: usize| kv.row_offset(table[j / bs] as usize, j % bs);
    for j in 0..n_ctx {
        let off = at(j);
        load_row_scalar(kv.format, &kv.k[off..off + rb], row);
        for g in 0..n_q {
            scores[g * n_ctx + j] = ops::dot_with(isa, &q[g * hd..(g + 1) * hd], row) * scale;
        }
    }
    for p in scores.chunks_exact_mut(n_ctx) {
        ops::softmax_inplace_with(isa, p);
        for v in p.iter_mut() {
            *v = f16::from_f32(*v).to_f32();
        }
    }
    for j in 0..n_ctx {
        let off = at(j);
        load_row_scalar(kv.format, &kv.v[off..off + rb], row);
        for g in 0..n_q {
            ops::axpy_with(
                isa,
                scores[g * n_ctx + j],
                row,
                &mut out[g * hd..(g + 1) * hd],
            );
        }
    }
}
