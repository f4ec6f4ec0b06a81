//! The quantized matmul on AMX tiles (block sums only), for batches of activation rows
//! (prefill, batched decode), over both weight layouts: the superblock one (`sb_format`)
//! and the 32-block panels of Q4_0, Q4_1 and Q8_0 (`packed`).
//!
//! A task walks its panels; per panel it unpacks every 32-block's codes once (the same 8
//! `vpdpbusd` operands the AVX-512 tile builds, which are exactly an AMX weight tile, made
//! signed by subtracting the type's code offset: `u - offset` fits a byte for every type)
//! and their scales, then runs every 16 activation rows through them: per block one tile
//! product gives the exact int32 sums of 16 rows × 16 weight rows, and the AVX-512 epilogue
//! applies the block's offset, scales and mins with the very f32 operations, in the very
//! order, of the layout's vector kernel (`sb_kernel`, `kernel`: module docs there), so the
//! output equals the scalar reference's bits. Only the integer products move to the tile
//! unit: 8,192 multiply-adds an instruction instead of 64.
//!
//! Q4_K, Q5_K and Q6_K (`SbType::int_superblock`) fold their integer sub-scales into the
//! weight tiles instead: the scaled codes `sc · (u - offset)` (Q4_K / Q5_K: 0 ≤ · < 2^11,
//! Q6_K: |·| ≤ 128 · 32 = 2^12) as a tile of their unsigned low bytes (`tdpbsud`) and one
//! of their signed high bytes (`tdpbssd`), so the tiles sum a whole superblock (4 steps of
//! 64 values) and the epilogue runs once per superblock, not per block: `A = lo + 256 hi`,
//! the mins' term from the block-sum pairs (Q4_K / Q5_K), the FMAs of the vector kernel.
//!
//! Activation rows past the last multiple of 16 are copied into a zero-padded tile (so the
//! tile load never reads past the activations); their outputs are not stored.
//!
//! What bounds these kernels (measured on an Intel Xeon, CPUID family 6 model 207, one
//! thread, loops of the bare instructions): from L1 a 16 × 64-byte `tileloadd` costs
//! 3-3.6 ns, a `tilestored` 5.7 ns, a `tdpbssd` 5.6 ns, so a step of the integer-superblock
//! form (3 loads, 2 products) takes 11 ns; where the kernel's operands live (L2, L3) the
//! same step takes 28-53 ns: the tile loads' memory level, not the products, sets the
//! pace. (An earlier loop of dependent loads read 17-18 ns a load and 22 ns a store; the
//! figures above are independent ones.) Sharing each weight tile between two activation
//! tiles (2 × 2 blocking: 4 loads per 4 products, where the integer-superblock form does 3
//! per 2) ran 5-18% faster as a bare loop but no faster in the kernel (the 32 rows' accumulators
//! spill, and each superblock drains the tiles before its sums are stored), so the kernel
//! stays at 16 rows. For Q4_K the vector epilogue's mins term costs 20-30% of the 512-row
//! matmul (dropping it, a timing experiment only, ran 295-336 against 238-257 GMAC/s);
//! loading the four block-sum pairs at once and spreading them by shuffles did not help.
//! Retried on the same host model (2 threads, 8,960 × 1,536, 512 rows, interleaved in one
//! process, GMAC/s): 32 rows over all eight tiles with the accumulators in memory, Q4_K
//! 420 vs 425 and 435 vs 465, Q6_K 748 vs 824 and 640 vs 686; the next superblock's four
//! tile steps spread between groups of 4 epilogue rows (so the tile unit never waits on
//! the vector epilogue), one thread, 205-210 vs 225-233 in six pairs. Dropping the mins
//! term (timing only) still moves Q4_K from 468-480 to 596-600, where Q6_K runs 574-595:
//! the mins' 4 `vpdpwssd` (memory-broadcast operands) a row are the whole gap. Moving that
//! term to the tiles (one `tdpbf16ps` a superblock: the block sums split `l + 64 h` against
//! the pairs `(m, 64 m)`, every product and sum an integer below 2^24, so exact and
//! bit-identical) ran slower (2 threads, 512 rows, interleaved, GMAC/s): Q4_K 8,960 ×
//! 1,536 691-723 against 800-811, 1,536 × 8,960 357-367 against 523-553: the extra tile
//! load, product and store a superblock cost more than the vector units saved, so the tile
//! unit, not the epilogue, binds.
//!
//! Where the time goes (same host, one thread, Q4_K 8,960 × 1,536, 512 rows; timing
//! experiments only): all of it 27.4 ms, without the tile instructions 12.8, without the
//! epilogue 22.2, without both 8.0 (unpacking, quantizing, the output stores): the tile
//! part (~14), the epilogue (~5) and the rest (~8) add up rather than overlap. A bare loop
//! of the tile steps runs 11 ns a step from L1 but 28-53 ns with the activations and
//! weights where the kernel has them (L2, or L3 for 8,960 columns of activations, which
//! the host reads at 28 B/ns); blocking the rows so the activations stay in L2, and
//! walking superblock-major over 8 row groups so each superblock's weight tiles stay in
//! L1, measured no faster in the kernel (219 vs 229 and 206 GMAC/s); nor did blocks of 2,
//! 4 or 8 panels unpacked together and walked superblock-major or row-group-major (each
//! activation tile then serves the block's panels from L1, each weight tile the row
//! groups): Q4_K 329-344 against 332 GMAC/s, Q6_K 284-314 against 339 (one thread, 512
//! rows, interleaved in one process). What did help: the output lines claimed a row group
//! ahead ([`claim_rows`]), the epilogue a superblock behind the stores ([`rows_int`]) and
//! the activation rows of the superblock after next pulled into L1 ([`pull_acts`]; the
//! same for the per-block kernels, two blocks a pull, measured no faster).
//!
//! Tried and not kept: cutting the walk along the columns so one chunk's activation rows
//! (1 MiB of codes) stay in L2 while the task's panels pass over them, the partial sums
//! going to the output and back between chunks (the same FMAs in the same order, so the
//! same bits). The down projection's 512 rows of 8,960 columns (4.6 MB) outgrow L2, and
//! a cache-hot 1,536 × 2,048 ran 494-501 GMAC/s where 1,536 × 8,960 ran 407-449, so up to
//! ~15% looked within reach; but the chunked walk measured 380-397 against 415-436 (Intel
//! Xeon, CPUID family 6 model 167, 2 threads, Q4_K, 512 rows, interleaved), and even the
//! one-chunk shapes slowed (8,960 × 1,536 511-537 against 569-611): the walk's extra
//! state nearly doubled the kernel's vector spills (46 to 81 stack accesses in the Q4_K
//! instance), and moving the row-group work into a function of its own ran slower still.

