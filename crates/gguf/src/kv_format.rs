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
/// four-bit codes + an f16 scale (18 bytes), iq4_nl = 32 four-bit indices into ggml's
/// 16 non-uniform levels + an f16 scale (18 bytes).
///
/// The rotated formats (`q4h`, `q8h`) first multiply each head's row by the normalized
/// Walsh–Hadamard matrix `H` (head_dim a power of two): a few outlier channels (Qwen2's
/// keys) are spread over every channel, so one scale per 32 values fits them. `H` is
/// orthonormal and symmetric, so attention folds it in once per query head: `q·k =
/// (Hq)·(Hk)` for keys, `Σ p·v = H Σ p·(Hv)` for values.
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
    /// ggml's IQ4_NL blocks: 4-bit indices into 16 non-uniform levels, f16 scale.
    Iq4Nl,
    /// Rotated (Walsh–Hadamard per head), then IQ4_NL blocks: 4.5 bits per value.
    Q4h,
    /// Rotated (Walsh–Hadamard per head), then q8_0 blocks: 8.5 bits per value.
    Q8h,
    /// Keys only: 4-bit codes quantized per channel over each 16-token group of a page
    /// (KIVI's key quantization at page granularity), an f16 scale and minimum per channel
    /// and group: 6 bits per value. A channel that carries an outlier gets its own range
    /// instead of widening the scale of the 31 values beside it.
    Q4c,
}

/// The K and V formats of one cache (chosen apart: keys carry the outlier channels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct KvFormats {
    pub k: KvFormat,
    pub v: KvFormat,
}

impl KvFormats {
    /// K and V in `f`.
    pub const fn same(f: KvFormat) -> KvFormats {
        KvFormats { k: f, v: f }
    }

    /// `"q8_0"` when K and V agree, else `"k=q4h,v=q4_0"` (what the engine info, the
    /// prefix cache's salt and `/metrics` show).
    pub fn name(self) -> String {
        if self.k == self.v {
            self.k.name().to_string()
        } else {
            format!("k={},v={}", self.k.name(), self.v.name())
        }
    }

    /// Parses [`KvFormats::name`]'s spellings, plus `k:v` (`q4h:q4_0`).
    pub fn parse(s: &str) -> Option<KvFormats> {
        let s = s.trim();
        if let Some((k, v)) = s.split_once(':') {
            return Some(KvFormats {
                k: KvFormat::parse(k)?,
                v: KvFormat::parse(v)?,
            });
        }
        if let Some((k, v)) = s.split_once(',') {
            let k = k.trim().strip_prefix("k=")?;
            let v = v.trim().strip_prefix("v=")?;
            return Some(KvFormats {
                k: KvFormat::parse(k)?,
                v: KvFormat::parse(v)?,
            });
        }
        KvFormat::parse(s).map(KvFormats::same)
    }

    /// Bytes per stored value, K and V averaged: `2 · layers · heads · head_dim` times this
    /// is the bytes of one token's K and V.
    pub fn bytes_per_value(self) -> f64 {
        (self.k.bytes_per_value() + self.v.bytes_per_value()) / 2.0
    }

    /// Bytes of one token's K and V rows of `dim` values (one head), each padded to
    /// whole groups as the cache stores them.
    pub fn row_pair_bytes(self, dim: usize) -> usize {
        self.k.row_bytes(dim) + self.v.row_bytes(dim)
    }

    /// Bytes of `values` K values plus as many V values (the planner's totals).
    pub fn bytes_for(self, values: u64) -> u64 {
        self.k.bytes_for(values) + self.v.bytes_for(values)
    }

    /// Whether either side is rotated (needs a power-of-two head_dim).
    pub fn rotated(self) -> bool {
        self.k.rotated() || self.v.rotated()
    }

    /// Refuses a pair a model of `head_dim` cannot store: a rotated format for a head size
    /// the Walsh–Hadamard transform does not cover (a power of two, up to 512), a
    /// per-channel key format for a head size that is not whole groups of 32, or a
    /// per-channel format asked to hold values (values are quantized per token).
    pub fn check_head_dim(self, head_dim: usize) -> Result<(), KvFormatRefused> {
        if self.v.per_channel() {
            return Err(KvFormatRefused::KeyOnly { format: self.v });
        }
        for f in [self.k, self.v] {
            if f.rotated() && !(head_dim.is_power_of_two() && (2..=512).contains(&head_dim)) {
                return Err(KvFormatRefused::HeadDim {
                    format: f,
                    head_dim,
                });
            }
            if f.per_channel() && !(head_dim.is_multiple_of(32) && head_dim <= 512) {
                return Err(KvFormatRefused::ChannelHeadDim {
                    format: f,
                    head_dim,
                });
            }
        }
        Ok(())
    }

