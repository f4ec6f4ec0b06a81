//! Reference quantizers, used by tests (here and in other crates) to build tiny models.
//!
//! F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 reproduce ggml's `quantize_row_*_ref`
//! bit for bit; MXFP4, TQ1_0 and TQ2_0 follow theirs too, and IQ1_S / IQ1_M use a simple
//! nearest-grid-point quantizer (`quant_low`).
//!
//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS use a simple quantizer instead: per
//! sub-block min/max (or absolute max), with the integer sub-block scales rounded up so
//! no value clips (beyond IQ4's asymmetric top level), and each value rounded to the
//! nearest level. The blocks are valid for any reader, but this is *not* ggml's
//! error-minimizing search (`make_qkx*_quants`, `make_q3_quants`, the IQ4 scale search),
//! so the bytes differ from llama.cpp's quantizer and the error is somewhat larger.
//!
//! IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S: `iquant::quantize_block` (nearest grid entry
//! per group, no importance weighting; much coarser than llama.cpp's).
//! Round-trip error is about half a quantization step (bounds in each function's doc).

use half::f16;

use crate::dequant::KVALUES_IQ4NL;
use crate::{GgmlType, GgufError, Result};

/// Quantizes `values` to `ty`'s block format. `values.len()` must be a whole number of
/// blocks.
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>> {
    let n_bytes = ty.bytes_for(values.len() as u64)? as usize;
    let mut out = Vec::with_capacity(n_bytes);
    let bs = ty
        .block_size()
        .expect("bytes_for succeeded so the layout is known");
    let blocks = values.chunks_exact(bs);
    // Normalized so a hand-made `Other(6)` quantizes as Q5_0.
    match GgmlType::from_u32(ty.to_u32()) {
        GgmlType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&f32_to_bf16(*v).to_le_bytes())),
        GgmlType::Q4_0 => blocks.for_each(|x| push_block(&mut out, 18, |o| block_q4_0(x, o))),
        GgmlType::Q4_1 => blocks.for_each(|x| block_q4_1(x, &mut out)),
        GgmlType::Q5_0 => blocks.for_each(|x| block_q5_0(x, &mut out)),
        GgmlType::Q5_1 => blocks.for_each(|x| block_q5_1(x, &mut out)),
        GgmlType::Q8_0 => blocks.for_each(|x| push_block(&mut out, 34, |o| block_q8_0(x, o))),
        GgmlType::Q2_K => blocks.for_each(|x| block_q2_k(x, &mut out)),
        GgmlType::Q3_K => blocks.for_each(|x| block_q3_k(x, &mut out)),
        GgmlType::Q4_K => blocks.for_each(|x| block_q4_k(x, &mut out)),
        GgmlType::Q5_K => blocks.for_each(|x| block_q5_k(x, &mut out)),
        GgmlType::Q6_K => blocks.for_each(|x| block_q6_k(x, &mut out)),
        GgmlType::IQ4_NL => blocks.for_each(|x| block_iq4_nl(x, &mut out)),
        GgmlType::IQ4_XS => blocks.for_each(|x| block_iq4_xs(x, &mut out)),
        GgmlType::MXFP4 => blocks.for_each(|x| crate::quant_low::block_mxfp4(x, &mut out)),
        GgmlType::TQ1_0 => blocks.for_each(|x| crate::quant_low::block_tq1_0(x, &mut out)),
        GgmlType::TQ2_0 => blocks.for_each(|x| crate::quant_low::block_tq2_0(x, &mut out)),
        GgmlType::IQ1_S => blocks.for_each(|x| crate::quant_low::block_iq1_s(x, &mut out)),
        GgmlType::IQ1_M => blocks.for_each(|x| crate::quant_low::block_iq1_m(x, &mut out)),
        t @ (GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ2_S) => blocks.for_each(|x| {
            let bytes = t.type_size().expect("known layout");
            push_block(&mut out, bytes, |o| crate::iquant::quantize_block(t, x, o))
        }),
        GgmlType::Other(_) => {
            return Err(GgufError::UnsupportedType {
                ty,
                what: "quantization",
            })
        }
    }
    debug_assert_eq!(out.len(), n_bytes);
    Ok(out)
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaN kept quiet.
pub fn f32_to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

fn push_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Appends one block of `bytes` bytes written by `f`.
fn push_block(out: &mut Vec<u8>, bytes: usize, f: impl FnOnce(&mut [u8])) {
    let at = out.len();
    out.resize(at + bytes, 0);
    f(&mut out[at..]);
}