#![cfg(target_arch = "x86_64")]

use super::amx::{self, ROWS};
use super::kernel::avx512::{load_scales, unpack as packed_unpack};
use super::packed::{Geometry, Layout, Packed};
use super::sb_format::PANEL;
use super::sb_format::{MinKind, SbPacked, SbType};
use super::sb_kernel::avx512::{lut, unpack};
use super::sb_lanes::{header, int_scales, min_pairs, scales, Header, Lanes, Scales, Z};
use super::tile::{mask16, Span};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// What a kernel instance's epilogue does beyond `acc = fma(f32(dot), da * dx, acc)`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Min {
    None,
    /// A superblock type's float min: `acc = fma(f32(isum), m * dx, acc)`.
    Sb,
    /// The panel layout's stored min: `acc = fma(m, d * isum of the activations, acc)`.
    Stored,
    /// Integer mins per 16 values (Q2_K): `acc = fnma(f32(mn0 X0 + mn1 X1), dmin * dx, acc)`.
    Int16,
}

/// The instances: superblock types by their id (`SbType::from_id`), the panel layouts
/// from [`PACKED`] on.
const PACKED: u8 = 32;

/// Layout of a panel instance.
const fn layout(id: u8) -> Layout {
    match id - PACKED {
        0 => Layout::Q4MinF16,
        1 => Layout::Q4SymF16,
        _ => Layout::Q8SymF16,
    }
}

/// `(offset, min, 16-value scales)` of instance `id`.
const fn form(id: u8) -> (i32, Min, bool) {
    if id < PACKED {
        let d = SbType::from_id(id).desc();
        let min = match d.min {
            MinKind::Float => Min::Sb,
            MinKind::Int16 => Min::Int16,
            MinKind::None => Min::None,
        };
        (d.offset, min, d.sub16)
    } else {
        let l = layout(id);
        if l.stored_min() {
            (0, Min::Stored, false)
        } else {
            (l.offset(), Min::None, false)
        }
    }
}

// Every superblock type's codes less its offset fit a signed byte (see `signed`).
const _: () = {
    let mut id = 0;
    while id < SbType::COUNT as u8 {
        let d = SbType::from_id(id).desc();
        let max = if d.lut { 255 } else { (1 << (d.lo + d.hi)) - 1 };
        assert!(max - d.offset <= 127 && d.offset <= 128);
        id += 1;
    }
};

/// Superblocks of a panel that [`rows_int`]'s fused form keeps unpacked at once: the one whose
/// epilogue reads its header, the one stored, the one multiplied and the one unpacked.
const RING: usize = 4;

/// One thread's buffers, grown to the largest matrix and reused.
struct Scratch {
    /// The panel's unpacked codes: 8 zmm (512 bytes) per 32-block. Integer-superblock
    /// types: the low bytes of the scaled codes `sc · (u - offset)`, and their high bytes
    /// in `hi`.
    codes: Vec<__m512i>,
    hi: Vec<__m512i>,
    /// Integer-superblock types with mins (Q4_K, Q5_K): per superblock, the mins of blocks
    /// 2p, 2p + 1 as the i16 halves of each lane.
    mins: Vec<[__m512i; 4]>,
    /// The panel's scales per 32-block and headers per superblock.
    scales: Vec<Scales<Z>>,
    heads: Vec<Header<Z>>,
    /// The zero-padded last activation tile: codes (16 rows of `cols`), per-block scales,
    /// `d * isum`, code sums (as f32) and 16-sums.
    tq: Vec<i8>,
    td: Vec<f32>,
    ts: Vec<f32>,
    tf: Vec<f32>,
    th: Vec<i32>,
    tp: Vec<i32>,
    /// Tile products: [`amx::SLOTS`] blocks (or a block's two halves, or a superblock's two
    /// sums) of 16 × 16 int32.
    c: [[__m512i; ROWS]; amx::SLOTS],
}

