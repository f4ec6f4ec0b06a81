//! Intel AMX tiles: the host check, the tile configuration and the few tile instructions
//! the AMX matmul kernels (`amx_panels`) issue.
//!
//! NOTE: written with `asm!` because the AMX intrinsics (`_tile_dpbsud` …) are not stable
//! Rust; the tile registers cannot be operands of `asm!`, so each instruction names its
//! tiles (`tmm0` … `tmm7`) as the configuration below lays them out.
//!
//! One `tdpbssd` multiplies a 16 × K tile of signed bytes (16 activation rows, K values
//! each) by a K/4 × 64-byte tile of signed bytes (K values of 16 weight rows, 4 values a
//! row per 32-bit lane: exactly the operand layout of a `vpdpbusd` zmm) into 16 × 16 int32:
//! 16 × 16 × K multiply-adds in one instruction, where `vpdpbusd` does 64.

#![cfg(target_arch = "x86_64")]

use std::arch::asm;
use std::sync::OnceLock;

/// Activation rows (and weight rows) of one tile product.
pub(crate) const ROWS: usize = 16;

/// Whether this process may run the AMX kernels: the CPU has AMX-TILE and AMX-INT8, the
/// kernel granted the tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`; without it
/// the first tile instruction faults) and `FOLIO_AMX=0` does not turn them off.
pub fn available() -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    *A.get_or_init(|| {
        let off = std::env::var("FOLIO_AMX").is_ok_and(|v| v.trim() == "0");
        !off && cpu_has_amx() && request_tile_state()
    })
}

fn cpu_has_amx() -> bool {
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    let max = std::arch::x86_64::__cpuid(0).eax;
    // EDX bit 24: AMX-TILE, bit 25: AMX-INT8.
    max >= 7 && leaf7.edx & (1 << 24) != 0 && leaf7.edx & (1 << 25) != 0
}

/// Asks Linux for the AMX tile data state (once per process; every thread then has it).
fn request_tile_state() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: arch_prctl with this request only changes the process's permitted xstate.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// A tile configuration (the 64-byte `ldtilecfg` operand, palette 1).
#[repr(C, align(64))]
pub(crate) struct Config([u8; 64]);

impl Config {
    /// Tiles `(rows, bytes per row)` from `tmm0` on.
    pub const fn new(tiles: &[(u8, u16)]) -> Config {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut i = 0;
        while i < tiles.len() {
            let (rows, colsb) = tiles[i];
            let b = colsb.to_le_bytes();
            c[16 + 2 * i] = b[0];
            c[17 + 2 * i] = b[1];
            c[48 + i] = rows;
            i += 1;
        }
        Config(c)
    }
}

/// The tiles of the 32-value form, four blocks in flight: `tmm0`/`tmm6` activations (16
/// rows × 32 bytes), `tmm1`/`tmm7` weight codes (8 rows × 64) of even and odd slots,
/// `tmm2` … `tmm5` the int32 products (16 × 64) of slots 0 … 3.
pub(crate) const BLOCK32: Config = Config::new(&[
    (16, 32),
    (8, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 32),
    (8, 64),
]);

/// Blocks whose products [`issue32`] keeps in flight (its slots).
pub(crate) const SLOTS: usize = 4;

/// The tiles of the 16-value form (types with a scale per 16 values): `tmm0`/`tmm1` the two
/// halves' activations (16 × 16 bytes), `tmm2`/`tmm3` their codes (4 × 64), `tmm4`/`tmm5`
/// and `tmm6`/`tmm7` the products of the two halves of pairs 0 and 1.
pub(crate) const BLOCK16: Config = Config::new(&[
    (16, 16),
    (16, 16),
    (4, 64),
    (4, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
]);

/// Loads `cfg` for this thread; [`release`] ends the tile use.
///
/// # Safety
/// [`available`] must be true.
#[inline(always)]
pub(crate) unsafe fn configure(cfg: &Config) {
    asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
}

/// Frees the tile state (so context switches stop saving it).
///
/// # Safety
/// [`available`] must be true.
#[inline(always)]
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, nomem));
}

