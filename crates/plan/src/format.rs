//! KV storage formats and their bytes per value, group metadata included.

use serde::{Deserialize, Serialize};

use crate::error::{PlanError, Result};

/// How one K or V value is stored. Quantized formats store groups of 32 values as codes plus
/// a 2-byte scale, so their size is `bytes per 32 values / 32` per value (DESIGN.md §compression).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvFormat {
    F32,
    F16,
    Bf16,
    /// 32 one-byte codes + 2-byte scale = 34 B per 32 values (8.5 bit).
    Q8_0,
    /// 32 four-bit codes (16 B) + 2-byte scale = 18 B per 32 values (4.5 bit).
    Q4_0,
}

impl KvFormat {
    pub const ALL: [KvFormat; 5] = [
        KvFormat::F32,
        KvFormat::F16,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        KvFormat::Q4_0,
    ];

    /// Bytes one group of 32 values takes, metadata included.
    pub fn bytes_per_32(self) -> u64 {
        match self {
            KvFormat::F32 => 128,
            KvFormat::F16 | KvFormat::Bf16 => 64,
            KvFormat::Q8_0 => 34,
            KvFormat::Q4_0 => 18,
        }
    }

    pub fn bits_per_value(self) -> f64 {
        self.bytes_per_32() as f64 * 8.0 / 32.0
    }

    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F32 => "f32",
            KvFormat::F16 => "f16",
            KvFormat::Bf16 => "bf16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| PlanError::Invalid {
                field: "kv format",
                value: s.to_string(),
                why: "expected one of f32, f16, bf16, q8_0, q4_0",
            })
    }

    /// Bytes of `values` values in this format (groups of 32, the last one rounded up).
    pub fn bytes_for(self, values: u64) -> u64 {
        values.div_ceil(32) * self.bytes_per_32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sizes() {
        assert_eq!(KvFormat::Q8_0.bits_per_value(), 8.5);
        assert_eq!(KvFormat::Q4_0.bits_per_value(), 4.5);
        assert_eq!(KvFormat::Bf16.bytes_for(64), 128);
        assert_eq!(KvFormat::parse("Q8_0").unwrap(), KvFormat::Q8_0);
        assert!(KvFormat::parse("q3").is_err());
    }
}
