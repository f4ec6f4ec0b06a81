//! The AVX-512 attention kernel (the f16 row store and rounding are in `x86_f16.rs`).
//!
//! Rows are read in chunks of 16 values; [`Rows`] decodes one chunk of a row in each
//! format, so the passes below are written once. Up to 4 query heads are processed per
//! pass (their accumulators stay in registers); a larger group runs in sub-groups. The
//! arithmetic is the reference's (`generic`, see the module doc of `attn`) bit for bit.

use super::x86_f16::round_f16;
use super::{KvFormat, PagedKv, Queries, SumOrder};
use std::arch::x86_64::*;

/// Largest number of query heads one pass keeps in registers.
const MAX_G: usize = 4;

/// Chunks of 16 values per pass of the value kernel (4 x G accumulators in registers).
const CB: usize = 4;

/// Whether the AVX-512 kernel handles this head size (whole passes of [`CB`] chunks: a
/// multiple of 64, which also covers the quantized formats' 32-value groups); others run
/// the generic path.
pub fn supports(_format: KvFormat, hd: usize) -> bool {
    hd > 0 && hd.is_multiple_of(16 * CB)
}

thread_local! {
    /// Byte offset of every position's row (the value pass visits positions 16 apart).
    static OFFSETS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decodes chunk `c` (values `16c .. 16c + 16`) of the row at `row` to f32.
trait Rows {
    unsafe fn chunk(row: *const u8, c: usize) -> __m512;

    /// Chunks `c` and `c + 1` (`c` even: one quantization group, decoded once).
    #[inline(always)]
    unsafe fn pair(row: *const u8, c: usize) -> (__m512, __m512) {
        (Self::chunk(row, c), Self::chunk(row, c + 1))
    }
}

/// The f16 scale at `p`, broadcast.
#[inline(always)]
unsafe fn scale_at(p: *const u8) -> __m512 {
    let bits = (p as *const u16).read_unaligned();
    _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

struct F16Rows;
impl Rows for F16Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(row.add(c * 32) as *const __m256i))
    }
}

struct Bf16Rows;
impl Rows for Bf16Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m512 {
        let h = _mm256_loadu_si256(row.add(c * 32) as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
    }
}

struct Q8Rows;
impl Rows for Q8Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m512 {
        let g = row.add((c >> 1) * 34);
        let q = _mm_loadu_si128(g.add(2 + (c & 1) * 16) as *const __m128i);
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale_at(g))
    }

    #[inline(always)]
    unsafe fn pair(row: *const u8, c: usize) -> (__m512, __m512) {
        let g = row.add((c >> 1) * 34);
        let d = scale_at(g);
        let q0 = _mm_loadu_si128(g.add(2) as *const __m128i);
        let q1 = _mm_loadu_si128(g.add(18) as *const __m128i);
        (
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d),
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d),
        )
    }
}

struct Q4Rows;
impl Rows for Q4Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m512 {
        let g = row.add((c >> 1) * 18);
        let b = _mm_loadu_si128(g.add(2) as *const __m128i);
        // Values 0..15 are the low nibbles, 16..31 the high ones (ggml's q4_0 order).
        let b = if c & 1 == 0 { b } else { _mm_srli_epi16(b, 4) };
        let nib = _mm_and_si128(b, _mm_set1_epi8(0x0f));
        let v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(nib), _mm512_set1_epi32(8));
        _mm512_mul_ps(_mm512_cvtepi32_ps(v), scale_at(g))
    }

    #[inline(always)]
    unsafe fn pair(row: *const u8, c: usize) -> (__m512, __m512) {
        let g = row.add((c >> 1) * 18);
        let d = scale_at(g);
        let b = _mm_loadu_si128(g.add(2) as *const __m128i);
        let m = _mm_set1_epi8(0x0f);
        let eight = _mm512_set1_epi32(8);
        let lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(b, m)), eight);
        let hi = _mm512_sub_epi32(
            _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), m)),
            eight,
        );
        (
            _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d),
            _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d),
        )
    }
}

