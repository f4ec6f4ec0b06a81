//! The *superblock* panel layout: ggml's Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
//! IQ4_XS, MXFP4 and TQ2_0 blocks with their exact bits and scales, only rearranged so that
//! one 64-byte load serves 16 output rows. TQ1_0, IQ1_S and IQ1_M are stored decoded (see
//! below), a little larger than in GGUF.
//!
//! NOTE: hand-written rather than taken from ggml's CPU "repack" types because those keep
//! ggml's own order of activations (q8_K, 256 per scale) and folio quantizes activations per
//! 32 (one format shared by every weight type and the attention kernels); the idea (rows
//! interleaved per block, scales kept in their packed bit form) is the same as ggml's
//! `block_q4_Kx8` and ik_llama.cpp's `_R4`/`_R8` types.
//!
//! Rows are grouped into panels of 16. A panel is its row blocks' *superblocks* (one ggml
//! block: 32 values for the legacy types, 256 for K-quants and IQ4_XS) one after another:
//! ```text
//! superblock: [header: each field as a plane of 16 rows][codes of 32-block 0]…[codes of 32-block S-1]
//! field plane: 16 x (2 or 4) bytes, row r at r * width (f16 scales, packed scale words)
//! codes:       a lo-bit plane (b = 2, 4 bits) then an optional hi-bit plane (1 or 2 bits)
//! b-bit plane: b vectors of 64 bytes; vector i, byte r*4 + c holds at bits t*b..(t+1)*b
//!              the code of row r, k = 4 (i * 8/b + t) + c            (t in 0..8/b)
//! ```
//! so each `(vector, shift)` pair unpacks to the `u8` operand of one `vpdpbusd`: 16 rows x 4
//! consecutive k. A code is `lo | hi << b`; IQ4 codes index ggml's non-linear table.
//!
//! The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) are the exception to "same
//! bytes": their weights are 8 (IQ2) or 4 (IQ3) values looked up together in a grid, which
//! no byte shuffle can do for 16 rows at once, so at load time each value becomes a code
//! into a 16-entry table of its signed grid magnitude (3 bits for IQ2, 4 for IQ3) and the
//! kernels treat it like IQ4. The header keeps `d` and the 4-bit scales (as u32 words of
//! nibbles). In memory that is 3.2 (IQ2) or 4.2 (IQ3) bits per weight instead of the
//! file's 2.06 to 3.44; the values and scales are exactly ggml's.
//! Header words are the ggml block's scale bytes read as little-endian u32 (or u16), so the
//! byte count equals the GGUF tensor's: the kernels unpack the 6-bit scales with shifts on
//! all 16 rows at once (see `sb_lanes`).
//!
//! Decoded at load time (their GGUF codes are not bit planes): TQ1_0's base-3 digits
//! become TQ2_0's 2-bit codes (66 bytes per 256 values instead of 54); each IQ1_S / IQ1_M
//! value, a grid value `g` in {-1, 0, 1} plus its group's delta `±1/8`, becomes a 3-bit
//! code `(g + 1) | (delta > 0) << 2` indexing [`IQ1_VALUES`] = `8g ± 1`, with the scale
//! divided by 8 (`dl * (g ± 1/8) = (dl/8) * (8g ± 1)`, both exact in f32, so the products
//! are ggml's bit for bit); 102 / 106 bytes per 256 values instead of 50 / 56. Their
//! header keeps `d` (IQ1_M's assembled from its nibbles) and the 3-bit scales.

use super::packed::Line;
use crate::pool::split_over_cores;
use folio_gguf::dequant::{iq1_m_d_bits, iq1_m_sub, iq1_s_sub, iq1s_grid_value, tq1_0_digits};
use folio_gguf::{iquant, GgmlType};
use half::f16;

/// Rows per panel (as the legacy layout: one 512-bit register of i32 / f32).
pub(crate) const PANEL: usize = 16;

