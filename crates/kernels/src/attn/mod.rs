//! Attention of one token's query heads over one KV head's paged cache, in any
//! [`KvFormat`], reading K/V rows in place through a block table.
//!
//! ```text
//! layer buffer:  [block 0][block 1] ... each block_stride bytes
//! one block:     ... [head h: row 0 | row 1 | ... | row p-1] ...   (at head_offset)
//! one row:       format.row_bytes(head_dim) bytes
//! ```
//!
//! [`attend_with`] takes the G query heads that share the KV head (GQA) and makes three
//! passes: scores for all G heads per key row (each row loaded and decoded once), a
//! softmax per head, then the weighted sum of value rows. The arithmetic is llama.cpp's on
//! a 512-bit CPU with an f16 cache (tinyBLAS matmuls, `ggml_vec_soft_max_f32`), so that
//! folio's greedy outputs are llama.cpp's:
//! - Q is rounded to f16 by the caller; a score is a dot product in [`SumOrder`], times
//!   `scale`;
//! - the softmax is [`softmax_lanes`] (llama.cpp's exp approximation, chunk sums in f64);
//! - the probabilities are rounded to f16, and each output value is again a dot product
//!   over positions in [`SumOrder`].
//!
//! Quantized rows are decoded on the fly inside the kernel (`q * d`), never into a
//! contiguous copy of the context. The AVX-512 kernel (both orders) and the AVX2 kernel
//! (batched order) reproduce [`generic`] bit for bit; other cases run [`generic`] itself.
//!
//! # Panics
//! On mismatched lengths or a block table that points outside the buffers (caller bugs:
//! the model validates block ids before attention runs).

#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod channel;
mod format;
mod generic;
pub mod hadamard;
mod iq4;
mod lanes;
#[cfg(target_arch = "x86_64")]
mod tile;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_f16;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::expf_512;

pub use channel::Staged;
pub use folio_gguf::{KvFormatRefused, KvFormats, KvRows};
pub use format::{load_row_scalar, load_row_unrotated, store_row_scalar, KvFormat, GROUP};
pub use lanes::{expf_ggml, reduce16, softmax_lanes, softmax_lanes_sink, LANES};

use crate::cpu::{isa, Isa};

/// The summation order of attention's dot products: llama.cpp computes a query that is
/// one of several in its batch with its tinyBLAS matmul, and a lone query (a decode step)
/// with `ggml_vec_dot_f16`; their roundings differ, and folio reproduces either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOrder {
    /// tinyBLAS: lane i % 16 of one vector sums terms i, i + 16, … by FMA, then
    /// [`reduce16`].
    Batched,
    /// `ggml_vec_dot_f16`: four vectors, term i in vector (i / 16) % 4, lane i % 16;
    /// combined as (v0 + v2) + (v1 + v3), then [`reduce16`].
    Single,
}

/// Cells llama.cpp's KV cache view is padded to without flash attention (`max(n_pad, 256)`
/// in b11312's `llama_kv_cache::get_n_kv`; 32 in older builds): a lone query's value sums
/// run over that many positions in sets of 64, and positions past the last whole 64 go to
/// `ggml_vec_dot_f16`'s f64 tail, which a multiple of 64 such as 256 never leaves.
pub const KV_PAD: usize = 256;

/// One KV head's rows in a paged layer buffer. K and V share the row geometry (row `i` of
/// K and of V belong to the same token and head) but each has its own format, so their
/// byte offsets are the row index times each side's row size. Built by [`PagedKv::new`]
/// only (the fields are the crate's): the row sizes the SIMD kernels read through unchecked
/// pointers are derived there from the formats and cannot fall out of step with them.
#[derive(Clone, Copy, Debug)]
pub struct PagedKv<'a> {
    /// The whole layer's keys.
    pub(crate) k: &'a [u8],
    /// The whole layer's values.
    pub(crate) v: &'a [u8],
    pub(crate) k_format: KvFormat,
    pub(crate) v_format: KvFormat,
    pub(crate) head_dim: usize,
    /// Bytes of one K row, `k_format.row_bytes(head_dim)`, and of one V row: computed once
    /// by [`PagedKv::new`] (the one place they are derived) because the kernels need them
    /// per block and per position, and the format's answer takes a table lookup and a
    /// division. Read them outside this crate with [`PagedKv::k_row_bytes`].
    pub(crate) k_row_bytes: usize,
    pub(crate) v_row_bytes: usize,
    /// Where this head's rows sit.
    pub(crate) paging: Paging,
    /// A per-channel key format's pages not encoded yet (empty for every other format).
    pub(crate) k_staged: Staged<'a>,
}

