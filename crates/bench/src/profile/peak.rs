//! The host's int8 dot-product peak: what an MFU figure divides by.
//!
//! Each probe runs chains of one int8 multiply-accumulate instruction on every thread, with
//! enough independent accumulators to cover the instruction's latency, so the figure is the
//! issue rate of the execution ports, not a latency:
//! - `vpdpbusd zmm` (AVX-512 VNNI): 64 u8×i8 MACs an instruction (16 i32 lanes × 4);
//! - `vpdpbusd ymm` (AVX-512 VNNI + VL): 32;
//! - `vpmaddubsw ymm` → `vpmaddwd` → `vpaddd` (AVX2, ggml's and folio's int8 dot without
//!   VNNI): 32 MACs per `vpmaddubsw`, the three instructions counted as one step.
//!
//! The reported peak is the fastest of them (on an AVX-512 VNNI host, `vpdpbusd zmm`):
//! MACs per second on all threads *at once*. On AMD Zen 4 (one 512-bit op as two 256-bit
//! halves) that is about 64 MACs a cycle a core; Zen 5 has two full 512-bit VNNI pipes,
//! 128 MACs a cycle a core (2 × 4 GHz × 128 ≈ 1 TMAC/s on this 2-core VM).
//!
//! Method, chosen for a shared machine: the threads start together at a barrier for each of
//! many short trials (about 5 ms each), a trial lasts as long as its slowest thread, and the
//! probe reports the fastest trial. A thread descheduled by another process only spoils the
//! trials it was away for, where one long trial (as before) halved the figure whenever a
//! compiler ran beside it on one of the two cores (520 vs 1040 GMAC/s between runs). A
//! trial never counts one thread's quiet moment with another's: the rate is that of all
//! threads running together, what a matmul over the whole pool gets.
//!
//! AMX (`tdpbssd`, 16 × 16 × 64 multiply-adds an instruction) is probed where the host
//! has it and the OS grants the tile state: six independent accumulator tiles.
//!
//! NOTE: hand-written with `std::arch` because the probe must issue exactly these
//! instructions; no crate measures instruction throughput.

use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Instant;

/// One probe's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peak {
    /// The instruction (chain) measured.
    pub instruction: String,
    /// Multiply-accumulates per second on all threads.
    pub macs_s: f64,
    pub threads: usize,
    /// Whether the instruction is a tile unit's (AMX), not the vector units'.
    #[serde(default)]
    pub tile: bool,
}

/// Instructions per accumulator per trial: 24 M instructions a thread, ~3-6 ms at 1-2 a
/// cycle, short enough that many trials fit between another process's time slices.
const ITERS: u64 = 2_000_000;

/// Trials per requested repetition (see the module doc).
const TRIALS_PER_REP: usize = 10;

/// Every probe this CPU can run, best of `reps` each, widest first.
pub fn int8_peaks(threads: usize, reps: usize) -> Vec<Peak> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let vnni = std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw");
        if vnni {
            // SAFETY: AVX-512 F/BW/VL/VNNI are present (checked above).
            out.push(measure("vpdpbusd zmm", 64, threads, reps, || unsafe {
                x86::dpbusd_zmm(ITERS)
            }));
            // SAFETY: as above.
            out.push(measure("vpdpbusd ymm", 32, threads, reps, || unsafe {
                x86::dpbusd_ymm(ITERS)
            }));
        }
        if folio_kernels::matmul::amx_available() {
            // One unit of `measure` is 1/64 of a `tdpbssd` (16,384 multiply-adds), so a
            // trial issues 64 times fewer of them than of the vector instructions.
            // SAFETY: the OS granted the tile state (checked above).
            let mut tiles = measure("AMX tdpbssd", 16 * 16 * 64 / 64, threads, reps, || unsafe {
                x86::tdpbssd(ITERS / 64)
            });
            tiles.tile = true;
            out.push(tiles);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked above).
            out.push(measure(
                "vpmaddubsw+vpmaddwd ymm",
                32,
                threads,
                reps,
                || unsafe { x86::maddubs_ymm(ITERS) },
            ));
        }
    }
    out
}