/// IQ2's signed levels: code = level index (8, 25, 43) | negative << 2.
const IQ2_VALUES: [i8; 16] = [8, 25, 43, 0, -8, -25, -43, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// IQ3_XXS's signed levels: code = level index | negative << 3.
const IQ3XXS_VALUES: [i8; 16] = [
    4, 12, 20, 28, 36, 44, 52, 62, -4, -12, -20, -28, -36, -44, -52, -62,
];
/// IQ3_S's signed levels: code = level index | negative << 3.
const IQ3S_VALUES: [i8; 16] = [1, 3, 5, 7, 9, 11, 13, 15, -1, -3, -5, -7, -9, -11, -13, -15];

/// ggml's IQ4_NL / IQ4_XS value table (`kvalues_iq4nl`).
pub(crate) const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `kvalues_mxfp4`: the e2m1 values, doubled.
pub(crate) const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// IQ1_S / IQ1_M values `8g ± 1` by 3-bit code `(g + 1) | (delta > 0) << 2` (3 and 7
/// unused).
pub(crate) const IQ1_VALUES: [i8; 16] = [-9, -1, 7, 0, -7, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// The types stored in the superblock layout (ids as const generic parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's names
#[repr(u8)]
pub(crate) enum SbType {
    Q5_0 = 0,
    Q5_1 = 1,
    IQ4_NL = 2,
    Q2_K = 3,
    Q3_K = 4,
    Q4_K = 5,
    Q5_K = 6,
    Q6_K = 7,
    IQ4_XS = 8,
    MXFP4 = 9,
    TQ1_0 = 10,
    TQ2_0 = 11,
    IQ1_S = 12,
    IQ1_M = 13,
    IQ2_XXS = 14,
    IQ2_XS = 15,
    IQ2_S = 16,
    IQ3_XXS = 17,
    IQ3_S = 18,
}

/// How a type's minimum enters the dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MinKind {
    /// Symmetric (an offset on the codes, or none).
    None,
    /// A float `m` per 32 values times the activation block's `d * isum` (Q5_1, Q4_K, Q5_K).
    Float,
    /// Integer mins per 16 values times the activation 16-sums, scaled by `dmin` (Q2_K).
    Int16,
}

/// Every type's [`Desc`], by id.
const DESCS: [Desc; SbType::COUNT] = {
    let mut t = [SbType::Q5_0.build_desc(); SbType::COUNT];
    let mut id = 0;
    while id < SbType::COUNT {
        t[id] = SbType::from_id(id as u8).build_desc();
        id += 1;
    }
    t
};

/// Everything the packer and the kernels need to know about a type, as constants.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc {
    /// Values per superblock (one ggml block).
    pub sb: usize,
    /// Bytes of one ggml block.
    pub ggml_bytes: usize,
    /// Header fields per row, in bytes (1, 2 or 4).
    pub fields: [usize; 6],
    pub n_fields: usize,
    /// Bits of the low and high code planes.
    pub lo: u32,
    pub hi: u32,
    /// Codes index `values` (signed values: IQ4's levels, MXFP4's and IQ1's tables, or the
    /// grid i-quants' signed grid magnitudes).
    pub lut: bool,
    /// The value table of `lut` types ([`IQ4_VALUES`], [`MXFP4_VALUES`], [`IQ1_VALUES`],
    /// [`IQ2_VALUES`], ...).
    pub values: [i8; 16],
    /// Integer sub-scales per 16 values (else one float scale per 32).
    pub sub16: bool,
    /// Subtracted from each (unsigned, table-applied) code: `w ∝ u - offset`.
    pub offset: i32,
    pub min: MinKind,
}

impl Desc {
    /// 32-blocks per superblock.
    pub const fn subs(&self) -> usize {
        self.sb / 32
    }
    /// Header bytes of one superblock (16 rows).
    pub const fn header_bytes(&self) -> usize {
        let mut s = 0;
        let mut i = 0;
        while i < self.n_fields {
            s += self.fields[i];
            i += 1;
        }
        s * PANEL
    }
    /// Offset of field `i`'s plane in the header.
    pub const fn field_off(&self, i: usize) -> usize {
        let mut s = 0;
        let mut j = 0;
        while j < i {
            s += self.fields[j];
            j += 1;
        }
        s * PANEL
    }
    /// Code bytes of one 32-block (16 rows).
    pub const fn code_bytes(&self) -> usize {
        64 * (self.lo + self.hi) as usize
    }
    /// Bytes of one superblock of a panel: exactly 16 ggml blocks, except for the types
    /// stored decoded (TQ1_0, IQ1_S, IQ1_M).
    pub const fn sb_bytes(&self) -> usize {
        self.header_bytes() + self.subs() * self.code_bytes()
    }
    /// `(subs, sb_bytes, header_bytes, code_bytes)`: the strides every tile walks a panel by.
    pub const fn strides(&self) -> (usize, usize, usize, usize) {
        (
            self.subs(),
            self.sb_bytes(),
            self.header_bytes(),
            self.code_bytes(),
        )
    }
}

// Every 16-value type's sub-scale products are exact in f32 (see
// `SbType::sub16_products_exact_in_f32`), so the vector kernels may combine them in f32.
const _: () = {
    let mut id = 0;
    while id < SbType::COUNT as u8 {
        let t = SbType::from_id(id);
        assert!(!t.desc().sub16 || (t.max_sub_scale() > 0 && t.sub16_products_exact_in_f32()));
        id += 1;
    }
};

// Ids are the discriminants, 0 .. COUNT, the last type's the largest (the descriptor table
// is indexed by them).
const _: () = {
    let mut id = 0;
    while id < SbType::COUNT {
        assert!(SbType::from_id(id as u8) as usize == id);
        id += 1;
    }
    assert!(SbType::IQ3_S as usize == SbType::COUNT - 1);
};

