//! Machine probes: memory read bandwidth and the matmul kernel's FLOP/s.

use folio_kernels::pool::ThreadPool;
use folio_kernels::{QMatrix, WeightType};
use std::hint::black_box;
use std::time::Instant;

/// Best-of-`reps` read bandwidth (bytes/s) summing a `bytes`-sized buffer with `threads`
/// threads, each reading its own contiguous slice (STREAM's "sum" kernel, read only).
///
/// NOTE: the buffer is written once before timing so its pages are real memory (a fresh
/// zeroed allocation maps one shared zero page and would read from cache).
pub fn read_bandwidth(bytes: usize, threads: usize, reps: usize) -> f64 {
    let n = (bytes / 8).max(1024);
    let data: Vec<u64> = (0..n as u64).collect();
    let threads = threads.max(1);
    let per = n.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        std::thread::scope(|s| {
            for part in data.chunks(per) {
                s.spawn(move || black_box(sum(part)));
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    (n * 8) as f64 / best
}

/// The read loop, compiled for the widest vector unit the CPU has (checked at run time:
/// the crate itself is built for baseline x86-64, whose 128-bit loads would understate β).
fn sum(v: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { sum_avx512(v) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { sum_avx2(v) };
        }
    }
    sum_lanes(v)
}

/// Four 512-bit accumulators, written with intrinsics: the auto-vectorized form of
/// [`sum_lanes`] stayed scalar here and measured the adds (~4 GB/s a core), not the memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(v: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let chunks = v.chunks_exact(32);
    let rest = chunks.remainder();
    let (mut a, mut b, mut c, mut d) = (
        _mm512_setzero_si512(),
        _mm512_setzero_si512(),
        _mm512_setzero_si512(),
        _mm512_setzero_si512(),
    );
    for ch in chunks {
        let p = ch.as_ptr() as *const __m512i;
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p.add(1)));
        c = _mm512_add_epi64(c, _mm512_loadu_si512(p.add(2)));
        d = _mm512_add_epi64(d, _mm512_loadu_si512(p.add(3)));
    }
    let s = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
    let s = _mm512_reduce_add_epi64(s) as u64;
    rest.iter().fold(s, |acc, &x| acc.wrapping_add(x))
}

/// The AVX2 form of [`sum_avx512`]: four 256-bit accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(v: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let chunks = v.chunks_exact(16);
    let rest = chunks.remainder();
    let (mut a, mut b, mut c, mut d) = (
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
    );
    for ch in chunks {
        let p = ch.as_ptr() as *const __m256i;
        a = _mm256_add_epi64(a, _mm256_loadu_si256(p));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(p.add(1)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(p.add(2)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(p.add(3)));
    }
    let s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    let mut lanes = [0u64; 4];
    _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, s);
    let s = lanes.iter().fold(0u64, |acc, &x| acc.wrapping_add(x));
    rest.iter().fold(s, |acc, &x| acc.wrapping_add(x))
}

/// Sixteen independent accumulators so the loop vectorizes and is not latency-bound.
#[inline(always)]
fn sum_lanes(v: &[u64]) -> u64 {
    let mut acc = [0u64; 16];
    let chunks = v.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    let mut s = rest.iter().fold(0u64, |a, &x| a.wrapping_add(x));
    for a in acc {
        s = s.wrapping_add(a);
    }
    s
}

/// Best-of-`reps` FLOP/s of `QMatrix::matmul` on a `rows × cols` Q4_1 matrix times a batch
/// of `batch` activation rows (2·rows·cols·batch FLOPs per call): the peak the model's
/// kernels reach when a large batch shares each weight read.
pub fn matmul_flops(rows: usize, cols: usize, batch: usize, reps: usize, pool: &ThreadPool) -> f64 {
    let blocks = rows * cols / 32;
    let mut raw = Vec::with_capacity(blocks * 20);
    let mut s: u32 = 12345;
    for _ in 0..blocks {
        raw.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        raw.extend_from_slice(&half::f16::from_f32(-0.08).to_le_bytes());
        for _ in 0..16 {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            raw.push((s >> 16) as u8);
        }
    }
    let m = QMatrix::from_ggml(WeightType::Q4_1, rows, cols, &raw)
        .expect("probe shape is a whole number of Q4_1 blocks");
    let x: Vec<f32> = (0..batch * cols)
        .map(|i| ((i % 17) as f32 - 8.0) * 0.05)
        .collect();
    let mut out = vec![0f32; batch * rows];
    m.matmul(&x, batch, &mut out, pool); // warm-up: repack caches, thread wake-up
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        m.matmul(&x, batch, &mut out, pool);
        best = best.min(t.elapsed().as_secs_f64());
        black_box(&out);
    }
    2.0 * rows as f64 * cols as f64 * batch as f64 / best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every SIMD read loop sums exactly what the scalar reference does, remainder included.
    #[test]
    fn simd_sums_equal_the_scalar_reference() {
        for n in [0usize, 1, 15, 31, 32, 33, 1000, 4099] {
            let v: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let want = sum_lanes(&v);
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 checked just above.
                    assert_eq!(unsafe { sum_avx2(&v) }, want, "avx2, n = {n}");
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512F checked just above.
                    assert_eq!(unsafe { sum_avx512(&v) }, want, "avx512, n = {n}");
                }
            }
            assert_eq!(sum(&v), want);
        }
    }
}
