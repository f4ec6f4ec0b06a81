//! Tensor element types (`ggml_type`) and their block geometry.

use std::fmt;

use crate::{GgufError, Result};

/// A tensor's storage type. The types folio can dequantize have their own variant; every
/// other ggml type id is kept by number in [`GgmlType::Other`] so errors can name it.
///
/// `Debug` and `Display` both print ggml's name (`Other(19)` prints as
/// `IQ1_S (ggml type 19)`), so an error formatted either way names the type.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    BF16,
    MXFP4,
    TQ1_0,
    TQ2_0,
    IQ1_S,
    IQ1_M,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ3_S,
    IQ2_S,
    /// Any other ggml type id (Q8_K, NVFP4, ...), or an unknown number.
    Other(u32),
}

impl GgmlType {
    /// Maps a ggml type id to its variant.
    pub fn from_u32(id: u32) -> GgmlType {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            10 => GgmlType::Q2_K,
            11 => GgmlType::Q3_K,
            12 => GgmlType::Q4_K,
            13 => GgmlType::Q5_K,
            14 => GgmlType::Q6_K,
            20 => GgmlType::IQ4_NL,
            23 => GgmlType::IQ4_XS,
            30 => GgmlType::BF16,
            39 => GgmlType::MXFP4,
            34 => GgmlType::TQ1_0,
            35 => GgmlType::TQ2_0,
            19 => GgmlType::IQ1_S,
            29 => GgmlType::IQ1_M,
            16 => GgmlType::IQ2_XXS,
            17 => GgmlType::IQ2_XS,
            18 => GgmlType::IQ3_XXS,
            21 => GgmlType::IQ3_S,
            22 => GgmlType::IQ2_S,
            other => GgmlType::Other(other),
        }
    }

    /// The ggml type id.
    pub fn to_u32(&self) -> u32 {
        match *self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
            GgmlType::BF16 => 30,
            GgmlType::MXFP4 => 39,
            GgmlType::TQ1_0 => 34,
            GgmlType::TQ2_0 => 35,
            GgmlType::IQ1_S => 19,
            GgmlType::IQ1_M => 29,
            GgmlType::IQ2_XXS => 16,
            GgmlType::IQ2_XS => 17,
            GgmlType::IQ3_XXS => 18,
            GgmlType::IQ3_S => 21,
            GgmlType::IQ2_S => 22,
            GgmlType::Other(id) => id,
        }
    }

    /// ggml's name for the type, if the id is a known ggml type.
    pub fn name(&self) -> Option<&'static str> {
        Some(match self.to_u32() {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            6 => "Q5_0",
            7 => "Q5_1",
            8 => "Q8_0",
            9 => "Q8_1",
            10 => "Q2_K",
            11 => "Q3_K",
            12 => "Q4_K",
            13 => "Q5_K",
            14 => "Q6_K",
            15 => "Q8_K",
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            20 => "IQ4_NL",
            21 => "IQ3_S",
            22 => "IQ2_S",
            23 => "IQ4_XS",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            30 => "BF16",
            34 => "TQ1_0",
            35 => "TQ2_0",
            39 => "MXFP4",
            40 => "NVFP4",
            41 => "Q1_0",
            42 => "Q2_0",
            _ => return None,
        })
    }

    /// `(values per block, bytes per block)`, for every type whose layout size folio
    /// knows. Sizes of types folio cannot dequantize are still known so a file holding
    /// them can be opened and its bounds checked.
    fn geometry(&self) -> Option<(usize, usize)> {
        Some(match self.to_u32() {
            0 => (1, 4),      // F32
            1 => (1, 2),      // F16
            2 => (32, 18),    // Q4_0: f16 d, 16 B nibbles
            3 => (32, 20),    // Q4_1: f16 d, f16 m, 16 B nibbles
            6 => (32, 22),    // Q5_0: f16 d, u32 qh, 16 B nibbles
            7 => (32, 24),    // Q5_1: f16 d, f16 m, u32 qh, 16 B nibbles
            8 => (32, 34),    // Q8_0: f16 d, 32 i8
            9 => (32, 36),    // Q8_1
            10 => (256, 84),  // Q2_K: 16 B scales, 64 B 2-bit quants, f16 d, f16 dmin
            11 => (256, 110), // Q3_K: 32 B hmask, 64 B qs, 12 B scales, f16 d
            12 => (256, 144), // Q4_K
            13 => (256, 176), // Q5_K: f16 d, f16 dmin, 12 B scales, 32 B qh, 128 B qs
            14 => (256, 210), // Q6_K
            15 => (256, 292), // Q8_K
            20 => (32, 18),   // IQ4_NL: f16 d, 16 B nibbles
            23 => (256, 136), // IQ4_XS: f16 d, u16 scales_h, 4 B scales_l, 128 B qs
            24 => (1, 1),     // I8
            25 => (1, 2),     // I16
            26 => (1, 4),     // I32
            27 => (1, 8),     // I64
            28 => (1, 8),     // F64
            30 => (1, 2),     // BF16
            39 => (32, 17),   // MXFP4: u8 e8m0 e, 16 B nibbles
            34 => (256, 54),  // TQ1_0: 48 B base-3 qs, 4 B qh, f16 d
            35 => (256, 66),  // TQ2_0: 64 B 2-bit qs, f16 d
            19 => (256, 50),  // IQ1_S: f16 d, 32 B qs, u16 qh[8]
            29 => (256, 56),  // IQ1_M: 32 B qs, 16 B qh, 8 B scales (f16 d in their top nibbles)
            16 => (256, 66),  // IQ2_XXS: f16 d, u16 qs[32]
            17 => (256, 74),  // IQ2_XS: f16 d, u16 qs[32], u8 scales[8]
            18 => (256, 98),  // IQ3_XXS: f16 d, u8 qs[64], u32 scales_and_signs[8]
            21 => (256, 110), // IQ3_S: f16 d, u8 qs[64], qh[8], signs[32], scales[4]
            22 => (256, 82),  // IQ2_S: f16 d, u8 qs[32], signs[32], qh[8], scales[8]
            _ => return None,
        })
    }

    /// Values per block: 1 for F32/F16/BF16, 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4,
    /// 256 for K-quants, IQ4_XS, TQ1_0, TQ2_0, IQ1_S and IQ1_M.
    pub fn block_size(&self) -> Option<usize> {
        self.geometry().map(|g| g.0)
    }

    /// Bytes per block: F32 4, F16 2, BF16 2, Q4_0 18, Q4_1 20, Q5_0 22, Q5_1 24, Q8_0 34,
    /// Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210, IQ4_NL 18, IQ4_XS 136, MXFP4 17,
    /// TQ1_0 54, TQ2_0 66, IQ1_S 50, IQ1_M 56.
    pub fn type_size(&self) -> Option<usize> {
        self.geometry().map(|g| g.1)
    }

    /// Bytes of one row of `n_cols` values. Errors if the type's size is unknown or
    /// `n_cols` is not a whole number of blocks.
    pub fn row_bytes(&self, n_cols: usize) -> Result<usize> {
        self.bytes_for(n_cols as u64).map(|b| b as usize)
    }

    /// Bytes of `n_values` values (checked; also used for whole tensors).
    pub(crate) fn bytes_for(&self, n_values: u64) -> Result<u64> {
        let (block_size, type_size) = self.geometry().ok_or(GgufError::UnsupportedType {
            ty: *self,
            what: "sizing (unknown block layout)",
        })?;
        if !n_values.is_multiple_of(block_size as u64) {
            return Err(GgufError::NotWholeBlocks {
                ty: *self,
                n_values,
                block_size,
            });
        }
        (n_values / block_size as u64)
            .checked_mul(type_size as u64)
            .filter(|b| usize::try_from(*b).is_ok())
            .ok_or(GgufError::ElementCountOverflow {
                dims: vec![n_values],
            })
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.name()) {
            (GgmlType::Other(id), Some(name)) => write!(f, "{name} (ggml type {id})"),
            (GgmlType::Other(id), None) => write!(f, "unknown ggml type {id}"),
            (_, name) => f.write_str(name.unwrap_or("?")),
        }
    }
}

/// Same as `Display`: a derived `Debug` would print `Other(16)`, which names nothing.
impl fmt::Debug for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
