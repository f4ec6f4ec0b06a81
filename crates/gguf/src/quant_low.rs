//! Reference quantizers of the low-bit types MXFP4, TQ1_0 and TQ2_0 (ggml's
//! `quantize_row_*_ref`, same operations), and simple ones for IQ1_S and IQ1_M (nearest
//! grid point per 8 values; ggml's need an importance matrix), so test models can be
//! written in every type folio reads.

use half::f16;

use crate::dequant::{e8m0_to_f32_half, iq1s_grid_value, IQ1_DELTA, KVALUES_MXFP4};

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, v| a.max(v.abs()))
}

/// `quantize_row_mxfp4_ref`: e = floor(log2(amax)) - 2 + 127 (so amax lands on the top
/// level 6 or just below 12), each value to its nearest level (the first on ties).
pub(crate) fn block_mxfp4(x: &[f32], out: &mut Vec<u8>) {
    let a = x
        .iter()
        .fold(0.0f32, |a, v| if a < v.abs() { v.abs() } else { a });
    let e = if a > 0.0 {
        (a.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    };
    let d = e8m0_to_f32_half(e);
    let best = |v: f32| {
        let mut best = (0u8, (KVALUES_MXFP4[0] as f32 * d - v).abs());
        for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
            let err = (k as f32 * d - v).abs();
            if err < best.1 {
                best = (i as u8, err);
            }
        }
        best.0
    };
    out.push(e);
    for j in 0..16 {
        out.push(best(x[j]) | (best(x[16 + j]) << 4));
    }
}

/// Ternary digit (0, 1, 2 for -1, 0, +1) of `v * id`, rounded half away from zero as
/// `lroundf`.
fn trit(v: f32, id: f32) -> u8 {
    ((v * id).round() as i32 + 1) as u8
}

/// `quantize_row_tq2_0_ref`: d = amax, 2-bit digits.
pub(crate) fn block_tq2_0(x: &[f32], out: &mut Vec<u8>) {
    let d = amax(x);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for n in 0..2 {
        for m in 0..32 {
            let mut q = 0u8;
            for l in 0..4 {
                q |= (trit(x[128 * n + 32 * l + m], id) & 3) << (2 * l);
            }
            out.push(q);
        }
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}

/// `quantize_row_tq1_0_ref`: d = amax, 5 (4 in qh) base-3 digits per byte, most
/// significant first, stored as the fraction `ceil(q * 256 / 243)`.
pub(crate) fn block_tq1_0(x: &[f32], out: &mut Vec<u8>) {
    let d = amax(x);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let pack = |digits: &mut dyn Iterator<Item = u8>, shift_one: bool| {
        let mut q = 0u8;
        for t in digits {
            q = q * 3 + t;
        }
        if shift_one {
            q *= 3;
        }
        (q as u16 * 256).div_ceil(243) as u8
    };
    for m in 0..32 {
        out.push(pack(&mut (0..5).map(|n| trit(x[m + 32 * n], id)), false));
    }
    for m in 0..16 {
        out.push(pack(
            &mut (0..5).map(|n| trit(x[160 + m + 16 * n], id)),
            false,
        ));
    }
    for j in 0..4 {
        out.push(pack(
            &mut (0..4).map(|m| trit(x[240 + j + 4 * m], id)),
            true,
        ));
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}

/// The grid index whose 8 values (each plus `delta`) times `dl` are nearest to `x`, and
/// the squared error.
fn nearest_grid(x: &[f32], dl: f32, delta: f32) -> (usize, f32) {
    let mut best = (0, f32::MAX);
    for idx in 0..2048 {
        let mut err = 0.0;
        for (j, &v) in x.iter().enumerate() {
            let e = dl * (iq1s_grid_value(idx, j) as f32 + delta) - v;
            err += e * e;
        }
        if err < best.1 {
            best = (idx, err);
        }
    }
    best
}

/// The 3-bit scale s with `d * (2s + 1) * 1.125` nearest `amax` (rounded up), and `dl`.
fn iq1_scale(d: f32, amax: f32) -> (u32, f32) {
    let s = if d > 0.0 {
        ((amax / (1.125 * d) - 1.0) / 2.0).ceil().clamp(0.0, 7.0) as u32
    } else {
        0
    };
    (s, d * (2 * s + 1) as f32)
}

/// Simple IQ1_S: d = amax / (15 * 1.125), per 32 values the 3-bit scale that fits their
/// largest magnitude and the delta sign with the smaller error, per 8 values the nearest
/// grid point.
pub(crate) fn block_iq1_s(x: &[f32], out: &mut Vec<u8>) {
    let d = f16::from_f32(amax(x) / (15.0 * 1.125)).to_f32();
    let mut qs = [0u8; 32];
    let mut qh = [0u16; 8];
    for ib in 0..8 {
        let sub = &x[32 * ib..32 * ib + 32];
        let (s, dl) = iq1_scale(d, amax(sub));
        let fit = |delta: f32| {
            let g: Vec<(usize, f32)> = sub
                .chunks_exact(8)
                .map(|v| nearest_grid(v, dl, delta))
                .collect();
            (g.iter().map(|p| p.1).sum::<f32>(), g)
        };
        let (ep, gp) = fit(IQ1_DELTA);
        let (en, gn) = fit(-IQ1_DELTA);
        let (neg, g) = if en < ep { (true, gn) } else { (false, gp) };
        let mut h = (s << 12) as u16 | if neg { 0x8000 } else { 0 };
        for (l, &(idx, _)) in g.iter().enumerate() {
            qs[4 * ib + l] = idx as u8;
            h |= ((idx >> 8) as u16) << (3 * l);
        }
        qh[ib] = h;
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&qs);
    qh.iter()
        .for_each(|h| out.extend_from_slice(&h.to_le_bytes()));
}

/// Simple IQ1_M: as IQ1_S with scales per 16 values and a delta sign per 8; the f16 d
/// goes into the top nibbles of the four scale words.
pub(crate) fn block_iq1_m(x: &[f32], out: &mut Vec<u8>) {
    let dh = f16::from_f32(amax(x) / (15.0 * 1.125));
    let d = dh.to_f32();
    let mut qs = [0u8; 32];
    let mut qh = [0u8; 16];
    let mut sc = [0u16; 4];
    for ib in 0..8 {
        for h in 0..2 {
            let half = &x[32 * ib + 16 * h..32 * ib + 16 * h + 16];
            let (s, dl) = iq1_scale(d, amax(half));
            sc[ib / 2] |= (s as u16) << (6 * (ib % 2) + 3 * h);
            for g in 0..2 {
                let v = &half[8 * g..8 * g + 8];
                let (ip, ep) = nearest_grid(v, dl, IQ1_DELTA);
                let (in_, en) = nearest_grid(v, dl, -IQ1_DELTA);
                let (idx, neg) = if en < ep { (in_, true) } else { (ip, false) };
                let l = 2 * h + g;
                qs[4 * ib + l] = idx as u8;
                let nib = ((idx >> 8) as u8) | if neg { 8 } else { 0 };
                qh[2 * ib + l / 2] |= nib << (4 * (l % 2));
            }
        }
    }
    let bits = dh.to_bits();
    for (i, w) in sc.iter_mut().enumerate() {
        *w |= ((bits >> (4 * i)) & 0xf) << 12;
    }
    out.extend_from_slice(&qs);
    out.extend_from_slice(&qh);
    sc.iter()
        .for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
}
