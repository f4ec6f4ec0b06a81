//! The AVX2 attention kernel, batched summation order only (what `--numerics fast` uses for
//! every token; the lone-query order of `--numerics llama` stays on the reference).
//!
//! It performs exactly the reference's operations (`generic`, see the module doc of `attn`)
//! on 8-lane vectors: one 16-lane accumulator of the reference is a pair of registers
//! (lanes 0..8, 8..16), and each reduction follows [`super::reduce16`]'s tree, whose first
//! step adds those two halves. So outputs are bit-identical to the reference, which the
//! tests check. Written by hand because the reference compiled for AVX2 decodes every row
//! into a copy and reduces lane by lane: ~400 cycles per position for three query heads,
//! eight times the AVX-512 kernel.

use super::lanes::{expc, expf_ggml, LANES};
use super::{KvFormat, PagedKv, Queries};
use std::arch::x86_64::*;

/// Query heads per pass: the score pass keeps 2 accumulators per head in registers, the
/// value pass 2 per head and lane-set (spilled to a small stack array between lanes).
const MAX_G: usize = 4;

/// Whether this kernel handles the head size: whole 16-value chunks.
pub fn supports(hd: usize) -> bool {
    hd > 0 && hd.is_multiple_of(LANES)
}

thread_local! {
    /// Row index of every position, and the scores.
    static SCRATCH: std::cell::RefCell<(Vec<usize>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Decodes values `8c .. 8c + 8` of the row at `row` to f32, exactly as
/// `load_row_scalar` does.
trait Rows8 {
    unsafe fn chunk(row: *const u8, c: usize) -> __m256;
}

#[inline(always)]
unsafe fn scale_at(p: *const u8) -> __m256 {
    let bits = (p as *const u16).read_unaligned();
    _mm256_set1_ps(half::f16::from_bits(bits).to_f32())
}

struct F16Rows;
impl Rows8 for F16Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(row.add(c * 16) as *const __m128i))
    }
}

struct Bf16Rows;
impl Rows8 for Bf16Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m256 {
        let h = _mm_loadu_si128(row.add(c * 16) as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}

/// 32-value groups: f16 scale, then 32 signed bytes.
struct Q8Rows;
impl Rows8 for Q8Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m256 {
        let g = row.add((c / 4) * 34);
        let q = _mm_loadl_epi64(g.add(2 + (c % 4) * 8) as *const __m128i);
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale_at(g))
    }
}

/// 32-value groups: f16 scale, then 16 bytes; values 0..16 are the low nibbles, 16..32 the
/// high ones, each minus 8.
struct Q4Rows;
impl Rows8 for Q4Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m256 {
        let g = row.add((c / 4) * 18);
        let b = _mm_loadl_epi64(g.add(2 + (c % 2) * 8) as *const __m128i);
        let b = if c % 4 < 2 { b } else { _mm_srli_epi16(b, 4) };
        let nib = _mm_and_si128(b, _mm_set1_epi8(0x0f));
        let v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nib), _mm256_set1_epi32(8));
        _mm256_mul_ps(_mm256_cvtepi32_ps(v), scale_at(g))
    }
}

/// ggml's IQ4_NL levels as a byte-shuffle table.
#[inline(always)]
unsafe fn iq4_levels() -> __m128i {
    _mm_loadu_si128(folio_gguf::dequant::KVALUES_IQ4NL.as_ptr() as *const __m128i)
}

/// IQ4_NL groups (also `q4h`'s): q4_0's nibble layout, each nibble an index into the 16
/// levels (looked up by a byte shuffle), times the f16 scale.
struct Iq4Rows;
impl Rows8 for Iq4Rows {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, c: usize) -> __m256 {
        let g = row.add((c / 4) * 18);
        let b = _mm_loadl_epi64(g.add(2 + (c % 2) * 8) as *const __m128i);
        let b = if c % 4 < 2 { b } else { _mm_srli_epi16(b, 4) };
        let nib = _mm_and_si128(b, _mm_set1_epi8(0x0f));
        let v = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(iq4_levels(), nib));
        _mm256_mul_ps(_mm256_cvtepi32_ps(v), scale_at(g))
    }
}

/// [`super::reduce16`] of the 16 lanes `lo` (0..8) and `hi` (8..16).
#[inline(always)]
unsafe fn reduce16(lo: __m256, hi: __m256) -> f32 {
    let t = _mm256_add_ps(hi, lo);
    let u = _mm_add_ps(_mm256_extractf128_ps::<1>(t), _mm256_castps256_ps128(t));
    // (u0 + u2) + (u1 + u3)
    let w = _mm_add_ps(_mm_movehl_ps(u, u), u);
    _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)))
}