thread_local! {
    static SCRATCH: RefCell<Option<Box<Scratch>>> = const { RefCell::new(None) };
}

/// Activation rows of one tile: codes (`stride` bytes a row), and per row `nb` scales and
/// code sums, `2 nb` 16-sums.
#[derive(Clone, Copy)]
struct Acts {
    xq: *const i8,
    xd: *const f32,
    xs: *const f32,
    xf: *const f32,
    xh: *const i32,
    xp: *const i32,
}

/// Computes the output rows of the span's panels for every activation row.
///
/// # Safety
/// As `tile::for_each_tile`; [`amx::available`] must be true and the span's activations
/// must hold the 16-sums when the type's scales cover 16 values.
pub(crate) unsafe fn run_sb(packed: &SbPacked, span: &Span) {
    with_scratch(|s| {
        macro_rules! types {
            ($($ty:ident => $id:literal),*) => {
                match packed.ty {
                    $(SbType::$ty => panels::<$id>(Weights::Sb(packed), span, s),)*
                }
            };
        }
        types!(Q5_0 => 0, Q5_1 => 1, IQ4_NL => 2, Q2_K => 3, Q3_K => 4, Q4_K => 5, Q5_K => 6,
            Q6_K => 7, IQ4_XS => 8, MXFP4 => 9, TQ1_0 => 10, TQ2_0 => 11, IQ1_S => 12,
            IQ1_M => 13, IQ2_XXS => 14, IQ2_XS => 15, IQ2_S => 16, IQ3_XXS => 17, IQ3_S => 18)
    })
}

/// [`run_sb`] for the panel layout (Q4_0, Q4_1, Q8_0).
///
/// # Safety
/// As [`run_sb`].
pub(crate) unsafe fn run_packed(packed: &Packed, span: &Span) {
    with_scratch(|s| match packed.layout {
        Layout::Q4MinF16 => panels::<PACKED>(Weights::Packed(packed), span, s),
        Layout::Q4SymF16 => panels::<{ PACKED + 1 }>(Weights::Packed(packed), span, s),
        Layout::Q8SymF16 => panels::<{ PACKED + 2 }>(Weights::Packed(packed), span, s),
    })
}

