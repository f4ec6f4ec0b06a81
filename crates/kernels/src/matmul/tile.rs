//! The tile both quantized kernel families (`kernel` on the panel layout, `sb_kernel` on
//! the superblock layout) work on, the walk that cuts a panel range into tiles, and the
//! pieces of their SIMD tiles that do not depend on the layout: the unrolling of the
//! activation-row count and the masked output stores. The per-layout arithmetic stays in
//! each family's own AVX-512, AVX2 and scalar tiles.

use super::packed::PANEL;
use crate::quant_act::{QuantizedActs, GROUP};

// Both layouts cut the rows into panels of the same height.
const _: () = assert!(super::sb_format::PANEL == PANEL);

/// Pointers describing one tile (one panel times a few activation rows); all derived from
/// checked slices by [`for_each_tile`].
#[derive(Clone, Copy)]
pub(crate) struct Tile {
    /// First weight byte of the panel.
    pub w: *const u8,
    /// 32-blocks per row.
    pub nb: usize,
    /// Codes / scales / `d*isum` / `isum` of the tile's first activation row.
    pub xq: *const i8,
    pub xd: *const f32,
    pub xs: *const f32,
    pub xi: *const i32,
    /// The same sums as f32.
    pub xf: *const f32,
    /// Group sums (`GROUP` values each) of the tile's first activation row.
    pub xg: *const i32,
    /// 16-sums of the tile's first activation row (null unless asked for).
    pub xh: *const i32,
    /// Block sums as i16 pairs of the tile's first activation row (superblock
    /// quantization only: `QuantizedActs::isum_pairs`).
    pub xp: *const i32,
    /// Output of activation row 0, panel row 0; activation row j is `ostride` further.
    pub out: *mut f32,
    pub ostride: usize,
    /// Valid panel rows (the last panel may be partial).
    pub valid: usize,
    /// Bytes ahead of each weight block being read that the SIMD tiles prefetch
    /// (`prefetcht0`, every line of the block), 0 for none: see [`for_each_tile`].
    pub ahead: usize,
}

/// Activation rows whose codes stay cache-resident while a task walks its panels.
const ACT_CHUNK: usize = 32;

/// One task's share of a quantized matmul: panels `p0..p1` for every activation row.
pub(crate) struct Span<'a> {
    pub panels: (usize, usize),
    pub acts: &'a QuantizedActs,
    /// Output rows of the matrix (the last panel may be partial).
    pub rows: usize,
    /// Output of activation row 0; activation row j is `ostride` floats further.
    pub out: *mut f32,
    pub ostride: usize,
    /// Whether the caller asked for streaming stores (`amx_panels::streams`).
    pub stream: bool,
}

/// Calls `run(tile, rows)` for the span's panels (each `panel_bytes` long from `w`) times
/// every group of at most `tr` activation rows.
///
/// Prefetch: the first pass over a panel reads it from memory, prefetching
/// [`crate::cpu::weight_prefetch_for`] the batch's rows ahead. The second pass reads the
/// panel from L1 and would leave the memory idle, so it prefetches the same line of the
/// *next* panel (`panel_bytes` ahead): measured on Zen 5 (2 threads, the 1.5B's 190 MB
/// Q6_K output head at 16 rows), 41 ms a call with neither, 24 ms with 4 KiB ahead in
/// every pass, 33 ms with the next panel alone, 20-22 ms with both.
///
/// # Safety
/// `w` must hold the panels; `span.out` must point to `(acts.n() - 1) * ostride + rows`
/// floats, and no other thread may write the entries of these panels concurrently.
/// `halves` requires that `acts` holds the 16-sums.
#[inline(always)]
pub(crate) unsafe fn for_each_tile(
    (w, panel_bytes): (*const u8, usize),
    span: &Span,
    halves: bool,
    tr: usize,
    run: impl Fn(&Tile, usize),
) {
    let Span {
        panels: (p0, p1),
        acts,
        rows,
        out,
        ostride,
        ..
    } = *span;
    let cols = acts.cols();
    let nb = cols / 32;
    let n = acts.n();
    let (xq, xd, xs, xi) = (acts.codes(), acts.scales(), acts.sums(), acts.isums());
    let xf = acts.isums_f32();
    let xg = acts.group_sums().as_ptr();
    let xh = if halves {
        acts.half_sums().as_ptr()
    } else {
        std::ptr::null()
    };
    let xp = acts.isum_pairs().as_ptr();
    let first_ahead = crate::cpu::weight_prefetch_for(n);
    for a0 in (0..n).step_by(ACT_CHUNK) {
        let a1 = (a0 + ACT_CHUNK).min(n);
        for p in p0..p1 {
            let valid = PANEL.min(rows - p * PANEL);
            for j0 in (a0..a1).step_by(tr) {
                let ahead = match (j0 - a0) / tr {
                    0 => first_ahead,
                    1 if p + 1 < p1 => panel_bytes,
                    _ => 0,
                };
                let t = Tile {
                    w: w.add(p * panel_bytes),
                    nb,
                    xq: xq.as_ptr().add(j0 * cols),
                    xd: xd.as_ptr().add(j0 * nb),
                    xs: xs.as_ptr().add(j0 * nb),
                    xi: xi.as_ptr().add(j0 * nb),
                    xf: xf.as_ptr().add(j0 * nb),
                    xg: xg.wrapping_add(j0 * cols / GROUP),
                    xh: xh.wrapping_add(j0 * nb * 2),
                    xp: xp.wrapping_add(j0 * nb / 2),
                    out: out.add(j0 * ostride + p * PANEL),
                    ostride,
                    valid,
                    ahead,
                };
                run(&t, tr.min(a1 - j0));
            }
        }
    }
}

