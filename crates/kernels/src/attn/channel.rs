//! Q4c: keys quantized per channel over each page of 16 tokens (KIVI's key quantization,
//! at page granularity), and the attention that reads them in place.
//!
//! Keys carry a few channels of large magnitude (Qwen2's K bias, RoPE's slowest
//! frequencies). A per-token scale over 32 channels spends its 16 levels on them and
//! flattens the rest (q4_0 KV scores 0/32 on the retrieval grid); per channel, each
//! channel gets its own range. A channel's range needs every token of its page, so a page
//! is encoded once, when it fills; until then its rows wait in f16 in the cache's staging
//! area ([`Staged`]: KIVI's full-precision residual, one page per growing sequence).
//!
//! ```text
//! one page of one head: 16 rows × row_bytes(hd) = 16·hd/2 + 4·hd bytes
//!   [codes of row 0 | row 1 | ... | row 15]   hd/2 bytes a row; per 32 channels, byte i
//!                                             holds channel i (low nibble) and i + 16
//!   [scale: hd × f16][min: hd × f16]          value(r, c) = min_c + code(r, c) · scale_c
//! ```
//! Attention folds the scales into the query once per page and query head, `q·k_r =
//! Σ_c (q_c·scale_c)·code_rc + Σ_c q_c·min_c`, so a key row costs one multiply-add per
//! channel, as an f16 row does; the codes are read as stored, never decoded to a copy.
//! Each page's codes are unpacked once and read by every query head of the GQA group; the
//! AVX-512 kernel sums a head's 16 rows into one vector of 16 scores at once. The scalar
//! [`Dot`] is the reference; the AVX2 and AVX-512 ones match it within float
//! reassociation.

use super::{load_row_scalar, PagedKv, Queries};
use crate::cpu::Isa;
use folio_gguf::KvFormat;
use half::f16;

/// Rows per channel group: one page.
pub const G: usize = KvFormat::CHANNEL_GROUP;

/// No staging slot: the page is encoded.
pub const NONE: u32 = u32::MAX;

/// The f16 rows of pages whose channel groups are not encoded yet, as attention reads
/// them: `rows` holds, per staging slot, every head's 16 rows of `head_dim` values.
#[derive(Clone, Copy, Debug, Default)]
pub struct Staged<'a> {
    /// Per physical block: its staging slot, or [`NONE`].
    pub slot_of: &'a [u32],
    pub rows: &'a [f16],
    /// KV heads per staging slot.
    pub heads: usize,
}

impl<'a> Staged<'a> {
    /// Head `head`'s 16 rows of `hd` values in block `block`, if the block is staged.
    #[inline]
    pub fn page(&self, block: usize, head: usize, hd: usize) -> Option<&'a [f16]> {
        let s = *self.slot_of.get(block)?;
        if s == NONE {
            return None;
        }
        let at = (s as usize * self.heads + head) * G * hd;
        Some(&self.rows[at..at + G * hd])
    }
}

/// Byte of channel `c`'s code in a row, and whether it is the high nibble.
#[inline]
fn nibble_at(c: usize) -> (usize, bool) {
    ((c / 32) * 16 + c % 16, c % 32 >= 16)
}

/// Encodes the rows of `rows` (`[G][hd]`) whose bit is set in `mask` as one page group into
/// `dst` (`G · row_bytes(hd)` bytes). Each channel's range is its minimum to maximum over
/// those rows: the minimum rounded to f16, the scale `(max − min) / 15` rounded to f16, a
/// code `round((x − min) / scale)` in 0..=15. Rows outside `mask` get code 0.
pub fn encode_group(hd: usize, rows: &[f32], mask: u16, dst: &mut [u8]) {
    assert!(
        hd.is_multiple_of(32) && rows.len() == G * hd && dst.len() == G * hd / 2 + 4 * hd,
        "encode_group: {} rows of head_dim {hd} into {} bytes",
        rows.len() / hd.max(1),
        dst.len()
    );
    dst.fill(0);
    let (codes, hdr) = dst.split_at_mut(G * hd / 2);
    let (scales, mins) = hdr.split_at_mut(2 * hd);
    let present = |r: usize| mask & (1 << r) != 0;
    for c in 0..hd {
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for r in (0..G).filter(|&r| present(r)) {
            lo = lo.min(rows[r * hd + c]);
            hi = hi.max(rows[r * hd + c]);
        }
        if lo > hi {
            (lo, hi) = (0.0, 0.0);
        }
        let min = f16::from_f32(lo);
        let scale = f16::from_f32((hi - min.to_f32()) / 15.0);
        mins[2 * c..2 * c + 2].copy_from_slice(&min.to_le_bytes());
        scales[2 * c..2 * c + 2].copy_from_slice(&scale.to_le_bytes());
        let (m, d) = (min.to_f32(), scale.to_f32());
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        let (byte, high) = nibble_at(c);
        for r in (0..G).filter(|&r| present(r)) {
            let q = ((rows[r * hd + c] - m) * inv).round().clamp(0.0, 15.0) as u8;
            codes[r * hd / 2 + byte] |= if high { q << 4 } else { q };
        }
    }
}