/// Where one head's rows sit in a paged layer buffer (see [`PagedKv`]).
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    /// Token slots per block.
    pub block_size: usize,
    /// Rows from one physical block to the next (every head's `block_size` rows).
    pub block_rows: usize,
    /// Row index of this head's first row inside a block.
    pub head_row: usize,
}

impl<'a> PagedKv<'a> {
    /// The view of one head: `(k_format, v_format)` rows of `head_dim` values in `k` and
    /// `v`, laid out as `paging` says; no staged pages (see [`PagedKv::with_staged`]).
    pub fn new(
        k: &'a [u8],
        v: &'a [u8],
        (k_format, v_format): (KvFormat, KvFormat),
        head_dim: usize,
        paging: Paging,
    ) -> PagedKv<'a> {
        PagedKv {
            k,
            v,
            k_format,
            v_format,
            head_dim,
            k_row_bytes: k_format.row_bytes(head_dim),
            v_row_bytes: v_format.row_bytes(head_dim),
            paging,
            k_staged: Staged::default(),
        }
    }

    /// This view with a per-channel key format's pages not encoded yet.
    pub fn with_staged(self, k_staged: Staged<'a>) -> PagedKv<'a> {
        PagedKv { k_staged, ..self }
    }

    /// Bytes of one K row.
    #[inline]
    pub fn k_row_bytes(&self) -> usize {
        self.k_row_bytes
    }

    /// Bytes of one V row.
    #[inline]
    pub fn v_row_bytes(&self) -> usize {
        self.v_row_bytes
    }

    /// Row index of physical block `block`'s slot `slot` (this head), in K and V alike.
    #[inline]
    pub fn row_index(&self, block: usize, slot: usize) -> usize {
        block * self.paging.block_rows + self.paging.head_row + slot
    }

    /// Byte offset of (block, slot)'s row in `k`.
    #[inline]
    pub fn k_offset(&self, block: usize, slot: usize) -> usize {
        self.row_index(block, slot) * self.k_row_bytes
    }

    /// Byte offset of (block, slot)'s row in `v`.
    #[inline]
    pub fn v_offset(&self, block: usize, slot: usize) -> usize {
        self.row_index(block, slot) * self.v_row_bytes
    }

    /// Checks that every row `attend` will touch (positions `first..n_ctx`) lies inside both
    /// buffers, so the SIMD kernel may use unchecked pointer reads.
    fn check(&self, table: &[u32], first: usize, n_ctx: usize) {
        let bs = self.paging.block_size;
        assert!(bs > 0 && self.head_dim > 0, "attend: empty block or head");
        let n_blocks = n_ctx.div_ceil(bs);
        assert!(
            table.len() >= n_blocks,
            "attend: block table has {} blocks, {n_ctx} positions need {n_blocks}",
            table.len()
        );
        let heads = self.paging.block_rows / bs;
        for &b in &table[first / bs..n_blocks] {
            if let Some(&s) = self.k_staged.slot_of.get(b as usize) {
                let end = (s as usize + 1) * self.k_staged.heads * bs * self.head_dim;
                assert!(
                    s == channel::NONE
                        || (self.k_staged.heads == heads && end <= self.k_staged.rows.len()),
                    "attend: block {b}'s staging slot {s} ends at row value {end} of {}",
                    self.k_staged.rows.len()
                );
            }
            let (ke, ve) = (self.k_offset(b as usize, bs), self.v_offset(b as usize, bs));
            assert!(
                ke <= self.k.len() && ve <= self.v.len(),
                "attend: block {b} ends at byte {ke} of K ({}) and {ve} of V ({})",
                self.k.len(),
                self.v.len()
            );
        }
    }
}