/// IQ4_NL groups (also `q4h`'s): q4_0's nibble layout, each nibble an index into ggml's
/// 16 levels (looked up by a byte shuffle), times the f16 scale.
struct Iq4Rows;
impl Iq4Rows {
    #[inline(always)]
    unsafe fn levels(nib: __m128i) -> __m512 {
        let lut = _mm_loadu_si128(folio_gguf::dequant::KVALUES_IQ4NL.as_ptr() as *const __m128i);
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, nib)))
    }
}
impl Rows for Iq4Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m512 {
        let g = row.add((c >> 1) * 18);
        let b = _mm_loadu_si128(g.add(2) as *const __m128i);
        let b = if c & 1 == 0 { b } else { _mm_srli_epi16(b, 4) };
        let nib = _mm_and_si128(b, _mm_set1_epi8(0x0f));
        _mm512_mul_ps(Self::levels(nib), scale_at(g))
    }

    #[inline(always)]
    unsafe fn pair(row: *const u8, c: usize) -> (__m512, __m512) {
        let g = row.add((c >> 1) * 18);
        let d = scale_at(g);
        let b = _mm_loadu_si128(g.add(2) as *const __m128i);
        let m = _mm_set1_epi8(0x0f);
        let lo = Self::levels(_mm_and_si128(b, m));
        let hi = Self::levels(_mm_and_si128(_mm_srli_epi16(b, 4), m));
        (_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d))
    }
}

/// Blocks ahead of the one being scored whose rows are prefetched: one block of scoring
/// (~16 rows x ~20 cycles) is about one DRAM latency, so two keep the misses covered
/// (measured ~2% faster than one at 16 sequences x 256 tokens).
const AHEAD: usize = 2;
/// Key rows scored together in the batched order (more spills registers at 4 heads).
const PAIR: usize = 2;
/// Where prefetched rows land: K rows are scored right away (L1); V rows wait for the value
/// pass, by when L1 has turned over, so they go to L2 (measured ~3% faster than both L1).
const KH: i32 = _MM_HINT_T0;
const VH: i32 = _MM_HINT_T1;

/// Physical rows of the sequence, block by block: `(row index of the block's first row,
/// first position, rows in this block, row index and row count of the block [`AHEAD`]
/// further)`. Row `i` lies at `i · row_bytes` in K and in V, each with its own row size.
#[inline(always)]
fn blocks<'a>(
    kv: &'a PagedKv,
    table: &'a [u32],
    n_ctx: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize, usize)> + 'a {
    let bs = kv.paging.block_size;
    let n_blocks = n_ctx.div_ceil(bs);
    let at = move |i: usize| kv.row_index(table[i] as usize, 0);
    (0..n_blocks).map(move |i| {
        let j = i * bs;
        // A next block past the end has 0 rows: its index is never used.
        let next = if i + AHEAD < n_blocks {
            at(i + AHEAD)
        } else {
            0
        };
        let next_n = n_ctx.saturating_sub(j + AHEAD * bs).min(bs);
        (at(i), j, bs.min(n_ctx - j), next, next_n)
    })
}

/// Asks for the next block's rows (one per row processed, so the misses in flight stay
/// few) while the current one is processed: blocks sit at
/// unrelated addresses, so the hardware prefetcher cannot run ahead across them, and at
/// large batch the context is far larger than the caches (the kernel is memory bound).
#[inline(always)]
unsafe fn prefetch_rows<const HINT: i32>(p: *const u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        _mm_prefetch::<HINT>(p.wrapping_add(off) as *const i8);
        off += 64;
    }
}