/// `unroll_rows!(nr, f(G..)(t), [1, ..], LAST)` is `match nr { 1 => f::<G.., 1>(t), ..,
/// _ => f::<G.., LAST>(t) }`: one fully unrolled instance per activation-row count, the
/// last one catching the rest.
macro_rules! unroll_rows {
    (@one $f:ident ($($g:ident),*) $t:expr, $n:literal) => {
        $f::<$($g,)* $n>($t)
    };
    ($nr:expr, $f:ident $gs:tt ($t:expr), [$($n:literal),*], $last:literal) => {
        match $nr {
            $($n => unroll_rows!(@one $f $gs $t, $n),)*
            _ => unroll_rows!(@one $f $gs $t, $last),
        }
    };
}
pub(crate) use unroll_rows;

/// A 32-block's integer products for a tile's `NR` activation rows: `chains[j] += Σ_k
/// vpdpbusd(u[k], x_j[k])` over the panel's 8 code vectors (integer sums: every order gives
/// the same result). With many rows the codes go through every row's chain in turn, so NR
/// independent chains are in flight; one row's chain of 8 at a time waits out the
/// instruction's latency (measured on an Intel Xeon, 2 threads, 16 rows, Q4_K 8,960 x 1,536
/// cache-resident: 269 -> 292 GMAC/s). With at most 4 rows each row runs two chains of 4.
///
/// # Safety
/// The caller must run with AVX-512 VNNI; `xq` (row 0's 32 codes of the block) must hold
/// NR rows `stride` bytes apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn block_dots<const NR: usize>(
    u: &[std::arch::x86_64::__m512i; 8],
    xq: *const i8,
    stride: usize,
    mut chains: [std::arch::x86_64::__m512i; NR],
) -> [std::arch::x86_64::__m512i; NR] {
    use std::arch::x86_64::{
        _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_set1_epi32, _mm512_setzero_si512,
    };
    let x = |j: usize, k: usize| {
        _mm512_set1_epi32((xq.add(j * stride) as *const i32).add(k).read_unaligned())
    };
    if NR <= 4 {
        for (j, c) in chains.iter_mut().enumerate() {
            let mut o = _mm512_setzero_si512();
            for k in 0..4 {
                *c = _mm512_dpbusd_epi32(*c, u[2 * k], x(j, 2 * k));
                o = _mm512_dpbusd_epi32(o, u[2 * k + 1], x(j, 2 * k + 1));
            }
            *c = _mm512_add_epi32(*c, o);
        }
    } else {
        for (k, uk) in u.iter().enumerate() {
            for (j, c) in chains.iter_mut().enumerate() {
                *c = _mm512_dpbusd_epi32(*c, *uk, x(j, k));
            }
        }
    }
    chains
}

/// The AVX-512 store mask of a tile's valid panel rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn mask16(valid: usize) -> u16 {
    if valid >= 16 {
        0xffff
    } else {
        (1u16 << valid) - 1
    }
}

/// Stores the first `n` (at most 8) lanes of `v` at `dst`.
///
/// # Safety
/// `dst` must hold `n` floats; the caller must run with AVX enabled.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn store8(dst: *mut f32, v: std::arch::x86_64::__m256, n: usize) {
    use std::arch::x86_64::_mm256_storeu_ps;
    if n == 8 {
        _mm256_storeu_ps(dst, v);
    } else {
        let mut tmp = [0f32; 8];
        _mm256_storeu_ps(tmp.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n);
    }
}