/// The value of largest magnitude, sign kept (the first of equal magnitudes), as ggml's
/// symmetric quantizers pick it: the scale's sign makes that value land on the end code.
fn signed_amax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// (min, max) of a block, as ggml's affine quantizers start from.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// Inverse of a scale, 0 for a zero scale (an all-zero block).
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// `quantize_row_q4_0_ref`: d = (value of largest magnitude) / -8, q = min(15, (int8)(x/d + 8.5)).
/// One block: 32 values in, 18 bytes out (`[d: f16][lo nibble = value j, hi = value j + 16]`).
/// Public because folio's q4_0 KV cache stores ggml's own blocks.
pub fn block_q4_0(x: &[f32], out: &mut [u8]) {
    let d = signed_amax(x) / -8.0;
    let id = inv(d);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        let xi0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let xi1 = ((x[16 + j] * id + 8.5) as i8).min(15) as u8;
        out[2 + j] = xi0 | (xi1 << 4);
    }
}

/// `quantize_row_q4_1_ref`: d = (max - min) / 15, m = min, q = min(15, (int8)((x-min)/d + 0.5)).
fn block_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inv(d);
    push_f16(out, d);
    push_f16(out, min);
    for j in 0..16 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[16 + j] - min) * id;
        let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
        out.push(xi0 | (xi1 << 4));
    }
}

/// `quantize_row_q5_0_ref`: d = (value of largest magnitude) / -16,
/// q = min(31, (int8)(x/d + 16.5)); bit 4 of element i goes to bit i of qh.
fn block_q5_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_amax(x) / -16.0;
    let id = inv(d);
    push_f16(out, d);
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        let xi0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
        let xi1 = ((x[16 + j] * id + 16.5) as i8).min(31) as u8;
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

/// `quantize_row_q5_1_ref`: d = (max - min) / 31, m = min, q = (uint8)((x-min)/d + 0.5).
fn block_q5_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inv(d);
    push_f16(out, d);
    push_f16(out, min);
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        // WHY the min(31): ggml's (uint8_t) cast never sees more than 31.5; gguf-py clips.
        let xi0 = (((x[j] - min) * id + 0.5) as u8).min(31);
        let xi1 = (((x[16 + j] - min) * id + 0.5) as u8).min(31);
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + 16);
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

/// `quantize_row_q8_0_ref`: d = amax / 127, q = round(x / d) (half away from zero). One
/// block: 32 values in, 34 bytes out (`[d: f16][q: 32 × i8]`). Public because folio's q8_0
/// KV cache stores ggml's own blocks.
pub fn block_q8_0(x: &[f32], out: &mut [u8]) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inv(d);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (o, &v) in out[2..34].iter_mut().zip(x) {
        *o = (v * id).round() as i8 as u8;
    }
}

/// The smallest f16 not below `v` (v >= 0). WHY: super-scales rounded up guarantee the
/// integer sub-block scales derived from them fit their bit width, so nothing clips.
fn f16_up(v: f32) -> f32 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1).to_f32()
    } else {
        h.to_f32()
    }
}

/// Scales, mins and codes of a "w = d*sc*q - dmin*m" super-block (Q2_K, Q4_K, Q5_K):
/// `N` sub-blocks, codes 0..=`qmax`, integer scales and mins 0..=`smax`.
struct AffineK<const N: usize> {
    d: f32,
    dmin: f32,
    sc: [u8; N],
    m: [u8; N],
    q: [u8; 256],
}

/// Per sub-block, a min m (nearest multiple of dmin to max(0, -min x)) then a scale rounded
/// up so the sub-block's max does not clip. Error per value is at most half a step plus
/// half of dmin.
fn affine_k<const N: usize>(x: &[f32], qmax: u8, smax: u8) -> AffineK<N> {
    let len = 256 / N;
    let (qmax_f, smax_f) = (qmax as f32, smax as f32);
    let mut need_min = [0.0f32; N];
    let mut need_max = [0.0f32; N];
    for (j, sub) in x.chunks_exact(len).enumerate() {
        need_min[j] = -sub.iter().fold(0.0f32, |a, &v| a.min(v));
        need_max[j] = sub.iter().fold(f32::MIN, |a, &v| a.max(v));
    }
    let dm = f16_up(need_min.iter().fold(0.0f32, |a, &v| a.max(v)) / smax_f);
    let mut lm = [0u8; N];
    let mut step = [0.0f32; N];
    for j in 0..N {
        lm[j] = if dm > 0.0 {
            (need_min[j] / dm).round().clamp(0.0, smax_f) as u8
        } else {
            0
        };
        step[j] = ((need_max[j] + dm * lm[j] as f32) / qmax_f).max(0.0);
    }
    let dd = f16_up(step.iter().fold(0.0f32, |a, &v| a.max(v)) / smax_f);
    let mut ls = [0u8; N];
    let mut q = [0u8; 256];
    for j in 0..N {
        ls[j] = if dd > 0.0 {
            (step[j] / dd).ceil().clamp(0.0, smax_f) as u8
        } else {
            0
        };
        let (d_eff, m_eff) = (dd * ls[j] as f32, dm * lm[j] as f32);
        let id = inv(d_eff);
        for l in 0..len {
            let v = ((x[len * j + l] + m_eff) * id).round();
            q[len * j + l] = v.clamp(0.0, qmax_f) as u8;
        }
    }
    AffineK {
        d: dd,
        dmin: dm,
        sc: ls,
        m: lm,
        q,
    }
}