/// Decodes row `r` of an encoded page group (`encode_group`'s layout) into `out` (`hd`).
pub fn decode_row(hd: usize, group: &[u8], r: usize, out: &mut [f32]) {
    let (codes, hdr) = group.split_at(G * hd / 2);
    let row = &codes[r * hd / 2..(r + 1) * hd / 2];
    for (c, o) in out.iter_mut().enumerate().take(hd) {
        let (byte, high) = nibble_at(c);
        let q = if high { row[byte] >> 4 } else { row[byte] & 15 };
        let at = |h: &[u8], c: usize| f16::from_le_bytes([h[2 * c], h[2 * c + 1]]).to_f32();
        *o = at(&hdr[2 * hd..], c) + q as f32 * at(hdr, c);
    }
}

/// The dot products the kernel is made of, one implementation per ISA.
trait Dot {
    /// `Σ_c qf[c] · x[c]` over f32 values.
    #[inline(always)]
    unsafe fn dot(qf: &[f32], x: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        for (a, b) in qf.chunks_exact(16).zip(x.chunks_exact(16)) {
            for l in 0..16 {
                acc[l] = a[l].mul_add(b[l], acc[l]);
            }
        }
        acc.iter().sum()
    }

    /// `dst[i]` = the f16 at bytes `2i` of `src`.
    #[inline(always)]
    unsafe fn halves(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
        }
    }

    /// Scores of page rows `lo..hi` for every head: `s[g][r] = Σ_c qf_g[c] · code(r, c) +
    /// bias[g]`, written at `scores[g * stride + at + r]` (`at` is negative when the window starts inside the page). The codes are unpacked once per
    /// page into `dec` (`G × hd`), then every head reads them (a GQA group of 6 heads
    /// shares each unpack).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn page(
        hd: usize,
        qf: &[f32],
        bias: &[f32],
        codes: &[u8],
        dec: &mut [f32],
        (lo, hi): (usize, usize),
        scores: &mut [f32],
        (stride, at): (usize, isize),
    ) {
        unpack(hd, codes, lo, hi, dec);
        for (g, b) in bias.iter().enumerate() {
            let q = &qf[g * hd..(g + 1) * hd];
            for r in lo..hi {
                scores[g * stride + (at + r as isize) as usize] =
                    Self::dot(q, &dec[r * hd..(r + 1) * hd]) + b;
            }
        }
    }
    /// The softmax of one head's scores, the sink in the denominator.
    unsafe fn softmax(p: &mut [f32], sink: Option<f32>);

    /// `out_g = Σ_j p[g][j] · v(first + j)` for every head (`out` overwritten).
    #[allow(clippy::too_many_arguments)]
    unsafe fn values(
        kv: &PagedKv,
        table: &[u32],
        first: usize,
        n_ctx: usize,
        p: &[f32],
        n_q: usize,
        vrow: &mut [f32],
        out: &mut [f32],
    ) {
        let hd = kv.head_dim;
        let n_vis = n_ctx - first;
        out.fill(0.0);
        let vrb = kv.v_row_bytes;
        for j in 0..n_vis {
            let (block, row) = folio_core::kv::page(table, first + j, kv.paging.block_size);
            let off = kv.v_offset(block, row);
            load_row_scalar(kv.v_format, &kv.v[off..off + vrb], vrow);
            for g in 0..n_q {
                let w = p[g * n_vis + j];
                if w == 0.0 {
                    continue;
                }
                for (o, &x) in out[g * hd..(g + 1) * hd].iter_mut().zip(vrow.iter()) {
                    *o = x.mul_add(w, *o);
                }
            }
        }
    }
}

/// The reference: plain Rust, channel by channel.
struct Scalar;