    /// Refuses a per-channel key format in pages that are not one channel group long
    /// ([`KvFormat::CHANNEL_GROUP`] tokens), or in a latent (MLA) cache, whose one row is
    /// read as both key and value.
    pub fn check_pages(self, block_size: usize, latent: bool) -> Result<(), KvFormatRefused> {
        if !self.k.per_channel() {
            return Ok(());
        }
        if latent {
            return Err(KvFormatRefused::Latent { format: self.k });
        }
        if block_size != KvFormat::CHANNEL_GROUP {
            return Err(KvFormatRefused::BlockSize {
                format: self.k,
                block_size,
            });
        }
        Ok(())
    }
}

/// What one token stores in a paged KV cache: `layers × kv_heads` rows of `head_dim`
/// values in K's format and as many in V's, or, for a latent cache (multi-head latent
/// attention), the K rows alone, read as both key and value.
///
/// The one description of a token's KV bytes: the cache's byte layout (folio-model's
/// `KvCache`), the engine's pool sizing and `folio plan` all count through it, so the
/// planner's figures are the bytes the engine allocates (rows padded to whole groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvRows {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Values are read from the K rows (MLA's latent row): no V rows are stored.
    pub latent: bool,
}

impl KvRows {
    /// Bytes of one token's K, all layers and heads.
    pub fn k_bytes_per_token(self, f: KvFormats) -> u64 {
        (self.layers * self.kv_heads * f.k.row_bytes(self.head_dim)) as u64
    }

    /// Bytes of one token's V, all layers and heads (0 in a latent cache).
    pub fn v_bytes_per_token(self, f: KvFormats) -> u64 {
        match self.latent {
            true => 0,
            false => (self.layers * self.kv_heads * f.v.row_bytes(self.head_dim)) as u64,
        }
    }

    /// Bytes of one token's K and V: what each cached position costs.
    pub fn bytes_per_token(self, f: KvFormats) -> u64 {
        self.k_bytes_per_token(f) + self.v_bytes_per_token(f)
    }
}

impl From<KvFormat> for KvFormats {
    fn from(f: KvFormat) -> Self {
        KvFormats::same(f)
    }
}

impl fmt::Display for KvFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A KV format asked of a model or a cache that cannot store it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvFormatRefused {
    #[error(
        "KV format {format} rotates each head with a Walsh–Hadamard transform, which needs a \
         power-of-two head_dim (2..=512); this model's head_dim is {head_dim}"
    )]
    HeadDim { format: KvFormat, head_dim: usize },
    #[error(
        "KV format {format} packs each key row in groups of 32 channels, which needs a \
         head_dim that is a multiple of 32 (up to 512); this model's head_dim is {head_dim}"
    )]
    ChannelHeadDim { format: KvFormat, head_dim: usize },
    #[error(
        "KV format {format} quantizes keys per channel and cannot hold values \
         (--kv-format-v / -ctv {format}); pair it with a per-token value format, e.g. \
         --kv-format {format}:q4h"
    )]
    KeyOnly { format: KvFormat },
    #[error(
        "KV format {format} quantizes each channel over one page of 16 tokens, which needs \
         --block-size 16; the block size is {block_size}"
    )]
    BlockSize { format: KvFormat, block_size: usize },
    #[error(
        "KV format {format} quantizes keys per channel, but this model (multi-head latent \
         attention) reads one latent row as key and value; choose a per-token format"
    )]
    Latent { format: KvFormat },
}

/// A name that is none of [`KvFormat::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown KV format {0:?}: expected one of f16, bf16, q8_0, q4_0, iq4_nl, q4h, q8h, q4c")]
pub struct UnknownKvFormat(pub String);

impl KvFormat {
    /// The formats llama.cpp's KV cache shares with folio, stored as ggml stores them.
    pub const ALL: [KvFormat; 4] = [
        KvFormat::F16,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        KvFormat::Q4_0,
    ];

