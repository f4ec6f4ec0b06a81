//! Storage formats of cached K/V rows and their scalar encode/decode.
//!
//! One row is the `head_dim` values of one (token, KV head). Quantized formats cut the row
//! into groups of 32 values along `head_dim` (ggml blocks, bit-compatible with ggml):
//!
//! ```text
//! q8_0 group (34 bytes): [d: f16][q0 .. q31: i8]            value = q * d
//! q4_0 group (18 bytes): [d: f16][16 bytes: lo nibble = value j, hi nibble = value j + 16]
//!                                                              value = (nibble - 8) * d
//! iq4_nl group (18 bytes): q4_0's layout,                      value = d * LEVELS[nibble]
//! q4h / q8h: the row times the Walsh–Hadamard matrix (`hadamard`), then iq4_nl / q8_0
//! ```
//! A rotated row decodes ([`load_row_scalar`]) to its rotated values, which is what the
//! attention kernels read (the query and the output are rotated instead);
//! [`load_row_unrotated`] turns it back.
//! A `head_dim` that is not a multiple of 32 gets a zero-padded last group, so every head
//! size works (the SIMD kernel takes the multiple-of-32 case, the generic path the rest).
//! The scalar encode/decode are folio-gguf's reference block (de)quantizers: the cache holds
//! ggml's own blocks. [`KvFormat`] itself (names and sizes) lives in folio-gguf, where the
//! planner shares it.

use super::hadamard;
pub use folio_gguf::KvFormat;
use folio_gguf::{dequant, quant, quant::f32_to_bf16};
use half::{bf16, f16};

/// Values per quantization group of the quantized formats (ggml's `QK8_0` / `QK4_0`).
pub const GROUP: usize = 32;

/// Encodes `src` into `dst` (`format.row_bytes(src.len())` bytes) with ggml's reference
/// rounding: f16 and bf16 round to nearest even, q8_0/q4_0 as `quantize_row_q*_0_ref`,
/// iq4_nl as `quantize_iq4_nl` (see `iq4`); q4h and q8h rotate the row first.
///
/// # Panics
/// A rotated format with a row length [`hadamard::supported`] refuses.
pub fn store_row_scalar(format: KvFormat, src: &[f32], dst: &mut [u8]) {
    if format.rotated() {
        let mut buf = [0f32; 512];
        let x = &mut buf[..src.len()];
        x.copy_from_slice(src);
        hadamard::fwht(x);
        return store_row_scalar(format.code(), x, dst);
    }
    match format {
        KvFormat::F16 => {
            for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        KvFormat::Bf16 => {
            for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_bf16(v).to_le_bytes());
            }
        }
        KvFormat::Q8_0 | KvFormat::Q4_0 | KvFormat::Iq4Nl => {
            let gb = format.group_bytes().expect("quantized format");
            for (i, out) in dst.chunks_exact_mut(gb).enumerate() {
                let mut x = [0f32; GROUP];
                let part = &src[(i * GROUP).min(src.len())..((i + 1) * GROUP).min(src.len())];
                x[..part.len()].copy_from_slice(part);
                match format {
                    KvFormat::Q8_0 => quant::block_q8_0(&x, out),
                    KvFormat::Q4_0 => quant::block_q4_0(&x, out),
                    _ => super::iq4::block(&x, out),
                }
            }
        }
        KvFormat::Q4h | KvFormat::Q8h => unreachable!("rotated formats encode their code"),
        KvFormat::Q4c => panic!(
            "store_row: q4c encodes a page of 16 rows at a time (channel::encode_group), \
             not one row"
        ),
    }
}

/// [`load_row_scalar`], then the rotation undone: the row as written, up to the format's
/// rounding (for tests and inspection; attention reads rows in the rotated domain).
pub fn load_row_unrotated(format: KvFormat, src: &[u8], dst: &mut [f32]) {
    load_row_scalar(format, src, dst);
    if format.rotated() {
        hadamard::fwht(dst);
    }
}

/// Decodes one row of `dst.len()` values (the inverse of [`store_row_scalar`] up to the
/// format's rounding; a rotated format's values stay rotated).
pub fn load_row_scalar(format: KvFormat, src: &[u8], dst: &mut [f32]) {
    match format {
        KvFormat::F16 => {
            let n = dst.len().min(src.len() / 2);
            if cfg!(target_endian = "little") && (src.as_ptr() as usize).is_multiple_of(2) {
                // SAFETY: `n` aligned, little-endian f16 values lie inside `src`.
                let h = unsafe { std::slice::from_raw_parts(src.as_ptr() as *const f16, n) };
                // One call per row: `half` converts with F16C when the CPU has it.
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(h, &mut dst[..n]);
            } else {
                for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
                }
            }
        }
        KvFormat::Bf16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        KvFormat::Q8_0 | KvFormat::Q4_0 | KvFormat::Iq4Nl | KvFormat::Q4h | KvFormat::Q8h => {
            let code = format.code();
            let gb = code.group_bytes().expect("quantized format");
            for (i, out) in dst.chunks_mut(GROUP).enumerate() {
                let g = &src[i * gb..(i + 1) * gb];
                let mut y = [0f32; GROUP];
                match code {
                    KvFormat::Q8_0 => dequant::block_q8_0(g, &mut y),
                    KvFormat::Q4_0 => dequant::block_q4_0(g, &mut y),
                    _ => dequant::block_iq4_nl(g, &mut y),
                }
                out.copy_from_slice(&y[..out.len()]);
            }
        }
        KvFormat::Q4c => panic!(
            "load_row: a q4c row decodes with its page's channel scales (channel::decode_row)"
        ),
    }
}