/// The query heads of one token that share a KV head (GQA), and how they attend.
#[derive(Clone, Copy, Debug)]
pub struct Queries<'a> {
    /// `[n][head_dim]`, already rounded to f16 precision.
    pub q: &'a [f32],
    /// Number of heads.
    pub n: usize,
    /// Score scale (1 / sqrt(head_dim) unless the model sets its own).
    pub scale: f32,
    pub order: SumOrder,
    /// First position the queries see: 0 for full causal attention, `pos + 1 - window`
    /// for a sliding-window layer (positions before it are outside the window, and their
    /// blocks may already be back in the pool: they are never read).
    pub first: usize,
    /// Attention logit soft-capping (Gemma 2): each scaled score `s` becomes
    /// `c · tanh(s / c)` before the softmax.
    pub softcap: Option<f32>,
    /// Attention sinks (GPT-OSS): one learned logit per query head (`n` values) that joins
    /// each head's softmax denominator but weights no value row.
    pub sinks: Option<&'a [f32]>,
}

impl Queries<'_> {
    /// Head `g`'s sink logit, if any.
    #[inline]
    pub fn sink(&self, g: usize) -> Option<f32> {
        self.sinks.map(|s| s[g])
    }
}

/// Consecutive query tokens of one sequence (a prefill chunk), each with the query heads
/// that share one KV head: what [`attend_tile`] takes.
#[derive(Clone, Copy, Debug)]
pub struct QueryTile<'a> {
    /// `[tokens][group][head_dim]`, already rounded (as [`Queries::q`]).
    pub q: &'a [f32],
    pub tokens: usize,
    /// Query heads per token (the GQA group).
    pub group: usize,
    /// The first token's position: token `i` sees positions `0..=first_pos + i`.
    pub first_pos: usize,
    /// Score scale (as [`Queries::scale`]).
    pub scale: f32,
    /// One sink logit per group head (as [`Queries::sinks`]); `None`: no sinks.
    pub sinks: Option<&'a [f32]>,
}

/// One KV head's rows of one sequence, widened to f32 by [`widen`] for [`attend_tile`]:
/// `k` and `v` are `[rows][head_dim]`, `rows` a multiple of 16 (zero past the context).
#[derive(Clone, Copy, Debug)]
pub struct WideRows<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub head_dim: usize,
}

/// Whether [`attend_tile`] has a kernel for this ISA and cache: AVX-512, f16 K and V, a
/// head size of 64, 128 or 256. Elsewhere callers attend token by token.
pub fn tile_supports(isa: Isa, kv: &PagedKv) -> bool {
    isa.clamp() == Isa::Avx512
        && cfg!(target_arch = "x86_64")
        && kv.k_format == KvFormat::F16
        && kv.v_format == KvFormat::F16
        && matches!(kv.head_dim, 64 | 128 | 256)
}

/// Widens positions `rows` of one head's K and V (f16) to f32 rows in `k` and `v`
/// (`[rows.len()][head_dim]` each), zero rows for positions at or past `n` (the context
/// length): the rows every [`attend_tile`] of the sequence then reads, converted once.
///
/// # Panics
/// When [`tile_supports`] is false, on lengths that do not match, or on a block table that
/// does not reach position `n - 1` (caller bugs).
pub fn widen(
    isa: Isa,
    kv: &PagedKv,
    table: &[u32],
    rows: std::ops::Range<usize>,
    n: usize,
    k: &mut [f32],
    v: &mut [f32],
) {
    assert!(
        tile_supports(isa, kv),
        "widen: no tile kernel for this ISA and cache"
    );
    let want = rows.len() * kv.head_dim;
    assert!(
        k.len() == want && v.len() == want,
        "widen: k ({}) and v ({}) must hold {} rows x head_dim ({})",
        k.len(),
        v.len(),
        rows.len(),
        kv.head_dim
    );
    if n > rows.start {
        kv.check(table, 0, n.min(rows.end));
    }
    // SAFETY: tile_supports guarantees AVX-512 and f16 rows; lengths and every row read
    // are checked above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        tile::widen_512(kv, table, rows, n, k, v)
    }
}