#[derive(Clone, Copy)]
enum Weights<'a> {
    Sb(&'a SbPacked),
    Packed(&'a Packed),
}

fn with_scratch(f: impl FnOnce(&mut Scratch)) {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        let s = slot.get_or_insert_with(|| {
            Box::new(Scratch {
                codes: Vec::new(),
                hi: Vec::new(),
                mins: Vec::new(),
                scales: Vec::new(),
                heads: Vec::new(),
                tq: Vec::new(),
                td: Vec::new(),
                ts: Vec::new(),
                tf: Vec::new(),
                th: Vec::new(),
                tp: Vec::new(),
                // SAFETY: only AMX hosts get here, and they have AVX-512.
                c: unsafe { [[_mm512_setzero_si512(); ROWS]; amx::SLOTS] },
            })
        });
        f(s)
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn panels<const T: u8>(w: Weights, span: &Span, s: &mut Scratch) {
    let (_, min, sub16) = const { form(T) };
    let (w0, nb, panel_bytes) = match w {
        Weights::Sb(p) => {
            let desc = p.ty.desc();
            (
                p.bytes().as_ptr(),
                p.nb,
                p.nb / desc.subs() * desc.sb_bytes(),
            )
        }
        Weights::Packed(p) => (p.bytes().as_ptr(), p.nb, p.nb * p.layout.block_bytes()),
    };
    let acts = span.acts;
    let (n, cols) = (acts.n(), acts.cols());
    debug_assert_eq!(cols, nb * 32);
    let full = n / ROWS * ROWS;
    if n > full {
        fill_tail(s, span, full, sub16);
    }
    let int_sb = const { T < PACKED && SbType::from_id(T).int_superblock() };
    // One row group: each panel's superblocks are unpacked as its products go (`rows_int`).
    let fused = int_sb && n <= ROWS;
    // Room for the whole panel's blocks, or for the fused ring's superblocks.
    let room = nb.max(RING * 8);
    if int_sb {
        s.hi.resize(room * 8, _mm512_setzero_si512());
        if min == Min::Sb {
            s.mins.resize(room / 8, [_mm512_setzero_si512(); 4]);
        }
    }
    s.codes.resize(room * 8, _mm512_setzero_si512());
    let z = Z(_mm512_setzero_si512());
    let zf = _mm512_setzero_ps();
    s.scales.resize(
        nb,
        Scales {
            da: zf,
            m: zf,
            sc: [z; 2],
            mn: [z; 2],
        },
    );
    s.heads.resize(
        nb,
        Header {
            d: zf,
            f1: zf,
            w: [z; 4],
        },
    );
    amx::configure(if int_sb {
        &amx::SUPER64
    } else if sub16 {
        &amx::BLOCK16
    } else {
        &amx::BLOCK32
    });
    let (p0, p1) = span.panels;
    let stream = streams(span);
    for panel in p0..p1 {
        let out0 = span.out.add(panel * PANEL);
        if !stream {
            claim_rows(out0, span.ostride, n.min(ROWS));
        }
        let wp = w0.add(panel * panel_bytes);
        // (The fused form unpacks inside `rows_int`.)
        match (int_sb, fused) {
            (true, true) => {}
            (true, false) => unpack_int::<T>(wp, nb, s, panel_bytes),
            _ if T < PACKED => unpack_sb::<T>(wp, nb, s, panel_bytes),
            _ => unpack_packed::<T>(wp, nb, s, panel_bytes),
        }
        let valid = PANEL.min(span.rows - panel * PANEL);
        let mask = mask16(valid);
        // A partial last panel writes under its mask, through the caches.
        let stream_lines = stream && valid == PANEL;
        for j0 in (0..n).step_by(ROWS) {
            if j0 + ROWS < n && !stream {
                let next = out0.add((j0 + ROWS) * span.ostride);
                claim_rows(next, span.ostride, ROWS.min(n - j0 - ROWS));
            }
            let a = if j0 < full {
                Acts {
                    xq: acts.codes().as_ptr().add(j0 * cols),
                    xd: acts.scales().as_ptr().add(j0 * nb),
                    xs: acts.sums().as_ptr().add(j0 * nb),
                    xf: acts.isums_f32().as_ptr().add(j0 * nb),
                    xh: if sub16 {
                        acts.half_sums().as_ptr().add(j0 * nb * 2)
                    } else {
                        std::ptr::null()
                    },
                    xp: acts.isum_pairs().as_ptr().wrapping_add(j0 * nb / 2),
                }
            } else {
                Acts {
                    xq: s.tq.as_ptr(),
                    xd: s.td.as_ptr(),
                    xs: s.ts.as_ptr(),
                    xf: s.tf.as_ptr(),
                    xh: s.th.as_ptr(),
                    xp: s.tp.as_ptr(),
                }
            };
            let acc = if int_sb {
                rows_int::<T>(s, a, nb, cols, fused.then_some((wp, panel_bytes)))
            } else if sub16 {
                rows16::<T>(s, a, nb, cols)
            } else {
                rows32::<T>(s, a, nb, cols)
            };
            let out = out0.add(j0 * span.ostride);
            for (j, v) in acc.iter().enumerate().take(n - j0) {
                if stream_lines {
                    _mm512_stream_ps(out.add(j * span.ostride), *v);
                } else {
                    _mm512_mask_storeu_ps(out.add(j * span.ostride), mask, *v);
                }
            }
        }
    }
    if stream {
        // Streaming stores are weakly ordered: visible before the pool hands the output on.
        _mm_sfence();
    }
    amx::release();
}

/// Activation rows from which a matmul that may stream its outputs does ([`streams`]).
const STREAM_ROWS: usize = 256;

/// Whether this span writes its output lines with streaming stores (`vmovntps`): where the
/// caller allows it (`QMatrix::matmul_lines`), from [`STREAM_ROWS`] activation rows, and
/// where every output row's panel line is a whole cache line (the span's output starts on
/// one, rows whole lines apart). Such an output (36 MB for the 1.5B's gate-up at 512 rows)
/// is written once and read by the next op; written through the caches, each line was
/// first read for ownership and pushed the activations and weight tiles out of L2.
/// Measured on an Intel Xeon (CPUID family 6 model 167, 2 threads, Qwen2.5-Coder-1.5B
/// Q4_K_M with its gate-up output streamed, prefill tok/s, pairs interleaved): 512 tokens
/// 293-303 against 270-287, 264 tokens 297-314 against 259-290, 132 tokens 264-295
/// against 280-295 (no gain, so not below 256 rows).
fn streams(span: &Span) -> bool {
    span.stream
        && span.acts.n() >= STREAM_ROWS
        && (span.out as usize).is_multiple_of(64)
        && span.ostride.is_multiple_of(PANEL)
}

/// Asks for write ownership of the 64-byte output line of each of `rows` rows from `out`
/// (rows `ostride` floats apart), one row group ahead of its stores.
///
/// A panel writes one line per activation row, rows a whole output row apart (35 KB for
/// 8,960 outputs): no hardware prefetcher follows that, so without this every store's
/// read-for-ownership missed to L3 or DRAM while the tile unit waited. Measured on an
/// Intel Xeon (CPUID family 6 model 207), one thread, Q4_K 8,960 × 1,536, 512 rows,
/// interleaved in one process: 23.4-23.8 ms against 25.0-26.8 ms without.
#[inline(always)]
unsafe fn claim_rows(out: *mut f32, ostride: usize, rows: usize) {
    for j in 0..rows {
        _mm_prefetch::<_MM_HINT_ET0>(out.add(j * ostride) as *const i8);
    }
}

/// Prefetches into L2 the `bytes` at `p + ahead`: the next panel's part that the unpacking
/// at `p` reads now, so the panel after this one is read from L2 while the memory would
/// otherwise idle through this panel's tile products (a prefetch past the matrix's end is
/// harmless). With few activation rows a panel's products pass quickly and the unpacking
/// waited on DRAM: measured on an Intel Xeon (CPUID family 6 model 207, 2 threads, 16 rows,
/// Q6_K 151,936 × 4,096, 510 MB, interleaved in one process), 38.6-43.7 ms a call against
/// 44.2-45.8 without; at 512 rows (Q4_K 8,960 × 1,536) 10.2-10.6 ms against 10.4-10.8.
/// Each call prefetches the lines that start inside its range ([`crate::cpu::lines_in`]).
#[inline(always)]
unsafe fn next_panel(p: *const u8, bytes: usize, ahead: usize) {
    next_panel_part(p, bytes, ahead, 0, 1)
}

/// Part `part` of `parts` of [`next_panel`]'s lines: an integer superblock spreads its
/// prefetches over its 32-blocks, as the vector kernels do (`sb_kernel`'s `prefetch`),
/// since a burst of all of them (52 lines for a Q6_K panel's superblock) filled the
/// line-fill buffers and stalled the unpacking on them. Measured on an Intel Xeon (CPUID
/// family 6 model 167, 2 threads, 16 rows on tiles, weights from DRAM): Q4_K 655,360 ×
/// 1,536 252-262 -> 269-300 GMAC/s, Q6_K 393,216 × 1,536 222-229 -> 225-250; the 1.5B
/// Q4_K_M's 16 × 256 decode (its Q6_K matrices on tiles) 137.6-142.5 -> 142.5-142.8 tok/s
/// (three interleaved rounds), its 512-token prefill unchanged.
#[inline(always)]
unsafe fn next_panel_part(p: *const u8, bytes: usize, ahead: usize, part: usize, parts: usize) {
    let (first, n) = crate::cpu::lines_in(p.wrapping_add(ahead) as usize, bytes);
    for i in part * n / parts..(part + 1) * n / parts {
        _mm_prefetch::<_MM_HINT_T2>((first + 64 * i) as *const i8);
    }
}

/// A superblock panel's codes and scales (per 32-block) and headers (per superblock) into
/// the scratch.
#[inline(always)]
unsafe fn unpack_sb<const T: u8>(w: *const u8, nb: usize, s: &mut Scratch, ahead: usize) {
    let ty = const { SbType::from_id(T) };
    let desc = const { SbType::from_id(T).desc() };
    let (subs, sbb, hb, cb) = desc.strides();
    let lut = if desc.lut {
        lut(&desc)
    } else {
        _mm512_setzero_si512()
    };
    for sb in 0..nb / subs {
        let sbp = w.add(sb * sbb);
        next_panel(sbp, sbb, ahead);
        let h = header::<Z>(ty, sbp, 0);
        s.heads[sb] = h;
        for sub in 0..subs {
            let b = sb * subs + sub;
            let u = unpack(&desc, sbp.add(hb + sub * cb), lut);
            for (o, ug) in s.codes[b * 8..b * 8 + 8].iter_mut().zip(u) {
                *o = signed::<T>(ug);
            }
            s.scales[b] = scales::<Z>(ty, &h, sub);
        }
    }
}

/// An integer-superblock panel (`SbType::int_superblock`): per 32-block the scaled codes
/// `sc · (u - offset)` split into unsigned low and signed high bytes, per superblock the
/// header and (Q4_K, Q5_K) the mins as i16 pairs.
#[inline(always)]
unsafe fn unpack_int<const T: u8>(w: *const u8, nb: usize, s: &mut Scratch, ahead: usize) {
    let (subs, sbb, _, _) = const { SbType::from_id(T).desc().strides() };
    for sb in 0..nb / subs {
        unpack_int_sb::<T>(w.add(sb * sbb), sb, s, ahead);
    }
}

/// [`unpack_int`] of the one superblock at `sbp` into superblock `slot` of the scratch.
#[inline(always)]
unsafe fn unpack_int_sb<const T: u8>(sbp: *const u8, slot: usize, s: &mut Scratch, ahead: usize) {
    let ty = const { SbType::from_id(T) };
    let desc = const { SbType::from_id(T).desc() };
    let (subs, sbb, hb, cb) = desc.strides();
    let even = _mm512_set1_epi16(0x00ff);
    let h = header::<Z>(ty, sbp, 0);
    if desc.min == MinKind::Float {
        s.mins[slot] = min_pairs::<Z>(&h).map(|v| v.0);
    }
    s.heads[slot] = h;
    for sub in 0..subs {
        next_panel_part(sbp, sbb, ahead, sub, subs);
        let b = slot * subs + sub;
        let u = unpack(&desc, sbp.add(hb + sub * cb), _mm512_setzero_si512());
        // Each lane's scale (of the 16 values a group of 4 operands covers) in both of
        // its i16 halves.
        // (No closure: one would not inherit this function's target features, and each
        // intrinsic in it would become a call.)
        let [s0, s1] = int_scales::<Z>(ty, &h, sub);
        let sc16 = [both_halves(s0.0), both_halves(s1.0)];
        for (g, ug) in u.iter().enumerate() {
            // The even and odd bytes' products as i16 (the codes less the offset,
            // sign-extended; unsigned codes need no extension), then their low bytes
            // interleaved back and their high bytes likewise (`vpternlogd` 0xca picks the
            // first operand's bits where `even` is set, the second's elsewhere).
            let w = signed::<T>(*ug);
            let (we, wo) = if desc.offset == 0 {
                (_mm512_and_si512(w, even), _mm512_srli_epi16::<8>(w))
            } else {
                (
                    _mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(w)),
                    _mm512_srai_epi16::<8>(w),
                )
            };
            let pe = _mm512_mullo_epi16(we, sc16[g / 4]);
            let po = _mm512_mullo_epi16(wo, sc16[g / 4]);
            s.codes[b * 8 + g] =
                _mm512_ternarylogic_epi32::<0xca>(even, pe, _mm512_slli_epi16::<8>(po));
            s.hi[b * 8 + g] =
                _mm512_ternarylogic_epi32::<0xca>(even, _mm512_srai_epi16::<8>(pe), po);
        }
    }
}

/// Each i32 lane's low i16 in both of its halves.
#[inline(always)]
unsafe fn both_halves(v: __m512i) -> __m512i {
    _mm512_or_si512(
        _mm512_and_si512(v, _mm512_set1_epi32(0xffff)),
        _mm512_slli_epi32::<16>(v),
    )
}

/// A panel-layout panel's codes and scales (`d` as `da`, the stored min as `m`).
#[inline(always)]
unsafe fn unpack_packed<const T: u8>(w: *const u8, nb: usize, s: &mut Scratch, ahead: usize) {
    let l = const { layout(T) };
    let Geometry {
        code_bytes,
        scale_bytes,
        block_bytes,
    } = const { Geometry::of(layout(T).code4(), layout(T).stored_min()) };
    for b in 0..nb {
        let base = w.add(b * block_bytes);
        next_panel(base, block_bytes, ahead);
        let u = if l.code4() {
            packed_unpack::<true>(base)
        } else {
            packed_unpack::<false>(base)
        };
        for (o, ug) in s.codes[b * 8..b * 8 + 8].iter_mut().zip(u) {
            *o = signed::<T>(ug);
        }
        s.scales[b].da = load_scales(base.add(code_bytes));
        if l.stored_min() {
            s.scales[b].m = load_scales(base.add(code_bytes + scale_bytes));
        }
    }
}

/// Codes `u` as the signed bytes `u - offset` (wrapping: an offset of 128 flips the top
/// bit), so the tile product is the offset-corrected integer sum itself.
#[inline(always)]
unsafe fn signed<const T: u8>(u: __m512i) -> __m512i {
    let (offset, _, _) = const { form(T) };
    if offset == 0 {
        u
    } else {
        _mm512_sub_epi8(u, _mm512_set1_epi8(offset as u8 as i8))
    }
}

/// `rows!(j => body)`: `body` once for each activation row `j` of a tile, unrolled (so a
/// tile's 16 accumulators stay in registers).
macro_rules! rows {
    ($j:ident => $body:block) => {
        rows!(@ $j $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $j:ident $body:block $($n:literal)*) => {
        $({
            let $j: usize = $n;
            $body
        })*
    };
}

/// The 16 rows' outputs of one panel, for types with a scale per 32 values.
#[inline(always)]
unsafe fn rows32<const T: u8>(s: &mut Scratch, a: Acts, nb: usize, cols: usize) -> [__m512; ROWS] {
    let (_, min, _) = const { form(T) };
    let mut acc = [_mm512_setzero_ps(); ROWS];
    let codes = s.codes.as_ptr() as *const u8;
    let c = s.c.as_mut_ptr() as *mut i32;
    // Block b's product lands in slot b % SLOTS. Products are issued SLOTS - 1 blocks
    // ahead and stored one block ahead of their epilogue, so the tile unit works while
    // the vector units scale and no store waits on a product just issued (`amx`).
    const AHEAD: usize = amx::SLOTS - 1;
    let issue = |b: usize| {
        amx::issue32(a.xq.add(b * 32), cols, codes.add(b * 512), b % amx::SLOTS);
    };
    let store = |b: usize| amx::store32(c.add((b % amx::SLOTS) * 256), b % amx::SLOTS);
    for b in 0..AHEAD.min(nb) {
        issue(b);
    }
    store(0);
    for b in 0..nb {
        if b + AHEAD < nb {
            issue(b + AHEAD);
        }
        if b + 1 < nb {
            store(b + 1);
        }
        let sc = &s.scales[b];
        let cb = c.add((b % amx::SLOTS) * 256) as *const __m512i;
        rows!(j => {
            let accj = &mut acc[j];
            let jb = j * nb + b;
            let dx = _mm512_set1_ps(*a.xd.add(jb));
            let dp = _mm512_load_si512(cb.add(j) as *const _);
            *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(sc.da, dx), *accj);
            match min {
                // Int16 mins come with 16-value scales (`rows16`).
                Min::None | Min::Int16 => {}
                Min::Sb => {
                    let xi = _mm512_set1_ps(*a.xf.add(jb));
                    *accj = _mm512_fmadd_ps(xi, _mm512_mul_ps(sc.m, dx), *accj);
                }
                Min::Stored => {
                    *accj = _mm512_fmadd_ps(sc.m, _mm512_set1_ps(*a.xs.add(jb)), *accj);
                }
            }
        });
    }
    acc
}

/// The 16 rows' outputs of one panel, for types with integer scales per 16 values.
#[inline(always)]
unsafe fn rows16<const T: u8>(s: &mut Scratch, a: Acts, nb: usize, cols: usize) -> [__m512; ROWS] {
    let (_, min, _) = const { form(T) };
    // 32-blocks per superblock (panel-layout instances never take this path).
    let subs = const {
        if T < PACKED {
            SbType::from_id(T).desc().subs()
        } else {
            1
        }
    };
    let mut acc = [_mm512_setzero_ps(); ROWS];
    let codes = s.codes.as_ptr() as *const u8;
    let c = s.c.as_mut_ptr() as *mut i32;
    // Block b's halves land in pair b % 2; the next block's products are issued before
    // b's are stored (`amx`).
    let issue = |b: usize| amx::issue16x2(a.xq.add(b * 32), cols, codes.add(b * 512), b % 2);
    issue(0);
    for b in 0..nb {
        if b + 1 < nb {
            issue(b + 1);
        }
        let c = c.add((b % 2) * 512);
        amx::store16x2(c, b % 2);
        let sc = &s.scales[b];
        let scf = [
            _mm512_cvtepi32_ps(sc.sc[0].0),
            _mm512_cvtepi32_ps(sc.sc[1].0),
        ];
        let h = &s.heads[b / subs];
        let (c0, c1) = (c as *const __m512i, (c as *const __m512i).add(ROWS));
        rows!(j => {
            let accj = &mut acc[j];
            let jb = j * nb + b;
            let dx = _mm512_set1_ps(*a.xd.add(jb));
            let d0 = _mm512_load_si512(c0.add(j) as *const _);
            let d1 = _mm512_load_si512(c1.add(j) as *const _);
            // f32(sc0 d0 + sc1 d1), exactly (`sub16_products_exact_in_f32`).
            let i = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(d0),
                scf[0],
                _mm512_mul_ps(_mm512_cvtepi32_ps(d1), scf[1]),
            );
            *accj = _mm512_fmadd_ps(i, _mm512_mul_ps(h.d, dx), *accj);
            if min == Min::Int16 {
                let (x0, x1) = (*a.xh.add(2 * jb), *a.xh.add(2 * jb + 1));
                let m = _mm512_add_epi32(
                    _mm512_mullo_epi32(sc.mn[0].0, _mm512_set1_epi32(x0)),
                    _mm512_mullo_epi32(sc.mn[1].0, _mm512_set1_epi32(x1)),
                );
                let md = _mm512_mul_ps(h.f1, dx);
                *accj = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), md, *accj);
            }
        });
    }
    acc
}

