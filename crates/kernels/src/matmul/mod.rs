//! Weight matrices and the batched matmul `out = x W^T` that folio spends its time in.
//!
//! NOTE: these kernels are hand-written (not candle's) because candle's CPU Q4_1 dot product
//! is a scalar loop, it quantizes activations serially, and a batch of 16 rows costs it ~15x
//! one row: it re-reads the weights per row (measured on the development machine). Here:
//! - weights are repacked at load time into 16-row panels (`packed`) so one AVX-512 VNNI
//!   `vpdpbusd` computes 4 k-values for 16 output rows;
//! - activations are quantized once per call to int8 blocks of 32 (`quant_act`, ggml's q8_1
//!   numerics), in parallel over the pool for large batches;
//! - each panel's unpacked weights are reused for several activation rows in registers
//!   (8 with block sums, 4 with ggml's lane sums), so n activation rows share one read of
//!   W from memory;
//! - output panels are spread over the persistent `ThreadPool`.
//!
//! Every quantized type keeps its exact bits and scales, only rearranged so one load serves
//! 16 output rows: Q4_0, Q4_1 and Q8_0 in the 32-block panel layout (`packed`, whose
//! kernels can also sum in ggml's lane order for llama.cpp's bits), Q5_0, Q5_1, IQ4_NL and
//! the K-quants Q2_K … Q6_K, IQ4_XS, MXFP4 (e8m0 scale, e2m1 table) and TQ2_0 in the
//! superblock layout (`sb_format`), whose bytes equal the GGUF tensor's; TQ1_0, IQ1_S and
//! IQ1_M in the same layout with their codes decoded at load time (2 or 5 bits per value,
//! a little larger than in GGUF); the grid i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and
//! IQ3_S too, each value's grid lookup done at load time (3- or 4-bit codes into a table
//! of signed grid magnitudes, so more bytes than the file's; see `sb_format`). F32/F16/BF16
//! use a dense FMA kernel.

mod amx;
mod amx_panels;
mod dense;
mod ggml;
mod ggml_k;
mod kernel;
mod packed;
mod sb_format;
mod sb_kernel;
mod sb_lanes;
mod sb_planes;
mod tile;

pub use kernel::Sums;

use crate::cpu::{self, Isa};
use crate::lines::Lines;
use crate::ops::Activation;
use crate::pool::{SendPtr, ThreadPool};
use crate::quant_act::{ExtraSums, Input, QuantizedActs};
use ggml::SubBlock;
use half::{bf16, f16};
use packed::{Layout, Packed, PANEL};
use sb_format::{SbPacked, SbType};
use std::cell::RefCell;
use tile::Span;

/// ggml tensor types folio can multiply with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's names
pub enum WeightType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_0,
    Q5_1,
    IQ4_NL,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_XS,
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
}

impl WeightType {
    /// `(values, bytes)` of one ggml block of this type.
    pub fn block(self) -> (usize, usize) {
        match self {
            WeightType::F32 => (1, 4),
            WeightType::F16 | WeightType::BF16 => (1, 2),
            WeightType::Q4_0 => (32, 18),
            WeightType::Q4_1 => (32, 20),
            WeightType::Q8_0 => (32, 34),
            other => {
                let d = other
                    .sb_type()
                    .expect("legacy and dense types matched above")
                    .desc();
                (d.sb, d.ggml_bytes)
            }
        }
    }

