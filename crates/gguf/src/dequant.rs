//! Scalar reference dequantization, following ggml's `dequantize_row_*` exactly
//! (same block layouts, same order of float operations, so results are bit-identical).
//!
//! Block layouts (little-endian, `f16` = IEEE half):
//! ```text
//! Q4_0  18 B / 32 values : f16 d | u8 qs[16]          w[j] = d*((qs[j]&15)-8), w[j+16] = d*((qs[j]>>4)-8)
//! Q4_1  20 B / 32 values : f16 d | f16 m | u8 qs[16]  w[j] = d*(qs[j]&15)+m,   w[j+16] = d*(qs[j]>>4)+m
//! Q5_0  22 B / 32 values : f16 d | u32 qh | u8 qs[16] 5-bit q = nibble | bit i of qh << 4; w[i] = d*(q-16)
//!                          (element j: low nibble of qs[j]; element j+16: high nibble of qs[j])
//! Q5_1  24 B / 32 values : f16 d | f16 m | u32 qh | u8 qs[16]   as Q5_0, w[i] = d*q + m
//! Q8_0  34 B / 32 values : f16 d | i8 qs[32]          w[j] = d*qs[j]
//! IQ4_NL 18 B / 32 values: f16 d | u8 qs[16]          w[j] = d*KVALUES_IQ4NL[qs[j]&15], w[j+16] = d*KVALUES_IQ4NL[qs[j]>>4]
//! Q2_K  84 B / 256 values: u8 scales[16] | u8 qs[64] | f16 d | f16 dmin
//!                          16 sub-blocks of 16: scale = scales[s]&15, min = scales[s]>>4
//!                          element 128n + 32j + l (l < 32): q = (qs[32n+l] >> 2j) & 3; w = d*scale*q - dmin*min
//! Q3_K 110 B / 256 values: u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d
//!                          element 128n + 32j + l: low 2 bits (qs[32n+l] >> 2j) & 3, high bit hmask[l] bit 4n+j;
//!                          q = low2 - (high bit set ? 0 : 4); 16 six-bit scales sc (kmask1/kmask2 packing);
//!                          w = d*(sc-32)*q
//! Q4_K 144 B / 256 values: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
//!                          8 sub-blocks of 32, 6-bit scale sc and min m each (get_scale_min_k4)
//!                          w = d*sc*q - dmin*m; qs holds 64-value chunks: low nibbles first 32, high next 32
//! Q5_K 176 B / 256 values: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//!                          as Q4_K with a fifth bit: element 32s + l takes qh[l] bit s as bit 4
//! Q6_K 210 B / 256 values: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//!                          q = (4 low bits from ql | 2 high bits from qh) - 32; w = d*scales[i/16]*q
//! IQ4_XS 136 B/256 values: f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
//!                          8 sub-blocks of 32: ls = (scales_l[ib/2] >> 4*(ib%2)) & 15 | ((scales_h >> 2ib) & 3) << 4,
//!                          dl = d*(ls-32); qs[16ib+j]: low nibble element 32ib+j, high nibble 32ib+16+j;
//!                          w = dl*KVALUES_IQ4NL[nibble]
//! BF16   2 B / value     : upper 16 bits of an f32
//! MXFP4  17 B / 32 values: u8 e | u8 qs[16]          d = 2^(e-128) (e8m0, halved), w[j] = KVALUES_MXFP4[qs[j]&15]*d,
//!                          w[j+16] = KVALUES_MXFP4[qs[j]>>4]*d
//! TQ2_0  66 B/256 values : u8 qs[64] | f16 d          element 128n + 32l + m: q = (qs[32n+m] >> 2l) & 3; w = (q-1)*d
//! TQ1_0  54 B/256 values : u8 qs[48] | u8 qh[4] | f16 d   base-3 digits, 5 per qs byte and 4 per qh byte, stored as
//!                          fixed-point fractions: digit n of byte b is ((u8)(b*3^n) * 3) >> 8; w = (digit-1)*d
//!                          (qs[0..32]: elements 32n + m; qs[32..48]: 160 + 16n + m; qh: 240 + 4n + j)
//! IQ1_S  50 B/256 values : f16 d | u8 qs[32] | u16 qh[8]
//!                          32-block ib: dl = d*(2*((qh[ib]>>12)&7)+1), delta = qh[ib] bit 15 ? -1/8 : 1/8;
//!                          8-group l: g = IQ1S_GRID[qs[4ib+l] | ((qh[ib]>>3l)&7)<<8]; w = dl*(g[j]+delta)
//! IQ1_M  56 B/256 values : u8 qs[32] | u8 qh[16] | u8 scales[8]   (u16 sc[4] = scales)
//!                          d = f16 from the top nibbles of sc[0..4]; 16-half h of 32-block ib:
//!                          dl = d*(2*((sc[ib/2] >> 6(ib%2)+3h)&7)+1); 8-group l: nibble l%2 of qh[2ib+l/2] holds
//!                          3 index bits (idx = qs[4ib+l] | (nibble&7)<<8) and the delta sign (bit 3); w = dl*(g[j]+delta)
//! IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: see `iquant`
//! ```