// Issuing a product and storing it are two calls because the tile unit runs its
// instructions in order: a `tilestored` right behind its `tdpbssd` waits out the product's
// latency and holds every later tile load and product back with it (measured: half the
// samples of the Q4_K prefill matmul sat on the tile loads and stores). The kernels issue
// the products of the next blocks first and store a product a block or more after it was
// issued, when it is done.

/// [`BLOCK32`]: issues `c = a · b` into `slot`'s product tile, for 16 activation rows of 32
/// bytes (`a`, rows `stride` apart) and a block's 512 code bytes `b`; [`store32`] writes it
/// out. Slots 0 and 2 share operand tiles, as do 1 and 3.
///
/// # Safety
/// [`BLOCK32`] configured; `a` must hold 16 rows, `b` 512 bytes; `slot` below [`SLOTS`].
#[inline(always)]
pub(crate) unsafe fn issue32(a: *const i8, stride: usize, b: *const u8, slot: usize) {
    macro_rules! dot {
        ($a:literal, $b:literal, $c:literal) => {
            asm!(
                concat!("tileloadd ", $a, ", [{a} + {sa}*1]"),
                concat!("tileloadd ", $b, ", [{b} + {s64}*1]"),
                concat!("tilezero ", $c),
                concat!("tdpbssd ", $c, ", ", $a, ", ", $b),
                a = in(reg) a, sa = in(reg) stride, b = in(reg) b,
                s64 = in(reg) 64usize, options(nostack, readonly),
            )
        };
    }
    match slot {
        0 => dot!("tmm0", "tmm1", "tmm2"),
        1 => dot!("tmm6", "tmm7", "tmm3"),
        2 => dot!("tmm0", "tmm1", "tmm4"),
        _ => dot!("tmm6", "tmm7", "tmm5"),
    }
}

/// [`BLOCK32`]: the 16 × 16 int32 products of `slot` to `c` (row = activation row, lane =
/// weight row).
///
/// # Safety
/// [`BLOCK32`] configured; `c` must hold 1,024 bytes.
#[inline(always)]
pub(crate) unsafe fn store32(c: *mut i32, slot: usize) {
    macro_rules! st {
        ($c:literal) => {
            asm!(
                concat!("tilestored [{c} + {s64}*1], ", $c),
                c = in(reg) c, s64 = in(reg) 64usize, options(nostack),
            )
        };
    }
    match slot {
        0 => st!("tmm2"),
        1 => st!("tmm3"),
        2 => st!("tmm4"),
        _ => st!("tmm5"),
    }
}

/// [`BLOCK16`]: issues the two 16-value halves' products of a block into `pair`'s product
/// tiles (values 0..16 and 16..32); [`store16x2`] writes them out. The pairs share the
/// operand tiles.
///
/// # Safety
/// [`BLOCK16`] configured; `a` must hold 16 rows of 32 bytes, `b` 512 bytes; `pair` 0 or 1.
#[inline(always)]
pub(crate) unsafe fn issue16x2(a: *const i8, stride: usize, b: *const u8, pair: usize) {
    macro_rules! dot {
        ($c0:literal, $c1:literal) => {
            asm!(
                "tileloadd tmm0, [{a} + {sa}*1]",
                "tileloadd tmm1, [{a2} + {sa}*1]",
                "tileloadd tmm2, [{b} + {s64}*1]",
                "tileloadd tmm3, [{b2} + {s64}*1]",
                concat!("tilezero ", $c0),
                concat!("tilezero ", $c1),
                concat!("tdpbssd ", $c0, ", tmm0, tmm2"),
                concat!("tdpbssd ", $c1, ", tmm1, tmm3"),
                a = in(reg) a, a2 = in(reg) a.add(16), sa = in(reg) stride,
                b = in(reg) b, b2 = in(reg) b.add(256),
                s64 = in(reg) 64usize, options(nostack, readonly),
            )
        };
    }
    if pair == 0 {
        dot!("tmm4", "tmm5")
    } else {
        dot!("tmm6", "tmm7")
    }
}

