//! The IQ4_NL encoder of the `iq4_nl` and `q4h` KV formats: ggml's `quantize_iq4_nl` for
//! one 32-value block without importance weights (`quantize_row_iq4_nl_impl` with
//! `ntry = 7`, weights `x²`), a search over 15 scales that keeps the one with the least
//! weighted squared error. A row is written once and read at every later step, so the
//! search is worth its ~16 passes over 32 values. Decoding is folio-gguf's
//! `dequant::block_iq4_nl` (`d · level`).

use folio_gguf::dequant::KVALUES_IQ4NL;
use half::f16;

/// ggml's `GROUP_MAX_EPS`: a block whose largest magnitude is below it is stored as zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Scales tried on each side of the largest value's level (ggml's `ntry`).
const NTRY: i32 = 7;

/// ggml's `best_index_int8`: the index of the level nearest `x` (ties to the upper one
/// only when strictly nearer).
fn best_index(x: f32) -> usize {
    let v = &KVALUES_IQ4NL;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (v[hi - 1] as f32) < (v[hi] as f32) - x {
        hi - 1
    } else {
        hi
    }
}

/// Encodes 32 values into one IQ4_NL block (18 bytes: `[d: f16][lo nibble = value j, hi
/// nibble = value j + 16]`).
pub fn block(x: &[f32; 32], out: &mut [u8]) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut l = [0u8; 32];
    let mut d = 0f32;
    if amax >= GROUP_MAX_EPS {
        let w: [f32; 32] = std::array::from_fn(|j| x[j] * x[j]);
        let v0 = KVALUES_IQ4NL[0] as f32;
        let sums = |id: f32, l: &mut [u8; 32]| {
            let (mut sqx, mut sq2) = (0f32, 0f32);
            for j in 0..32 {
                let i = best_index(id * x[j]);
                l[j] = i as u8;
                let q = KVALUES_IQ4NL[i] as f32;
                sqx += w[j] * q * x[j];
                sq2 += w[j] * q * q;
            }
            (sqx, sq2)
        };
        let (sqx, sq2) = sums(1.0 / (-max / v0), &mut l);
        d = if sq2 > 0.0 { sqx / sq2 } else { 0.0 };
        let mut best = d * sqx;
        let mut scratch = [0u8; 32];
        for itry in -NTRY..=NTRY {
            let id = (itry as f32 + v0) / max;
            let (sqx, sq2) = sums(id, &mut scratch);
            if sq2 > 0.0 && sqx * sqx > best * sq2 {
                d = sqx / sq2;
                best = d * sqx;
            }
        }
        // ggml re-indexes with the final scale (ntry > 0).
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for j in 0..32 {
            l[j] = best_index(id * x[j]) as u8;
        }
    }
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        out[2 + j] = l[j] | (l[16 + j] << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_scale_search() {
        assert_eq!(best_index(-200.0), 0);
        assert_eq!(best_index(200.0), 15);
        assert_eq!(best_index(1.0), 8);
        // -10 and 1 are 11 apart: -4.5 is nearer -10 than 1 (5.5 each side: a tie goes up).
        assert_eq!(best_index(-4.6), 7);
        assert_eq!(best_index(-4.5), 8);
        // Values on the levels themselves (times 0.5) come back exactly.
        let x: [f32; 32] = std::array::from_fn(|j| KVALUES_IQ4NL[j % 16] as f32 * 0.5);
        let mut b = [0u8; 18];
        block(&x, &mut b);
        let mut y = [0f32; 32];
        folio_gguf::dequant::block_iq4_nl(&b, &mut y);
        assert_eq!(y, x);
        block(&[0.0; 32], &mut b);
        assert_eq!(b, [0u8; 18]);
    }
}