/// The horizontal sums of 16 vectors at once: lane `r` of the result is the sum of
/// `v[r]`'s lanes, added in exactly the tree `_mm512_reduce_add_ps` uses (halves, then
/// quarters, eighths, pairs), so each sum is bit-identical to reducing `v[r]` alone, at
/// about a third of the shuffles.
#[inline(always)]
pub(super) unsafe fn reduce16(v: &[__m512; 16]) -> __m512 {
    // Lanes i and i + 8: rows (2p, 2p + 1) in the two 256-bit halves.
    let mut w = [_mm512_setzero_ps(); 8];
    for (p, w) in w.iter_mut().enumerate() {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        *w = _mm512_add_ps(
            _mm512_shuffle_f32x4(a, b, 0b01_00_01_00),
            _mm512_shuffle_f32x4(a, b, 0b11_10_11_10),
        );
    }
    // Lanes i and i + 4: 128-bit lane k of x[m] holds row 4m + k.
    let mut x = [_mm512_setzero_ps(); 4];
    for (m, x) in x.iter_mut().enumerate() {
        let (a, b) = (w[2 * m], w[2 * m + 1]);
        *x = _mm512_add_ps(
            _mm512_shuffle_f32x4(a, b, 0b10_00_10_00),
            _mm512_shuffle_f32x4(a, b, 0b11_01_11_01),
        );
    }
    // Lanes i and i + 2: lane k of y[n] holds rows 8n + k (elements 0, 1), 8n + 4 + k.
    let y0 = _mm512_add_ps(
        _mm512_shuffle_ps(x[0], x[1], 0x44),
        _mm512_shuffle_ps(x[0], x[1], 0xee),
    );
    let y1 = _mm512_add_ps(
        _mm512_shuffle_ps(x[2], x[3], 0x44),
        _mm512_shuffle_ps(x[2], x[3], 0xee),
    );
    // Lanes 0 and 1: element 4k + e holds row 4e + k; put row r at element r.
    let z = _mm512_add_ps(
        _mm512_shuffle_ps(y0, y1, 0x88),
        _mm512_shuffle_ps(y0, y1, 0xdd),
    );
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(idx, z)
}

/// Output chunk `(a, b)`'s 16 lane sums `lanes[l][a][b]` (lane `l` summed positions
/// `l, l + 16, …`) combined in `_mm512_reduce_add_ps`'s tree, applied across vectors:
/// lanes `l` and `l + 8`, then `+ 4`, then `(0 + 2) + (1 + 3)`: the reference's value sums.
/// The callers keep their lanes as `[lane][row or head][chunk]` arrays.
#[inline(always)]
pub(super) unsafe fn lane_tree<const A: usize, const B: usize>(
    lanes: &[[[__m512; B]; A]; 16],
    a: usize,
    b: usize,
) -> __m512 {
    // Loops, not `array::from_fn`: a closure does not inherit the caller's target
    // features, and the intrinsics inside it would not inline.
    let mut t = [_mm512_setzero_ps(); 8];
    for (i, t) in t.iter_mut().enumerate() {
        *t = _mm512_add_ps(lanes[i + 8][a][b], lanes[i][a][b]);
    }
    let mut u = [_mm512_setzero_ps(); 4];
    for (i, u) in u.iter_mut().enumerate() {
        *u = _mm512_add_ps(t[i + 4], t[i]);
    }
    _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3]))
}

/// Stores the first `k` of 16 reduced, scaled scores of each head at `s + g * s_stride`.
#[inline(always)]
unsafe fn flush<const G: usize>(
    sums: &[[__m512; 16]; G],
    s: *mut f32,
    s_stride: usize,
    k: usize,
    vscale: __m512,
) {
    let m: __mmask16 = if k >= 16 { 0xffff } else { (1 << k) - 1 };
    for (g, v) in sums.iter().enumerate() {
        let r = _mm512_mul_ps(reduce16(v), vscale);
        _mm512_mask_storeu_ps(s.add(g * s_stride), m, r);
    }
}

