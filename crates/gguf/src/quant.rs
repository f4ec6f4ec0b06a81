//! Reference quantizers, used by tests (here and in other crates) to build tiny models.
//!
//! F32, F16, BF16, Q4_0, Q4_1 and Q8_0 reproduce ggml's `quantize_row_*_ref` bit for bit.
//! Q4_K and Q6_K use a simple quantizer (per-sub-block min/max, scales rounded up so no
//! value clips at the top) that is valid for any reader but not ggml's error-minimizing search; their
//! round-trip error is about half a quantization step.

use half::f16;

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
    match ty {
        GgmlType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&f32_to_bf16(*v).to_le_bytes())),
        GgmlType::Q4_0 => blocks.for_each(|x| block_q4_0(x, &mut out)),
        GgmlType::Q4_1 => blocks.for_each(|x| block_q4_1(x, &mut out)),
        GgmlType::Q8_0 => blocks.for_each(|x| block_q8_0(x, &mut out)),
        GgmlType::Q4_K => blocks.for_each(|x| block_q4_k(x, &mut out)),
        GgmlType::Q6_K => blocks.for_each(|x| block_q6_k(x, &mut out)),
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

/// Inverse of a scale, 0 for a zero scale (an all-zero block).
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// `quantize_row_q4_0_ref`: d = (value of largest magnitude) / -8, q = min(15, (int8)(x/d + 8.5)).
fn block_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = inv(d);
    push_f16(out, d);
    for j in 0..16 {
        let x0 = x[j] * id;
        let x1 = x[16 + j] * id;
        let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
        out.push(xi0 | (xi1 << 4));
    }
}

/// `quantize_row_q4_1_ref`: d = (max - min) / 15, m = min, q = min(15, (int8)((x-min)/d + 0.5)).
fn block_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
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

/// `quantize_row_q8_0_ref`: d = amax / 127, q = round(x / d).
fn block_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inv(d);
    push_f16(out, d);
    for &v in x {
        out.push((v * id).round() as i8 as u8);
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

/// Simple Q4_K: per sub-block of 32, a 6-bit min m (nearest multiple of dmin to
/// max(0, -min x)) then a 6-bit scale rounded up so the sub-block's max does not clip.
/// Error per value is at most half a step plus half of dmin.
fn block_q4_k(x: &[f32], out: &mut Vec<u8>) {
    let mut need_min = [0.0f32; 8];
    let mut need_max = [0.0f32; 8];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        need_min[j] = -sub.iter().fold(0.0f32, |a, &v| a.min(v));
        need_max[j] = sub.iter().fold(f32::MIN, |a, &v| a.max(v));
    }
    let dm = f16_up(need_min.iter().fold(0.0f32, |a, &v| a.max(v)) / 63.0);
    let mut lm = [0u8; 8];
    let mut step = [0.0f32; 8];
    for j in 0..8 {
        lm[j] = if dm > 0.0 {
            (need_min[j] / dm).round().clamp(0.0, 63.0) as u8
        } else {
            0
        };
        step[j] = ((need_max[j] + dm * lm[j] as f32) / 15.0).max(0.0);
    }
    let dd = f16_up(step.iter().fold(0.0f32, |a, &v| a.max(v)) / 63.0);
    let mut ls = [0u8; 8];
    let mut q = [0u8; 256];
    for j in 0..8 {
        ls[j] = if dd > 0.0 {
            (step[j] / dd).ceil().clamp(0.0, 63.0) as u8
        } else {
            0
        };
        let (d_eff, m_eff) = (dd * ls[j] as f32, dm * lm[j] as f32);
        let id = inv(d_eff);
        for l in 0..32 {
            let v = ((x[32 * j + l] + m_eff) * id).round();
            q[32 * j + l] = v.clamp(0.0, 15.0) as u8;
        }
    }
    out.extend_from_slice(&f16::from_f32(dd).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(dm).to_le_bytes());
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
    out.extend_from_slice(&scales);
    for chunk in 0..4 {
        for l in 0..32 {
            out.push(q[64 * chunk + l] | (q[64 * chunk + 32 + l] << 4));
        }
    }
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