impl SbType {
    /// Number of types (ids `0..COUNT`).
    pub const COUNT: usize = 19;

    pub const fn from_id(id: u8) -> SbType {
        match id {
            0 => SbType::Q5_0,
            1 => SbType::Q5_1,
            2 => SbType::IQ4_NL,
            3 => SbType::Q2_K,
            4 => SbType::Q3_K,
            5 => SbType::Q4_K,
            6 => SbType::Q5_K,
            7 => SbType::Q6_K,
            8 => SbType::IQ4_XS,
            9 => SbType::MXFP4,
            10 => SbType::TQ1_0,
            11 => SbType::TQ2_0,
            12 => SbType::IQ1_S,
            13 => SbType::IQ1_M,
            14 => SbType::IQ2_XXS,
            15 => SbType::IQ2_XS,
            16 => SbType::IQ2_S,
            17 => SbType::IQ3_XXS,
            _ => SbType::IQ3_S,
        }
    }

    /// The type's descriptor: an entry of a table built at compile time, so a runtime call
    /// (one per matmul task) is a copy, not the construction below (it showed as ~0.8% of
    /// batch-1 decode in a profile).
    pub const fn desc(self) -> Desc {
        DESCS[self as usize]
    }

    const fn build_desc(self) -> Desc {
        #[allow(clippy::too_many_arguments)] // one row of the table below
        const fn d(
            sb: usize,
            ggml_bytes: usize,
            f: &[usize],
            lo: u32,
            hi: u32,
            lut: bool,
            sub16: bool,
            offset: i32,
            min: MinKind,
        ) -> Desc {
            let mut fields = [0; 6];
            let mut i = 0;
            while i < f.len() {
                fields[i] = f[i];
                i += 1;
            }
            Desc {
                sb,
                ggml_bytes,
                fields,
                n_fields: f.len(),
                lo,
                hi,
                lut,
                values: IQ4_VALUES,
                sub16,
                offset,
                min,
            }
        }
        use MinKind::*;
        let mut desc = match self {
            SbType::Q5_0 => d(32, 22, &[2], 4, 1, false, false, 16, None),
            SbType::Q5_1 => d(32, 24, &[2, 2], 4, 1, false, false, 0, Float),
            SbType::IQ4_NL => d(32, 18, &[2], 4, 0, true, false, 128, None),
            SbType::Q2_K => d(256, 84, &[2, 2, 4, 4, 4, 4], 2, 0, false, true, 0, Int16),
            SbType::Q3_K => d(256, 110, &[2, 4, 4, 4], 2, 1, false, true, 4, None),
            SbType::Q4_K => d(256, 144, &[2, 2, 4, 4, 4], 4, 0, false, false, 0, Float),
            SbType::Q5_K => d(256, 176, &[2, 2, 4, 4, 4], 4, 1, false, false, 0, Float),
            SbType::Q6_K => d(256, 210, &[2, 4, 4, 4, 4], 4, 2, false, true, 32, None),
            SbType::IQ4_XS => d(256, 136, &[2, 2, 4], 4, 0, true, false, 128, None),
            SbType::MXFP4 => {
                let mut m = d(32, 17, &[1], 4, 0, true, false, 128, None);
                m.values = MXFP4_VALUES;
                m
            }
            SbType::TQ1_0 => d(256, 54, &[2], 2, 0, false, false, 1, None),
            SbType::TQ2_0 => d(256, 66, &[2], 2, 0, false, false, 1, None),
            SbType::IQ1_S => {
                let mut m = d(256, 50, &[2, 4], 2, 1, true, false, 128, None);
                m.values = IQ1_VALUES;
                m
            }
            SbType::IQ1_M => {
                let mut m = d(256, 56, &[2, 4, 4], 2, 1, true, true, 128, None);
                m.values = IQ1_VALUES;
                m
            }
            // Grid i-quants: f16 d, then the 4-bit scales as one or two u32 words; codes
            // index the signed magnitudes (3 bits for IQ2's 3 levels, 4 for IQ3's 8).
            SbType::IQ2_XXS => d(256, 66, &[2, 4], 2, 1, true, false, 128, None),
            SbType::IQ2_XS => d(256, 74, &[2, 4, 4], 2, 1, true, true, 128, None),
            SbType::IQ2_S => d(256, 82, &[2, 4, 4], 2, 1, true, true, 128, None),
            SbType::IQ3_XXS => d(256, 98, &[2, 4], 4, 0, true, false, 128, None),
            SbType::IQ3_S => d(256, 110, &[2, 4], 4, 0, true, false, 128, None),
        };
        desc.values = match self {
            SbType::IQ2_XXS | SbType::IQ2_XS | SbType::IQ2_S => IQ2_VALUES,
            SbType::IQ3_XXS => IQ3XXS_VALUES,
            SbType::IQ3_S => IQ3S_VALUES,
            _ => desc.values,
        };
        desc
    }