/// The 16 rows' outputs of one panel of an integer-superblock type: per superblock the
/// tiles sum the scaled codes' low and high bytes over its 256 values (4 steps of 64),
/// then `A = lo + 256 hi` and (Q4_K, Q5_K) the mins' term (`vpdpwssd` of the mins with the
/// block-sum pairs) take the FMAs of `SbType::int_superblock`.
///
/// The epilogue runs one superblock behind the stores (the sums of superblock sb go to
/// memory set sb % 2 while the epilogue reads those of sb - 1), so its vector loads never
/// wait on the tile store just issued: measured on an Intel Xeon (CPUID family 6 model
/// 207), one thread, Q4_K 8,960 × 1,536, 512 rows, interleaved in one process, 3-4%
/// faster in three pairs (25.2-26.6 ms against 26.1-27.6; a third memory set measured
/// the same as two).
///
/// `fused` (the panel's weights and the prefetch distance) is for a batch of one row
/// group, where every panel is walked once: each superblock is unpacked into a ring slot
/// two superblocks ahead of its products, so the unpacked codes stay in L1 (a whole
/// panel's, 48 KB for 1,536 columns, went through L2 before its one use) and the vector
/// units unpack while the tile unit multiplies. Measured on an Intel Xeon (CPUID family 6
/// model 167, 2 threads, 16 rows, interleaved in one process, GMAC/s; weights in L3):
/// Q4_K 1,536 × 1,536 281-284 against 239-243 unpacked a panel at a time, Q6_K 1,536 ×
/// 8,960 296-299 against 255-257; from DRAM (80 matrices, 616 MB) Q4_K 8,960 × 1,536
/// 204-212 against 182-184, Q6_K 177-180 against 175-178 and its 151,936 × 1,536 output
/// head 176-182 against 167-172. (Unpacking one superblock ahead measured the same.)
#[inline(always)]
unsafe fn rows_int<const T: u8>(
    s: &mut Scratch,
    a: Acts,
    nb: usize,
    cols: usize,
    fused: Option<(*const u8, usize)>,
) -> [__m512; ROWS] {
    let (_, sbb, _, _) = const { SbType::from_id(T).desc().strides() };
    let mut acc = [_mm512_setzero_ps(); ROWS];
    let c = s.c.as_mut_ptr() as *mut i32;
    let nsb = nb / 8;
    let slot = |sb: usize| if fused.is_some() { sb % RING } else { sb };
    // Fused: superblock sb's codes, unpacked into ring slot sb % RING just before its
    // products are issued (the vector units unpack while the tile unit multiplies).
    let fill = |s: &mut Scratch, sb: usize| {
        if let Some((w, ahead)) = fused {
            unpack_int_sb::<T>(w.add(sb * sbb), sb % RING, s, ahead);
        }
    };
    // Superblock sb's sums land in tile set sb % 2; the next superblock's products are
    // issued before sb's are stored (`amx`).
    let issue = |s: &Scratch, sb: usize| {
        let (lo, hi) = (s.codes.as_ptr() as *const u8, s.hi.as_ptr() as *const u8);
        for q in 0..4 {
            let at = (slot(sb) * 8 + 2 * q) * 512;
            let xq = a.xq.add(sb * 256 + 64 * q);
            amx::issue_super(xq, cols, lo.add(at), hi.add(at), sb % 2, q == 0);
        }
    };
    let set = |sb: usize| c.add((sb % 2) * 2 * ROWS * ROWS);
    fill(s, 0);
    if nsb > 1 {
        fill(s, 1);
    }
    issue(s, 0);
    for sb in 0..nsb {
        if sb + 2 < nsb {
            fill(s, sb + 2);
        }
        if sb + 1 < nsb {
            issue(s, sb + 1);
        }
        pull_acts(a.xq, cols, (sb + 2) * 256, 256);
        amx::store_super(set(sb), sb % 2);
        if sb > 0 {
            superblock_epilogue::<T>(s, a, nb, sb - 1, slot(sb - 1), set(sb - 1), &mut acc);
        }
    }
    superblock_epilogue::<T>(s, a, nb, nsb - 1, slot(nsb - 1), set(nsb - 1), &mut acc);
    acc
}