use half::f16;

use crate::{GgmlType, GgufError, Result};

pub use crate::iq1s_grid::IQ1S_GRID;

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
    // Normalized so a hand-made `Other(6)` dequantizes as Q5_0.
    match GgmlType::from_u32(ty.to_u32()) {
        GgmlType::F32 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        GgmlType::BF16 => blocks.for_each(|(b, y)| {
            y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
        }),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| block_q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| block_q4_1(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| block_q5_0(b, y)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| block_q5_1(b, y)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| block_q8_0(b, y)),
        GgmlType::Q2_K => blocks.for_each(|(b, y)| block_q2_k(b, y)),
        GgmlType::Q3_K => blocks.for_each(|(b, y)| block_q3_k(b, y)),
        GgmlType::Q4_K => blocks.for_each(|(b, y)| block_q4_k(b, y)),
        GgmlType::Q5_K => blocks.for_each(|(b, y)| block_q5_k(b, y)),
        GgmlType::Q6_K => blocks.for_each(|(b, y)| block_q6_k(b, y)),
        GgmlType::IQ4_NL => blocks.for_each(|(b, y)| block_iq4_nl(b, y)),
        GgmlType::IQ4_XS => blocks.for_each(|(b, y)| block_iq4_xs(b, y)),
        GgmlType::MXFP4 => blocks.for_each(|(b, y)| block_mxfp4(b, y)),
        GgmlType::TQ1_0 => blocks.for_each(|(b, y)| block_tq1_0(b, y)),
        GgmlType::TQ2_0 => blocks.for_each(|(b, y)| block_tq2_0(b, y)),
        GgmlType::IQ1_S => blocks.for_each(|(b, y)| block_iq1_s(b, y)),
        GgmlType::IQ1_M => blocks.for_each(|(b, y)| block_iq1_m(b, y)),
        t @ (GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ2_S) => blocks.for_each(|(b, y)| crate::iquant::dequantize_block(t, b, y)),
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

/// One Q5_0 block (22 bytes) into 32 values.
pub fn block_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = ((qs[j] & 0x0F) | xh_0) as i32 - 16;
        let x1 = ((qs[j] >> 4) | xh_1) as i32 - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// One Q5_1 block (24 bytes) into 32 values.
pub fn block_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = ((qs[j] & 0x0F) | xh_0) as f32;
        let x1 = ((qs[j] >> 4) | xh_1) as f32;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/// ggml's `kvalues_iq4nl`: the 16 non-linear levels of IQ4_NL and IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block (18 bytes) into 32 values.
pub fn block_iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as f32;
        y[j + 16] = d * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
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

/// One Q2_K block (84 bytes) into 256 values.
pub fn block_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let d = f16_at(b, 80);
    let min = f16_at(b, 82);
    let mut is = 0;
    let mut out = y.iter_mut();
    for n in 0..2 {
        let q = &b[16 + 32 * n..16 + 32 * n + 32];
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0x0F) as f32;
                let ml = min * (sc >> 4) as f32;
                for &ql in &q[16 * half..16 * half + 16] {
                    *out.next().expect("256 outputs") = dl * ((ql >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// The 16 six-bit Q3_K scales (0..=63, before the -32), unpacked from `scales[12]`
/// exactly as ggml does with kmask1 = 0x03030303 and kmask2 = 0x0f0f0f0f.
///
/// Scale s: low 4 bits in byte s%8 (low nibble for s < 8, high for s >= 8), high 2 bits
/// in byte 8 + s%4 at bits 2*(s/4).
pub fn q3_k_scales(scales: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let word = |i: usize| u32::from_le_bytes(scales[4 * i..4 * i + 4].try_into().unwrap());
    let (a0, a1, tmp) = (word(0), word(1), word(2));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0u8; 16];
    for (i, w) in aux.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// One Q3_K block (110 bytes) into 256 values.
pub fn block_q3_k(b: &[u8], y: &mut [f32]) {
    let hm = &b[0..32];
    let scales = q3_k_scales(&b[96..108]);
    let d_all = f16_at(b, 108);
    let mut is = 0;
    let mut m = 1u8;
    let mut out = y.iter_mut();
    for n in 0..2 {
        let q = &b[32 + 32 * n..32 + 32 * n + 32];
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let dl = d_all * (scales[is] as i32 - 32) as f32;
                is += 1;
                for l in 16 * half..16 * half + 16 {
                    let v = ((q[l] >> shift) & 3) as i32 - if hm[l] & m != 0 { 0 } else { 4 };
                    *out.next().expect("256 outputs") = dl * v as f32;
                }
            }
            m <<= 1;
        }
    }
}

/// One Q5_K block (176 bytes) into 256 values.
pub fn block_q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for chunk in 0..4 {
        let ql = &qs[chunk * 32..chunk * 32 + 32];
        let out = &mut y[chunk * 64..chunk * 64 + 64];
        let (sc1, m1) = get_scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = get_scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            out[l] = d1 * ((ql[l] & 0x0F) + h1) as f32 - m1;
            out[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// The 6-bit scale (0..=63, before the -32) of IQ4_XS sub-block `ib` (0..8).
pub fn iq4_xs_scale(ib: usize, scales_h: u16, scales_l: &[u8]) -> u8 {
    ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | ((((scales_h >> (2 * ib)) & 3) as u8) << 4)
}

/// One IQ4_XS block (136 bytes) into 256 values.
pub fn block_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let scales_l = &b[4..8];
    for ib in 0..8 {
        let ls = iq4_xs_scale(ib, scales_h, scales_l) as i32;
        let dl = d * (ls - 32) as f32;
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        let out = &mut y[32 * ib..32 * ib + 32];
        for j in 0..16 {
            out[j] = dl * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as f32;
            out[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
        }
    }
}

/// ggml's `kvalues_mxfp4` (`kvalues_fp4`): the 16 e2m1 values, doubled so they are integers.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's `ggml_e8m0_to_fp32_half`: `2^(e - 128)`, half the e8m0 scale (the e2m1 values
/// are stored doubled). e < 2 gives the subnormals 2^-128 and 2^-127.
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// One MXFP4 block (17 bytes) into 32 values.
pub fn block_mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_to_f32_half(b[0]);
    let qs = &b[1..17];
    for j in 0..16 {
        y[j] = KVALUES_MXFP4[(qs[j] & 0x0F) as usize] as f32 * d;
        y[j + 16] = KVALUES_MXFP4[(qs[j] >> 4) as usize] as f32 * d;
    }
}

/// One TQ2_0 block (66 bytes) into 256 values.
pub fn block_tq2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 64);
    for n in 0..2 {
        for l in 0..4 {
            for m in 0..32 {
                let q = ((b[32 * n + m] >> (2 * l)) & 3) as i32;
                y[128 * n + 32 * l + m] = (q - 1) as f32 * d;
            }
        }
    }
}

/// The 256 base-3 digits (0, 1, 2 for -1, 0, +1) of a TQ1_0 block (54 bytes), in value
/// order, decoded as ggml's `dequantize_row_tq1_0` does.
pub fn tq1_0_digits(b: &[u8], q: &mut [u8; 256]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let digit = |byte: u8, n: usize| ((byte.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as u8;
    let (qs, qh) = (&b[0..48], &b[48..52]);
    for n in 0..5 {
        for m in 0..32 {
            q[32 * n + m] = digit(qs[m], n);
        }
        for m in 0..16 {
            q[160 + 16 * n + m] = digit(qs[32 + m], n);
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            q[240 + 4 * n + j] = digit(qh[j], n);
        }
    }
}

/// One TQ1_0 block (54 bytes) into 256 values.
pub fn block_tq1_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 52);
    let mut q = [0u8; 256];
    tq1_0_digits(b, &mut q);
    for (y, &q) in y.iter_mut().zip(&q) {
        *y = (q as i32 - 1) as f32 * d;
    }
}

/// Value `j` (0..8) of IQ1S_GRID entry `idx`: -1, 0 or 1.
pub fn iq1s_grid_value(idx: usize, j: usize) -> i8 {
    (IQ1S_GRID[idx] >> (8 * j)) as u8 as i8
}

/// ggml's `IQ1S_DELTA` (also IQ1_M's): the shift of every grid value, its sign per group.
pub const IQ1_DELTA: f32 = 0.125;

/// Where the values of an IQ1_S 32-block `ib` come from: the 3-bit scale, whether the
/// delta is negative, and the grid index of each 8-group.
pub fn iq1_s_sub(b: &[u8], ib: usize) -> (u32, bool, [usize; 4]) {
    let qh = u16::from_le_bytes([b[34 + 2 * ib], b[35 + 2 * ib]]) as usize;
    let qs = &b[2 + 4 * ib..6 + 4 * ib];
    let idx = std::array::from_fn(|l| qs[l] as usize | (((qh >> (3 * l)) & 7) << 8));
    (((qh >> 12) & 7) as u32, qh & 0x8000 != 0, idx)
}

/// One IQ1_S block (50 bytes) into 256 values.
pub fn block_iq1_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let (s, neg, idx) = iq1_s_sub(b, ib);
        let dl = d * (2 * s + 1) as f32;
        let delta = if neg { -IQ1_DELTA } else { IQ1_DELTA };
        for (l, &i) in idx.iter().enumerate() {
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = dl * (iq1s_grid_value(i, j) as f32 + delta);
            }
        }
    }
}