/// `s[g * s_stride + j] = (q_g · k_j) * scale` for G heads, summed in the reference's
/// order: batched, one FMA chain over the row's chunks; single, chunk c into vector c % 4,
/// then (v0 + v2) + (v1 + v3). Then [`reduce16`] as `_mm512_reduce_add_ps` would, 16
/// positions at a time.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (row, head) index both the keys and the sums
unsafe fn scores_pass<R: Rows, const G: usize, const SINGLE: bool>(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    q: *const f32,
    scale: f32,
    s: *mut f32,
    s_stride: usize,
) {
    let (hd, rb, vrb) = (kv.head_dim, kv.k_row_bytes, kv.v_row_bytes);
    let nc = hd / 16;
    let vscale = _mm512_set1_ps(scale);
    // Per-row partial sums of 16 consecutive positions, reduced together.
    let mut sums = [[_mm512_setzero_ps(); 16]; G];
    let mut k = 0;
    let (kb, vb) = (kv.k.as_ptr(), kv.v.as_ptr());
    for (first, j, n, next_i, next_n) in blocks(kv, table, n_ctx) {
        // wrapping_add: the pointers stay in bounds (checked by PagedKv::check) or are
        // never read (a next block past the end has 0 rows).
        let mut row = kb.wrapping_add(first * rb);
        let (next, next_v) = (kb.wrapping_add(next_i * rb), vb.wrapping_add(next_i * vrb));
        let mut r = 0;
        while r < n {
            // Batched: PAIR rows at once when they fit before the next flush. Each row's
            // chain is one dependent FMA per chunk (the order the reference defines), so a
            // lone row waits on FMA latency; interleaved rows fill the ports (scores of 3
            // heads: 28 -> 19 cycles per position). Same operations per row, same bits.
            if !SINGLE && r + PAIR <= n && k + PAIR <= 16 {
                for rr in r..r + PAIR {
                    if rr < next_n {
                        prefetch_rows::<KH>(next.wrapping_add(rr * rb), rb);
                        prefetch_rows::<VH>(next_v.wrapping_add(rr * vrb), vrb);
                    }
                }
                let mut acc = [[_mm512_setzero_ps(); G]; PAIR];
                let mut c = 0;
                while c + 4 <= nc {
                    let mut kc = [[_mm512_setzero_ps(); 4]; PAIR];
                    for (i, kr) in kc.iter_mut().enumerate() {
                        let rp = row.add(i * rb);
                        (kr[0], kr[1]) = R::pair(rp, c);
                        (kr[2], kr[3]) = R::pair(rp, c + 2);
                    }
                    for g in 0..G {
                        let qg = q.add(g * hd + c * 16);
                        for (cc, qo) in [0usize, 16, 32, 48].into_iter().enumerate() {
                            let qv = _mm512_loadu_ps(qg.add(qo));
                            for i in 0..PAIR {
                                acc[i][g] = _mm512_fmadd_ps(qv, kc[i][cc], acc[i][g]);
                            }
                        }
                    }
                    c += 4;
                }
                for (i, a) in acc.iter().enumerate() {
                    for g in 0..G {
                        sums[g][k + i] = a[g];
                    }
                }
                k += PAIR;
                r += PAIR;
                if k == 16 {
                    flush(&sums, s.add(j + r - 16), s_stride, 16, vscale);
                    k = 0;
                }
                row = row.add(PAIR * rb);
                continue;
            }
            if r < next_n {
                prefetch_rows::<KH>(next.wrapping_add(r * rb), rb);
                // The value pass visits positions 16 apart, one per block, so its reads
                // cannot stream: fetch each V row along with its K row instead.
                prefetch_rows::<VH>(next_v.wrapping_add(r * vrb), vrb);
            }
            // Batched: one FMA chain per head; single: four (chunk c into set c % 4).
            // `supports` guarantees whole groups of 4 chunks; named accumulators (no
            // indexing by a runtime value) so they stay in registers.
            let mut a0 = [_mm512_setzero_ps(); G];
            let mut a1 = [_mm512_setzero_ps(); G];
            let mut a2 = [_mm512_setzero_ps(); G];
            let mut a3 = [_mm512_setzero_ps(); G];
            let mut c = 0;
            while c + 4 <= nc {
                let (k0, k1) = R::pair(row, c);
                let (k2, k3) = R::pair(row, c + 2);
                for g in 0..G {
                    let qg = q.add(g * hd + c * 16);
                    let (q0, q1) = (_mm512_loadu_ps(qg), _mm512_loadu_ps(qg.add(16)));
                    let (q2, q3) = (_mm512_loadu_ps(qg.add(32)), _mm512_loadu_ps(qg.add(48)));
                    if SINGLE {
                        a0[g] = _mm512_fmadd_ps(q0, k0, a0[g]);
                        a1[g] = _mm512_fmadd_ps(q1, k1, a1[g]);
                        a2[g] = _mm512_fmadd_ps(q2, k2, a2[g]);
                        a3[g] = _mm512_fmadd_ps(q3, k3, a3[g]);
                    } else {
                        a0[g] = _mm512_fmadd_ps(q0, k0, a0[g]);
                        a0[g] = _mm512_fmadd_ps(q1, k1, a0[g]);
                        a0[g] = _mm512_fmadd_ps(q2, k2, a0[g]);
                        a0[g] = _mm512_fmadd_ps(q3, k3, a0[g]);
                    }
                }
                c += 4;
            }
            for g in 0..G {
                sums[g][k] = if SINGLE {
                    _mm512_add_ps(_mm512_add_ps(a0[g], a2[g]), _mm512_add_ps(a1[g], a3[g]))
                } else {
                    a0[g]
                };
            }
            k += 1;
            r += 1;
            if k == 16 {
                flush(&sums, s.add(j + r - 16), s_stride, 16, vscale);
                k = 0;
            }
            row = row.add(rb);
        }
    }
    if k > 0 {
        for v in sums.iter_mut() {
            v[k..].fill(_mm512_setzero_ps());
        }
        flush(&sums, s.add(n_ctx - k), s_stride, k, vscale);
    }
}