    /// The formats beyond [`KvFormat::ALL`] that hold keys and values: IQ4_NL blocks, and
    /// the rotated ones.
    pub const MORE: [KvFormat; 3] = [KvFormat::Iq4Nl, KvFormat::Q4h, KvFormat::Q8h];

    /// Every format, in the order `folio` lists them.
    pub const EVERY: [KvFormat; 8] = [
        KvFormat::F16,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        KvFormat::Q4_0,
        KvFormat::Iq4Nl,
        KvFormat::Q4h,
        KvFormat::Q8h,
        KvFormat::Q4c,
    ];

    /// Tokens per channel group of [`KvFormat::Q4c`]: one page of the default block size,
    /// so a group is encoded once, when its page fills.
    pub const CHANNEL_GROUP: usize = 16;

    /// The ggml type whose blocks this format stores (a rotated format stores its code's
    /// blocks, of rotated values); `None` for folio's per-channel key format, which ggml
    /// does not have.
    pub fn ggml_type(self) -> Option<GgmlType> {
        Some(match self {
            KvFormat::F16 => GgmlType::F16,
            KvFormat::Bf16 => GgmlType::BF16,
            KvFormat::Q8_0 | KvFormat::Q8h => GgmlType::Q8_0,
            KvFormat::Q4_0 => GgmlType::Q4_0,
            KvFormat::Iq4Nl | KvFormat::Q4h => GgmlType::IQ4_NL,
            KvFormat::Q4c => return None,
        })
    }

    /// Whether values are quantized per channel over a page's tokens (keys only): rows
    /// are encoded a page group at a time, not one by one.
    pub fn per_channel(self) -> bool {
        self == KvFormat::Q4c
    }

    /// Whether this format can hold values (every format but the per-channel key one).
    pub fn holds_values(self) -> bool {
        !self.per_channel()
    }

    /// Whether rows are Walsh–Hadamard rotated before they are encoded.
    pub fn rotated(self) -> bool {
        matches!(self, KvFormat::Q4h | KvFormat::Q8h)
    }

    /// The unrotated format whose blocks this one stores (itself when not rotated).
    pub fn code(self) -> KvFormat {
        match self {
            KvFormat::Q4h => KvFormat::Iq4Nl,
            KvFormat::Q8h => KvFormat::Q8_0,
            f => f,
        }
    }

    /// `(values per block, bytes per block)` of [`KvFormat::ggml_type`]. Q4c's "block"
    /// is one row's share of 32 channels: 16 bytes of codes plus 1/16 of the group's
    /// 32 × 4 bytes of f16 scales and minimums.
    fn geometry(self) -> (usize, usize) {
        let Some(t) = self.ggml_type() else {
            return (32, 16 + 32 * 4 / KvFormat::CHANNEL_GROUP);
        };
        match (t.block_size(), t.type_size()) {
            (Some(n), Some(b)) => (n, b),
            _ => unreachable!("every KV format is a ggml type with a known layout"),
        }
    }