/// Causal attention of a tile of consecutive tokens over one KV head's widened rows, in
/// the batched order (no window, no soft-cap): each token's output bit for bit what
/// [`attend_with`] gives it alone with `n_ctx = first_pos + i + 1` and
/// [`SumOrder::Batched`], at a fraction of the cost (see `tile.rs`). Writes `out`:
/// `[tokens][group][head_dim]`.
///
/// # Panics
/// Without AVX-512, on a head size other than 64, 128 or 256, on lengths that do not match
/// the tile, or on rows that do not reach the last token's position (caller bugs).
pub fn attend_tile(isa: Isa, rows: &WideRows, tile: &QueryTile, out: &mut [f32]) {
    let hd = rows.head_dim;
    assert!(
        isa.clamp() == Isa::Avx512 && matches!(hd, 64 | 128 | 256),
        "attend_tile: no tile kernel for {isa:?} and head size {hd}"
    );
    let n = tile.tokens * tile.group * hd;
    assert!(
        tile.q.len() == n && out.len() == n,
        "attend_tile: q ({}) and out ({}) must hold tokens ({}) x group ({}) x head_dim ({hd})",
        tile.q.len(),
        out.len(),
        tile.tokens,
        tile.group,
    );
    assert!(
        tile.sinks.is_none_or(|s| s.len() == tile.group),
        "attend_tile: {} sinks for a group of {}",
        tile.sinks.map_or(0, |s| s.len()),
        tile.group
    );
    let need = (tile.first_pos + tile.tokens).next_multiple_of(16) * hd;
    assert!(
        rows.k.len() >= need && rows.v.len() >= need,
        "attend_tile: rows hold {} and {} values, the tile needs {need}",
        rows.k.len(),
        rows.v.len()
    );
    if n == 0 {
        return;
    }
    // SAFETY: AVX-512 and the head size are asserted above, and every length.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        tile::attend_tile_512(rows, tile, out)
    }
}

/// `s = c · tanh(s / c)` on every score (ggml's scale, tanh, scale).
#[inline]
pub(crate) fn softcap_scores(scores: &mut [f32], cap: Option<f32>) {
    if let Some(c) = cap {
        for s in scores {
            *s = (*s / c).tanh() * c;
        }
    }
}

/// Causal attention of the query heads `qs` over the first `n_ctx` positions of `kv`
/// reached through `table`. Writes `out`: `[qs.n][head_dim]`. `scores` is scratch (reused
/// across calls to avoid allocation).
///
/// `isa` picks the kernel ([`crate::cpu::isa`] for the best one); the tests run each.
///
/// A rotated K format (`q4h`, `q8h`) rotates the queries once here, a rotated V format the
/// outputs once at the end ([`hadamard`]): the kernels themselves read every format's rows
/// as stored, in the rotated domain, and never rotate per key.
pub fn attend_with(
    isa: Isa,
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    if kv.k_format.per_channel() {
        check_io(kv, table, n_ctx, qs, out);
        if n_ctx > 0 && qs.n > 0 {
            channel::attend(isa, kv, table, n_ctx, qs, scores, out);
        }
    } else if !kv.k_format.rotated() {
        attend_stored(isa, kv, table, n_ctx, qs, scores, out);
    } else {
        let mut q = QROT.with(|b| std::mem::take(&mut *b.borrow_mut()));
        q.clear();
        q.extend_from_slice(qs.q);
        hadamard::fwht_rows(hd, &mut q);
        let rotated = Queries { q: &q, ..*qs };
        attend_stored(isa, kv, table, n_ctx, &rotated, scores, out);
        QROT.with(|b| *b.borrow_mut() = q);
    }
    if kv.v_format.rotated() {
        hadamard::fwht_rows(hd, out);
    }
}

thread_local! {
    /// The rotated queries of [`attend_with`] (reused across calls).
    static QROT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`attend_with`] over rows as stored: queries already in K's domain, outputs left in V's.