/// `out_g = Σ_j p[g * p_stride + j] · v_j` for G heads, per output value as a dot product
/// over positions in the reference's order: lane l sums positions l, l + 16, … by FMA
/// (batched), or positions 64i + 16s + l into set s, sets combined as (s0 + s2) + (s1 + s3)
/// (single); then the lanes go through the tree of [`reduce16`] (applied across 16
/// vectors of 16 values). `offs[j]` is position j's row offset in `kv.v`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn values_pass<R: Rows, const G: usize, const SINGLE: bool>(
    kv: &PagedKv,
    offs: &[usize],
    p: *const f32,
    p_stride: usize,
    out: *mut f32,
) {
    let hd = kv.head_dim;
    let n_all = offs.len();
    // Single: positions past the last whole 64 of the padded length go to the f64 tail.
    let n_ctx = if SINGLE {
        n_all.min(n_all.next_multiple_of(super::KV_PAD) & !63)
    } else {
        n_all
    };
    let nc = hd / 16;
    let base = kv.v.as_ptr();
    for c0 in (0..nc).step_by(CB) {
        let mut lanes = [[[_mm512_setzero_ps(); CB]; G]; 16];
        // Adds row j's chunks c0..c0 + CB, weighted by head g's probability, into `acc`.
        // (A macro, not a closure: closures do not inherit this function's target
        // features, and the intrinsics inside would not inline.)
        macro_rules! accumulate {
            ($acc:expr, $j:expr) => {{
                let row = base.add(offs[$j]);
                let (v0, v1) = R::pair(row, c0);
                let (v2, v3) = R::pair(row, c0 + 2);
                for (g, a) in $acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(*p.add(g * p_stride + $j));
                    a[0] = _mm512_fmadd_ps(v0, w, a[0]);
                    a[1] = _mm512_fmadd_ps(v1, w, a[1]);
                    a[2] = _mm512_fmadd_ps(v2, w, a[2]);
                    a[3] = _mm512_fmadd_ps(v3, w, a[3]);
                }
            }};
        }
        for (l, lane) in lanes.iter_mut().enumerate().take(n_ctx) {
            if !SINGLE {
                let mut acc = [[_mm512_setzero_ps(); CB]; G];
                let mut j = l;
                while j < n_ctx {
                    accumulate!(acc, j);
                    j += 16;
                }
                *lane = acc;
                continue;
            }
            // Sets (0, 2), then (1, 3), each pair in one pass over its positions and summed
            // at once: ggml combines the four as (s0 + s2) + (s1 + s3).
            let mut first = [[_mm512_setzero_ps(); CB]; G];
            for (k, (sa, sb)) in [(0usize, 2usize), (1, 3)].into_iter().enumerate() {
                let mut a = [[_mm512_setzero_ps(); CB]; G];
                let mut b = [[_mm512_setzero_ps(); CB]; G];
                let (mut ja, mut jb) = (16 * sa + l, 16 * sb + l);
                while ja < n_ctx {
                    accumulate!(a, ja);
                    if jb < n_ctx {
                        accumulate!(b, jb);
                    }
                    ja += 64;
                    jb += 64;
                }
                for g in 0..G {
                    for cc in 0..CB {
                        let pair = _mm512_add_ps(a[g][cc], b[g][cc]);
                        if k == 0 {
                            first[g][cc] = pair;
                        } else {
                            lane[g][cc] = _mm512_add_ps(first[g][cc], pair);
                        }
                    }
                }
            }
        }
        for g in 0..G {
            for cc in 0..CB {
                let r = lane_tree(&lanes, g, cc);
                _mm512_storeu_ps(out.add(g * hd + (c0 + cc) * 16), r);
            }
        }
    }
    if n_ctx < n_all {
        // The f64 tail: each product rounded to f32, added in position order.
        for g in 0..G {
            for c in 0..nc {
                let o = out.add(g * hd + c * 16);
                let r = _mm512_loadu_ps(o);
                let mut lo = _mm512_cvtps_pd(_mm512_castps512_ps256(r));
                let mut hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(r),
                )));
                for (j, &off) in offs.iter().enumerate().take(n_all).skip(n_ctx) {
                    let v = R::chunk(base.add(off), c);
                    let prod = _mm512_mul_ps(v, _mm512_set1_ps(*p.add(g * p_stride + j)));
                    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(prod)));
                    hi = _mm512_add_pd(
                        hi,
                        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                            _mm512_castps_pd(prod),
                        ))),
                    );
                }
                let r = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(lo))),
                    _mm256_castps_pd(_mm512_cvtpd_ps(hi)),
                ));
                _mm512_storeu_ps(o, r);
            }
        }
    }
}

