//! ggml's grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S: their blocks parsed
//! into one common form ([`IqBlock`]), the exact dequantization of ggml's
//! `dequantize_row_iq*`, and a simple reference quantizer to build test models.
//!
//! Every one of these types stores, per 256 values, an f16 `d`, a 4-bit scale `ls` per 32
//! (or 16) values, and per group of 8 (IQ2) or 4 (IQ3) values an index into a grid of
//! unsigned magnitudes (`grids`), plus one sign bit per value. A value is
//! `db(ls) * (±grid byte)` with
//! ```text
//! IQ2_XXS, IQ2_XS, IQ2_S: db = d * (0.5 + ls) * 0.25     (ls per 32; per 16 for _XS, _S)
//! IQ3_XXS:                db = d * (0.5 + ls) * 0.5      (ls per 32)
//! IQ3_S:                  db = d * (1 + 2 ls)            (ls per 32)
//! ```
//! Block layouts (little-endian):
//! ```text
//! IQ2_XXS  66 B: f16 d | per 32: u32 aux0 (4 grid indices, 8 bits) | u32 aux1 (4 x 7-bit sign index, ls << 28)
//! IQ2_XS   74 B: f16 d | u16 qs[32] (9-bit grid index | 7-bit sign index << 9) | u8 scales[8] (ls per 16)
//! IQ2_S    82 B: f16 d | u8 qs[32] (grid index low 8) | u8 signs[32] | u8 qh[8] (2 high bits per 8) | u8 scales[8]
//! IQ3_XXS  98 B: f16 d | u8 qs[64] (grid index per 4) | per 32: u32 (4 x 7-bit sign index, ls << 28)
//! IQ3_S   110 B: f16 d | u8 qs[64] (low 8 bits per 4) | u8 qh[8] (ninth bits per 32) | u8 signs[32] | u8 scales[4]
//! ```
//! A 7-bit sign index names 8 sign bits through `KSIGNS_IQ2XS` (an even number of them set).

use half::f16;

use crate::grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS,
};
use crate::GgmlType;

/// The grid i-quant types.
pub const TYPES: [GgmlType; 5] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
];

/// One block in the form every type shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IqBlock {
    /// f16 bits of the block scale.
    pub d: u16,
    /// The 4-bit scale of each 16 values (types with one per 32 repeat it).
    pub ls: [u8; 16],
    /// Grid index of each group (32 groups of 8 for IQ2, 64 groups of 4 for IQ3).
    pub idx: [u16; 64],
    /// Sign bits of each 8 values (bit j: value j negative).
    pub signs: [u8; 32],
}

/// Values per grid entry: 8 for IQ2, 4 for IQ3 (`None` for any other type).
pub fn group(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S => Some(8),
        GgmlType::IQ3_XXS | GgmlType::IQ3_S => Some(4),
        _ => None,
    }
}

/// The distinct grid magnitudes of a type, ascending (codes index them).
pub fn magnitudes(ty: GgmlType) -> &'static [u8] {
    match ty {
        GgmlType::IQ3_XXS => &[4, 12, 20, 28, 36, 44, 52, 62],
        GgmlType::IQ3_S => &[1, 3, 5, 7, 9, 11, 13, 15],
        _ => &[8, 25, 43],
    }
}

/// Grid entry `i` of the type: its magnitudes (4 or 8 used).
fn entry(ty: GgmlType, i: usize) -> [u8; 8] {
    match ty {
        GgmlType::IQ2_XXS => IQ2XXS_GRID[i].to_le_bytes(),
        GgmlType::IQ2_XS => IQ2XS_GRID[i].to_le_bytes(),
        GgmlType::IQ2_S => IQ2S_GRID[i].to_le_bytes(),
        GgmlType::IQ3_XXS => (IQ3XXS_GRID[i] as u64).to_le_bytes(),
        _ => (IQ3S_GRID[i] as u64).to_le_bytes(),
    }
}

fn grid_len(ty: GgmlType) -> usize {
    match ty {
        GgmlType::IQ2_XXS | GgmlType::IQ3_XXS => 256,
        GgmlType::IQ2_XS | GgmlType::IQ3_S => 512,
        _ => 1024,
    }
}

/// Signs stored as a 7-bit index (the eighth bit is the parity), not as raw bytes.
fn indexed_signs(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::IQ2_S | GgmlType::IQ3_S)
}

/// One scale per 16 values (else per 32).
fn ls_per16(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XS | GgmlType::IQ2_S)
}