/// `expf_ggml` on 8 lanes: the same operations; 2^n is built from its exponent bits, which
/// equals the reference's single rounding while 2^n is a normal f32 (n in -126..=127).
/// Lanes outside that range (x below about -87 or above 88) take the scalar routine.
#[inline(always)]
unsafe fn expf8(x: __m256) -> __m256 {
    use expc::*;
    // (A macro, not a closure: closures do not inherit target features, and the
    // intrinsics inside would not inline.)
    macro_rules! f {
        ($c:expr) => {
            _mm256_set1_ps(f32::from_bits($c))
        };
    }
    let r = f!(SHIFT);
    let z = _mm256_fmadd_ps(x, f!(LOG2E), r);
    let n = _mm256_sub_ps(z, r);
    let lo = _mm256_cmp_ps::<_CMP_GE_OQ>(n, _mm256_set1_ps(-126.0));
    let hi = _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_set1_ps(127.0));
    let in_range = _mm256_movemask_ps(_mm256_and_ps(lo, hi));
    let b = _mm256_fnmadd_ps(n, f!(LN2_LO), _mm256_fnmadd_ps(n, f!(LN2_HI), x));
    let u = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(f!(C5), b, f!(C4)),
            u,
            _mm256_fmadd_ps(f!(C3), b, f!(C2)),
        ),
        u,
        _mm256_fmadd_ps(f!(C1), b, _mm256_set1_ps(1.0)),
    );
    let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let res = _mm256_mul_ps(j, _mm256_castsi256_ps(e));
    if in_range == 0xff {
        return res;
    }
    let (mut xs, mut out) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(xs.as_mut_ptr(), x);
    _mm256_storeu_ps(out.as_mut_ptr(), res);
    for (i, (o, &xi)) in out.iter_mut().zip(&xs).enumerate() {
        if in_range & (1 << i) == 0 {
            *o = expf_ggml(xi);
        }
    }
    _mm256_loadu_ps(out.as_ptr())
}

/// Lanes `i < n` set (n <= 8).
#[inline(always)]
unsafe fn mask8(n: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
}

/// `super::softmax_lanes`, then each probability rounded to f16 precision.
#[inline(always)]
pub(super) unsafe fn softmax_f16(x: &mut [f32], sink: Option<f32>) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut vm = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i + 8 <= n {
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(p.add(i)));
        i += 8;
    }
    let mut m = [0f32; 8];
    _mm256_storeu_ps(m.as_mut_ptr(), vm);
    let max = x[i..]
        .iter()
        .chain(&m)
        .chain(&sink)
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if max == f32::NEG_INFINITY {
        return;
    }
    let vmax = _mm256_set1_ps(max);
    let mut sum = 0f64;
    let mut i = 0;
    while i < n {
        // One reference chunk of 16: lanes past the end are zero.
        let mut e = [_mm256_setzero_ps(); 2];
        for (h, eh) in e.iter_mut().enumerate() {
            let at = i + 8 * h;
            if at >= n {
                break;
            }
            let k = (n - at).min(8);
            let m = mask8(k);
            // Lanes past the end read as `max` (exp(0), in the fast range), then zeroed.
            let v = _mm256_blendv_ps(
                vmax,
                _mm256_maskload_ps(p.add(at), m),
                _mm256_castsi256_ps(m),
            );
            let ex = _mm256_and_ps(expf8(_mm256_sub_ps(v, vmax)), _mm256_castsi256_ps(m));
            _mm256_maskstore_ps(p.add(at), m, ex);
            *eh = ex;
        }
        sum += reduce16(e[0], e[1]) as f64;
        i += LANES;
    }
    sum += super::lanes::sink_term(sink, max);
    let inv = _mm256_set1_ps((1.0 / sum) as f32);
    let mut i = 0;
    while i < n {
        let m = mask8((n - i).min(8));
        let v = _mm256_mul_ps(_mm256_maskload_ps(p.add(i), m), inv);
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        _mm256_maskstore_ps(p.add(i), m, _mm256_cvtph_ps(h));
        i += 8;
    }
}