/// llama.cpp's exp approximation on 16 lanes (the vector form of `lanes::expf_ggml`).
#[inline(always)]
pub(crate) unsafe fn expf_512(x: __m512) -> __m512 {
    use super::lanes::expc::*;
    let r = _mm512_set1_ps(f32::from_bits(SHIFT));
    let z = _mm512_fmadd_ps(x, _mm512_set1_ps(f32::from_bits(LOG2E)), r);
    let n = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(
        n,
        _mm512_set1_ps(f32::from_bits(LN2_LO)),
        _mm512_fnmadd_ps(n, _mm512_set1_ps(f32::from_bits(LN2_HI)), x),
    );
    let big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0), _CMP_GT_OQ);
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_set1_ps(f32::from_bits(C5)),
                b,
                _mm512_set1_ps(f32::from_bits(C4)),
            ),
            u,
            _mm512_fmadd_ps(
                _mm512_set1_ps(f32::from_bits(C3)),
                b,
                _mm512_set1_ps(f32::from_bits(C2)),
            ),
        ),
        u,
        _mm512_fmadd_ps(_mm512_set1_ps(f32::from_bits(C1)), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if big == 0 {
        return res;
    }
    let zero = _mm512_setzero_ps();
    let le0 = _mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ);
    let alt = _mm512_mask_blend_ps(le0, _mm512_set1_ps(f32::INFINITY), zero);
    _mm512_mask_blend_ps(big, res, alt)
}