/// IQ1_M's super-scale: the f16 whose four nibbles are the top nibbles of the four u16
/// scale words (bytes 48..56), as f16 bits.
pub fn iq1_m_d_bits(b: &[u8]) -> u16 {
    let sc = |i: usize| u16::from_le_bytes([b[48 + 2 * i], b[49 + 2 * i]]);
    (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000)
}

/// Where the values of an IQ1_M 32-block `ib` come from: the 3-bit scales of its two
/// 16-halves, and each 8-group's grid index and negative-delta flag.
pub fn iq1_m_sub(b: &[u8], ib: usize) -> ([u32; 2], [(usize, bool); 4]) {
    let sc = u16::from_le_bytes([b[48 + 2 * (ib / 2)], b[49 + 2 * (ib / 2)]]) as u32;
    let s = 6 * (ib as u32 % 2);
    let scales = [(sc >> s) & 7, (sc >> (s + 3)) & 7];
    let (qs, qh) = (&b[4 * ib..4 * ib + 4], &b[32 + 2 * ib..34 + 2 * ib]);
    let groups = std::array::from_fn(|l| {
        let nib = (qh[l / 2] >> (4 * (l % 2))) as usize;
        (qs[l] as usize | ((nib & 7) << 8), nib & 8 != 0)
    });
    (scales, groups)
}

/// One IQ1_M block (56 bytes) into 256 values.
pub fn block_iq1_m(b: &[u8], y: &mut [f32]) {
    let d = f16::from_bits(iq1_m_d_bits(b)).to_f32();
    for ib in 0..8 {
        let (scales, groups) = iq1_m_sub(b, ib);
        for (l, &(i, neg)) in groups.iter().enumerate() {
            let dl = d * (2 * scales[l / 2] + 1) as f32;
            let delta = if neg { -IQ1_DELTA } else { IQ1_DELTA };
            for j in 0..8 {
                y[32 * ib + 8 * l + j] = dl * (iq1s_grid_value(i, j) as f32 + delta);
            }
        }
    }
}