impl Dot for Scalar {
    #[inline(always)]
    unsafe fn softmax(p: &mut [f32], sink: Option<f32>) {
        super::softmax_lanes_sink(p, sink)
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Dot for Avx2 {
    #[inline(always)]
    unsafe fn softmax(p: &mut [f32], sink: Option<f32>) {
        super::avx2::softmax_f16(p, sink)
    }

    #[inline(always)]
    unsafe fn halves(src: &[u8], dst: &mut [f32]) {
        use std::arch::x86_64::*;
        for (i, d) in dst.chunks_exact_mut(8).enumerate() {
            let h = _mm_loadu_si128(src.as_ptr().add(16 * i) as _);
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }

    #[inline(always)]
    unsafe fn values(
        kv: &PagedKv,
        table: &[u32],
        first: usize,
        n_ctx: usize,
        p: &[f32],
        n_q: usize,
        _vrow: &mut [f32],
        out: &mut [f32],
    ) {
        // The AVX2 kernel's value pass, every V format's reader (AVX-512 hosts have AVX2).
        super::avx2::weigh_values(kv, table, first, n_ctx, p, n_q, out)
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Dot for Avx512 {
    #[inline(always)]
    unsafe fn softmax(p: &mut [f32], sink: Option<f32>) {
        super::x86::softmax_512(p, sink)
    }

    #[inline(always)]
    unsafe fn halves(src: &[u8], dst: &mut [f32]) {
        use std::arch::x86_64::*;
        for (i, d) in dst.chunks_exact_mut(16).enumerate() {
            let h = _mm256_loadu_si256(src.as_ptr().add(32 * i) as _);
            _mm512_storeu_ps(d.as_mut_ptr(), _mm512_cvtph_ps(h));
        }
    }

    /// A whole page: each head's 16 row sums reduced together into one vector of 16
    /// scores (`x86::reduce16`), instead of 16 horizontal sums.
    #[inline(always)]
    unsafe fn page(
        hd: usize,
        qf: &[f32],
        bias: &[f32],
        codes: &[u8],
        dec: &mut [f32],
        (lo, hi): (usize, usize),
        scores: &mut [f32],
        (stride, at): (usize, isize),
    ) {
        use std::arch::x86_64::*;
        unpack(hd, codes, lo, hi, dec);
        let d = dec.as_ptr();
        let m: __mmask16 = (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as u16;
        for (g, &b) in bias.iter().enumerate() {
            let q = qf.as_ptr().add(g * hd);
            let mut acc = [_mm512_setzero_ps(); 16];
            for (r, a) in acc.iter_mut().enumerate().take(hi).skip(lo) {
                for c in 0..hd / 16 {
                    let x = _mm512_loadu_ps(d.add(r * hd + 16 * c));
                    *a = _mm512_fmadd_ps(x, _mm512_loadu_ps(q.add(16 * c)), *a);
                }
            }
            let v = _mm512_add_ps(super::x86::reduce16(&acc), _mm512_set1_ps(b));
            // Lanes below `lo` fall before the row's start and are masked off (never written).
            let out = scores.as_mut_ptr().add(g * stride).wrapping_offset(at);
            _mm512_mask_storeu_ps(out, m, v);
        }
    }

    #[inline(always)]
    unsafe fn values(
        kv: &PagedKv,
        table: &[u32],
        first: usize,
        n_ctx: usize,
        p: &[f32],
        n_q: usize,
        _vrow: &mut [f32],
        out: &mut [f32],
    ) {
        // The AVX-512 kernel's value pass, every V format's reader (its register blocks
        // need head_dim in 64s; the AVX2 one takes the rest).
        if super::x86::supports(kv.v_format, kv.head_dim) {
            super::x86::weigh_values(kv, table, first, n_ctx, p, n_q, out)
        } else {
            super::avx2::weigh_values(kv, table, first, n_ctx, p, n_q, out)
        }
    }
}

/// Rows `lo..hi` of a page's codes as f32 values (`dec[r * hd + c]`, unscaled codes).
#[inline(always)]
fn unpack(hd: usize, codes: &[u8], lo: usize, hi: usize, dec: &mut [f32]) {
    for r in lo..hi {
        let row = &codes[r * hd / 2..(r + 1) * hd / 2];
        let out = &mut dec[r * hd..(r + 1) * hd];
        for (c32, (bytes, o)) in row
            .chunks_exact(16)
            .zip(out.chunks_exact_mut(32))
            .enumerate()
        {
            let _ = c32;
            for i in 0..16 {
                o[i] = (bytes[i] & 15) as f32;
                o[i + 16] = (bytes[i] >> 4) as f32;
            }
        }
    }
}

/// Attention of `qs` over a Q4c key cache (any V format), `isa`'s kernel. Same contract as
/// [`super::attend_with`]'s stored-domain kernels: queries in K's domain (Q4c is not
/// rotated), outputs in V's.
pub(super) fn attend(
    isa: Isa,
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    assert!(
        kv.paging.block_size == G && kv.head_dim.is_multiple_of(32),
        "q4c attention: pages of {G} tokens and a head_dim multiple of 32 (got {} and {})",
        kv.paging.block_size,
        kv.head_dim
    );
    #[cfg(target_arch = "x86_64")]
    match isa.clamp() {
        // SAFETY: clamp() guarantees the CPU has the ISA; `check` bounded every read.
        Isa::Avx512 => return unsafe { attend_512(kv, table, n_ctx, qs, scratch, out) },
        Isa::Avx2 => return unsafe { attend_256(kv, table, n_ctx, qs, scratch, out) },
        Isa::Scalar => {}
    }
    let _ = isa;
    // SAFETY: the scalar Dot has no ISA requirement.
    unsafe { body::<Scalar>(kv, table, n_ctx, qs, scratch, out) }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C must be present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn attend_512(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    body::<Avx512>(kv, table, n_ctx, qs, scratch, out)
}

/// # Safety
/// AVX2, FMA and F16C must be present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_256(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    body::<Avx2>(kv, table, n_ctx, qs, scratch, out)
}

/// Scores page by page (staged pages as f16 rows, encoded ones through the folded query),
/// the softmax per head, then the weighted sum of the value rows, each decoded once.
#[inline(always)]
unsafe fn body<D: Dot>(
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scratch: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (hd, n_q, first) = (kv.head_dim, qs.n, qs.first);
    let n_vis = n_ctx - first;
    let head = kv.paging.head_row / kv.paging.block_size;
    let krb = kv.k_row_bytes;
    scratch.resize(n_q * n_vis + n_q * hd + 3 * hd + G * hd, 0.0);
    let (scores, rest) = scratch.split_at_mut(n_q * n_vis);
    let (qf, rest) = rest.split_at_mut(n_q * hd);
    let (scale_c, rest) = rest.split_at_mut(hd);
    let (min_c, rest) = rest.split_at_mut(hd);
    let (vrow, dec) = rest.split_at_mut(hd);
    let mut bias = [0f32; 64];
    let mut bias_heap = Vec::new();
    let bias = if n_q <= bias.len() {
        &mut bias[..n_q]
    } else {
        bias_heap.resize(n_q, 0.0);
        &mut bias_heap[..]
    };
    for page in first / G..n_ctx.div_ceil(G) {
        let b = table[page] as usize;
        let (lo, hi) = ((page * G).max(first), ((page + 1) * G).min(n_ctx));
        if let Some(rows) = kv.k_staged.page(b, head, hd) {
            for p in lo..hi {
                let row = &rows[(p - page * G) * hd..][..hd];
                for g in 0..n_q {
                    let q = &qs.q[g * hd..(g + 1) * hd];
                    let mut s = 0f32;
                    for (x, y) in q.iter().zip(row) {
                        s = x.mul_add(y.to_f32(), s);
                    }
                    scores[g * n_vis + p - first] = s;
                }
            }
            continue;
        }
        let group = &kv.k[kv.k_offset(b, 0)..][..G * krb];
        let (codes, hdr) = group.split_at(G * hd / 2);
        D::halves(&hdr[..2 * hd], scale_c);
        D::halves(&hdr[2 * hd..4 * hd], min_c);
        for g in 0..n_q {
            let q = &qs.q[g * hd..(g + 1) * hd];
            let f = &mut qf[g * hd..(g + 1) * hd];
            for c in 0..hd {
                f[c] = q[c] * scale_c[c];
            }
            // (In 16 lanes: one serial chain of hd multiply-adds per head and page costs
            // more than the page's scores.)
            bias[g] = D::dot(q, min_c);
        }
        // Rows lo..hi of the page sit at scores[g * n_vis + page * G + r - first].
        D::page(
            hd,
            qf,
            bias,
            codes,
            dec,
            (lo - page * G, hi - page * G),
            scores,
            (n_vis, (page * G) as isize - first as isize),
        );
    }
    for s in scores.iter_mut() {
        *s *= qs.scale;
    }
    super::softcap_scores(scores, qs.softcap);
    // Probabilities rounded to f16, as every other kernel weighs values (the AVX2 softmax
    // rounds already; rounding twice is rounding once).
    for (g, p) in scores.chunks_exact_mut(n_vis).enumerate() {
        D::softmax(p, qs.sink(g));
        for v in p.iter_mut() {
            *v = f16::from_f32(*v).to_f32();
        }
    }
    D::values(kv, table, first, n_ctx, scores, n_q, vrow, out);
}
