//! Runtime CPU feature detection and the choice of instruction set.
//!
//! folio is built without `-C target-cpu=native` so one binary runs everywhere; every SIMD
//! kernel is a `#[target_feature(enable = "...")]` function chosen here at run time.

use std::sync::OnceLock;

/// The x86 features folio's kernels care about, detected once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuFeatures {
    /// AVX-512 F + BW + VL together (the 512-bit kernels need all three).
    pub avx512: bool,
    /// AVX-512 VNNI (`vpdpbusd`: u8 x i8 -> i32 dot products of 4), used by quantized matmul.
    pub avx512_vnni: bool,
    /// AVX2 (256-bit integer and float).
    pub avx2: bool,
    /// Fused multiply-add on 256-bit registers.
    pub fma: bool,
    /// Half-precision conversion instructions (`vcvtph2ps`).
    pub f16c: bool,
}

/// Instruction-set level a kernel is run with, from least to most capable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust; the reference every SIMD kernel is tested against.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL; quantized matmul also needs VNNI (else it runs its AVX2 kernel).
    Avx512,
}

impl Isa {
    /// Parses the `FOLIO_ISA` spelling (`scalar`, `avx2`, `avx512`).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// The ISA actually usable for `self` on this CPU: a request for more than the CPU has
    /// is lowered, so forcing an ISA can never execute an unsupported instruction.
    pub fn clamp(self) -> Isa {
        self.min(best())
    }

    /// Every ISA this CPU can run, lowest first (tests compare each one to `Scalar`).
    pub fn available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= best())
            .collect()
    }
}

