//! How cached K/V values are stored: the one `KvFormat` the kernels, the model, the planner
//! and the CLI share.
//!
//! It lives here, in the lowest crate, because each format is a ggml type and its sizes
//! are ggml's block geometry ([`GgmlType::block_size`] / [`GgmlType::type_size`]): the
//! planner's arithmetic and the cache's byte layout then cannot drift apart.

use std::{fmt, str::FromStr};

use crate::GgmlType;

/// How cached K/V values are stored. Quantized formats cut a row into groups of 32 values,
/// each a ggml block: q8_0 = 32 one-byte codes + an f16 scale (34 bytes), q4_0 = 32
/// four-bit codes + an f16 scale (18 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum KvFormat {
    /// IEEE half precision, the default (what llama.cpp stores).
    F16,
    /// bfloat16: f32's exponent range with 8 bits of mantissa.
    Bf16,
    /// 8-bit integers per 32-value group with an f16 scale.
    Q8_0,
    /// 4-bit integers per 32-value group with an f16 scale.
    Q4_0,
}

/// A name that is none of [`KvFormat::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown KV format {0:?}: expected one of f16, bf16, q8_0, q4_0")]
pub struct UnknownKvFormat(pub String);

impl KvFormat {
    /// Every format, in the order `folio` lists them.
    pub const ALL: [KvFormat; 4] = [
        KvFormat::F16,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        KvFormat::Q4_0,
    ];

    /// The ggml type whose blocks this format stores.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            KvFormat::F16 => GgmlType::F16,
            KvFormat::Bf16 => GgmlType::BF16,
            KvFormat::Q8_0 => GgmlType::Q8_0,
            KvFormat::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// `(values per block, bytes per block)` of [`KvFormat::ggml_type`].
    fn geometry(self) -> (usize, usize) {
        let t = self.ggml_type();
        match (t.block_size(), t.type_size()) {
            (Some(n), Some(b)) => (n, b),
            _ => unreachable!("every KV format is a ggml type with a known layout"),
        }
    }

    /// Parses the names [`KvFormat::name`] prints (case-insensitive, surrounding spaces
    /// ignored).
    pub fn parse(s: &str) -> Option<KvFormat> {
        let s = s.trim();
        KvFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// The llama.cpp spelling: `f16`, `bf16`, `q8_0`, `q4_0`.
    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
            KvFormat::Bf16 => "bf16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
        }
    }

    /// Bytes of one quantization group (one ggml block), `None` for the per-value formats.
    pub fn group_bytes(self) -> Option<usize> {
        match self.geometry() {
            (1, _) => None,
            (_, bytes) => Some(bytes),
        }
    }

    /// Bytes per stored value, averaged over a group: 2, 2, 34/32, 18/32.
    pub fn bytes_per_value(self) -> f64 {
        let (n, bytes) = self.geometry();
        bytes as f64 / n as f64
    }

    /// Bits per stored value, group scale included: 16, 16, 8.5, 4.5.
    pub fn bits_per_value(self) -> f64 {
        self.bytes_per_value() * 8.0
    }

    /// Bytes one group of 32 values takes, metadata included.
    pub fn bytes_per_32(self) -> u64 {
        (self.bytes_per_value() * 32.0) as u64
    }

    /// Bytes of one row of `dim` values (a partial last group is zero-padded to a whole
    /// block, so every head size is storable).
    pub fn row_bytes(self, dim: usize) -> usize {
        let (n, bytes) = self.geometry();
        dim.div_ceil(n) * bytes
    }

    /// [`KvFormat::row_bytes`] in `u64`, for the planner's totals.
    pub fn bytes_for(self, values: u64) -> u64 {
        let (n, bytes) = self.geometry();
        values.div_ceil(n as u64) * bytes as u64
    }
}

impl FromStr for KvFormat {
    type Err = UnknownKvFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvFormat::parse(s).ok_or_else(|| UnknownKvFormat(s.to_string()))
    }
}

impl fmt::Display for KvFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_ggml_block_sizes() {
        assert_eq!(KvFormat::Q8_0.bits_per_value(), 8.5);
        assert_eq!(KvFormat::Q4_0.bits_per_value(), 4.5);
        assert_eq!(KvFormat::Q8_0.group_bytes(), Some(34));
        assert_eq!(KvFormat::Q4_0.group_bytes(), Some(18));
        assert_eq!(KvFormat::F16.group_bytes(), None);
        assert_eq!(KvFormat::Bf16.bytes_for(64), 128);
        assert_eq!(KvFormat::Q4_0.row_bytes(40), 36);
        assert_eq!(KvFormat::Q8_0.bytes_per_32(), 34);
        assert_eq!("Q8_0".parse::<KvFormat>(), Ok(KvFormat::Q8_0));
        assert!("q3".parse::<KvFormat>().is_err());
    }
}
