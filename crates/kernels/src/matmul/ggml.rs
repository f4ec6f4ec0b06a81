//! Decoding ggml's block layouts into one common form: sub-blocks of 32 unsigned codes
//! with a scale `d` and a min `m`, so that `w = d * u + m`.
//!
//! | ggml type | bytes / values | code `u`            | `d`            | `m`               |
//! |-----------|----------------|---------------------|----------------|-------------------|
//! | Q4_0      | 18 / 32        | nibble (0..15)      | d              | -8 d (implicit)   |
//! | Q4_1      | 20 / 32        | nibble              | d              | m                 |
//! | Q4_K      | 144 / 256      | nibble              | d * sc (f32)   | -dmin * mn (f32)  |
//! | Q8_0      | 34 / 32        | q + 128 (0..255)    | d              | -128 d (implicit) |
//! | Q6_K      | 210 / 256      | requantized + 128   | amax / 127     | -128 d (implicit) |
//!
//! Q4_K is lossless in this form (each 32-value sub-block has its own 6-bit scale and min).
//! NOTE: Q6_K is *not* lossless: its scales are per 16 values, and the kernel works on 32,
//! so each 32 values are requantized to symmetric int8 with their own f16 scale. The added
//! error is at most half an int8 step (amax/254), about an eighth of Q6_K's own step and
//! the same size as the error of the 8-bit activations. llama.cpp is exact here.

use half::f16;

/// One decoded sub-block of 32 weights of one row: `w[i] = d * u[i] + m`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SubBlock {
    pub u: [u8; 32],
    pub d: f32,
    pub m: f32,
}

impl SubBlock {
    pub const ZERO: SubBlock = SubBlock {
        u: [0; 32],
        d: 0.0,
        m: 0.0,
    };
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Q4_0: `d: f16, qs: [u8; 16]`; value j is the low nibble of qs[j], value j+16 the high one.
pub(crate) fn decode_q4_0(block: &[u8], out: &mut SubBlock) {
    let d = f16_at(block, 0);
    nibbles(&block[2..18], &mut out.u);
    out.d = d;
    out.m = -8.0 * d;
}

/// Q4_1: `d: f16, m: f16, qs: [u8; 16]`.
pub(crate) fn decode_q4_1(block: &[u8], out: &mut SubBlock) {
    out.d = f16_at(block, 0);
    out.m = f16_at(block, 2);
    nibbles(&block[4..20], &mut out.u);
}

/// Q8_0: `d: f16, qs: [i8; 32]`.
pub(crate) fn decode_q8_0(block: &[u8], out: &mut SubBlock) {
    let d = f16_at(block, 0);
    for (u, &q) in out.u.iter_mut().zip(&block[2..34]) {
        *u = q ^ 0x80; // (q as i8) + 128 as u8
    }
    out.d = d;
    out.m = -128.0 * d;
}

fn nibbles(qs: &[u8], u: &mut [u8; 32]) {
    for j in 0..16 {
        u[j] = qs[j] & 0x0f;
        u[j + 16] = qs[j] >> 4;
    }
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min of sub-block `j` (0..8) of a K-quant.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K: `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]` -> 8 sub-blocks.
pub(crate) fn decode_q4_k(block: &[u8], out: &mut [SubBlock]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for pair in 0..4 {
        let q = &qs[pair * 32..pair * 32 + 32];
        for half in 0..2 {
            let j = pair * 2 + half;
            let (sc, mn) = scale_min_k4(j, scales);
            let sb = &mut out[j];
            for (ul, &ql) in sb.u.iter_mut().zip(q) {
                *ul = if half == 0 { ql & 0x0f } else { ql >> 4 };
            }
            sb.d = d * sc as f32;
            sb.m = -(dmin * mn as f32);
        }
    }
}

/// Q6_K: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16` -> the 256 exact values.
pub(crate) fn dequant_q6_k(block: &[u8], y: &mut [f32; 256]) {
    let ql = &block[0..128];
    let qh = &block[128..192];
    let sc = &block[192..208];
    let d = f16_at(block, 208);
    for half in 0..2 {
        let (ql, qh, sc) = (&ql[half * 64..], &qh[half * 32..], &sc[half * 8..]);
        let y = &mut y[half * 128..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| d * (sc[k] as i8) as f32;
            y[l] = s(is) * q1 as f32;
            y[l + 32] = s(is + 2) * q2 as f32;
            y[l + 64] = s(is + 4) * q3 as f32;
            y[l + 96] = s(is + 6) * q4 as f32;
        }
    }
}

/// Q6_K -> 8 symmetric int8 sub-blocks (see the module note on why this is requantized).
pub(crate) fn decode_q6_k(block: &[u8], out: &mut [SubBlock]) {
    let mut y = [0f32; 256];
    dequant_q6_k(block, &mut y);
    for (j, sb) in out.iter_mut().enumerate().take(8) {
        requantize_sym8(&y[j * 32..j * 32 + 32], sb);
    }
}

/// Symmetric int8 with an f16 scale (so the stored scale is exactly the one used).
fn requantize_sym8(y: &[f32], sb: &mut SubBlock) {
    let amax = y.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = f16::from_f32(amax / 127.0).to_f32();
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (u, &v) in sb.u.iter_mut().zip(y) {
        let q = (v * id).round().clamp(-127.0, 127.0) as i32;
        *u = (q + 128) as u8;
    }
    sb.d = d;
    sb.m = -128.0 * d;
}