/// [`super::softmax_lanes`] on 16 lanes at a time (bit-identical).
#[inline(always)]
pub(super) unsafe fn softmax_512(x: &mut [f32], sink: Option<f32>) {
    let ptr = x.as_mut_ptr();
    // The maximum is exact in any order (scores are never NaN).
    let mut vm = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < x.len() {
        let rest = x.len() - i;
        let m: __mmask16 = if rest >= 16 { 0xffff } else { (1 << rest) - 1 };
        vm = _mm512_mask_max_ps(vm, m, vm, _mm512_maskz_loadu_ps(m, ptr.add(i)));
        i += 16;
    }
    let mut max = _mm512_reduce_max_ps(vm);
    if let Some(s) = sink {
        max = max.max(s);
    }
    if max == f32::NEG_INFINITY {
        return;
    }
    let vmax = _mm512_set1_ps(max);
    let mut sum = 0f64;
    let mut i = 0;
    while i < x.len() {
        let rest = x.len() - i;
        let m: __mmask16 = if rest >= 16 { 0xffff } else { (1 << rest) - 1 };
        let v = _mm512_maskz_loadu_ps(m, ptr.add(i));
        // Lanes past the end are zero, as exp(−∞) would be.
        let e = _mm512_maskz_mov_ps(m, expf_512(_mm512_sub_ps(v, vmax)));
        _mm512_mask_storeu_ps(ptr.add(i), m, e);
        sum += _mm512_reduce_add_ps(e) as f64;
        i += 16;
    }
    sum += super::lanes::sink_term(sink, max);
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    let mut i = 0;
    while i < x.len() {
        let rest = x.len() - i;
        let m: __mmask16 = if rest >= 16 { 0xffff } else { (1 << rest) - 1 };
        let v = _mm512_maskz_loadu_ps(m, ptr.add(i));
        _mm512_mask_storeu_ps(ptr.add(i), m, _mm512_mul_ps(v, inv));
        i += 16;
    }
}