/// Scores of `G` heads: `s[g * n_ctx + j] = reduce16(lanes of q_g · k_j) * scale`, lane
/// `l` of 16 summing terms `l, l + 16, …` by FMA.
#[inline(always)]
unsafe fn scores<R: Rows8, const G: usize>(
    kv: &PagedKv,
    rows: &[usize],
    q: *const f32,
    scale: f32,
    s: *mut f32,
    stride: usize,
) {
    let (hd, rb) = (kv.head_dim, kv.k_row_bytes);
    let base = kv.k.as_ptr();
    for (j, &i) in rows.iter().enumerate() {
        let row = base.add(i * rb);
        let mut lo = [_mm256_setzero_ps(); G];
        let mut hi = [_mm256_setzero_ps(); G];
        for c in 0..hd / LANES {
            let (k0, k1) = (R::chunk(row, 2 * c), R::chunk(row, 2 * c + 1));
            for g in 0..G {
                let qg = q.add(g * hd + c * LANES);
                lo[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), k0, lo[g]);
                hi[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg.add(8)), k1, hi[g]);
            }
        }
        for g in 0..G {
            *s.add(g * stride + j) = reduce16(lo[g], hi[g]) * scale;
        }
    }
}

/// `out_g = Σ_j p[g * stride + j] · v_j` for `G` heads, each output value a dot product
/// over positions in the batched order: lane `l` sums the positions `≡ l (mod 16)` by FMA,
/// then the tree of [`super::reduce16`] across lanes. Position j is `lead + j` counted
/// from a multiple of 16 (`lead < 16`): llama.cpp's lanes follow the cache cell. 16
/// output values (two registers) at a time.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (g, h) index both the lanes and the output
unsafe fn values<R: Rows8, const G: usize>(
    kv: &PagedKv,
    rows: &[usize],
    p: *const f32,
    stride: usize,
    lead: usize,
    out: *mut f32,
) {
    let (hd, n_ctx, rb) = (kv.head_dim, rows.len(), kv.v_row_bytes);
    let base = kv.v.as_ptr();
    for c in 0..hd / LANES {
        let mut lanes = [[[_mm256_setzero_ps(); 2]; G]; LANES];
        for (l, lane) in lanes.iter_mut().enumerate() {
            let mut j = (l + LANES - lead) % LANES;
            while j < n_ctx {
                let row = base.add(rows[j] * rb);
                let (v0, v1) = (R::chunk(row, 2 * c), R::chunk(row, 2 * c + 1));
                for (g, a) in lane.iter_mut().enumerate() {
                    let w = _mm256_set1_ps(*p.add(g * stride + j));
                    a[0] = _mm256_fmadd_ps(v0, w, a[0]);
                    a[1] = _mm256_fmadd_ps(v1, w, a[1]);
                }
                j += LANES;
            }
        }
        for g in 0..G {
            for h in 0..2 {
                let mut t = [_mm256_setzero_ps(); 8];
                for (i, ti) in t.iter_mut().enumerate() {
                    *ti = _mm256_add_ps(lanes[i + 8][g][h], lanes[i][g][h]);
                }
                let mut u = [_mm256_setzero_ps(); 4];
                for (i, ui) in u.iter_mut().enumerate() {
                    *ui = _mm256_add_ps(t[i + 4], t[i]);
                }
                let r = _mm256_add_ps(_mm256_add_ps(u[0], u[2]), _mm256_add_ps(u[1], u[3]));
                _mm256_storeu_ps(out.add(g * hd + c * LANES + 8 * h), r);
            }
        }
    }
}

/// The value pass alone, over positions `first..n_ctx` weighted by `p` (`[n_q][n_ctx -
/// first]`), into `out` (`[n_q][head_dim]`, overwritten): for a kernel that computes its
/// scores itself (the per-channel key format's, `super::channel`).
///
/// # Safety
/// AVX2, FMA and F16C must be present (the caller's target features); `kv.check(table,
/// first, n_ctx)` must have passed and `supports(kv.head_dim)`.
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
    macro_rules! go {
        ($rv:ty) => {
            weigh_values_in::<$rv>(kv, table, first, n_ctx, p, n_q, out)
        };
    }
    match kv.v_format.code() {
        KvFormat::F16 => go!(F16Rows),
        KvFormat::Bf16 => go!(Bf16Rows),
        KvFormat::Q8_0 => go!(Q8Rows),
        KvFormat::Q4_0 => go!(Q4Rows),
        _ => go!(Iq4Rows),
    }
}

