//! The quantized matmul kernels on the panel layout (see `packed`), one per ISA.
//!
//! A *tile* is one panel (16 output rows) times a few activation rows. The arithmetic is
//! ggml's x86 dot product (`ggml_vec_dot_q4_1_q8_1`, `…_q4_0_q8_0`, `…_q8_0_q8_0`), so that
//! outputs equal llama.cpp's bit for bit: per 32-block and per group g of 4 values
//! (one `vpdpbusd` lane),
//! ```text
//! p[g]      = sum_{k in 4g..4g+4} u[r][k] * xq[j][k] - offset * gsum[j][g]   (int32, exact)
//! acc[g]    = fma(f32(p[g]), d[r] * dx[j], acc[g])      (8 float accumulators, as ggml's lanes)
//! summs     = summs + m[r] * s[j]                       (layouts with stored mins, unfused)
//! out       = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7)) + summs
//! ```
//! (the last line is ggml's `hsum_float_8`): [`Sums::Ggml`]. [`Sums::Block`] sums the 32
//! products of a block in int32 first and keeps one float accumulator per row:
//! ```text
//! acc = fma(f32(sum_g p[g]), d[r] * dx[j], acc);  acc = fma(m[r], s[j], acc)
//! ```
//! a third of the float work per activation row, so batched steps (prefill, many decodes,
//! speculative verification) run ~2x faster, but its rounding differs from llama.cpp's, and
//! this model's int8 activation quantization turns last-bit differences into flipped codes
//! and logits that move by tenths of a nat. Every ISA performs exactly the f32 operations
//! of the chosen form in this order, so SIMD results equal the scalar reference bit for bit.

use super::packed::{code, scales, Geometry, Layout, Packed, PANEL};
use super::tile::{for_each_tile, Span, Tile};
use crate::cpu::Isa;
use crate::quant_act::GROUP;

/// How a row's dot product accumulates its blocks (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Sums {
    /// ggml's x86 order: llama.cpp's exact bits for Q4_0, Q4_1 and Q8_0 here, and for
    /// Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, TQ1_0, TQ2_0, IQ1_S and IQ1_M through their
    /// `ggml_vec_dot_*_q8_K` (the `ggml_k` rows), and Q5_0 through its Q8_0 bytes; other
    /// types keep the block order.
    Ggml,
    /// One int32 sum and one FMA per block: fastest.
    #[default]
    Block,
}

/// Activation rows processed per pass over a panel's blocks (weights are unpacked once
/// per pass). In ggml's order each row keeps 8 group accumulators and a min sum: 4 rows are
/// 36 zmm, a few spilled to L1, still measured ~10% faster than 2 rows (weights unpacked
/// half as often); AVX2 has only 16 ymm. In block sums a row keeps one accumulator; Q8_0
/// (twice the bytes of the 4-bit layouts) passes 16 rows, the 4-bit layouts 8. Measured on
/// an Intel Xeon (AMX host, 2 threads, 16 rows): 8,960 × 1,536 streamed from DRAM, 16 rows
/// against 8, Q8_0 184-189 -> 216-224 GMAC/s, Q4_1 257-261 -> 263-271, Q4_0 261-271 ->
/// 256-284; in a model, decode 16 × 256 of the Qwen2.5-1.5B in Q8_0 109-110 -> 121-127
/// tok/s and in Q4_0 140-141 -> 143-145, but SmolLM2-135M's Q4_1 811-875 -> 769-800.
fn tile_rows(isa: Isa, sums: Sums, layout: Layout) -> usize {
    match (isa, sums) {
        (Isa::Avx2, Sums::Ggml) => 2,
        (Isa::Avx2, Sums::Block) => 4,
        (_, Sums::Ggml) => 4,
        (_, Sums::Block) if layout == Layout::Q8SymF16 => 16,
        (_, Sums::Block) => 8,
    }
}

/// ggml's `hsum_float_8` of 8 lane values, then `+ summs`.
#[inline(always)]
fn hsum8(a: &[f32; 8], summs: f32) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    ((r[0] + r[2]) + (r[1] + r[3])) + summs
}

/// Computes the output rows of the span's panels for every activation row.
///
/// # Safety
/// As [`for_each_tile`]; `isa` must be supported (VNNI for `Avx512`).
pub(crate) unsafe fn run_panels(isa: Isa, sums: Sums, packed: &Packed, span: &Span) {
    let l = packed.layout;
    debug_assert_eq!(span.acts.cols(), packed.nb * 32);
    let panels = (packed.bytes().as_ptr(), packed.nb * l.block_bytes());
    for_each_tile(panels, span, false, tile_rows(isa, sums, l), |t, nr| {
        run_tile(isa, sums, l, t, nr)
    });
}