/// The value pass alone (batched order) over positions `first..n_ctx` weighted by `p`
/// (`[n_q][n_ctx - first]`), into `out` (`[n_q][head_dim]`, overwritten): for a kernel
/// that computes its scores itself (the per-channel key format's, `super::channel`).
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C must be present (the caller's target features);
/// `kv.check(table, first, n_ctx)` must have passed and `supports(kv.v_format, head_dim)`.
#[inline(always)]
pub(super) unsafe fn weigh_values(
    kv: &PagedKv,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    p: &[f32],
    n_q: usize,
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    let mut offs = OFFSETS.with(|o| std::mem::take(&mut *o.borrow_mut()));
    offs.clear();
    offs.extend((first..n_ctx).map(|j| {
        let (block, row) = folio_core::kv::page(table, j, kv.paging.block_size);
        kv.v_offset(block, row)
    }));
    let n = n_ctx - first;
    let (s, o) = (p.as_ptr(), out.as_mut_ptr());
    macro_rules! go {
        ($rv:ty) => {{
            let mut g0 = 0;
            while g0 < n_q {
                let (sp, op) = (s.add(g0 * n), o.add(g0 * hd));
                match (n_q - g0).min(MAX_G) {
                    1 => values_pass::<$rv, 1, false>(kv, &offs, sp, n, op),
                    2 => values_pass::<$rv, 2, false>(kv, &offs, sp, n, op),
                    3 => values_pass::<$rv, 3, false>(kv, &offs, sp, n, op),
                    _ => values_pass::<$rv, 4, false>(kv, &offs, sp, n, op),
                }
                g0 += MAX_G;
            }
        }};
    }
    match kv.v_format.code() {
        KvFormat::F16 => go!(F16Rows),
        KvFormat::Bf16 => go!(Bf16Rows),
        KvFormat::Q8_0 => go!(Q8Rows),
        KvFormat::Q4_0 => go!(Q4Rows),
        _ => go!(Iq4Rows),
    }
    OFFSETS.with(|o| *o.borrow_mut() = offs);
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run<RK: Rows, RV: Rows, const SINGLE: bool>(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
    scale: f32,
    sinks: Option<&[f32]>,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    let s = scores.as_mut_ptr();
    let mut g0 = 0;
    while g0 < n_q {
        let (qp, sp) = (q.as_ptr().add(g0 * hd), s.add(g0 * n_ctx));
        match (n_q - g0).min(MAX_G) {
            1 => scores_pass::<RK, 1, SINGLE>(kv, table, n_ctx, qp, scale, sp, n_ctx),
            2 => scores_pass::<RK, 2, SINGLE>(kv, table, n_ctx, qp, scale, sp, n_ctx),
            3 => scores_pass::<RK, 3, SINGLE>(kv, table, n_ctx, qp, scale, sp, n_ctx),
            _ => scores_pass::<RK, 4, SINGLE>(kv, table, n_ctx, qp, scale, sp, n_ctx),
        }
        g0 += MAX_G;
    }
    for (g, p) in scores.chunks_exact_mut(n_ctx).enumerate() {
        softmax_512(p, sinks.map(|s| s[g]));
        round_f16(p);
    }
    // Taken out of the thread-local and put back: the kernel must not run inside a
    // closure (closures do not inherit target features).
    let mut offs = OFFSETS.with(|o| std::mem::take(&mut *o.borrow_mut()));
    offs.clear();
    let bs = kv.paging.block_size;
    let (mut blk, mut slot) = (0, 0);
    for _ in 0..n_ctx {
        offs.push(kv.v_offset(table[blk] as usize, slot));
        slot += 1;
        if slot == bs {
            (blk, slot) = (blk + 1, 0);
        }
    }
    let (s, o) = (scores.as_ptr(), out.as_mut_ptr());
    let mut g0 = 0;
    while g0 < n_q {
        let (sp, op) = (s.add(g0 * n_ctx), o.add(g0 * hd));
        match (n_q - g0).min(MAX_G) {
            1 => values_pass::<RV, 1, SINGLE>(kv, &offs, sp, n_ctx, op),
            2 => values_pass::<RV, 2, SINGLE>(kv, &offs, sp, n_ctx, op),
            3 => values_pass::<RV, 3, SINGLE>(kv, &offs, sp, n_ctx, op),
            _ => values_pass::<RV, 4, SINGLE>(kv, &offs, sp, n_ctx, op),
        }
        g0 += MAX_G;
    }
    OFFSETS.with(|o| *o.borrow_mut() = offs);
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C must be present; `kv.check(table, n_ctx)` must
/// have passed; `supports(kv.format, kv.head_dim)`; `scores.len() == n_q * n_ctx`;
/// `q` and `out` hold `n_q * head_dim` values (`out` is overwritten).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn attend_512(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let Queries {
        q,
        n: n_q,
        scale,
        order,
        ..
    } = *qs;
    debug_assert_eq!(qs.first, 0, "attend_512 reads from position 0");
    debug_assert!(qs.softcap.is_none(), "attend_512 does not soft-cap");
    macro_rules! go {
        ($rk:ty, $rv:ty) => {
            match order {
                SumOrder::Batched => {
                    run::<$rk, $rv, false>(kv, table, n_ctx, q, n_q, scale, qs.sinks, scores, out)
                }
                SumOrder::Single => {
                    run::<$rk, $rv, true>(kv, table, n_ctx, q, n_q, scale, qs.sinks, scores, out)
                }
            }
        };
    }
    // K's reader, then V's (rotated formats read their code's blocks).
    macro_rules! with_v {
        ($rk:ty) => {
            match kv.v_format.code() {
                KvFormat::F16 => go!($rk, F16Rows),
                KvFormat::Bf16 => go!($rk, Bf16Rows),
                KvFormat::Q8_0 => go!($rk, Q8Rows),
                KvFormat::Q4_0 => go!($rk, Q4Rows),
                _ => go!($rk, Iq4Rows),
            }
        };
    }
    match kv.k_format.code() {
        KvFormat::F16 => with_v!(F16Rows),
        KvFormat::Bf16 => with_v!(Bf16Rows),
        KvFormat::Q8_0 => with_v!(Q8Rows),
        KvFormat::Q4_0 => with_v!(Q4Rows),
        _ => with_v!(Iq4Rows),
    }
}