#[inline(always)]
unsafe fn weigh_values_in<RV: Rows8>(
    kv: &PagedKv,
    table: &[u32],
    first: usize,
    n_ctx: usize,
    p: &[f32],
    n_q: usize,
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    let (mut offs, sc) = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    offs.clear();
    offs.extend((first..n_ctx).map(|j| {
        let (block, row) = folio_core::kv::page(table, j, kv.paging.block_size);
        kv.row_index(block, row)
    }));
    let n = n_ctx - first;
    debug_assert!(p.len() == n_q * n && out.len() == n_q * hd);
    let (s, o) = (p.as_ptr(), out.as_mut_ptr());
    let mut g0 = 0;
    while g0 < n_q {
        let (sp, op) = (s.add(g0 * n), o.add(g0 * hd));
        match (n_q - g0).min(MAX_G) {
            1 => values::<RV, 1>(kv, &offs, sp, n, 0, op),
            2 => values::<RV, 2>(kv, &offs, sp, n, 0, op),
            3 => values::<RV, 3>(kv, &offs, sp, n, 0, op),
            _ => values::<RV, 4>(kv, &offs, sp, n, 0, op),
        }
        g0 += MAX_G;
    }
    SCRATCH.with(|s| *s.borrow_mut() = (offs, sc));
}

#[inline(always)]
unsafe fn run<RK: Rows8, RV: Rows8>(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    out: &mut [f32],
) {
    let (hd, n_q) = (kv.head_dim, qs.n);
    let (mut offs, mut sc) = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    offs.clear();
    offs.extend((qs.first..n_ctx).map(|j| {
        let (block, row) = folio_core::kv::page(table, j, kv.paging.block_size);
        kv.row_index(block, row)
    }));
    // The window's positions index the rows 0..n. A score row holds `lead` masked slots
    // (−∞) first, so that its softmax chunks of 16 start at multiples of 16 of the
    // absolute position, as llama.cpp's cells do.
    let n = n_ctx - qs.first;
    let lead = qs.first % LANES;
    let stride = lead + n;
    sc.clear();
    sc.resize(n_q * stride, f32::NEG_INFINITY);
    let (q, s, o) = (qs.q.as_ptr(), sc.as_mut_ptr(), out.as_mut_ptr());
    let mut g0 = 0;
    while g0 < n_q {
        let (qp, sp) = (q.add(g0 * hd), s.add(g0 * stride + lead));
        match (n_q - g0).min(MAX_G) {
            1 => scores::<RK, 1>(kv, &offs, qp, qs.scale, sp, stride),
            2 => scores::<RK, 2>(kv, &offs, qp, qs.scale, sp, stride),
            3 => scores::<RK, 3>(kv, &offs, qp, qs.scale, sp, stride),
            _ => scores::<RK, 4>(kv, &offs, qp, qs.scale, sp, stride),
        }
        g0 += MAX_G;
    }
    for (g, p) in sc.chunks_exact_mut(stride).enumerate() {
        // (The cap acts on scores; the mask after it, as in ggml.)
        super::softcap_scores(&mut p[lead..], qs.softcap);
        softmax_f16(p, qs.sink(g));
    }
    let mut g0 = 0;
    while g0 < n_q {
        let (sp, op) = (s.add(g0 * stride + lead), o.add(g0 * hd));
        match (n_q - g0).min(MAX_G) {
            1 => values::<RV, 1>(kv, &offs, sp, stride, lead, op),
            2 => values::<RV, 2>(kv, &offs, sp, stride, lead, op),
            3 => values::<RV, 3>(kv, &offs, sp, stride, lead, op),
            _ => values::<RV, 4>(kv, &offs, sp, stride, lead, op),
        }
        g0 += MAX_G;
    }
    SCRATCH.with(|s| *s.borrow_mut() = (offs, sc));
}

/// Batched-order attention of `qs` over the first `n_ctx` positions, bit-identical to the
/// reference.
///
/// # Safety
/// AVX2, FMA and F16C must be present; `kv.check(table, qs.first, n_ctx)` must have passed,
/// `supports(kv.head_dim)`, `n_ctx > 0`; `qs.q` and `out` hold `qs.n * head_dim` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attend(kv: &PagedKv, table: &[u32], n_ctx: usize, qs: &Queries, out: &mut [f32]) {
    // K's reader, then V's: each side in its own format (rotated formats read their
    // code's blocks).
    macro_rules! with_v {
        ($rk:ty) => {
            match kv.v_format.code() {
                KvFormat::F16 => run::<$rk, F16Rows>(kv, table, n_ctx, qs, out),
                KvFormat::Bf16 => run::<$rk, Bf16Rows>(kv, table, n_ctx, qs, out),
                KvFormat::Q8_0 => run::<$rk, Q8Rows>(kv, table, n_ctx, qs, out),
                KvFormat::Q4_0 => run::<$rk, Q4Rows>(kv, table, n_ctx, qs, out),
                _ => run::<$rk, Iq4Rows>(kv, table, n_ctx, qs, out),
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