unsafe fn run_tile(isa: Isa, sums: Sums, l: Layout, t: &Tile, nr: usize) {
    // Layout -> the kernel's const parameters (4-bit codes, f32 scales, stored mins), then
    // the accumulation form.
    macro_rules! layouts {
        ($m:ident, $lanes:literal) => {
            match l {
                Layout::Q4MinF16 => $m::tile::<true, true, $lanes>(t, nr),
                Layout::Q4SymF16 => $m::tile::<true, false, $lanes>(t, nr),
                Layout::Q8SymF16 => $m::tile::<false, false, $lanes>(t, nr),
            }
        };
    }
    match (isa, sums) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, Sums::Ggml) => layouts!(avx512, true),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, Sums::Block) => layouts!(avx512, false),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, Sums::Ggml) => layouts!(avx2, true),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, Sums::Block) => layouts!(avx2, false),
        _ => tile_scalar(sums, l, t, nr),
    }
}

/// The reference kernel: the same arithmetic as the SIMD tiles, one lane at a time.
#[allow(clippy::needless_range_loop)]
unsafe fn tile_scalar(sums: Sums, l: Layout, t: &Tile, nr: usize) {
    let bb = l.block_bytes();
    let cols = t.nb * 32;
    let ng = cols / GROUP;
    for j in 0..nr {
        let mut acc = [[0f32; 8]; PANEL];
        let mut summs = [0f32; PANEL];
        for blk in 0..t.nb {
            let b = std::slice::from_raw_parts(t.w.add(blk * bb), bb);
            let x = std::slice::from_raw_parts(t.xq.add(j * cols + blk * 32), 32);
            let jb = j * t.nb + blk;
            for r in 0..PANEL {
                let (d, m) = scales(l, b, r);
                let sc = d * *t.xd.add(jb);
                if sums == Sums::Block {
                    let mut dp: i32 = (0..32).map(|k| code(l, b, r, k) as i32 * x[k] as i32).sum();
                    if !l.stored_min() {
                        dp -= l.offset() * *t.xi.add(jb);
                    }
                    acc[r][0] = (dp as f32).mul_add(sc, acc[r][0]);
                    if l.stored_min() {
                        acc[r][0] = m.mul_add(*t.xs.add(jb), acc[r][0]);
                    }
                    continue;
                }
                for g in 0..8 {
                    let mut p: i32 = (4 * g..4 * g + 4)
                        .map(|k| code(l, b, r, k) as i32 * x[k] as i32)
                        .sum();
                    if !l.stored_min() {
                        p -= l.offset() * *t.xg.add(j * ng + blk * 8 + g);
                    }
                    acc[r][g] = (p as f32).mul_add(sc, acc[r][g]);
                }
                if l.stored_min() {
                    summs[r] += m * *t.xs.add(jb);
                }
            }
        }
        for r in 0..t.valid {
            *t.out.add(j * t.ostride + r) = match sums {
                Sums::Ggml => hsum8(&acc[r], summs[r]),
                Sums::Block => acc[r][0],
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::super::tile::{block_dots, mask16, unroll_rows};
    use super::{Geometry, Tile};
    use std::arch::x86_64::*;

    /// Dispatches the activation-row count to a fully unrolled instance.
    pub(super) unsafe fn tile<const C4: bool, const MIN: bool, const LANES: bool>(
        t: &Tile,
        nr: usize,
    ) {
        if LANES {
            unroll_rows!(nr, tile_n(C4, MIN, LANES)(t), [1, 2, 3, 4, 5, 6, 7], 8)
        } else {
            unroll_rows!(
                nr,
                tile_n(C4, MIN, LANES)(t),
                [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
                16
            )
        }
    }

    /// The 16 f16 scales at `p` as f32.
    #[inline(always)]
    pub(in crate::matmul) unsafe fn load_scales(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }

    /// The 8 `vpdpbusd` operands (16 rows x 4 codes each) of the 32-block at `base`:
    /// 4-bit codes split from their bytes (`C4`), 8-bit ones as stored.
    #[inline(always)]
    pub(in crate::matmul) unsafe fn unpack<const C4: bool>(base: *const u8) -> [__m512i; 8] {
        let mut u = [_mm512_setzero_si512(); 8];
        if C4 {
            let m4 = _mm512_set1_epi8(0x0f);
            for i in 0..4 {
                let v = _mm512_loadu_si512(base.add(i * 64) as *const _);
                u[2 * i] = _mm512_and_si512(v, m4);
                u[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
        } else {
            for (i, ui) in u.iter_mut().enumerate() {
                *ui = _mm512_loadu_si512(base.add(i * 64) as *const _);
            }
        }
        u
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile_n<const C4: bool, const MIN: bool, const LANES: bool, const NB: usize>(
        t: &Tile,
    ) {
        let Geometry {
            code_bytes,
            scale_bytes: sbytes,
            block_bytes: bb,
        } = const { Geometry::of(C4, MIN) };
        let off = if C4 { 8 } else { 128 };
        let cols = t.nb * 32;
        let ng = cols / super::GROUP;
        let mut acc = [[_mm512_setzero_ps(); 8]; NB];
        let mut summs = [_mm512_setzero_ps(); NB];
        let ahead = t.ahead;
        for blk in 0..t.nb {
            let base = t.w.add(blk * bb);
            if ahead > 0 {
                let (first, lines) = crate::cpu::lines_in(base as usize + ahead, bb);
                for line in 0..lines {
                    crate::cpu::prefetch_weights::<NB>((first + 64 * line) as *const u8);
                }
            }
            let u = unpack::<C4>(base);
            let d = load_scales(base.add(code_bytes));
            let m = if MIN {
                load_scales(base.add(code_bytes + sbytes))
            } else {
                _mm512_setzero_ps()
            };
            if !LANES {
                // Sums::Block: every row's chain (`block_dots`), one FMA a block.
                // Symmetric codes: each chain starts at `-offset X` (exact).
                let mut dps = [_mm512_setzero_si512(); NB];
                if !MIN {
                    for (j, dp) in dps.iter_mut().enumerate() {
                        *dp = _mm512_set1_epi32(-off * *t.xi.add(j * t.nb + blk));
                    }
                }
                let dps = block_dots(&u, t.xq.add(blk * 32), cols, dps);
                for (j, (accj, dp)) in acc.iter_mut().zip(dps).enumerate() {
                    let jb = j * t.nb + blk;
                    let sc = _mm512_mul_ps(d, _mm512_set1_ps(*t.xd.add(jb)));
                    accj[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, accj[0]);
                    if MIN {
                        accj[0] = _mm512_fmadd_ps(m, _mm512_set1_ps(*t.xs.add(jb)), accj[0]);
                    }
                }
                continue;
            }
            for j in 0..NB {
                let xp = t.xq.add(j * cols + blk * 32) as *const i32;
                let gp = t.xg.add(j * ng + blk * 8);
                let jb = j * t.nb + blk;
                let sc = _mm512_mul_ps(d, _mm512_set1_ps(*t.xd.add(jb)));
                for g in 0..8 {
                    let x = _mm512_set1_epi32(xp.add(g).read_unaligned());
                    // The offset of symmetric codes enters as the starting value (exact).
                    let init = if MIN {
                        _mm512_setzero_si512()
                    } else {
                        _mm512_set1_epi32(-off * *gp.add(g))
                    };
                    let p = _mm512_dpbusd_epi32(init, u[g], x);
                    acc[j][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[j][g]);
                }
                if MIN {
                    let ms = _mm512_mul_ps(m, _mm512_set1_ps(*t.xs.add(jb)));
                    summs[j] = _mm512_add_ps(summs[j], ms);
                }
            }
        }
        let mask: __mmask16 = mask16(t.valid);
        for j in 0..NB {
            let a = &acc[j];
            let v = if LANES {
                let r0 = _mm512_add_ps(a[0], a[4]);
                let r1 = _mm512_add_ps(a[1], a[5]);
                let r2 = _mm512_add_ps(a[2], a[6]);
                let r3 = _mm512_add_ps(a[3], a[7]);
                let h = _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3));
                _mm512_add_ps(h, summs[j])
            } else {
                a[0]
            };
            _mm512_mask_storeu_ps(t.out.add(j * t.ostride), mask, v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::tile::{store8, unroll_rows};
    use super::{Geometry, Tile};
    use std::arch::x86_64::*;

    pub(super) unsafe fn tile<const C4: bool, const MIN: bool, const LANES: bool>(
        t: &Tile,
        nr: usize,
    ) {
        unroll_rows!(nr, tile_n(C4, MIN, LANES)(t), [1, 2, 3], 4)
    }

    #[inline(always)]
    unsafe fn load_scales(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    /// Without VNNI: `vpmaddubsw` (u8 x i8 -> saturating i16 pairs) then `vpmaddwd` give
    /// the same 4-value lane sums as `vpdpbusd`: 4-bit codes directly (2 * 15 * 127 fits
    /// i16), 8-bit codes by the sign trick on the signed weight `u - 128`:
    /// |w| (u8) x sign(x, w) (i8) <= 2 * 128 * 127 fits i16, and the offset is then already
    /// applied.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_n<const C4: bool, const MIN: bool, const LANES: bool, const NB: usize>(
        t: &Tile,
    ) {
        let Geometry {
            code_bytes,
            scale_bytes: sbytes,
            block_bytes: bb,
        } = const { Geometry::of(C4, MIN) };
        let ssz = 2; // f16 scales
        let cols = t.nb * 32;
        let ng = cols / super::GROUP;
        let m4 = _mm256_set1_epi8(0x0f);
        let x80 = _mm256_set1_epi8(0x80u8 as i8);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[[_mm256_setzero_ps(); 8]; NB]; 2];
        let mut summs = [[_mm256_setzero_ps(); NB]; 2];
        for blk in 0..t.nb {
            let base = t.w.add(blk * bb);
            for h in 0..2 {
                let d = load_scales(base.add(code_bytes + h * 8 * ssz));
                let m = if MIN {
                    load_scales(base.add(code_bytes + sbytes + h * 8 * ssz))
                } else {
                    _mm256_setzero_ps()
                };
                let mut u = [_mm256_setzero_si256(); 8];
                let mut a = [_mm256_setzero_si256(); 8];
                if C4 {
                    for i in 0..4 {
                        let v = _mm256_loadu_si256(base.add(i * 64 + h * 32) as *const _);
                        u[2 * i] = _mm256_and_si256(v, m4);
                        u[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    }
                } else {
                    for k in 0..8 {
                        let v = _mm256_loadu_si256(base.add(k * 64 + h * 32) as *const _);
                        u[k] = _mm256_xor_si256(v, x80); // signed weight u - 128
                        a[k] = _mm256_abs_epi8(u[k]);
                    }
                }
                for j in 0..NB {
                    let xp = t.xq.add(j * cols + blk * 32) as *const i32;
                    let gp = t.xg.add(j * ng + blk * 8);
                    let jb = j * t.nb + blk;
                    let sc = _mm256_mul_ps(d, _mm256_set1_ps(*t.xd.add(jb)));
                    if !LANES {
                        // Sums::Block: 4-bit codes sum all 8 pairs in i16 (8 x 2 x 15 x 127
                        // fits), 8-bit ones per group in i32; one FMA per block.
                        let dp = if C4 {
                            let x0 = _mm256_set1_epi32(xp.read_unaligned());
                            let mut s16 = _mm256_maddubs_epi16(u[0], x0);
                            for (k, uk) in u.iter().enumerate().skip(1) {
                                let x = _mm256_set1_epi32(xp.add(k).read_unaligned());
                                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(*uk, x));
                            }
                            let dp = _mm256_madd_epi16(s16, ones);
                            if MIN {
                                dp
                            } else {
                                _mm256_sub_epi32(dp, _mm256_set1_epi32(8 * *t.xi.add(jb)))
                            }
                        } else {
                            let mut s = _mm256_setzero_si256();
                            for k in 0..8 {
                                let x = _mm256_set1_epi32(xp.add(k).read_unaligned());
                                let q = _mm256_maddubs_epi16(a[k], _mm256_sign_epi8(x, u[k]));
                                s = _mm256_add_epi32(s, _mm256_madd_epi16(q, ones));
                            }
                            s
                        };
                        let acc0 = &mut acc[h][j][0];
                        *acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), sc, *acc0);
                        if MIN {
                            let s = _mm256_set1_ps(*t.xs.add(jb));
                            *acc0 = _mm256_fmadd_ps(m, s, *acc0);
                        }
                        continue;
                    }
                    for g in 0..8 {
                        let x = _mm256_set1_epi32(xp.add(g).read_unaligned());
                        let p = if C4 {
                            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[g], x), ones);
                            if MIN {
                                p
                            } else {
                                _mm256_sub_epi32(p, _mm256_set1_epi32(8 * *gp.add(g)))
                            }
                        } else {
                            let q = _mm256_maddubs_epi16(a[g], _mm256_sign_epi8(x, u[g]));
                            _mm256_madd_epi16(q, ones)
                        };
                        acc[h][j][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[h][j][g]);
                    }
                    if MIN {
                        let ms = _mm256_mul_ps(m, _mm256_set1_ps(*t.xs.add(jb)));
                        summs[h][j] = _mm256_add_ps(summs[h][j], ms);
                    }
                }
            }
        }
        for h in 0..2 {
            let lo = h * 8;
            if t.valid <= lo {
                break;
            }
            let n = (t.valid - lo).min(8);
            for j in 0..NB {
                let a = &acc[h][j];
                let v = if LANES {
                    let r0 = _mm256_add_ps(a[0], a[4]);
                    let r1 = _mm256_add_ps(a[1], a[5]);
                    let r2 = _mm256_add_ps(a[2], a[6]);
                    let r3 = _mm256_add_ps(a[3], a[7]);
                    let hs = _mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3));
                    _mm256_add_ps(hs, summs[h][j])
                } else {
                    a[0]
                };
                store8(t.out.add(j * t.ostride + lo), v, n);
            }
        }
    }
}
