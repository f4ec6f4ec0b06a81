//! Decoding ggml's block layouts into one common form: sub-blocks of 32 unsigned codes
//! with a scale `d` and a min `m`, so that `w = d * u + m`.
//!
//! | ggml type | bytes / values | code `u`            | `d`            | `m`               |
//! |-----------|----------------|---------------------|----------------|-------------------|
//! | Q4_0      | 18 / 32        | nibble (0..15)      | d              | -8 d (implicit)   |
//! | Q4_1      | 20 / 32        | nibble              | d              | m                 |
//! | Q8_0      | 34 / 32        | q + 128 (0..255)    | d              | -128 d (implicit) |
//!
//! Lossless: the packed layout keeps the f16 scales and every code bit. The other types
//! (Q5_0 … IQ4_XS) use the superblock layout (`sb_format`).

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