    /// Every type: ggml's id order up to BF16, then the types added later.
    pub const ALL: [WeightType; 25] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q8_0,
        WeightType::Q2_K,
        WeightType::Q3_K,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
        WeightType::IQ4_NL,
        WeightType::IQ4_XS,
        WeightType::BF16,
        WeightType::MXFP4,
        WeightType::TQ1_0,
        WeightType::TQ2_0,
        WeightType::IQ1_S,
        WeightType::IQ1_M,
        WeightType::IQ2_XXS,
        WeightType::IQ2_XS,
        WeightType::IQ3_XXS,
        WeightType::IQ3_S,
        WeightType::IQ2_S,
    ];

    /// Whether matmuls with this type quantize the activations with one scale per 256
    /// values (ggml's Q8_K, as llama.cpp does for these types) rather than per 32.
    pub fn superblock_acts(self) -> bool {
        self.sb_type().is_some_and(|t| t.superblock_acts())
    }

    /// ggml's name (`Q4_K`, `IQ4_XS`, …).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "F32",
            WeightType::F16 => "F16",
            WeightType::BF16 => "BF16",
            WeightType::Q4_0 => "Q4_0",
            WeightType::Q4_1 => "Q4_1",
            WeightType::Q8_0 => "Q8_0",
            WeightType::Q5_0 => "Q5_0",
            WeightType::Q5_1 => "Q5_1",
            WeightType::IQ4_NL => "IQ4_NL",
            WeightType::Q2_K => "Q2_K",
            WeightType::Q3_K => "Q3_K",
            WeightType::Q4_K => "Q4_K",
            WeightType::Q5_K => "Q5_K",
            WeightType::Q6_K => "Q6_K",
            WeightType::IQ4_XS => "IQ4_XS",
            WeightType::MXFP4 => "MXFP4",
            WeightType::TQ1_0 => "TQ1_0",
            WeightType::TQ2_0 => "TQ2_0",
            WeightType::IQ1_S => "IQ1_S",
            WeightType::IQ1_M => "IQ1_M",
            WeightType::IQ2_XXS => "IQ2_XXS",
            WeightType::IQ2_XS => "IQ2_XS",
            WeightType::IQ3_XXS => "IQ3_XXS",
            WeightType::IQ3_S => "IQ3_S",
            WeightType::IQ2_S => "IQ2_S",
        }
    }

    /// The type named `s` (ggml's name, any case).
    pub fn from_name(s: &str) -> Option<WeightType> {
        WeightType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// The superblock-layout type, for the types stored that way.
    fn sb_type(self) -> Option<SbType> {
        Some(match self {
            WeightType::Q5_0 => SbType::Q5_0,
            WeightType::Q5_1 => SbType::Q5_1,
            WeightType::IQ4_NL => SbType::IQ4_NL,
            WeightType::Q2_K => SbType::Q2_K,
            WeightType::Q3_K => SbType::Q3_K,
            WeightType::Q4_K => SbType::Q4_K,
            WeightType::Q5_K => SbType::Q5_K,
            WeightType::Q6_K => SbType::Q6_K,
            WeightType::IQ4_XS => SbType::IQ4_XS,
            WeightType::MXFP4 => SbType::MXFP4,
            WeightType::TQ1_0 => SbType::TQ1_0,
            WeightType::TQ2_0 => SbType::TQ2_0,
            WeightType::IQ1_S => SbType::IQ1_S,
            WeightType::IQ1_M => SbType::IQ1_M,
            WeightType::IQ2_XXS => SbType::IQ2_XXS,
            WeightType::IQ2_XS => SbType::IQ2_XS,
            WeightType::IQ3_XXS => SbType::IQ3_XXS,
            WeightType::IQ3_S => SbType::IQ3_S,
            WeightType::IQ2_S => SbType::IQ2_S,
            _ => return None,
        })
    }

    /// Bytes of a `rows x cols` tensor in ggml layout (`None` if cols is not a whole
    /// number of blocks or the size overflows).
    pub fn ggml_bytes(self, rows: usize, cols: usize) -> Option<usize> {
        let (bv, bb) = self.block();
        if !cols.is_multiple_of(bv) {
            return None;
        }
        (cols / bv).checked_mul(bb)?.checked_mul(rows)
    }
}

/// Why a matrix could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("{field} = {value} must be a multiple of {multiple}")]
    NotMultiple {
        field: &'static str,
        multiple: usize,
        value: usize,
    },
    #[error("{field} = {value} is below the minimum {min}")]
    TooSmall {
        field: &'static str,
        min: usize,
        value: usize,
    },
    #[error("{field} = {value} exceeds the limit {limit}")]
    TooLarge {
        field: &'static str,
        limit: usize,
        value: usize,
    },
    #[error("{field} has {value} bytes but the shape needs exactly {expected}")]
    WrongLength {
        field: &'static str,
        expected: usize,
        value: usize,
    },
}

/// Largest accepted dimension: far above any real model, small enough that the products
/// computed from it cannot overflow (a crafted file must not cause a huge allocation).
pub const MAX_DIM: usize = 1 << 24;

