//! The quantized matmul kernels on the panel layout (see `packed`), one per ISA.
//!
//! A *tile* is one panel (16 output rows) times up to 8 activation rows. Per 32-block:
//! ```text
//! dp[j][r]  = sum_k u[r][k] * xq[j][k]                (int32, exact)
//! dp       -= offset * isum[j]                        (symmetric layouts: w = d (u - off))
//! acc[j][r] = fma(f32(dp), d[r] * dx[j], acc)         (per-block scale, like ggml)
//! acc[j][r] = fma(m[r], s[j], acc)                    (layouts with stored mins)
//! ```
//! Every ISA performs exactly these f32 operations in this order, so SIMD results equal
//! the scalar reference bit for bit (the tests still allow a tiny tolerance).

use super::packed::{code, scales, Layout, Packed, PANEL};
use crate::cpu::Isa;
use crate::quant_act::QuantizedActs;

/// Pointers describing one tile; all derived from checked slices by `run_panels`.
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// First block of the panel.
    w: *const u8,
    /// 32-blocks per row.
    nb: usize,
    /// Codes / scales / `d*isum` / `isum` of the tile's first activation row.
    xq: *const i8,
    xd: *const f32,
    xs: *const f32,
    xi: *const i32,
    /// Output of activation row 0, panel row 0; activation row j is `ostride` further.
    out: *mut f32,
    ostride: usize,
    /// Valid panel rows (the last panel may be partial).
    valid: usize,
}

/// Activation rows processed per pass over a panel's blocks (weights are unpacked once
/// per pass): 8 fits the 32 zmm registers; AVX2 has only 16 ymm.
fn tile_rows(isa: Isa) -> usize {
    match isa {
        Isa::Avx2 => 4,
        _ => 8,
    }
}

/// Activation rows whose codes stay cache-resident while a task walks its panels.
const ACT_CHUNK: usize = 32;

/// Computes output rows of panels `p0..p1` for every activation row.
///
/// # Safety
/// `out` must point to `acts.n() * rows` floats, and no other thread may write the
/// entries of these panels concurrently. `isa` must be supported (VNNI for `Avx512`).
pub(crate) unsafe fn run_panels(
    isa: Isa,
    packed: &Packed,
    p0: usize,
    p1: usize,
    acts: &QuantizedActs,
    rows: usize,
    out: *mut f32,
) {
    let (nb, l) = (packed.nb, packed.layout);
    let cols = nb * 32;
    debug_assert_eq!(acts.cols(), cols);
    let n = acts.n();
    let bb = l.block_bytes();
    let w = packed.bytes().as_ptr();
    let tr = tile_rows(isa);
    let (xq, xd, xs, xi) = (acts.codes(), acts.scales(), acts.sums(), acts.isums());
    for a0 in (0..n).step_by(ACT_CHUNK) {
        let a1 = (a0 + ACT_CHUNK).min(n);
        for p in p0..p1 {
            let valid = PANEL.min(rows - p * PANEL);
            for j0 in (a0..a1).step_by(tr) {
                let t = Tile {
                    w: w.add(p * nb * bb),
                    nb,
                    xq: xq.as_ptr().add(j0 * cols),
                    xd: xd.as_ptr().add(j0 * nb),
                    xs: xs.as_ptr().add(j0 * nb),
                    xi: xi.as_ptr().add(j0 * nb),
                    out: out.add(j0 * rows + p * PANEL),
                    ostride: rows,
                    valid,
                };
                run_tile(isa, l, &t, tr.min(a1 - j0));
            }
        }
    }
}

unsafe fn run_tile(isa: Isa, l: Layout, t: &Tile, nr: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => match l {
            Layout::Q4MinF16 => avx512::tile::<true, false, true>(t, nr),
            Layout::Q4SymF16 => avx512::tile::<true, false, false>(t, nr),
            Layout::Q4MinF32 => avx512::tile::<true, true, true>(t, nr),
            Layout::Q8SymF16 => avx512::tile::<false, false, false>(t, nr),
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => match l {
            Layout::Q4MinF16 => avx2::tile::<true, false, true>(t, nr),
            Layout::Q4SymF16 => avx2::tile::<true, false, false>(t, nr),
            Layout::Q4MinF32 => avx2::tile::<true, true, true>(t, nr),
            Layout::Q8SymF16 => avx2::tile::<false, false, false>(t, nr),
        },
        _ => tile_scalar(l, t, nr),
    }
}