/// [`rows_int`]'s epilogue of superblock `sb` from its sums at `c` (low bytes' 16 × 16
/// int32, then the high bytes').
#[inline(always)]
unsafe fn superblock_epilogue<const T: u8>(
    s: &Scratch,
    a: Acts,
    nb: usize,
    sb: usize,
    slot: usize,
    c: *const i32,
    acc: &mut [__m512; ROWS],
) {
    let (_, min, _) = const { form(T) };
    let h = &s.heads[slot];
    let nd = Z::fneg(h.f1);
    let (c0, c1) = (c as *const __m512i, (c as *const __m512i).add(ROWS));
    rows!(j => {
        let accj = &mut acc[j];
        let jb = j * nb + sb * 8;
        let dx = _mm512_set1_ps(*a.xd.add(jb));
        let ai = _mm512_add_epi32(
            _mm512_load_si512(c0.add(j) as *const _),
            _mm512_slli_epi32::<8>(_mm512_load_si512(c1.add(j) as *const _)),
        );
        *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_mul_ps(h.d, dx), *accj);
        if min == Min::Sb {
            let mut m = _mm512_setzero_si512();
            for (p, mp) in s.mins[slot].iter().enumerate() {
                m = _mm512_dpwssd_epi32(m, *mp, _mm512_set1_epi32(*a.xp.add(jb / 2 + p)));
            }
            *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(nd, dx), *accj);
        }
    });
}