/// Whether the kernel reports AMX int8 tiles (`amx_int8` in /proc/cpuinfo: the flag is
/// shown only when the OS enables the tile state; `is_x86_feature_detected!("amx-int8")` is
/// not stable Rust yet).
pub fn has_amx_int8() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "amx_int8"))
        })
        .unwrap_or(false)
}

/// The fastest of `peaks` that runs on the vector units (none of AMX's tiles): what the
/// vector kernels can reach, and the peak an MFU is compared with across hosts with and
/// without tiles.
pub fn vector_best(peaks: &[Peak]) -> Option<Peak> {
    best(peaks.iter().filter(|p| !p.tile).cloned().collect())
}

/// The fastest of `peaks`.
pub fn best(peaks: Vec<Peak>) -> Option<Peak> {
    peaks
        .into_iter()
        .max_by(|a, b| a.macs_s.total_cmp(&b.macs_s))
}

/// Runs `f` (which issues `ITERS` × `x86::CHAINS` instructions of `macs` MACs each) on
/// `threads` threads at once, `reps` × [`TRIALS_PER_REP`] trials started together at a
/// barrier (after one untimed warm-up, which also lifts the clock); a trial's time is its
/// slowest thread's, the figure the fastest trial's.
fn measure(name: &str, macs: u64, threads: usize, reps: usize, f: impl Fn() -> i32 + Sync) -> Peak {
    let threads = threads.max(1);
    let trials = reps.max(1) * TRIALS_PER_REP;
    let barrier = std::sync::Barrier::new(threads);
    let times: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    black_box(f());
                    (0..trials)
                        .map(|_| {
                            barrier.wait();
                            let t = Instant::now();
                            black_box(f());
                            t.elapsed().as_secs_f64()
                        })
                        .collect::<Vec<f64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a probe thread does not panic"))
            .collect()
    });
    let best = (0..trials)
        .map(|i| times.iter().map(|t| t[i]).fold(0.0, f64::max))
        .fold(f64::INFINITY, f64::min);
    let total = (threads as u64 * ITERS * x86::CHAINS as u64 * macs) as f64;
    Peak {
        instruction: name.into(),
        macs_s: total / best,
        threads,
        tile: false,
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    pub const CHAINS: usize = 12;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// Independent accumulator chains: ≥ latency (4–5 cycles) × ports (2) on every x86 core
    /// folio targets.
    pub const CHAINS: usize = 12;

    macro_rules! chains {
        ($zero:expr, $step:expr, $fold:expr, $iters:expr) => {{
            let mut acc = [$zero; CHAINS];
            for _ in 0..$iters {
                for a in acc.iter_mut() {
                    *a = $step(*a);
                }
            }
            let mut s = acc[0];
            for a in &acc[1..] {
                s = $fold(s, *a);
            }
            s
        }};
    }

    /// `iters` × 12 `tdpbssd` into six independent tiles (int8 16 × 64 by 16 × 64).
    ///
    /// # Safety
    /// The process must hold the AMX tile state (`folio_kernels::matmul::amx_available`).
    pub unsafe fn tdpbssd(iters: u64) -> i32 {
        use std::arch::asm;
        #[repr(C, align(64))]
        struct Cfg([u8; 64]);
        let mut cfg = Cfg([0; 64]);
        cfg.0[0] = 1;
        for t in 0..8 {
            cfg.0[16 + 2 * t] = 64;
            cfg.0[48 + t] = 16;
        }
        let data = [black_box(1i8); 1024];
        let mut c = [0i32; 256];
        asm!(
            "ldtilecfg [{cfg}]",
            "tileloadd tmm0, [{d} + {s}*1]",
            "tileloadd tmm1, [{d} + {s}*1]",
            "tilezero tmm2", "tilezero tmm3", "tilezero tmm4",
            "tilezero tmm5", "tilezero tmm6", "tilezero tmm7",
            cfg = in(reg) cfg.0.as_ptr(), d = in(reg) data.as_ptr(), s = in(reg) 64usize,
            options(nostack),
        );
        for _ in 0..iters {
            for _ in 0..2 {
                asm!(
                    "tdpbssd tmm2, tmm0, tmm1",
                    "tdpbssd tmm3, tmm0, tmm1",
                    "tdpbssd tmm4, tmm0, tmm1",
                    "tdpbssd tmm5, tmm0, tmm1",
                    "tdpbssd tmm6, tmm0, tmm1",
                    "tdpbssd tmm7, tmm0, tmm1",
                    options(nostack, nomem),
                );
            }
        }
        asm!(
            "tilestored [{c} + {s}*1], tmm2",
            "tilerelease",
            c = in(reg) c.as_mut_ptr(), s = in(reg) 64usize, options(nostack),
        );
        c[0]
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dpbusd_zmm(iters: u64) -> i32 {
        let a = _mm512_set1_epi8(black_box(3));
        let b = _mm512_set1_epi8(black_box(-2));
        let s = chains!(
            _mm512_setzero_si512(),
            |x| _mm512_dpbusd_epi32(x, a, b),
            |x, y| _mm512_add_epi32(x, y),
            iters
        );
        _mm512_reduce_add_epi32(s)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn dpbusd_ymm(iters: u64) -> i32 {
        let a = _mm256_set1_epi8(black_box(3));
        let b = _mm256_set1_epi8(black_box(-2));
        let s = chains!(
            _mm256_setzero_si256(),
            |x| _mm256_dpbusd_epi32(x, a, b),
            |x, y| _mm256_add_epi32(x, y),
            iters
        );
        _mm256_extract_epi32::<0>(s)
    }

    /// The AVX2 dot step with the accumulator fed back as the unsigned operand: with
    /// constant operands LLVM hoists `vpmaddubsw`/`vpmaddwd` out of the loop (they are pure),
    /// and the chain would time only the adds.
    #[target_feature(enable = "avx2")]
    pub unsafe fn maddubs_ymm(iters: u64) -> i32 {
        let b = _mm256_set1_epi8(black_box(-2));
        let ones = _mm256_set1_epi16(1);
        let s = chains!(
            _mm256_set1_epi8(black_box(3)),
            |x| _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(x, b), ones)),
            |x, y| _mm256_add_epi32(x, y),
            iters
        );
        _mm256_extract_epi32::<0>(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each chain computes a known value (3 × -2 per MAC, summed), so the compiler cannot
    /// drop the work and the lanes are the ones counted.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn chains_compute_what_they_count() {
        let n = 10u64;
        if std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // 16 lanes × 4 MACs × (-6) × n × CHAINS, summed over lanes.
            let want = -6 * 64 * n as i32 * x86::CHAINS as i32;
            assert_eq!(unsafe { x86::dpbusd_zmm(n) }, want);
            // One lane of the ymm form: 4 MACs × (-6) × n × CHAINS.
            assert_eq!(
                unsafe { x86::dpbusd_ymm(n) },
                -6 * 4 * n as i32 * x86::CHAINS as i32
            );
        } else {
            eprintln!("skipping the VNNI chains: this CPU has no AVX-512 VNNI");
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // Lane 0 of the fed-back chain, step by step in scalar: its 4 bytes are the
            // unsigned operand, each times -2, pairs saturated to i16, then summed to i32.
            let step = |x: i32| {
                let u = x.to_le_bytes();
                let pair =
                    |i: usize| (u[i] as i32 * -2 + u[i + 1] as i32 * -2).clamp(-32768, 32767);
                x.wrapping_add(pair(0) + pair(2))
            };
            let mut x = i32::from_le_bytes([3; 4]);
            for _ in 0..n {
                x = step(x);
            }
            assert_eq!(
                unsafe { x86::maddubs_ymm(n) },
                x.wrapping_mul(x86::CHAINS as i32)
            );
        }
    }

    #[test]
    fn the_best_probe_is_reported() {
        let all = int8_peaks(1, 1);
        for p in &all {
            eprintln!(
                "{}: {:.1} GMAC/s on 1 thread",
                p.instruction,
                p.macs_s / 1e9
            );
        }
        match best(all.clone()) {
            Some(p) => assert!(all.iter().all(|q| q.macs_s <= p.macs_s) && p.macs_s > 0.0),
            None => assert!(all.is_empty()),
        }
    }
}