fn attend_stored(
    isa: Isa,
    kv: &PagedKv,
    table: &[u32],
    n_ctx: usize,
    qs: &Queries,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    check_io(kv, table, n_ctx, qs, out);
    if n_ctx == 0 || qs.n == 0 {
        return;
    }
    let hd = kv.head_dim;
    // NOTE: the AVX-512 kernel walks whole blocks from position 0 and fuses the softmax into
    // its score pass; a window that starts mid-context, or soft-capped scores, take the AVX2
    // kernel (same operations, 8 lanes) or the reference.
    #[cfg(target_arch = "x86_64")]
    if isa.clamp() == Isa::Avx512
        && x86::supports(kv.k_format, hd)
        && qs.first == 0
        && qs.softcap.is_none()
    {
        scores.resize(qs.n * n_ctx, 0.0);
        // SAFETY: clamp() guarantees AVX-512; `check` bounds every row read.
        unsafe { x86::attend_512(kv, table, n_ctx, qs, scores, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.clamp() != Isa::Scalar {
        // SAFETY: clamp() guarantees AVX2, FMA and F16C (AVX-512 hosts have them too);
        // `check` bounds every row read.
        if qs.order == SumOrder::Batched && avx2::supports(hd) {
            return unsafe { avx2::attend(kv, table, n_ctx, qs, out) };
        }
        return unsafe { generic::attend_avx2(kv, table, n_ctx, qs, scores, out) };
    }
    generic::attend(kv, table, n_ctx, qs, scores, out)
}

/// The checks every kernel relies on: lengths, sinks, the visible range and every row the
/// kernel will read inside the buffers. Zeroes `out`.
fn check_io(kv: &PagedKv, table: &[u32], n_ctx: usize, qs: &Queries, out: &mut [f32]) {
    let (q, n_q) = (qs.q, qs.n);
    let hd = kv.head_dim;
    assert!(
        q.len() == n_q * hd && out.len() == n_q * hd,
        "attend: q ({}) and out ({}) must hold n_q ({n_q}) x head_dim ({hd})",
        q.len(),
        out.len()
    );
    assert!(
        qs.sinks.is_none_or(|s| s.len() == n_q),
        "attend: {} sinks for {n_q} query heads",
        qs.sinks.map_or(0, |s| s.len())
    );
    out.fill(0.0);
    if n_ctx == 0 || n_q == 0 {
        return;
    }
    assert!(
        qs.first < n_ctx,
        "attend: first visible position {} must be below n_ctx {n_ctx}",
        qs.first
    );
    kv.check(table, qs.first, n_ctx);
}

/// Rounds every value to the nearest f16 (ties to even) and back: the query rounding
/// [`attend_with`] expects (llama.cpp converts Q to f16 against an f16 cache).
pub fn round_to_f16(x: &mut [f32]) {
    round_to_f16_with(isa(), x)
}

/// [`round_to_f16`] with an explicit ISA.
pub fn round_to_f16_with(isa: Isa, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.clamp() == Isa::Avx512 {
        // SAFETY: clamp() guarantees AVX-512.
        return unsafe { x86_f16::round_f16_512(x) };
    }
    let _ = isa;
    for v in x {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

/// Rounds every `head_dim`-value row of `x` to what `format` stores and back: the
/// precision of queries computed "at the KV format" (f16 and bf16 round each value to
/// nearest even; q8_0 and q4_0 quantize each 32-value group with an f16 scale, as ggml's
/// reference quantizers do). F16 is [`round_to_f16`] (SIMD where the CPU has it).
pub fn round_queries(format: KvFormat, head_dim: usize, x: &mut [f32]) {
    if format == KvFormat::F16 {
        return round_to_f16(x);
    }
    assert!(
        head_dim > 0 && x.len().is_multiple_of(head_dim),
        "round_queries: {} values are not rows of head_dim {head_dim}",
        x.len()
    );
    // A row of up to 512 values fits the stack buffer (no allocation per attention task).
    let n = format.row_bytes(head_dim);
    let mut stack = [0u8; 1024];
    let mut heap = Vec::new();
    let bytes = if n <= stack.len() {
        &mut stack[..n]
    } else {
        heap.resize(n, 0);
        &mut heap[..]
    };
    for row in x.chunks_exact_mut(head_dim) {
        store_row_scalar(format, row, bytes);
        load_row_unrotated(format, bytes, row);
    }
}

/// Encodes one row of `src.len()` values into `dst` (`format.row_bytes(src.len())` bytes),
/// rounding as ggml does (see [`store_row_scalar`]).
pub fn store_row(format: KvFormat, src: &[f32], dst: &mut [u8]) {
    store_row_with(isa(), format, src, dst)
}

/// [`store_row`] with an explicit ISA (only f16 has a SIMD path; it rounds identically).
pub fn store_row_with(isa: Isa, format: KvFormat, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        dst.len(),
        format.row_bytes(src.len()),
        "store_row: {} values of {} need {} bytes, dst has {}",
        src.len(),
        format.name(),
        format.row_bytes(src.len()),
        dst.len()
    );
    #[cfg(target_arch = "x86_64")]
    if format == KvFormat::F16 {
        match isa.clamp() {
            // SAFETY: clamp() guarantees the CPU supports the ISA; lengths checked above.
            Isa::Avx512 => return unsafe { x86_f16::store_f16_512(src, dst) },
            Isa::Avx2 => return unsafe { x86_f16::store_f16_256(src, dst) },
            Isa::Scalar => {}
        }
    }
    let _ = isa;
    store_row_scalar(format, src, dst)
}