enum Storage {
    Packed(Packed),
    Super(SbPacked),
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Row blocks of different types stacked (a fused Q/K/V whose V is Q6_K while Q and K
    /// are Q4_K, as Q4_K_M files have): `(first row, part)`, each part written in place.
    Stack(Vec<(usize, QMatrix)>),
}

/// A weight matrix `W[rows = out features][cols = in features]`, repacked at load time
/// into the layout its kernel streams.
pub struct QMatrix {
    ty: WeightType,
    rows: usize,
    cols: usize,
    data: Storage,
    /// Accumulation form of the quantized kernels.
    sums: Sums,
    /// The form llama.cpp's arithmetic runs on, while `sums` is `Ggml`, for the types whose
    /// ggml dot product the superblock kernels do not reproduce.
    ggml: Option<GgmlForm>,
}

/// A superblock matrix rewritten for llama.cpp's summation order (`Sums::Ggml` only: a
/// parity mode, larger than the file).
enum GgmlForm {
    /// K-quant, IQ2_XXS, ternary and 1-bit rows for `ggml_vec_dot_*_q8_K`.
    K(ggml_k::KRows),
    /// Q5_0 rows as Q8_0 blocks (same `d`, byte `code - 16`): `ggml_vec_dot_q5_0_q8_0`
    /// and llamafile's tinyBLAS sign-extend each code to exactly that byte and then sum as
    /// for Q8_0, so the Q8_0 kernel in ggml's lane order gives their bits.
    Q8(Box<QMatrix>),
}

/// Whether a quantized matmul in block sums runs its integer products on AMX tiles (hosts
/// with AMX: see [`amx_available`]); every choice gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Tiles {
    /// AMX from [`amx_min_rows`] activation rows on, for the types where it measured faster,
    /// where the host has it; the vector kernels otherwise.
    #[default]
    Auto,
    /// The AVX-512 / AVX2 kernels only.
    Vector,
    /// AMX for every type and batch size where the host has it (tests).
    Amx,
}

/// Whether every part of a stack is quantized with the same activation scale span (per
/// 32 or per superblock), so one quantization of the activations serves them all.
fn shared_acts(parts: &[(usize, QMatrix)]) -> bool {
    let span = |m: &QMatrix| m.quantized().map(|(_, e)| e.superblock);
    let first = parts.first().and_then(|(_, m)| span(m));
    first.is_some() && parts.iter().all(|(_, m)| span(m) == first)
}

/// Activation rows from which [`Tiles::Auto`] runs type `ty` on AMX (`None`: never, see
/// [`amx_pays`]). A tile product always computes 16 rows, and a panel's codes are unpacked
/// for the tiles once per call: measured on an Intel Xeon with AMX-INT8 (2 threads, 16
/// rows), Q4_K 8,960 × 1,536 ran 228 GMAC/s on tiles against 276 with AVX-512 VNNI (32
/// rows 342 against 271), so the types whose vector kernel rescales once per 32-block
/// start at 32 rows. Q6_K's tiles sum its superblock in integers (`SbType::int_superblock`)
/// where its vector kernel multiplies two 16-value chains a block per row: 16 rows ran
/// 216-225 GMAC/s on tiles against 158-171 (CPUID family 6 model 207, both shapes of the
/// 1.5B's ffn_down). Q4_K and Q5_K, though their tiles now sum whole superblocks too, stay
/// at 32: on model 167 (2 threads, 16 rows) the bare matmul ran faster on tiles (Q4_K
/// 8,960 × 1,536 330-338 against 309-316 GMAC/s, the matrix hot in the caches), yet the
/// 1.5B Q4_K_M's 16 × 256 decode, weights streamed from memory, fell from 137-147 to
/// 126-131 tok/s (three interleaved rounds).
pub fn amx_min_rows(ty: WeightType) -> Option<usize> {
    match ty {
        _ if !amx_pays(ty) => None,
        WeightType::Q6_K => Some(16),
        _ => Some(32),
    }
}