/// Packs 8 six-bit (scale, min) pairs as Q4_K/Q5_K's `scales[12]` (inverse of
/// [`crate::dequant::get_scale_min_k4`]).
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut scales = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4);
            scales[j - 4] |= (ls[j] >> 4) << 6;
            scales[j] |= (lm[j] >> 4) << 6;
        }
    }
    scales
}

/// Simple Q4_K: 8 sub-blocks of 32, 6-bit scales and mins, 4-bit codes ([`affine_k`]).
/// Error per value is at most half a step plus half of dmin.
fn block_q4_k(x: &[f32], out: &mut Vec<u8>) {
    let k = affine_k::<8>(x, 15, 63);
    push_f16(out, k.d);
    push_f16(out, k.dmin);
    out.extend_from_slice(&pack_scale_min_k4(&k.sc, &k.m));
    for chunk in 0..4 {
        for l in 0..32 {
            out.push(k.q[64 * chunk + l] | (k.q[64 * chunk + 32 + l] << 4));
        }
    }
}

/// Simple Q5_K: as Q4_K with 5-bit codes; bit 4 of element 32s + l goes to bit s of qh[l].
/// Error per value is at most half a step plus half of dmin.
fn block_q5_k(x: &[f32], out: &mut Vec<u8>) {
    let k = affine_k::<8>(x, 31, 63);
    push_f16(out, k.d);
    push_f16(out, k.dmin);
    out.extend_from_slice(&pack_scale_min_k4(&k.sc, &k.m));
    let mut qh = [0u8; 32];
    for (i, &q) in k.q.iter().enumerate() {
        qh[i % 32] |= (q >> 4) << (i / 32);
    }
    out.extend_from_slice(&qh);
    for chunk in 0..4 {
        for l in 0..32 {
            out.push((k.q[64 * chunk + l] & 0x0F) | ((k.q[64 * chunk + 32 + l] & 0x0F) << 4));
        }
    }
}

/// Simple Q2_K: 16 sub-blocks of 16, 4-bit scales and mins, 2-bit codes ([`affine_k`]).
/// Error per value is at most half a step plus half of dmin.
fn block_q2_k(x: &[f32], out: &mut Vec<u8>) {
    let k = affine_k::<16>(x, 3, 15);
    out.extend((0..16).map(|j| k.sc[j] | (k.m[j] << 4)));
    // element 128n + 32j + l: bits 2j..2j+1 of qs[32n + l]
    let mut qs = [0u8; 64];
    for (i, &q) in k.q.iter().enumerate() {
        qs[32 * (i / 128) + i % 32] |= q << (2 * ((i % 128) / 32));
    }
    out.extend_from_slice(&qs);
    push_f16(out, k.d);
    push_f16(out, k.dmin);
}

/// Simple Q3_K: 16 sub-blocks of 16, codes -4..=3 with step amax/3.5 (so x/step lies in
/// -3.5..=3.5 and nothing clips by more than half a step), the step a 6-bit multiple
/// (0..=31, stored +32) of an f16 super-scale rounded up. Error per value is at most half
/// a step.
fn block_q3_k(x: &[f32], out: &mut Vec<u8>) {
    let mut want = [0.0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        want[j] = sub.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 3.5;
    }
    let dd = f16_up(want.iter().fold(0.0f32, |a, &v| a.max(v)) / 31.0);
    let mut sc = [0u8; 16];
    let mut codes = [0u8; 256]; // q + 4, 0..=7
    for j in 0..16 {
        let ls = if dd > 0.0 {
            (want[j] / dd).ceil().clamp(0.0, 31.0)
        } else {
            0.0
        };
        sc[j] = ls as u8 + 32;
        let id = inv(dd * ls);
        for l in 0..16 {
            let v = (x[16 * j + l] * id).round().clamp(-4.0, 3.0) as i32;
            codes[16 * j + l] = (v + 4) as u8;
        }
    }
    let mut hmask = [0u8; 32];
    let mut qs = [0u8; 64];
    for (i, &c) in codes.iter().enumerate() {
        let (n, j, l) = (i / 128, (i % 128) / 32, i % 32);
        qs[32 * n + l] |= (c & 3) << (2 * j);
        hmask[l] |= (c >> 2) << (4 * n + j);
    }
    // scale s: low 4 bits in byte s%8 (nibble s/8), high 2 bits in byte 8 + s%4 at bits 2*(s/4)
    let mut scales = [0u8; 12];
    for (s, &v) in sc.iter().enumerate() {
        scales[s % 8] |= (v & 0x0F) << (4 * (s / 8));
        scales[8 + s % 4] |= (v >> 4) << (2 * (s / 4));
    }
    out.extend_from_slice(&hmask);
    out.extend_from_slice(&qs);
    out.extend_from_slice(&scales);
    push_f16(out, dd);
}

