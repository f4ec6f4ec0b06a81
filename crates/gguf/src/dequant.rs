//! Scalar reference dequantization, following ggml's `dequantize_row_*` exactly
//! (same block layouts, same order of float operations, so results are bit-identical).
//!
//! Block layouts (little-endian, `f16` = IEEE half):
//! ```text
//! Q4_0  18 B / 32 values : f16 d | u8 qs[16]          w[j] = d*((qs[j]&15)-8), w[j+16] = d*((qs[j]>>4)-8)
//! Q4_1  20 B / 32 values : f16 d | f16 m | u8 qs[16]  w[j] = d*(qs[j]&15)+m,   w[j+16] = d*(qs[j]>>4)+m
//! Q8_0  34 B / 32 values : f16 d | i8 qs[32]          w[j] = d*qs[j]
//! Q4_K 144 B / 256 values: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
//!                          8 sub-blocks of 32, 6-bit scale sc and min m each (get_scale_min_k4)
//!                          w = d*sc*q - dmin*m; qs holds 64-value chunks: low nibbles first 32, high next 32
//! Q6_K 210 B / 256 values: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//!                          q = (4 low bits from ql | 2 high bits from qh) - 32; w = d*scales[i/16]*q
//! BF16   2 B / value     : upper 16 bits of an f32
//! ```

use half::f16;

use crate::{GgmlType, GgufError, Result};

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Dequantizes `out.len()` values of type `ty` from `data`, which must hold exactly the
/// whole blocks for them.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let n = out.len() as u64;
    let expected = ty.bytes_for(n)?;
    if data.len() as u64 != expected {
        return Err(GgufError::DataLength {
            ty,
            n_values: n,
            expected,
            got: data.len() as u64,
        });
    }
    let (bs, ts) = (
        ty.block_size()
            .expect("bytes_for succeeded so the layout is known"),
        ty.type_size()
            .expect("bytes_for succeeded so the layout is known"),
    );
    let blocks = data.chunks_exact(ts).zip(out.chunks_exact_mut(bs));
    match ty {
        GgmlType::F32 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        GgmlType::BF16 => blocks.for_each(|(b, y)| {
            y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
        }),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| block_q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| block_q4_1(b, y)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| block_q8_0(b, y)),
        GgmlType::Q4_K => blocks.for_each(|(b, y)| block_q4_k(b, y)),
        GgmlType::Q6_K => blocks.for_each(|(b, y)| block_q6_k(b, y)),
        GgmlType::Other(_) => {
            return Err(GgufError::UnsupportedType {
                ty,
                what: "dequantization",
            })
        }
    }
    Ok(())
}

/// One Q4_0 block (18 bytes) into 32 values.
pub fn block_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as i32 - 8;
        let x1 = (qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// One Q4_1 block (20 bytes) into 32 values.
pub fn block_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as f32;
        let x1 = (qs[j] >> 4) as f32;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/// One Q8_0 block (34 bytes) into 32 values.
pub fn block_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of Q4_K/Q5_K sub-block `j` (0..8).
///
/// ```text
/// j < 4 : sc = q[j] & 63,                          m = q[j+4] & 63
/// j >= 4: sc = (q[j+4] & 15) | ((q[j-4] >> 6) << 4), m = (q[j+4] >> 4) | ((q[j] >> 6) << 4)
/// ```
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One Q4_K block (144 bytes) into 256 values.
pub fn block_q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for chunk in 0..4 {
        let q = &qs[chunk * 32..chunk * 32 + 32];
        let out = &mut y[chunk * 64..chunk * 64 + 64];
        let (sc1, m1) = get_scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = get_scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        for l in 0..32 {
            out[l] = d1 * (q[l] & 0x0F) as f32 - m1;
            out[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// One Q6_K block (210 bytes) into 256 values.
pub fn block_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &b[half * 64..half * 64 + 64];
        let qh = &b[128 + half * 32..128 + half * 32 + 32];
        let sc = &b[192 + half * 8..192 + half * 8 + 8];
        let out = &mut y[half * 128..half * 128 + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