/// Whether the AMX kernel of type `ty` beats its AVX-512 VNNI kernel. Each 32-block's
/// 16 × 16 product is stored and rescaled in f32 by the vector units (the activation scale
/// is per 32 values), so the tiles win by the unpacking and the integer sub-scales the
/// vector kernel no longer does per activation row, and lose where the rescale itself is
/// long: the types with integer mins per 16 values. Measured on an Intel Xeon with
/// AMX-INT8 (CPUID family 6 model 167, 2 threads, 512 rows, 8,960 × 1,536, GMAC/s tiles vs
/// VNNI, the vector kernels with their 16-row tiles): Q4_0 407 vs 283, Q4_1 349 vs 279,
/// Q8_0 346 vs 280, Q5_0 396 vs 251, Q5_1 330 vs 270, IQ4_NL 408 vs 278, MXFP4 418 vs 277,
/// Q3_K 267 vs 222, Q4_K 327-329 vs 228-254, Q5_K 302 vs 269, Q6_K 262 vs 222, IQ4_XS 380
/// vs 269, TQ1_0 399 vs 294, TQ2_0 422 vs 298, IQ1_S 373 vs 272, IQ2_XXS 377 vs 238,
/// IQ2_S 266 vs 222, IQ3_XXS 369 vs 285, IQ3_S 375 vs 287 (the transposed shape and 32
/// rows agree: Q4_0 1,536 × 8,960 438 vs 258, 32 rows 431 vs 282); not faster: Q2_K 176 vs
/// 201, IQ1_M 218 vs 227, IQ2_XS 235 vs 228. Since then Q4_K, Q5_K and Q6_K sum whole
/// superblocks in the tiles (`SbType::int_superblock`), no per-block rescale: Q4_K 527 vs
/// 315, Q5_K 502 vs 309 (model 167); Q6_K on tiles 207-209 -> 388-426 (model 207).
pub fn amx_pays(ty: WeightType) -> bool {
    !matches!(
        ty,
        WeightType::Q2_K | WeightType::IQ1_M | WeightType::IQ2_XS
    )
}

/// Whether this host runs the AMX matmul kernels (AMX-INT8, the OS grants the tile state,
/// `FOLIO_AMX=0` unset). Every quantized type has an AMX kernel (`amx_panels`).
pub fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Where a matmul writes: activation row b's outputs start `b * stride` floats after
/// `ptr`; `stream` lets the kernels that can write past the caches do so.
#[derive(Clone, Copy)]
struct Dst {
    ptr: SendPtr<f32>,
    stride: usize,
    stream: bool,
}

thread_local! {
    /// Quantized activations of the calling thread, reused across calls (no allocation on
    /// the hot path once grown).
    static ACTS: RefCell<QuantizedActs> = RefCell::new(QuantizedActs::new());
}