/// Stores two 16 × 16 int32 tiles (the register names, literals) to `c[0..256]` and
/// `c[256..512]`, rows 64 bytes apart: the product pairs of [`store16x2`] and
/// [`store_super`]. A macro because `asm!` takes register names only as literals.
macro_rules! store_pair {
    ($c:expr, $t0:literal, $t1:literal) => {
        asm!(
            concat!("tilestored [{c} + {s64}*1], ", $t0),
            concat!("tilestored [{c2} + {s64}*1], ", $t1),
            c = in(reg) $c, c2 = in(reg) $c.add(256), s64 = in(reg) 64usize,
            options(nostack),
        )
    };
}

/// [`BLOCK16`]: `pair`'s products to `c`: `c[0..256]` those of values 0..16, `c[256..512]`
/// of values 16..32 (each 16 × 16 int32 as in [`store32`]).
///
/// # Safety
/// [`BLOCK16`] configured; `c` must hold 2,048 bytes.
#[inline(always)]
pub(crate) unsafe fn store16x2(c: *mut i32, pair: usize) {
    if pair == 0 {
        store_pair!(c, "tmm4", "tmm5")
    } else {
        store_pair!(c, "tmm6", "tmm7")
    }
}

/// The tiles of the integer-superblock form (`SbType::int_superblock`): `tmm0` 16
/// activation rows × 64 bytes, `tmm1`/`tmm2` 64 values of the scaled codes' low and high
/// bytes (16 × 64), `tmm3`/`tmm4` and `tmm5`/`tmm6` the int32 sums of sets 0 and 1.
pub(crate) const SUPER64: Config = Config::new(&[
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
]);

/// [`SUPER64`]: adds 64 values' products to `set`'s two sums (zeroed first when `zero`):
/// signed activations `a` (16 rows `stride` apart) times the unsigned low bytes `lo`
/// (`tdpbsud`) and the signed high bytes `hi` (`tdpbssd`) of the scaled codes (1,024 bytes
/// each: two 32-blocks' `vpdpbusd` operands). [`store_super`] writes the sums out.
///
/// # Safety
/// [`SUPER64`] configured; `a` must hold 16 rows of 64 bytes, `lo` and `hi` 1,024 bytes;
/// `set` 0 or 1.
#[inline(always)]
pub(crate) unsafe fn issue_super(
    a: *const i8,
    stride: usize,
    lo: *const u8,
    hi: *const u8,
    set: usize,
    zero: bool,
) {
    macro_rules! dot {
        ($c0:literal, $c1:literal) => {{
            if zero {
                asm!(
                    concat!("tilezero ", $c0),
                    concat!("tilezero ", $c1),
                    options(nostack, nomem)
                );
            }
            asm!(
                "tileloadd tmm0, [{a} + {sa}*1]",
                "tileloadd tmm1, [{lo} + {s64}*1]",
                "tileloadd tmm2, [{hi} + {s64}*1]",
                concat!("tdpbsud ", $c0, ", tmm0, tmm1"),
                concat!("tdpbssd ", $c1, ", tmm0, tmm2"),
                a = in(reg) a, sa = in(reg) stride, lo = in(reg) lo, hi = in(reg) hi,
                s64 = in(reg) 64usize, options(nostack, readonly),
            )
        }};
    }
    if set == 0 {
        dot!("tmm3", "tmm4")
    } else {
        dot!("tmm5", "tmm6")
    }
}

/// [`SUPER64`]: `set`'s sums to `c`: `c[0..256]` those of the low bytes, `c[256..512]` of
/// the high bytes (each 16 × 16 int32 as in [`store32`]).
///
/// # Safety
/// [`SUPER64`] configured; `c` must hold 2,048 bytes.
#[inline(always)]
pub(crate) unsafe fn store_super(c: *mut i32, set: usize) {
    if set == 0 {
        store_pair!(c, "tmm3", "tmm4")
    } else {
        store_pair!(c, "tmm5", "tmm6")
    }
}