    /// Whether the activations take one scale per 256 values (ggml's Q8_K, as llama.cpp
    /// quantizes them for every type with 256-value superblocks): the types with a
    /// superblock header. Their vector and tile kernels read the superblock's first block
    /// scale; [`SbType::int_superblock`] ones rely on it.
    pub const fn superblock_acts(self) -> bool {
        self.desc().sb == 256
    }

    /// Whether the kernels sum a whole superblock in integers: Q4_K and Q5_K, whose 6-bit
    /// sub-scales and mins multiply the 32-block sums exactly (`|sum| ≤ 63 · 31 · 127 ·
    /// 256 < 2^31`), and Q6_K, whose signed 8-bit scales per 16 values multiply the
    /// offset-corrected 16-sums exactly (`|sum| ≤ 128 · 32 · 127 · 256 < 2^31`), so a
    /// superblock costs one or two f32 FMAs, not two per 32-block (as ggml's
    /// `ggml_vec_dot_q4_K_q8_K` / `_q6_K_q8_K` sum it):
    /// ```text
    /// A = sum_g sc[g] * (sum_k u[k] x[k] - offset * X[g])    (g: the scale groups, int32, exact)
    /// B = sum_sub mn[sub] * X[sub]                            (Q4_K, Q5_K)
    /// acc = fma(f32(A), d * dx, acc);  acc = fma(f32(B), -dmin * dx, acc)
    /// ```
    pub const fn int_superblock(self) -> bool {
        matches!(self, SbType::Q4_K | SbType::Q5_K | SbType::Q6_K)
    }

    /// The largest |sub-scale| of a type with integer scales per 16 values (0 for the others).
    pub const fn max_sub_scale(self) -> i64 {
        match self {
            // A signed byte.
            SbType::Q6_K => 128,
            // 6 bits less 32.
            SbType::Q3_K => 32,
            // 4 bits.
            SbType::Q2_K => 15,
            // 2 ls + 1 of a 4-bit ls, of a 3-bit one.
            SbType::IQ2_XS | SbType::IQ2_S => 31,
            SbType::IQ1_M => 15,
            _ => 0,
        }
    }

    /// Whether every product `sub-scale * (16-value dot - offset * 16-sum)` of a 16-value
    /// type, with activation codes of at most 128 in magnitude, is below 2^24 in magnitude:
    /// an f32 then holds each product exactly, so `fma(f32(d0), f32(sc0), f32(d1) * f32(sc1))`
    /// rounds the exact integer `sc0 d0 + sc1 d1` once, to the bits `f32(sc0 d0 + sc1 d1)`
    /// gets. The vector kernels take that route: two conversions, a multiply and an fma
    /// instead of two `vpmulld` (each two uops on port 0 of an Intel core, ten cycles).
    pub const fn sub16_products_exact_in_f32(self) -> bool {
        let d = self.desc();
        let mut max_w: i64 = 0;
        if d.lut {
            let mut i = 0;
            while i < 16 {
                let w = (d.values[i] as i64 + 128 - d.offset as i64).abs();
                if w > max_w {
                    max_w = w;
                }
                i += 1;
            }
        } else {
            let top = (1i64 << (d.lo + d.hi)) - 1;
            let off = d.offset as i64;
            max_w = if top - off > off { top - off } else { off };
        }
        max_w * 16 * 128 * self.max_sub_scale() <= 1 << 24
    }

    /// The ggml type of a grid i-quant (`None` for the others).
    pub const fn iq_grid(self) -> Option<GgmlType> {
        Some(match self {
            SbType::IQ2_XXS => GgmlType::IQ2_XXS,
            SbType::IQ2_XS => GgmlType::IQ2_XS,
            SbType::IQ2_S => GgmlType::IQ2_S,
            SbType::IQ3_XXS => GgmlType::IQ3_XXS,
            SbType::IQ3_S => GgmlType::IQ3_S,
            _ => return None,
        })
    }

    /// Multiplies the stored `d` of a grid i-quant so every block scale is `d' * (2 ls + 1)`
    /// (exactly ggml's `db`: a power of two times an exact product).
    pub const fn d_factor(self) -> f32 {
        match self {
            SbType::IQ2_XXS | SbType::IQ2_XS | SbType::IQ2_S => 0.125,
            SbType::IQ3_XXS => 0.25,
            _ => 1.0,
        }
    }
}