/// Index of the IQ4 level nearest `v` (in level units).
fn nearest_iq4(v: f32) -> u8 {
    let mut best = 0;
    for (i, &k) in KVALUES_IQ4NL.iter().enumerate() {
        if (v - k as f32).abs() < (v - KVALUES_IQ4NL[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// The IQ4 scale that maps the value of largest magnitude to the level -127. WHY the
/// sign: the levels reach -127 but only +113, so the larger side takes the negative end.
fn iq4_scale(x: &[f32]) -> f32 {
    let max = signed_amax(x);
    if max == 0.0 {
        0.0 // not -0.0: an all-zero block dequantizes to +0
    } else {
        max / -127.0
    }
}

/// Simple IQ4_NL: d = (value of largest magnitude) / -127, each value to its nearest level.
/// Error per value is at most 14*|d| (the widest half gap is 12, the clip above +113 is 14).
fn block_iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    let d = f16::from_f32(iq4_scale(x)).to_f32();
    let id = inv(d);
    push_f16(out, d);
    for j in 0..16 {
        out.push(nearest_iq4(x[j] * id) | (nearest_iq4(x[16 + j] * id) << 4));
    }
}

/// Simple IQ4_XS: 8 sub-blocks of 32, each with IQ4_NL's scale (largest magnitude to -127)
/// written as a 6-bit signed multiple (-31..=31, stored +32) of an f16 super-scale d,
/// rounded away from zero so nothing clips beyond IQ4_NL's own +113 clip. Error per value
/// is at most 14 * (|sub-block scale| + d).
fn block_iq4_xs(x: &[f32], out: &mut Vec<u8>) {
    let mut want = [0.0f32; 8];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        want[j] = iq4_scale(sub);
    }
    let d = f16_up(want.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 31.0);
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    let mut qs = [0u8; 128];
    for j in 0..8 {
        let l = if d > 0.0 {
            ((want[j].abs() / d).ceil().min(31.0) * want[j].signum()) as i32
        } else {
            0
        };
        let ls = (l + 32) as u8;
        scales_l[j / 2] |= (ls & 0x0F) << (4 * (j % 2));
        scales_h |= ((ls >> 4) as u16) << (2 * j);
        let id = inv(d * l as f32);
        for k in 0..16 {
            qs[16 * j + k] =
                nearest_iq4(x[32 * j + k] * id) | (nearest_iq4(x[32 * j + 16 + k] * id) << 4);
        }
    }
    push_f16(out, d);
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend_from_slice(&scales_l);
    out.extend_from_slice(&qs);
}

/// Simple Q6_K: per sub-block of 16, scale = amax / 31 expressed as an i8 multiple of an
/// f16 super-scale (rounded up so nothing clips); q in -32..=31 stored as q + 32.
fn block_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut amax = [0.0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        amax[j] = sub.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    }
    let dd = f16_up(amax.iter().fold(0.0f32, |a, &v| a.max(v / 31.0)) / 127.0);
    let mut sc = [0i8; 16];
    let mut l_vals = [0u8; 256];
    for j in 0..16 {
        sc[j] = if dd > 0.0 {
            (amax[j] / 31.0 / dd).ceil().clamp(0.0, 127.0) as i8
        } else {
            0
        };
        let id = inv(dd * sc[j] as f32);
        for l in 0..16 {
            let v = (x[16 * j + l] * id).round().clamp(-32.0, 31.0) as i32;
            l_vals[16 * j + l] = (v + 32) as u8;
        }
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for half in 0..2 {
        let lv = &l_vals[128 * half..128 * half + 128];
        for l in 0..32 {
            ql[64 * half + l] = (lv[l] & 0x0F) | ((lv[l + 64] & 0x0F) << 4);
            ql[64 * half + l + 32] = (lv[l + 32] & 0x0F) | ((lv[l + 96] & 0x0F) << 4);
            qh[32 * half + l] = (lv[l] >> 4)
                | ((lv[l + 32] >> 4) << 2)
                | ((lv[l + 64] >> 4) << 4)
                | ((lv[l + 96] >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&f16::from_f32(dd).to_le_bytes());
}