/// ggml's block scale `db` for 4-bit scale `ls` (module doc), with ggml's operations.
pub fn db(ty: GgmlType, d: f32, ls: u8) -> f32 {
    match ty {
        GgmlType::IQ3_XXS => d * (0.5 + ls as f32) * 0.5,
        GgmlType::IQ3_S => d * (1 + 2 * ls as i32) as f32,
        _ => d * (0.5 + ls as f32) * 0.25,
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Parses one block of `ty` (a grid i-quant; `b` its bytes).
pub fn parse(ty: GgmlType, b: &[u8]) -> IqBlock {
    let mut k = IqBlock {
        d: u16::from_le_bytes([b[0], b[1]]),
        ls: [0; 16],
        idx: [0; 64],
        signs: [0; 32],
    };
    let ksign = |i: u32| KSIGNS_IQ2XS[(i & 127) as usize];
    for ib in 0..8 {
        match ty {
            GgmlType::IQ2_XXS => {
                let (a0, a1) = (u32_at(b, 2 + 8 * ib), u32_at(b, 6 + 8 * ib));
                k.ls[2 * ib] = (a1 >> 28) as u8;
                for l in 0..4 {
                    k.idx[4 * ib + l] = ((a0 >> (8 * l)) & 255) as u16;
                    k.signs[4 * ib + l] = ksign(a1 >> (7 * l));
                }
            }
            GgmlType::IQ2_XS => {
                k.ls[2 * ib] = b[66 + ib] & 15;
                k.ls[2 * ib + 1] = b[66 + ib] >> 4;
                for l in 0..4 {
                    let q = u16::from_le_bytes([b[2 + 8 * ib + 2 * l], b[3 + 8 * ib + 2 * l]]);
                    k.idx[4 * ib + l] = q & 511;
                    k.signs[4 * ib + l] = ksign(q as u32 >> 9);
                }
            }
            GgmlType::IQ2_S => {
                k.ls[2 * ib] = b[74 + ib] & 15;
                k.ls[2 * ib + 1] = b[74 + ib] >> 4;
                let qh = b[66 + ib] as u16;
                for l in 0..4 {
                    k.idx[4 * ib + l] = b[2 + 4 * ib + l] as u16 | ((qh << (8 - 2 * l)) & 0x300);
                    k.signs[4 * ib + l] = b[34 + 4 * ib + l];
                }
            }
            GgmlType::IQ3_XXS => {
                let a = u32_at(b, 66 + 4 * ib);
                k.ls[2 * ib] = (a >> 28) as u8;
                for l in 0..4 {
                    k.signs[4 * ib + l] = ksign(a >> (7 * l));
                }
                for g in 0..8 {
                    k.idx[8 * ib + g] = b[2 + 8 * ib + g] as u16;
                }
            }
            _ => {
                k.ls[2 * ib] = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
                let qh = b[66 + ib] as u16;
                for l in 0..4 {
                    let (q1, q2) = (b[2 + 8 * ib + 2 * l] as u16, b[3 + 8 * ib + 2 * l] as u16);
                    k.idx[8 * ib + 2 * l] = q1 | ((qh << (8 - 2 * l)) & 256);
                    k.idx[8 * ib + 2 * l + 1] = q2 | ((qh << (7 - 2 * l)) & 256);
                    k.signs[4 * ib + l] = b[74 + 4 * ib + l];
                }
            }
        }
        if !ls_per16(ty) {
            k.ls[2 * ib + 1] = k.ls[2 * ib];
        }
    }
    k
}

/// Writes `k` as one block of `ty` (`out`: the block's bytes). Signs of the types that
/// store a 7-bit index must have even parity.
pub fn write(ty: GgmlType, k: &IqBlock, out: &mut [u8]) {
    out.fill(0);
    out[..2].copy_from_slice(&k.d.to_le_bytes());
    for ib in 0..8 {
        let s7 = |l: usize| (k.signs[4 * ib + l] & 127) as u32;
        match ty {
            GgmlType::IQ2_XXS => {
                let (mut a0, mut a1) = (0u32, (k.ls[2 * ib] as u32) << 28);
                for l in 0..4 {
                    a0 |= (k.idx[4 * ib + l] as u32) << (8 * l);
                    a1 |= s7(l) << (7 * l);
                }
                out[2 + 8 * ib..6 + 8 * ib].copy_from_slice(&a0.to_le_bytes());
                out[6 + 8 * ib..10 + 8 * ib].copy_from_slice(&a1.to_le_bytes());
            }
            GgmlType::IQ2_XS => {
                out[66 + ib] = k.ls[2 * ib] | (k.ls[2 * ib + 1] << 4);
                for l in 0..4 {
                    let q = k.idx[4 * ib + l] | ((s7(l) as u16) << 9);
                    out[2 + 8 * ib + 2 * l..4 + 8 * ib + 2 * l].copy_from_slice(&q.to_le_bytes());
                }
            }
            GgmlType::IQ2_S => {
                out[74 + ib] = k.ls[2 * ib] | (k.ls[2 * ib + 1] << 4);
                for l in 0..4 {
                    let i = k.idx[4 * ib + l];
                    out[2 + 4 * ib + l] = i as u8;
                    out[66 + ib] |= ((i >> 8) as u8) << (2 * l);
                    out[34 + 4 * ib + l] = k.signs[4 * ib + l];
                }
            }
            GgmlType::IQ3_XXS => {
                let mut a = (k.ls[2 * ib] as u32) << 28;
                for l in 0..4 {
                    a |= s7(l) << (7 * l);
                }
                out[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&a.to_le_bytes());
                for g in 0..8 {
                    out[2 + 8 * ib + g] = k.idx[8 * ib + g] as u8;
                }
            }
            _ => {
                out[106 + ib / 2] |= k.ls[2 * ib] << (4 * (ib % 2));
                for g in 0..8 {
                    let i = k.idx[8 * ib + g];
                    out[2 + 8 * ib + g] = i as u8;
                    out[66 + ib] |= ((i >> 8) as u8) << g;
                }
                for l in 0..4 {
                    out[74 + 4 * ib + l] = k.signs[4 * ib + l];
                }
            }
        }
    }
}

/// The 256 signed grid values of a block (`w = db(ls) * value`).
pub fn values(ty: GgmlType, k: &IqBlock) -> [i8; 256] {
    let g = group(ty).unwrap_or(8);
    let mut v = [0i8; 256];
    for (i, vi) in v.iter_mut().enumerate() {
        let m = entry(ty, k.idx[i / g] as usize)[i % g] as i8;
        *vi = if k.signs[i / 8] & KMASK_IQ2XS[i % 8] != 0 {
            -m
        } else {
            m
        };
    }
    v
}

/// One block (`b`) into 256 values, bit-exact with ggml's `dequantize_row_iq*`:
/// `db * grid * (±1)` equals `db * (±grid)` since negation is exact.
pub fn dequantize_block(ty: GgmlType, b: &[u8], y: &mut [f32]) {
    let k = parse(ty, b);
    let d = f16::from_bits(k.d).to_f32();
    let v = values(ty, &k);
    for (i, (y, v)) in y.iter_mut().zip(v).enumerate() {
        *y = db(ty, d, k.ls[i / 16]) * v as f32;
    }
}

/// A simple reference quantizer (not ggml's search): `d` from the block's largest
/// magnitude, each scale rounded up so its values do not clip, each group's nearest grid
/// entry to the magnitudes, signs from the values; where the sign bits must have even
/// parity, the value whose flip costs least is flipped.
pub fn quantize_block(ty: GgmlType, x: &[f32], out: &mut [u8]) {
    let g = group(ty).unwrap_or(8);
    let top = *magnitudes(ty).last().expect("non-empty") as f32;
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    // The largest db (ls = 15) times the top magnitude reaches amax.
    let d = amax / (db(ty, 1.0, 15) * top);
    let mut d16 = f16::from_f32(d);
    if d16.to_f32() < d {
        d16 = f16::from_bits(d16.to_bits() + 1);
    }
    let df = d16.to_f32();
    let mut k = IqBlock {
        d: d16.to_bits(),
        ls: [0; 16],
        idx: [0; 64],
        signs: [0; 32],
    };
    let per = if ls_per16(ty) { 16 } else { 32 };
    for s in 0..256 / per {
        let xs = &x[s * per..(s + 1) * per];
        let sub_max = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        let ls = (0..16u8)
            .find(|&ls| db(ty, df, ls) * top >= sub_max)
            .unwrap_or(15);
        for i in s * per / 16..(s + 1) * per / 16 {
            k.ls[i] = ls;
        }
        let dl = db(ty, df, ls);
        for gi in s * per / g..(s + 1) * per / g {
            let xg = &x[gi * g..(gi + 1) * g];
            // Squared error of each value at each magnitude, then a sum per grid entry.
            let mut e = [[0f32; 64]; 8];
            for (ej, v) in e.iter_mut().zip(xg) {
                for &m in magnitudes(ty) {
                    ej[m as usize] = (v.abs() - dl * m as f32).powi(2);
                }
            }
            let err = |i: usize| -> f32 {
                let m = entry(ty, i);
                (0..g).map(|j| e[j][m[j] as usize]).sum()
            };
            let best = (0..grid_len(ty))
                .map(|i| (err(i), i))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("non-empty grid");
            k.idx[gi] = best.1 as u16;
        }
    }
    for (j, s) in k.signs.iter_mut().enumerate() {
        let xs = &x[8 * j..8 * j + 8];
        *s = xs
            .iter()
            .enumerate()
            .fold(0, |a, (i, v)| if *v < 0.0 { a | (1 << i) } else { a });
        if indexed_signs(ty) && s.count_ones() % 2 == 1 {
            // Flipping value i costs about 4 |x_i| * magnitude_i.
            let cost = |i: usize| {
                xs[i].abs() * entry(ty, k.idx[(8 * j + i) / g] as usize)[(8 * j + i) % g] as f32
            };
            let i = (0..8)
                .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
                .expect("8 values");
            *s ^= 1 << i;
        }
    }
    write(ty, &k, out);
}