fn u16_at(b: &[u8], i: usize) -> u32 {
    u16::from_le_bytes([b[i], b[i + 1]]) as u32
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The IQ1 code of value `j` of grid entry `idx` with delta sign `neg` (see [`IQ1_VALUES`]).
fn iq1_code(idx: usize, j: usize, neg: bool) -> u8 {
    (iq1s_grid_value(idx, j) + 1) as u8 | if neg { 0 } else { 4 }
}

/// Splits one ggml block into its header field values (raw bits) and its `sb` codes in
/// column order (`lo | hi << lo_bits`, before the value table).
pub(crate) fn split_block(ty: SbType, b: &[u8], fields: &mut [u32], u: &mut [u8]) {
    match ty {
        SbType::Q5_0 | SbType::Q5_1 => {
            let (qh, qs) = if ty == SbType::Q5_0 {
                fields[0] = u16_at(b, 0);
                (u32_at(b, 2), &b[6..22])
            } else {
                fields[0] = u16_at(b, 0);
                fields[1] = u16_at(b, 2);
                (u32_at(b, 4), &b[8..24])
            };
            for j in 0..16 {
                u[j] = (qs[j] & 15) | ((((qh >> j) & 1) as u8) << 4);
                u[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
        }
        SbType::IQ4_NL => {
            fields[0] = u16_at(b, 0);
            for j in 0..16 {
                u[j] = b[2 + j] & 15;
                u[j + 16] = b[2 + j] >> 4;
            }
        }
        SbType::Q4_K | SbType::Q5_K => {
            fields[0] = u16_at(b, 0);
            fields[1] = u16_at(b, 2);
            for w in 0..3 {
                fields[2 + w] = u32_at(b, 4 + 4 * w);
            }
            let (qh, qs) = if ty == SbType::Q4_K {
                (None, &b[16..144])
            } else {
                (Some(&b[16..48]), &b[48..176])
            };
            for j in 0..4 {
                for l in 0..32 {
                    let q = qs[32 * j + l];
                    let (h0, h1) = match qh {
                        Some(h) => ((h[l] >> (2 * j)) & 1, (h[l] >> (2 * j + 1)) & 1),
                        None => (0, 0),
                    };
                    u[64 * j + l] = (q & 15) | (h0 << 4);
                    u[64 * j + 32 + l] = (q >> 4) | (h1 << 4);
                }
            }
        }
        SbType::Q6_K => {
            let (ql, qh) = (&b[0..128], &b[128..192]);
            fields[0] = u16_at(b, 208);
            for w in 0..4 {
                fields[1 + w] = u32_at(b, 192 + 4 * w);
            }
            for h in 0..2 {
                let (ql, qh, u) = (&ql[64 * h..], &qh[32 * h..], &mut u[128 * h..]);
                for l in 0..32 {
                    u[l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                    u[l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                    u[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    u[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
        SbType::Q3_K => {
            let (hm, qs) = (&b[0..32], &b[32..96]);
            fields[0] = u16_at(b, 108);
            for w in 0..3 {
                fields[1 + w] = u32_at(b, 96 + 4 * w);
            }
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        let lo = (qs[32 * n + l] >> (2 * j)) & 3;
                        let hb = (hm[l] >> (4 * n + j)) & 1;
                        u[128 * n + 32 * j + l] = lo | (hb << 2);
                    }
                }
            }
        }
        SbType::Q2_K => {
            let qs = &b[16..80];
            fields[0] = u16_at(b, 80);
            fields[1] = u16_at(b, 82);
            for w in 0..4 {
                fields[2 + w] = u32_at(b, 4 * w);
            }
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        u[128 * n + 32 * j + l] = (qs[32 * n + l] >> (2 * j)) & 3;
                    }
                }
            }
        }
        SbType::IQ2_XXS | SbType::IQ2_XS | SbType::IQ2_S | SbType::IQ3_XXS | SbType::IQ3_S => {
            let gt = ty.iq_grid().expect("a grid i-quant");
            let k = iquant::parse(gt, b);
            fields[..3].copy_from_slice(&[k.d as u32, 0, 0]);
            let desc = ty.desc();
            if desc.sub16 {
                // ls of 16 values s at word s / 8, bits 4 (s % 8).
                for (s, ls) in k.ls.iter().enumerate() {
                    fields[1 + s / 8] |= (*ls as u32) << (4 * (s % 8));
                }
            } else {
                // ls of 32-block ib at bits 4 ib.
                for ib in 0..8 {
                    fields[1] |= (k.ls[2 * ib] as u32) << (4 * ib);
                }
            }
            for (ui, v) in u.iter_mut().zip(iquant::values(gt, &k)) {
                let at = desc.values.iter().position(|t| *t == v);
                *ui = at.expect("every grid value is in the type's table") as u8;
            }
        }
        SbType::IQ4_XS => {
            fields[0] = u16_at(b, 0);
            fields[1] = u16_at(b, 2);
            fields[2] = u32_at(b, 4);
            for ib in 0..8 {
                for j in 0..16 {
                    let q = b[8 + 16 * ib + j];
                    u[32 * ib + j] = q & 15;
                    u[32 * ib + 16 + j] = q >> 4;
                }
            }
        }
        SbType::MXFP4 => {
            fields[0] = b[0] as u32;
            for j in 0..16 {
                u[j] = b[1 + j] & 15;
                u[j + 16] = b[1 + j] >> 4;
            }
        }
        SbType::TQ2_0 => {
            fields[0] = u16_at(b, 64);
            for n in 0..2 {
                for l in 0..4 {
                    for m in 0..32 {
                        u[128 * n + 32 * l + m] = (b[32 * n + m] >> (2 * l)) & 3;
                    }
                }
            }
        }
        SbType::TQ1_0 => {
            fields[0] = u16_at(b, 52);
            let mut q = [0u8; 256];
            tq1_0_digits(b, &mut q);
            u[..256].copy_from_slice(&q);
        }
        SbType::IQ1_S => {
            fields[0] = u16_at(b, 0);
            fields[1] = 0;
            for ib in 0..8 {
                let (s, neg, idx) = iq1_s_sub(b, ib);
                fields[1] |= s << (3 * ib);
                for (l, &i) in idx.iter().enumerate() {
                    for j in 0..8 {
                        u[32 * ib + 8 * l + j] = iq1_code(i, j, neg);
                    }
                }
            }
        }
        SbType::IQ1_M => {
            fields[0] = iq1_m_d_bits(b) as u32;
            fields[1] = u32_at(b, 48);
            fields[2] = u32_at(b, 52);
            for ib in 0..8 {
                let (_, groups) = iq1_m_sub(b, ib);
                for (l, &(i, neg)) in groups.iter().enumerate() {
                    for j in 0..8 {
                        u[32 * ib + 8 * l + j] = iq1_code(i, j, neg);
                    }
                }
            }
        }
    }
}

/// Writes the codes of one 32-block (16 rows of 32 values, `codes[r * stride + k]`) into
/// `out` (`desc.code_bytes()` bytes) as the module doc lays them out.
fn write_codes(desc: &Desc, codes: &[u8], stride: usize, out: &mut [u8]) {
    out.fill(0);
    let lo_bytes = 64 * desc.lo as usize;
    plane(desc.lo, 0, codes, stride, &mut out[..lo_bytes]);
    if desc.hi > 0 {
        plane(desc.hi, desc.lo, codes, stride, &mut out[lo_bytes..]);
    }
}

/// One bit plane of [`write_codes`]: bits `shift..shift + bits` of every code, four codes
/// (one 32-bit lane of the layout) at a time: `shift + bits <= 8`, so shifting the four
/// bytes as one word and masking each byte's `bits` keeps every code in its own byte.
/// Model loading spends most of its time here.
fn plane(bits: u32, shift: u32, codes: &[u8], stride: usize, out: &mut [u8]) {
    fn go<const BITS: u32>(shift: u32, codes: &[u8], stride: usize, out: &mut [u8]) {
        let per = 8 / BITS as usize;
        let mask = ((1u32 << BITS) - 1) * 0x0101_0101;
        for r in 0..PANEL {
            let src = &codes[r * stride..][..32];
            for g in 0..8 {
                let (i, t) = (g / per, (g % per) as u32 * BITS);
                let x = u32::from_le_bytes(src[4 * g..4 * g + 4].try_into().expect("4 bytes"));
                let o = &mut out[i * 64 + r * 4..][..4];
                let w = u32::from_le_bytes((&*o).try_into().expect("4 bytes"));
                o.copy_from_slice(&(w | ((x >> shift) & mask) << t).to_le_bytes());
            }
        }
    }
    match bits {
        1 => go::<1>(shift, codes, stride, out),
        2 => go::<2>(shift, codes, stride, out),
        4 => go::<4>(shift, codes, stride, out),
        8 => go::<8>(shift, codes, stride, out),
        _ => unreachable!("code planes are 1, 2, 4 or 8 bits wide"),
    }
}

/// The codes of row `r` of a packed 32-block (its 32 columns), table applied for the
/// lookup types (`value + 128`), so `w ∝ code - desc.offset`: each 32-bit lane of a plane
/// holds four codes of one row, read as one word. The one reader of the packed codes
/// outside the SIMD kernels (scalar references, row export, `--numerics llama`'s load).
pub(crate) fn codes32(desc: &Desc, blk: &[u8], r: usize) -> [i32; 32] {
    let mut v = [0u32; 32];
    let mut read = |bits: u32, base: usize, shift: u32| {
        let per = 8 / bits as usize;
        let mask = ((1u32 << bits) - 1) * 0x0101_0101;
        for g in 0..8 {
            let (i, t) = (g / per, (g % per) as u32 * bits);
            let at = base + i * 64 + r * 4;
            let w = u32::from_le_bytes(blk[at..at + 4].try_into().expect("4 bytes"));
            let c = ((w >> t) & mask).to_le_bytes();
            for (o, c) in v[4 * g..4 * g + 4].iter_mut().zip(c) {
                *o |= (c as u32) << shift;
            }
        }
    };
    read(desc.lo, 0, 0);
    if desc.hi > 0 {
        read(desc.hi, 64 * desc.lo as usize, desc.lo);
    }
    v.map(|c| {
        if desc.lut {
            desc.values[c as usize] as i32 + 128
        } else {
            c as i32
        }
    })
}

/// A whole matrix in the superblock panel layout.
pub(crate) struct SbPacked {
    pub ty: SbType,
    /// 32-column blocks per row.
    pub nb: usize,
    pub panels: usize,
    lines: Vec<Line>,
}

/// Panels each thread of [`SbPacked::build`] packs at least (up to this many, the calling
/// thread packs alone): a thread's start costs about as much as packing a few panels.
/// Measured on an Intel Xeon (CPUID family 6 model 207, 2 threads, Q4_K rows of 1,536,
/// best of 50 builds, two runs): 2 panels 60 us on one thread vs 73-84 on two, 4 panels
/// 85-105 vs 76-113, 8 panels 144-193 vs 116-151, 64 panels 1,197-1,241 vs 674-739.
pub(crate) const PARALLEL_PANELS: usize = 8;

/// Packs the panels from `p0` on into `bytes` (whole panels, `nsb` superblocks each).
fn pack_panels<'a>(
    ty: SbType,
    rows: usize,
    nsb: usize,
    p0: usize,
    bytes: &mut [u8],
    row: &(impl Fn(usize) -> &'a [u8] + Sync),
) {
    let desc = ty.desc();
    let mut fields = vec![[0u32; 6]; PANEL];
    let mut codes = vec![0u8; PANEL * desc.sb];
    for (i, panel) in bytes.chunks_mut(nsb * desc.sb_bytes()).enumerate() {
        let p = p0 + i;
        for s in 0..nsb {
            for r in 0..PANEL {
                let rr = p * PANEL + r;
                if rr < rows {
                    let blk = &row(rr)[s * desc.ggml_bytes..(s + 1) * desc.ggml_bytes];
                    split_block(
                        ty,
                        blk,
                        &mut fields[r],
                        &mut codes[r * desc.sb..(r + 1) * desc.sb],
                    );
                } else {
                    // Padding rows: zero scales, zero codes (their outputs are never stored).
                    fields[r] = [0; 6];
                    codes[r * desc.sb..(r + 1) * desc.sb].fill(0);
                }
            }
            let sbb = &mut panel[s * desc.sb_bytes()..][..desc.sb_bytes()];
            for f in 0..desc.n_fields {
                let w = desc.fields[f];
                let off = desc.field_off(f);
                for (r, fr) in fields.iter().enumerate() {
                    let v = fr[f].to_le_bytes();
                    sbb[off + r * w..off + (r + 1) * w].copy_from_slice(&v[..w]);
                }
            }
            let hb = desc.header_bytes();
            for sub in 0..desc.subs() {
                let out = &mut sbb[hb + sub * desc.code_bytes()..][..desc.code_bytes()];
                write_codes(&desc, &codes[sub * 32..], desc.sb, out);
            }
        }
    }
}

impl SbPacked {
    /// Repacks `rows` rows of ggml blocks (`row(r)` gives row r's bytes), the panels split
    /// over the host's cores: loading a model is mostly this repacking (measured on the
    /// 1.5B Q4_K_M, 2 cores: about 6 s of a cold `generate` on one thread).
    pub fn build<'a>(
        ty: SbType,
        rows: usize,
        cols: usize,
        row: impl Fn(usize) -> &'a [u8] + Sync,
    ) -> SbPacked {
        let desc = ty.desc();
        let nsb = cols / desc.sb;
        let panels = rows.div_ceil(PANEL);
        let panel_bytes = nsb * desc.sb_bytes();
        let total = panels * panel_bytes;
        let mut lines = vec![Line([0; 64]); total.div_ceil(64)];
        // SAFETY: Line is plain bytes; the slice covers exactly the allocation's prefix.
        let bytes = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut u8, total) };
        split_over_cores(bytes, panel_bytes, PARALLEL_PANELS, |p0, chunk| {
            pack_panels(ty, rows, nsb, p0, chunk, &row)
        });
        SbPacked {
            ty,
            nb: cols / 32,
            panels,
            lines,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        let d = self.ty.desc();
        let total = self.panels * (self.nb * 32 / d.sb) * d.sb_bytes();
        // SAFETY: as in build.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, total) }
    }

    /// A Q5_0 matrix's first `rows` rows as GGUF Q8_0 bytes: each block's `d` and every
    /// value's byte `code - 16` (what ggml's Q5_0 dot products multiply), so the values are
    /// exactly the file's.
    pub fn q5_0_as_q8_0(&self, rows: usize) -> Vec<u8> {
        assert_eq!(
            self.ty,
            SbType::Q5_0,
            "q5_0_as_q8_0 on a {:?} matrix",
            self.ty
        );
        let desc = self.ty.desc();
        let bytes = self.bytes();
        let mut out = Vec::with_capacity(rows * self.nb * 34);
        for row in 0..rows {
            let (p, r) = (row / PANEL, row % PANEL);
            for s in 0..self.nb {
                let sbb = &bytes[(p * self.nb + s) * desc.sb_bytes()..][..desc.sb_bytes()];
                let at = desc.field_off(0) + r * 2;
                out.extend_from_slice(&sbb[at..at + 2]);
                let blk = &sbb[desc.header_bytes()..];
                let codes = codes32(&desc, blk, r);
                out.extend(codes.map(|c| (c - desc.offset) as i8 as u8));
            }
        }
        out
    }

    /// Dequantizes row `row` into `out` (`nb * 32` values) exactly as ggml's
    /// `dequantize_row_*` does (same operations, same order).
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        use super::sb_lanes::{header, scales, One};
        let desc = self.ty.desc();
        let (p, r) = (row / PANEL, row % PANEL);
        let nsb = self.nb * 32 / desc.sb;
        let bytes = self.bytes();
        for s in 0..nsb {
            let sbb = &bytes[(p * nsb + s) * desc.sb_bytes()..][..desc.sb_bytes()];
            // SAFETY: the pointer addresses this superblock's header; `One` reads row r only.
            let h = unsafe { header::<One>(self.ty, sbb.as_ptr(), r) };
            for sub in 0..desc.subs() {
                let sc = scales::<One>(self.ty, &h, sub);
                let blk = &sbb[desc.header_bytes() + sub * desc.code_bytes()..];
                let codes = codes32(&desc, blk, r);
                for (k, c) in codes.into_iter().enumerate() {
                    let q = (c - desc.offset) as f32;
                    let y = &mut out[s * desc.sb + sub * 32 + k];
                    *y = if desc.sub16 {
                        let hf = k / 16;
                        let dl = h.d.0 * sc.sc[hf].0 as f32;
                        match desc.min {
                            MinKind::Int16 => dl * q - h.f1.0 * sc.mn[hf].0 as f32,
                            _ => dl * q,
                        }
                    } else {
                        match desc.min {
                            MinKind::Float => sc.da.0 * q + sc.m.0,
                            _ => sc.da.0 * q,
                        }
                    };
                }
            }
        }
    }
}

/// f16 bits -> f32.
pub(crate) fn f16_bits(v: u32) -> f32 {
    f16::from_bits(v as u16).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packing split over threads equals one thread's, and every packed code reads
    /// back (`codes32`) as `split_block` gave it, for every superblock type.
    #[test]
    fn packing_over_threads_equals_one_thread_and_keeps_every_code() {
        // Past PARALLEL_PANELS, with a partial last panel.
        let rows = 71 * PANEL + 5;
        let cols = 256;
        for id in 0..SbType::COUNT as u8 {
            let ty = SbType::from_id(id);
            let desc = ty.desc();
            let nsb = cols / desc.sb;
            let rb = nsb * desc.ggml_bytes;
            let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ id as u64;
            let raw: Vec<u8> = (0..rows * rb)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 24) as u8
                })
                .collect();
            let row = |r: usize| &raw[r * rb..(r + 1) * rb];
            let packed = SbPacked::build(ty, rows, cols, row);
            let mut one = vec![0u8; packed.bytes().len()];
            pack_panels(ty, rows, nsb, 0, &mut one, &row);
            assert!(
                packed.bytes() == &one[..],
                "{ty:?}: threads changed the packing"
            );
            let (mut fields, mut u) = ([0u32; 6], vec![0u8; desc.sb]);
            for rr in [0, 17, 40 * PANEL + 3, rows - 1] {
                let (p, r) = (rr / PANEL, rr % PANEL);
                for s in 0..nsb {
                    let blk = &row(rr)[s * desc.ggml_bytes..(s + 1) * desc.ggml_bytes];
                    split_block(ty, blk, &mut fields, &mut u);
                    let sbb = &packed.bytes()[(p * nsb + s) * desc.sb_bytes()..];
                    for sub in 0..desc.subs() {
                        let cb = &sbb[desc.header_bytes() + sub * desc.code_bytes()..];
                        let all = codes32(&desc, cb, r);
                        for k in 0..32 {
                            let v = u[sub * 32 + k] as usize;
                            let want = if desc.lut {
                                desc.values[v] as i32 + 128
                            } else {
                                v as i32
                            };
                            assert_eq!(all[k], want, "{ty:?} row {rr} sb {s} k {k}");
                        }
                    }
                }
            }
        }
    }
}