/// Features of the running CPU (detected on first call).
pub fn features() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    CpuFeatures {
        avx512: has!("avx512f") && has!("avx512bw") && has!("avx512vl"),
        avx512_vnni: has!("avx512vnni"),
        avx2: has!("avx2"),
        fma: has!("fma"),
        f16c: has!("f16c"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// Best ISA the hardware supports, ignoring `FOLIO_ISA`.
pub fn best() -> Isa {
    let f = features();
    // NOTE: the AVX-512 kernels also use 256-bit FMA/F16C forms, so require the AVX2 set too.
    let avx2 = f.avx2 && f.fma && f.f16c;
    if f.avx512 && avx2 {
        Isa::Avx512
    } else if avx2 {
        Isa::Avx2
    } else {
        Isa::Scalar
    }
}

/// The ISA kernels dispatch to: the best available, or a lower one forced with
/// `FOLIO_ISA=scalar|avx2|avx512` (a higher one than the CPU has is ignored).
pub fn isa() -> Isa {
    static I: OnceLock<Isa> = OnceLock::new();
    *I.get_or_init(|| {
        let forced = std::env::var("FOLIO_ISA").ok().and_then(|s| Isa::parse(&s));
        forced.map_or(best(), Isa::clamp)
    })
}

/// The quantized matmul kernels `isa` runs (for reports): `amx+avx512-vnni` (AMX tiles for
/// batches, see `matmul::Tiles::Auto`), `avx512-vnni`, `avx2` or `scalar`.
pub fn matmul_path(isa: Isa) -> &'static str {
    match isa.clamp() {
        Isa::Avx512 if has_vnni512() && crate::matmul::amx_available() => "amx+avx512-vnni",
        Isa::Avx512 if has_vnni512() => "avx512-vnni",
        Isa::Avx512 | Isa::Avx2 => "avx2",
        Isa::Scalar => "scalar",
    }
}

/// Whether the quantized AVX-512 kernels (which need VNNI) can run.
pub(crate) fn has_vnni512() -> bool {
    best() == Isa::Avx512 && features().avx512_vnni
}

/// Bytes ahead of the block being read that the quantized AVX-512 matmul kernels prefetch
/// (`prefetcht0`, every line of the block), or 0 for none. Decode streams the weights from
/// DRAM once per step, and the best distance is the CPU's: on Intel Xeons the hardware
/// prefetcher alone ran dry (4 KiB ahead paid), while on AMD Zen 4 the same prefetches
/// took batch-1 decode of a 1 GB model from ~24-26 to ~14-17 tok/s (the hardware
/// prefetcher already streams; the extra load-port work and early evictions cost).
/// `FOLIO_PREFETCH=BYTES` overrides (0 = off).
pub fn weight_prefetch() -> usize {
    static P: OnceLock<usize> = OnceLock::new();
    *P.get_or_init(|| {
        std::env::var("FOLIO_PREFETCH")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(if vendor_is_amd() { 0 } else { 4096 })
    })
}

/// Activation rows from which a matmul prefetches its weights [`BATCHED_PREFETCH`] bytes
/// ahead on every CPU (unless `FOLIO_PREFETCH` says otherwise).
pub const BATCHED_ROWS: usize = 8;

/// The prefetch distance of a matmul over `BATCHED_ROWS` or more activation rows. Each
/// weight line then feeds many rows, the loop consumes the stream slowly, and AMD's hardware
/// prefetcher no longer runs far enough ahead: measured on Zen 5 (2 threads, the 1.5B's
/// 190 MB Q6_K output head at 16 rows), 33 ms a call without, 20-22 ms with 4 KiB.
pub const BATCHED_PREFETCH: usize = 4096;

/// [`weight_prefetch`] for a matmul over `rows` activation rows.
pub fn weight_prefetch_for(rows: usize) -> usize {
    static FORCED: OnceLock<Option<usize>> = OnceLock::new();
    let forced = *FORCED.get_or_init(|| {
        std::env::var("FOLIO_PREFETCH")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    });
    match forced {
        Some(p) => p,
        None if rows >= BATCHED_ROWS => BATCHED_PREFETCH,
        None => weight_prefetch(),
    }
}

/// The 64-byte lines that start inside `[start, start + bytes)`: the first one's address
/// and how many. A walk over consecutive ranges (a panel's blocks or superblocks, whatever
/// their size) that prefetches these touches every line once; stepping 64 bytes from each
/// range's own start prefetched a line twice wherever a range did not begin on a line.
#[inline(always)]
pub(crate) fn lines_in(start: usize, bytes: usize) -> (usize, usize) {
    let first = start.next_multiple_of(64);
    (first, (start + bytes).saturating_sub(first).div_ceil(64))
}

/// Prefetches the weight line at `a` for a matmul over `NR` activation rows, into the
/// cache level that measured fastest. Batch-1 decode streams the weights from DRAM faster
/// with `prefetcht2` (a line to the outer caches, not L1) than with `prefetcht0`: measured
/// on an Intel Xeon (CPUID family 6 model 207, 2 threads, 1 row, 151,936 × 4,096 so the
/// matrix does not fit the 300 MiB L3, interleaved), Q4_K 10.3-12.4 ms against 12.7-15.1,
/// Q6_K 18.4-18.9 against 19.8-22.5, Q4_0 10.3-10.5 against 11.2-11.4, Q8_0 the same
/// (18.9-19.2 against 19.0-19.6: 35 GB/s, the bus's pace), and the 1.5B Q4_K_M's decode
/// 27.4-28.7 tok/s against 24.6-26.2. From [`BATCHED_ROWS`] on, `prefetcht0` as measured
/// on Zen 5 (on the Xeon the two hints ran the same at 16 rows: the loop is compute-bound
/// there).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_weights<const NR: usize>(a: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T2};
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        if NR >= BATCHED_ROWS {
            _mm_prefetch::<_MM_HINT_T0>(a as *const i8);
        } else {
            _mm_prefetch::<_MM_HINT_T2>(a as *const i8);
        }
    }
}

/// Whether the CPU's vendor string is AMD's.
fn vendor_is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 0 (the vendor string) exists on every x86-64 CPU.
        let r = std::arch::x86_64::__cpuid(0);
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&r.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&r.edx.to_le_bytes());
        v[8..].copy_from_slice(&r.ecx.to_le_bytes());
        &v == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