impl QMatrix {
    /// Builds a matrix from the tensor bytes exactly as stored in GGUF (ggml block layouts,
    /// row-major, each row `cols` values).
    pub fn from_ggml(
        ty: WeightType,
        rows: usize,
        cols: usize,
        raw: &[u8],
    ) -> Result<QMatrix, KernelError> {
        for (field, value) in [("rows", rows), ("cols", cols)] {
            if value == 0 {
                return Err(KernelError::TooSmall {
                    field,
                    min: 1,
                    value,
                });
            }
            if value > MAX_DIM {
                return Err(KernelError::TooLarge {
                    field,
                    limit: MAX_DIM,
                    value,
                });
            }
        }
        let (bv, bb) = ty.block();
        if !cols.is_multiple_of(bv) {
            return Err(KernelError::NotMultiple {
                field: "cols",
                multiple: bv,
                value: cols,
            });
        }
        let row_bytes = cols / bv * bb;
        let expected = row_bytes
            .checked_mul(rows)
            .filter(|&e| e <= isize::MAX as usize)
            .ok_or(KernelError::TooLarge {
                field: "rows * cols",
                limit: isize::MAX as usize,
                value: rows.saturating_mul(cols),
            })?;
        if raw.len() != expected {
            return Err(KernelError::WrongLength {
                field: "raw",
                expected,
                value: raw.len(),
            });
        }
        let row = |r: usize| &raw[r * row_bytes..(r + 1) * row_bytes];
        let nb = cols / 32;
        let data = match ty {
            WeightType::F32 => Storage::F32(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            WeightType::F16 => Storage::F16(
                raw.chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            // NOTE: bf16 widens to f32 exactly; kept as f32 (one code path, 2x bytes).
            WeightType::BF16 => Storage::F32(
                raw.chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            ),
            WeightType::Q4_0 => {
                Storage::Packed(Packed::build(Layout::Q4SymF16, rows, nb, |r, o| {
                    per_block(row(r), 18, o, ggml::decode_q4_0)
                }))
            }
            WeightType::Q4_1 => {
                Storage::Packed(Packed::build(Layout::Q4MinF16, rows, nb, |r, o| {
                    per_block(row(r), 20, o, ggml::decode_q4_1)
                }))
            }
            WeightType::Q8_0 => {
                Storage::Packed(Packed::build(Layout::Q8SymF16, rows, nb, |r, o| {
                    per_block(row(r), 34, o, ggml::decode_q8_0)
                }))
            }
            other => {
                let ty = other
                    .sb_type()
                    .expect("every other type has a superblock layout");
                Storage::Super(SbPacked::build(ty, rows, cols, row))
            }
        };
        Ok(QMatrix {
            ty,
            rows,
            cols,
            data,
            sums: Sums::default(),
            ggml: None,
        })
    }

    /// How the quantized kernels accumulate (see [`Sums`]); dense matrices ignore it.
    pub fn set_sums(&mut self, sums: Sums) {
        self.sums = sums;
        match &mut self.data {
            Storage::Stack(parts) => {
                for (_, m) in parts {
                    m.set_sums(sums);
                }
            }
            Storage::Super(p) if sums == Sums::Ggml && ggml_k::KRows::covers(p.ty) => {
                if self.ggml.is_none() {
                    self.ggml = Some(GgmlForm::K(ggml_k::KRows::build(p, self.rows)));
                }
            }
            Storage::Super(p) if sums == Sums::Ggml && p.ty == SbType::Q5_0 => {
                if self.ggml.is_none() {
                    let raw = p.q5_0_as_q8_0(self.rows);
                    let mut q8 = QMatrix::from_ggml(WeightType::Q8_0, self.rows, self.cols, &raw)
                        .expect("a Q5_0 matrix's shape is a valid Q8_0 shape");
                    q8.set_sums(Sums::Ggml);
                    self.ggml = Some(GgmlForm::Q8(Box::new(q8)));
                }
            }
            _ => self.ggml = None,
        }
    }

    /// Stacks matrices with the same `cols` (of any types) into one: rows of the first,
    /// then of the second, …; one call computes them all, each part with its own kernel.
    pub fn stack(parts: Vec<QMatrix>) -> Result<QMatrix, KernelError> {
        let first = parts.first().ok_or(KernelError::TooSmall {
            field: "parts",
            min: 1,
            value: 0,
        })?;
        let (cols, ty, sums) = (first.cols, first.ty, first.sums);
        let mut at = Vec::with_capacity(parts.len());
        let mut rows = 0;
        for m in parts {
            if m.cols != cols {
                return Err(KernelError::WrongLength {
                    field: "cols of a stacked part",
                    expected: cols,
                    value: m.cols,
                });
            }
            let r = m.rows;
            at.push((rows, m));
            rows += r;
        }
        Ok(QMatrix {
            ty,
            rows,
            cols,
            data: Storage::Stack(at),
            sums,
            ggml: None,
        })
    }

    /// The accumulation form in use.
    pub fn sums(&self) -> Sums {
        self.sums
    }

    /// The ggml type it was built from.
    pub fn weight_type(&self) -> WeightType {
        self.ty
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes one matmul streams from memory (for bandwidth figures).
    pub fn weight_bytes(&self) -> usize {
        match &self.data {
            Storage::Packed(p) => p.bytes().len(),
            Storage::Super(p) => p.bytes().len(),
            Storage::Stack(parts) => parts.iter().map(|(_, m)| m.weight_bytes()).sum(),
            Storage::F32(v) => v.len() * 4,
            Storage::F16(v) => v.len() * 2,
        }
    }

    /// `out[b*rows + r] = sum_k x[b*cols + k] * W[r][k]` for `b in 0..n`; the n activation
    /// rows share one read of W. Uses [`cpu::isa`].
    ///
    /// # Panics
    /// If `x.len() != n * cols` or `out.len() != n * rows` (caller bugs, not input data).
    pub fn matmul(&self, x: &[f32], n: usize, out: &mut [f32], pool: &ThreadPool) {
        self.matmul_with(cpu::isa(), x, n, out, pool)
    }

    /// [`QMatrix::matmul`] of an FFN's down projection straight from its `[gate | up]`
    /// rows (`gu`: `n` rows of `2 * cols`): `x = act(gate) * up` row by row as the
    /// activations are quantized, so the activated rows are never stored in f32 (kernels
    /// that read f32 rows get them computed first). The same bits as activating into a
    /// buffer and calling [`QMatrix::matmul`] on it.
    ///
    /// # Panics
    /// If `gu.len() != n * 2 * cols` or `out.len() != n * rows` (caller bugs).
    pub fn matmul_gated(
        &self,
        gu: &[f32],
        act: Activation,
        n: usize,
        out: &mut [f32],
        pool: &ThreadPool,
    ) {
        self.matmul_input(cpu::isa(), Tiles::Auto, Input::Gated(gu, act), n, out, pool)
    }

    /// [`QMatrix::matmul`] with a forced ISA (clamped to what the CPU supports; the
    /// quantized AVX-512 kernels need VNNI and otherwise run the AVX2 ones).
    pub fn matmul_with(&self, isa: Isa, x: &[f32], n: usize, out: &mut [f32], pool: &ThreadPool) {
        self.matmul_tiles(isa, Tiles::Auto, x, n, out, pool)
    }

    /// [`QMatrix::matmul_with`] with the AMX choice made by the caller.
    pub fn matmul_tiles(
        &self,
        isa: Isa,
        tiles: Tiles,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        pool: &ThreadPool,
    ) {
        self.matmul_input(isa, tiles, Input::Rows(x), n, out, pool)
    }

    /// [`QMatrix::matmul_tiles`] of either kind of input.
    pub fn matmul_input(
        &self,
        isa: Isa,
        tiles: Tiles,
        x: Input<'_>,
        n: usize,
        out: &mut [f32],
        pool: &ThreadPool,
    ) {
        self.matmul_checked(isa, tiles, x, n, (out, false), pool)
    }

    /// [`QMatrix::matmul`] into a cache-line-aligned buffer that the next op reads in a
    /// pass of its own (the FFN's gate-up output): from 256 activation rows the AMX
    /// kernels write it with streaming stores, past the caches (measured faster there;
    /// `amx_panels::streams`). The same bits as [`QMatrix::matmul`].
    ///
    /// # Panics
    /// As [`QMatrix::matmul`].
    pub fn matmul_lines(&self, x: &[f32], n: usize, out: &mut Lines, pool: &ThreadPool) {
        let (isa, x) = (cpu::isa(), Input::Rows(x));
        self.matmul_checked(isa, Tiles::Auto, x, n, (out, true), pool)
    }

    /// The sizes checked, the matmul into `out` (streamed where `stream` and the kernel
    /// can).
    fn matmul_checked(
        &self,
        isa: Isa,
        tiles: Tiles,
        x: Input<'_>,
        n: usize,
        (out, stream): (&mut [f32], bool),
        pool: &ThreadPool,
    ) {
        x.check(n, self.cols);
        assert_eq!(
            out.len(),
            n * self.rows,
            "out.len() must be n * rows = {n} * {}",
            self.rows
        );
        if n == 0 {
            return;
        }
        let dst = Dst {
            ptr: SendPtr(out.as_mut_ptr()),
            stride: self.rows,
            stream,
        };
        self.matmul_raw(isa.clamp(), tiles, x, n, dst, pool);
    }

    /// The matmul into `dst`.
    fn matmul_raw(
        &self,
        isa: Isa,
        tiles: Tiles,
        x: Input<'_>,
        n: usize,
        dst: Dst,
        pool: &ThreadPool,
    ) {
        // The quantized AVX-512 kernels need VNNI; without it the AVX2 ones run.
        let qisa = if isa == Isa::Avx512 && !cpu::has_vnni512() {
            Isa::Avx2
        } else {
            isa
        };
        let tiles = if qisa == Isa::Avx512 && self.sums == Sums::Block && amx_available() {
            tiles
        } else {
            Tiles::Vector
        };
        match &self.data {
            Storage::Super(_) if self.ggml.is_some() => {
                match self.ggml.as_ref().expect("checked") {
                    // SAFETY: `matmul_with` checked the sizes of x and the output.
                    GgmlForm::K(k) => unsafe {
                        k.matmul(qisa, &x.rows(n, self.cols), n, dst.ptr, dst.stride, pool)
                    },
                    GgmlForm::Q8(m) => m.matmul_raw(isa, tiles, x, n, dst, pool),
                }
            }
            Storage::Packed(_) | Storage::Super(_) => {
                let (panels, extra) = self.quantized().expect("a quantized storage");
                // SAFETY: as in `over_panels`; `extra` holds the sums the kernel reads.
                let run = |span: &Span| unsafe { self.run_span(qisa, tiles, span) };
                self.quant_matmul(panels, extra, &run, qisa, x, n, dst, pool)
            }
            Storage::F32(w) => self.dense_matmul(w, isa, &x.rows(n, self.cols), n, dst, pool),
            Storage::F16(w) => self.dense_matmul(w, isa, &x.rows(n, self.cols), n, dst, pool),
            // The fast form quantizes the activations once for all parts (a Q4_K + Q6_K QKV
            // would otherwise quantize them once a part) and spreads every part's panels over
            // the pool in one hand-off.
            // (Parts that disagree on the activations' scale span keep their own.)
            Storage::Stack(parts) if self.sums == Sums::Block && shared_acts(parts) => {
                let mut starts = Vec::with_capacity(parts.len());
                let mut panels = 0;
                let mut extra = ExtraSums::default();
                for (_, m) in parts {
                    let (p, e) = m.quantized().expect("checked above");
                    starts.push(panels);
                    panels += p;
                    extra.groups |= e.groups;
                    extra.halves |= e.halves;
                    extra.superblock = e.superblock;
                }
                let run = |span: &Span| {
                    let (p0, p1) = span.panels;
                    for ((r0, m), &s0) in parts.iter().zip(&starts) {
                        let s1 = s0 + m.quantized().expect("checked above").0;
                        let (a, b) = (p0.max(s0), p1.min(s1));
                        if a >= b {
                            continue;
                        }
                        let part = Span {
                            panels: (a - s0, b - s0),
                            acts: span.acts,
                            rows: m.rows,
                            // The part's rows r0..r0+m.rows lie inside every output row.
                            out: span.out.wrapping_add(*r0),
                            ostride: span.ostride,
                            stream: span.stream,
                        };
                        // SAFETY: as in `over_panels`: the part's panels a..b are rows of
                        // this task alone; `extra` holds every part's sums.
                        unsafe { m.run_span(qisa, tiles, &part) }
                    }
                };
                self.quant_matmul(panels, extra, &run, qisa, x, n, dst, pool)
            }
            Storage::Stack(parts) => {
                // Each part reads the rows: a gated input is activated once for all.
                let x = x.rows(n, self.cols);
                for (r0, part) in parts {
                    // SAFETY: the part's rows r0..r0+part.rows lie inside every output row.
                    let o = Dst {
                        ptr: SendPtr(unsafe { dst.ptr.get().add(*r0) }),
                        ..dst
                    };
                    part.matmul_raw(isa, tiles, Input::Rows(&x), n, o, pool);
                }
            }
        }
    }

    /// A quantized matrix's panel count and the activation sums its kernel reads (`None`
    /// for dense and stacked matrices).
    fn quantized(&self) -> Option<(usize, ExtraSums)> {
        match &self.data {
            Storage::Packed(p) => Some((
                p.panels,
                // Group sums feed only the offset term of symmetric layouts in ggml's lane
                // order.
                ExtraSums {
                    groups: self.sums == Sums::Ggml && !p.layout.stored_min(),
                    halves: false,
                    superblock: false,
                },
            )),
            Storage::Super(p) => Some((
                p.panels,
                ExtraSums {
                    groups: false,
                    halves: p.ty.desc().sub16,
                    superblock: p.ty.superblock_acts(),
                },
            )),
            _ => None,
        }
    }

    /// Runs the quantized kernel of this matrix over `span`.
    ///
    /// # Safety
    /// As [`tile::for_each_tile`]; `isa` must be supported (VNNI for `Avx512`), `tiles`
    /// other than `Vector` only where [`amx_available`] and in block sums, and the span's
    /// activations must hold the sums [`QMatrix::quantized`] names.
    unsafe fn run_span(&self, isa: Isa, tiles: Tiles, span: &Span) {
        let amx = match tiles {
            Tiles::Vector => false,
            Tiles::Auto => amx_min_rows(self.ty).is_some_and(|m| span.acts.n() >= m),
            Tiles::Amx => true,
        };
        match &self.data {
            #[cfg(target_arch = "x86_64")]
            Storage::Super(p) if amx => amx_panels::run_sb(p, span),
            #[cfg(target_arch = "x86_64")]
            Storage::Packed(p) if amx => amx_panels::run_packed(p, span),
            Storage::Packed(p) => kernel::run_panels(isa, self.sums, p, span),
            Storage::Super(p) => sb_kernel::run_panels(isa, p, span),
            _ => unreachable!("run_span is called on quantized matrices only"),
        }
    }

    /// Quantizes `x` (into this thread's buffer) with the `extra` sums the kernel reads,
    /// then runs `tiles` over the `panels` spread across the pool, writing into `dst`.
    #[allow(clippy::too_many_arguments)]
    fn quant_matmul(
        &self,
        panels: usize,
        extra: ExtraSums,
        tiles: &(dyn Fn(&Span) + Sync),
        isa: Isa,
        x: Input<'_>,
        n: usize,
        dst: Dst,
        pool: &ThreadPool,
    ) {
        let run = |acts: &mut QuantizedActs| {
            acts.quantize(isa, x, n, self.cols, extra, pool);
            let acts = &*acts;
            let rows = self.rows;
            over_panels(panels, n, pool, &|p0, p1| {
                tiles(&Span {
                    panels: (p0, p1),
                    acts,
                    rows,
                    out: dst.ptr.get(),
                    ostride: dst.stride,
                    stream: dst.stream,
                })
            });
        };
        ACTS.with(|cell| match cell.try_borrow_mut() {
            Ok(mut acts) => run(&mut acts),
            // Re-entered on this thread (a matmul inside a pool task): a fresh buffer.
            Err(_) => run(&mut QuantizedActs::new()),
        })
    }

    fn dense_matmul<T: dense::DenseElem>(
        &self,
        w: &[T],
        isa: Isa,
        x: &[f32],
        n: usize,
        dst: Dst,
        pool: &ThreadPool,
    ) {
        let (out, ostride) = (dst.ptr, dst.stride);
        let (rows, cols) = (self.rows, self.cols);
        let groups = rows.div_ceil(PANEL);
        let (n_tasks, per) = split(groups, pool.n_threads(), n);
        pool.run(n_tasks, &|t| {
            let r0 = (t * per * PANEL).min(rows);
            let r1 = ((t + 1) * per * PANEL).min(rows);
            // SAFETY: task t owns rows r0..r1 of every output row; sizes checked above.
            unsafe { dense::run_rows(isa, w, cols, ostride, r0, r1, x, n, out.get()) };
        });
    }

    /// Dequantizes row `r` into `out` (`cols` values): the embedding lookup, exactly the
    /// values ggml's dequantization gives.
    ///
    /// # Panics
    /// If `r >= rows` or `out.len() != cols`.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} out of range (rows = {})", self.rows);
        assert_eq!(
            out.len(),
            self.cols,
            "out.len() must be cols = {}",
            self.cols
        );
        let c = self.cols;
        match &self.data {
            Storage::Packed(p) => p.row_f32(r, out),
            Storage::Super(p) => p.row_f32(r, out),
            Storage::Stack(parts) => {
                let (r0, m) = parts
                    .iter()
                    .rev()
                    .find(|(r0, _)| *r0 <= r)
                    .expect("parts start at row 0");
                m.row_f32(r - r0, out)
            }
            Storage::F32(w) => out.copy_from_slice(&w[r * c..(r + 1) * c]),
            Storage::F16(w) => {
                for (o, v) in out.iter_mut().zip(&w[r * c..(r + 1) * c]) {
                    *o = v.to_f32();
                }
            }
        }
    }
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("weight_bytes", &self.weight_bytes())
            .finish()
    }
}

fn per_block(row: &[u8], bytes: usize, out: &mut [SubBlock], f: fn(&[u8], &mut SubBlock)) {
    for (blk, sb) in row.chunks_exact(bytes).zip(out.iter_mut()) {
        f(blk, sb);
    }
}

/// Runs `f(p0, p1)` on the pool for disjoint ranges of `panels` panels covering them all.
///
/// Callers' SAFETY: a range's panels are output rows no other task writes; the output
/// (`(n - 1) * ostride + rows` floats, checked by `matmul_with`) outlives `run`.
fn over_panels(panels: usize, n: usize, pool: &ThreadPool, f: &(dyn Fn(usize, usize) + Sync)) {
    let (n_tasks, per) = split(panels, pool.n_threads(), n);
    pool.run(n_tasks, &|t| {
        let p0 = (t * per).min(panels);
        let p1 = ((t + 1) * per).min(panels);
        f(p0, p1);
    });
}

/// Splits `units` panels into `(tasks, units per task)`: a few tasks per thread so a
/// thread slowed by another process does not hold up the call, but not so many that the
/// per-task overhead shows. Large batches have more work per panel, so smaller tasks.
fn split(units: usize, threads: usize, n: usize) -> (usize, usize) {
    if threads <= 1 {
        return (1, units);
    }
    let per_thread = if n >= 16 { 8 } else { 4 };
    let tasks = units.min(threads * per_thread).max(1);
    let per = units.div_ceil(tasks);
    (units.div_ceil(per), per)
}