    /// Parses the names [`KvFormat::name`] prints (case-insensitive, surrounding spaces
    /// ignored).
    pub fn parse(s: &str) -> Option<KvFormat> {
        let s = s.trim();
        KvFormat::EVERY
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// The llama.cpp spelling: `f16`, `bf16`, `q8_0`, `q4_0`, `iq4_nl`; folio's rotated
    /// `q4h` (IQ4_NL blocks) and `q8h` (q8_0 blocks).
    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
            KvFormat::Bf16 => "bf16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
            KvFormat::Iq4Nl => "iq4_nl",
            KvFormat::Q4h => "q4h",
            KvFormat::Q8h => "q8h",
            KvFormat::Q4c => "q4c",
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

    #[test]
    fn more_formats_and_pairs() {
        assert_eq!(KvFormat::Q4h.bits_per_value(), 4.5);
        assert_eq!(KvFormat::Iq4Nl.row_bytes(128), 72);
        assert_eq!(KvFormat::Q8h.row_bytes(128), 136);
        assert_eq!(KvFormat::Q4h.code(), KvFormat::Iq4Nl);
        assert!(KvFormat::Q8h.rotated() && !KvFormat::Iq4Nl.rotated());
        for f in KvFormat::EVERY {
            assert_eq!(KvFormat::parse(f.name()), Some(f));
        }
        let p = KvFormats {
            k: KvFormat::Q4h,
            v: KvFormat::Q4_0,
        };
        assert_eq!(p.name(), "k=q4h,v=q4_0");
        assert_eq!(KvFormats::parse("k=q4h,v=q4_0"), Some(p));
        assert_eq!(KvFormats::parse("q4h:q4_0"), Some(p));
        assert_eq!(KvFormats::same(KvFormat::Q8_0).name(), "q8_0");
        assert_eq!(KvFormats::parse("q8_0"), Some(KvFormat::Q8_0.into()));
        assert_eq!(KvFormats::parse("q4h:q5"), None);
        // 128 K values at 72 bytes + 128 V values at 72: 4.5 bits each.
        assert_eq!(p.bytes_for(128), 144);
        assert_eq!(p.bytes_per_value(), 18.0 / 32.0);
        let q8h = KvFormats {
            k: KvFormat::Q8h,
            v: KvFormat::Q4h,
        };
        assert_eq!(q8h.row_pair_bytes(128), 136 + 72);
        assert!(q8h.check_head_dim(128).is_ok());
        let e = q8h.check_head_dim(96).unwrap_err();
        assert!(e.to_string().contains("head_dim is 96"), "{e}");
        assert!(KvFormats::same(KvFormat::Q4_0).check_head_dim(96).is_ok());
    }

    #[test]
    fn per_channel_keys_hold_keys_only_in_16_token_pages() {
        // 128 values: 64 bytes of codes + 128 channels x 4 bytes / 16 rows = 96 (6 bits).
        assert_eq!(KvFormat::Q4c.row_bytes(128), 96);
        assert_eq!(KvFormat::Q4c.bits_per_value(), 6.0);
        let p = KvFormats::parse("q4c:q4h").unwrap();
        assert_eq!(p.row_pair_bytes(128), 96 + 72);
        assert!(p.check_head_dim(128).is_ok());
        let plain = KvFormats::parse("q4c:q4_0").unwrap();
        assert!(plain.check_head_dim(96).is_ok());
        let e = plain.check_head_dim(80).unwrap_err();
        assert!(e.to_string().contains("head_dim is 80"), "{e}");
        let e = KvFormats::same(KvFormat::Q4c)
            .check_head_dim(128)
            .unwrap_err();
        assert_eq!(
            e,
            KvFormatRefused::KeyOnly {
                format: KvFormat::Q4c
            }
        );
        assert!(e.to_string().contains("q4c:q4h"), "{e}");
        assert!(p.check_pages(16, false).is_ok());
        let e = p.check_pages(32, false).unwrap_err();
        assert!(e.to_string().contains("block size is 32"), "{e}");
        assert!(p.check_pages(16, true).is_err());
        assert!(KvFormats::same(KvFormat::Q4h).check_pages(32, true).is_ok());
        assert_eq!(KvFormat::Q4c.ggml_type(), None);
        assert!(!KvFormat::Q4c.holds_values() && KvFormat::Q4h.holds_values());
    }

    #[test]
    fn token_bytes_count_padded_rows_and_the_latent_row_once() {
        // Qwen2.5-Coder-1.5B: 28 layers, 2 KV heads of 128.
        let qwen = KvRows {
            layers: 28,
            kv_heads: 2,
            head_dim: 128,
            latent: false,
        };
        let f16 = KvFormats::same(KvFormat::F16);
        assert_eq!(qwen.k_bytes_per_token(f16), 14_336);
        assert_eq!(qwen.bytes_per_token(f16), 28_672);
        let mixed = KvFormats {
            k: KvFormat::Q8_0,
            v: KvFormat::Q4h,
        };
        assert_eq!(qwen.k_bytes_per_token(mixed), 28 * 2 * 136);
        assert_eq!(qwen.v_bytes_per_token(mixed), 28 * 2 * 72);
        // A head of 40 values pads to two groups in q4_0.
        let odd = KvRows {
            layers: 1,
            kv_heads: 1,
            head_dim: 40,
            latent: false,
        };
        assert_eq!(odd.bytes_per_token(KvFormat::Q4_0.into()), 72);
        // MLA: one latent row of 576 per layer in K's format; V's format is unused.
        let mla = KvRows {
            layers: 27,
            kv_heads: 1,
            head_dim: 576,
            latent: true,
        };
        assert_eq!(
            mla.bytes_per_token(KvFormats {
                k: KvFormat::F16,
                v: KvFormat::Q4_0
            }),
            27 * 1152
        );
        assert_eq!(mla.v_bytes_per_token(f16), 0);
    }
}