/// The reference kernel: the same arithmetic as the SIMD tiles, one lane at a time.
unsafe fn tile_scalar(l: Layout, t: &Tile, nr: usize) {
    let bb = l.block_bytes();
    let cols = t.nb * 32;
    let mut acc = [[0f32; PANEL]; 8];
    for blk in 0..t.nb {
        let b = std::slice::from_raw_parts(t.w.add(blk * bb), bb);
        for r in 0..PANEL {
            let (d, m) = scales(l, b, r);
            let mut u = [0i32; 32];
            for (k, uk) in u.iter_mut().enumerate() {
                *uk = code(l, b, r, k) as i32;
            }
            for (j, accj) in acc.iter_mut().enumerate().take(nr) {
                let x = std::slice::from_raw_parts(t.xq.add(j * cols + blk * 32), 32);
                let mut dp: i32 = u.iter().zip(x).map(|(&a, &b)| a * b as i32).sum();
                let jb = j * t.nb + blk;
                if !l.stored_min() {
                    dp -= l.offset() * *t.xi.add(jb);
                }
                let sc = d * *t.xd.add(jb);
                accj[r] = (dp as f32).mul_add(sc, accj[r]);
                if l.stored_min() {
                    accj[r] = m.mul_add(*t.xs.add(jb), accj[r]);
                }
            }
        }
    }
    for (j, accj) in acc.iter().enumerate().take(nr) {
        for (r, &v) in accj.iter().enumerate().take(t.valid) {
            *t.out.add(j * t.ostride + r) = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Tile;

    /// Bytes ahead of the current block to prefetch (a few blocks: DRAM latency / block time).
    const PREFETCH: usize = 2048;
    use std::arch::x86_64::*;

    /// Dispatches the activation-row count to a fully unrolled instance.
    pub(super) unsafe fn tile<const C4: bool, const F32S: bool, const MIN: bool>(
        t: &Tile,
        nr: usize,
    ) {
        match nr {
            1 => tile_n::<C4, F32S, MIN, 1>(t),
            2 => tile_n::<C4, F32S, MIN, 2>(t),
            3 => tile_n::<C4, F32S, MIN, 3>(t),
            4 => tile_n::<C4, F32S, MIN, 4>(t),
            5 => tile_n::<C4, F32S, MIN, 5>(t),
            6 => tile_n::<C4, F32S, MIN, 6>(t),
            7 => tile_n::<C4, F32S, MIN, 7>(t),
            _ => tile_n::<C4, F32S, MIN, 8>(t),
        }
    }

    #[inline(always)]
    unsafe fn load_scales<const F32S: bool>(p: *const u8) -> __m512 {
        if F32S {
            _mm512_loadu_ps(p as *const f32)
        } else {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile_n<const C4: bool, const F32S: bool, const MIN: bool, const NB: usize>(t: &Tile) {
        let code_bytes = if C4 { 256 } else { 512 };
        let sbytes = if F32S { 64 } else { 32 };
        let bb = code_bytes + sbytes * (1 + MIN as usize);
        let off = if C4 { 8 } else { 128 };
        let cols = t.nb * 32;
        let m4 = _mm512_set1_epi8(0x0f);
        let mut acc = [_mm512_setzero_ps(); NB];
        for blk in 0..t.nb {
            let base = t.w.add(blk * bb);
            // Decode streams weights from DRAM; the hardware prefetcher alone runs dry.
            for line in (0..bb).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(PREFETCH + line) as *const i8);
            }
            let mut u = [_mm512_setzero_si512(); 8];
            if C4 {
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
            let d = load_scales::<F32S>(base.add(code_bytes));
            let m = if MIN {
                load_scales::<F32S>(base.add(code_bytes + sbytes))
            } else {
                _mm512_setzero_ps()
            };
            for (j, accj) in acc.iter_mut().enumerate() {
                let xp = t.xq.add(j * cols + blk * 32) as *const i32;
                let jb = j * t.nb + blk;
                let dp = if NB <= 4 {
                    // Two chains per row: with few rows, one chain of 8 dependent `vpdpbusd`
                    // (latency ~5) per row leaves the VNNI ports waiting (measured ~10%
                    // faster at 4 rows; at 8 rows the extra add costs more than it hides).
                    // Integer sums are exact, so the split does not change the result.
                    let mut e = _mm512_setzero_si512();
                    let mut o = _mm512_setzero_si512();
                    for k in 0..4 {
                        let x0 = _mm512_set1_epi32(xp.add(2 * k).read_unaligned());
                        let x1 = _mm512_set1_epi32(xp.add(2 * k + 1).read_unaligned());
                        e = _mm512_dpbusd_epi32(e, u[2 * k], x0);
                        o = _mm512_dpbusd_epi32(o, u[2 * k + 1], x1);
                    }
                    _mm512_add_epi32(e, o)
                } else {
                    let mut s = _mm512_setzero_si512();
                    for (k, uk) in u.iter().enumerate() {
                        let x = _mm512_set1_epi32(xp.add(k).read_unaligned());
                        s = _mm512_dpbusd_epi32(s, *uk, x);
                    }
                    s
                };
                let dp = if MIN {
                    dp
                } else {
                    _mm512_sub_epi32(dp, _mm512_set1_epi32(off * *t.xi.add(jb)))
                };
                let sc = _mm512_mul_ps(d, _mm512_set1_ps(*t.xd.add(jb)));
                *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, *accj);
                if MIN {
                    *accj = _mm512_fmadd_ps(m, _mm512_set1_ps(*t.xs.add(jb)), *accj);
                }
            }
        }
        let mask: __mmask16 = if t.valid >= 16 {
            0xffff
        } else {
            (1u16 << t.valid) - 1
        };
        for (j, accj) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(t.out.add(j * t.ostride), mask, *accj);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Tile;
    use std::arch::x86_64::*;

    pub(super) unsafe fn tile<const C4: bool, const F32S: bool, const MIN: bool>(
        t: &Tile,
        nr: usize,
    ) {
        match nr {
            1 => tile_n::<C4, F32S, MIN, 1>(t),
            2 => tile_n::<C4, F32S, MIN, 2>(t),
            3 => tile_n::<C4, F32S, MIN, 3>(t),
            _ => tile_n::<C4, F32S, MIN, 4>(t),
        }
    }

    #[inline(always)]
    unsafe fn load_scales<const F32S: bool>(p: *const u8) -> __m256 {
        if F32S {
            _mm256_loadu_ps(p as *const f32)
        } else {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        }
    }

    /// Without VNNI: `vpmaddubsw` (u8 x i8 -> saturating i16 pairs) then `vpmaddwd`.
    /// 4-bit codes: 8 pair sums of at most 15*127*2 add up to <= 30480, so they are summed
    /// in i16 before widening. 8-bit codes would overflow i16 (255*127*2), so they use the
    /// sign trick on the signed weight `u - 128`: |w| (u8) x sign(x, w) (i8) <= 32512.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_n<const C4: bool, const F32S: bool, const MIN: bool, const NB: usize>(t: &Tile) {
        let code_bytes = if C4 { 256 } else { 512 };
        let sbytes = if F32S { 64 } else { 32 };
        let ssz = if F32S { 4 } else { 2 };
        let bb = code_bytes + sbytes * (1 + MIN as usize);
        let cols = t.nb * 32;
        let m4 = _mm256_set1_epi8(0x0f);
        let x80 = _mm256_set1_epi8(0x80u8 as i8);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NB]; 2];
        for blk in 0..t.nb {
            let base = t.w.add(blk * bb);
            for (h, acch) in acc.iter_mut().enumerate() {
                let d = load_scales::<F32S>(base.add(code_bytes + h * 8 * ssz));
                let m = if MIN {
                    load_scales::<F32S>(base.add(code_bytes + sbytes + h * 8 * ssz))
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
                for (j, accj) in acch.iter_mut().enumerate() {
                    let xp = t.xq.add(j * cols + blk * 32) as *const i32;
                    let jb = j * t.nb + blk;
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
                        // Sum of (u - 128) * x == dp - 128 * isum: already offset-corrected.
                        let mut s = _mm256_setzero_si256();
                        for k in 0..8 {
                            let x = _mm256_set1_epi32(xp.add(k).read_unaligned());
                            let p = _mm256_maddubs_epi16(a[k], _mm256_sign_epi8(x, u[k]));
                            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
                        }
                        s
                    };
                    let sc = _mm256_mul_ps(d, _mm256_set1_ps(*t.xd.add(jb)));
                    *accj = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), sc, *accj);
                    if MIN {
                        *accj = _mm256_fmadd_ps(m, _mm256_set1_ps(*t.xs.add(jb)), *accj);
                    }
                }
            }
        }
        for (h, acch) in acc.iter().enumerate() {
            let lo = h * 8;
            if t.valid <= lo {
                break;
            }
            let n = (t.valid - lo).min(8);
            for (j, accj) in acch.iter().enumerate() {
                let dst = t.out.add(j * t.ostride + lo);
                if n == 8 {
                    _mm256_storeu_ps(dst, *accj);
                } else {
                    let mut tmp = [0f32; 8];
                    _mm256_storeu_ps(tmp.as_mut_ptr(), *accj);
                    std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n);
                }
            }
        }
    }
}