/// Prefetches into L1 the activation codes of a tile's 16 rows from column `col` on,
/// `bytes` of each row; a column past the row's end names the next tile's rows (the row
/// group after this one, which the panel's walk takes next; past the batch the prefetch
/// reads nothing that matters and cannot fault).
///
/// The tile loads read 16 rows a whole activation row apart, a pattern no hardware
/// prefetcher follows, so without this each waited on L2 or L3 (`tileloadd` stalls the
/// tile unit until its lines arrive). Measured on an Intel Xeon (CPUID family 6 model 207,
/// 2 threads, 512 rows, one build switched at run time, interleaved): Q4_K 8,960 × 1,536
/// 760-826 GMAC/s against 670-706, Q6_K 910-953 against 845-904, 1,536 × 8,960 Q4_K
/// 573-584 against 546-560; Qwen2.5-Coder-1.5B Q4_K_M pp512 341-364 tok/s against 327-333.
#[inline(always)]
unsafe fn pull_acts(xq: *const i8, cols: usize, col: usize, bytes: usize) {
    let (base, col) = if col < cols {
        (xq, col)
    } else {
        (xq.wrapping_add(ROWS * cols), col - cols)
    };
    for j in 0..ROWS {
        let row = base.wrapping_add(j * cols + col);
        for l in (0..bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(l));
        }
    }
}

