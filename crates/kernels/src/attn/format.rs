//! Storage formats of cached K/V rows and their scalar encode/decode.
//!
//! One row is the `head_dim` values of one (token, KV head). Quantized formats cut the row
//! into groups of 32 values along `head_dim` (ggml blocks, bit-compatible with ggml):
//!
//! ```text
//! q8_0 group (34 bytes): [d: f16][q0 .. q31: i8]            value = q * d
//! q4_0 group (18 bytes): [d: f16][16 bytes: lo nibble = value j, hi nibble = value j + 16]
//!                                                              value = (nibble - 8) * d
//! ```
//! A `head_dim` that is not a multiple of 32 gets a zero-padded last group, so every head
//! size works (the SIMD kernel takes the multiple-of-32 case, the generic path the rest).
//! The scalar encode/decode are folio-gguf's reference block (de)quantizers: the cache holds
//! ggml's own blocks.

use folio_gguf::{dequant, quant, quant::f32_to_bf16};
use half::{bf16, f16};

/// Values per quantization group of the quantized formats (ggml's `QK8_0` / `QK4_0`).
pub const GROUP: usize = 32;

/// How cached K/V values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvFormat {
    /// IEEE half precision, the default (what llama.cpp stores).
    F16,
    /// bfloat16: f32's exponent range with 8 bits of mantissa.
    Bf16,
    /// 8-bit integers per 32-value group with an f16 scale (34 bytes per 32 values).
    Q8_0,
    /// 4-bit integers per 32-value group with an f16 scale (18 bytes per 32 values).
    Q4_0,
}

impl KvFormat {
    /// Every format, in the order `folio` lists them.
    pub const ALL: [KvFormat; 4] = [
        KvFormat::F16,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        KvFormat::Q4_0,
    ];

    /// Parses the names [`KvFormat::name`] prints (case-insensitive).
    pub fn parse(s: &str) -> Option<KvFormat> {
        let s = s.trim();
        KvFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// The llama.cpp spelling: `f16`, `bf16`, `q8_0`, `q4_0`.
    pub fn name(&self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
            KvFormat::Bf16 => "bf16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
        }
    }

    /// Bytes per stored value, averaged over a quantization group: 2, 2, 34/32, 18/32.
    pub fn bytes_per_value(&self) -> f64 {
        match self {
            KvFormat::F16 | KvFormat::Bf16 => 2.0,
            KvFormat::Q8_0 => 34.0 / 32.0,
            KvFormat::Q4_0 => 18.0 / 32.0,
        }
    }

    /// Bytes of one quantization group, `None` for the per-value formats.
    pub fn group_bytes(&self) -> Option<usize> {
        match self {
            KvFormat::F16 | KvFormat::Bf16 => None,
            KvFormat::Q8_0 => Some(2 + GROUP),
            KvFormat::Q4_0 => Some(2 + GROUP / 2),
        }
    }

    /// Bytes of one row of `dim` values (a partial last group is padded to 32).
    pub fn row_bytes(&self, dim: usize) -> usize {
        match self.group_bytes() {
            None => 2 * dim,
            Some(g) => dim.div_ceil(GROUP) * g,
        }
    }
}

/// Encodes `src` into `dst` (`format.row_bytes(src.len())` bytes) with ggml's reference
/// rounding: f16 and bf16 round to nearest even, q8_0/q4_0 as `quantize_row_q*_0_ref`.
pub fn store_row_scalar(format: KvFormat, src: &[f32], dst: &mut [u8]) {
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
        KvFormat::Q8_0 | KvFormat::Q4_0 => {
            let gb = format.group_bytes().expect("quantized format");
            for (i, out) in dst.chunks_exact_mut(gb).enumerate() {
                let mut x = [0f32; GROUP];
                let part = &src[(i * GROUP).min(src.len())..((i + 1) * GROUP).min(src.len())];
                x[..part.len()].copy_from_slice(part);
                if format == KvFormat::Q8_0 {
                    quant::block_q8_0(&x, out);
                } else {
                    quant::block_q4_0(&x, out);
                }
            }
        }
    }
}

/// Decodes one row of `dst.len()` values (the inverse of [`store_row_scalar`] up to the
/// format's rounding).
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
        KvFormat::Q8_0 | KvFormat::Q4_0 => {
            let gb = format.group_bytes().expect("quantized format");
            for (i, out) in dst.chunks_mut(GROUP).enumerate() {
                let g = &src[i * gb..(i + 1) * gb];
                let mut y = [0f32; GROUP];
                if format == KvFormat::Q8_0 {
                    dequant::block_q8_0(g, &mut y);
                } else {
                    dequant::block_q4_0(g, &mut y);
                }
                out.copy_from_slice(&y[..out.len()]);
            }
        }
    }
}