/// Copies activation rows `full..n` into the zero-padded tile (zero rows: zero products,
/// scales and sums, so their outputs are 0 and never stored).
fn fill_tail(s: &mut Scratch, span: &Span, full: usize, halves: bool) {
    let acts = span.acts;
    let (n, cols) = (acts.n(), acts.cols());
    let nb = cols / 32;
    let k = n - full;
    fill(&mut s.tq, ROWS * cols, &acts.codes()[full * cols..n * cols]);
    fill(&mut s.td, ROWS * nb, &acts.scales()[full * nb..n * nb]);
    fill(&mut s.ts, ROWS * nb, &acts.sums()[full * nb..n * nb]);
    fill(&mut s.tf, ROWS * nb, &acts.isums_f32()[full * nb..n * nb]);
    if halves {
        fill(
            &mut s.th,
            ROWS * nb * 2,
            &acts.half_sums()[full * nb * 2..n * nb * 2],
        );
    }
    if acts.superblock() {
        fill(
            &mut s.tp,
            ROWS * nb / 2,
            &acts.isum_pairs()[full * nb / 2..n * nb / 2],
        );
    }
    debug_assert!(k < ROWS);
}

/// `v` = `src` then zeros up to `len`.
fn fill<T: Copy + Default>(v: &mut Vec<T>, len: usize, src: &[T]) {
    v.clear();
    v.extend_from_slice(src);
    v.resize(len, T::default());
}
