//! Matmul micro-benchmark: µs per call and GB/s of weights streamed, on the global pool.
//!
//! `cargo run -p folio-kernels --release --example kbench [-- --cold] [--isa scalar|avx2|avx512]`
//!
//! "hot": the same matrix every call (cache-resident after the first). `--cold` also cycles
//! through enough copies of the 1536x576 matrix (~400 MB) that every call reads DRAM, as
//! decode does with a whole model.

use folio_kernels::matmul::{QMatrix, WeightType};
use folio_kernels::{cpu, Isa, ThreadPool};
use std::time::Instant;

fn raw(ty: WeightType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    // Cheap deterministic bytes with sane f16 scales (0x2000 ~ 0.0078).
    let (bv, bb) = ty.block();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(rows * cols / bv * bb);
    for _ in 0..rows * cols / bv {
        let start = v.len();
        for _ in 0..bb {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(s as u8);
        }
        v[start] = 0x00;
        v[start + 1] = 0x20;
        if ty == WeightType::Q4_1 {
            v[start + 2] = 0x00;
            v[start + 3] = 0xa0;
        }
    }
    v
}

/// CPU time of the calling thread in ns (Linux), so figures survive a busy machine.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Best-of-5 mean (wall µs, caller-thread CPU µs) per call over ~60 ms rounds.
fn time(mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..3 {
        f();
    }
    let t = Instant::now();
    let mut calls = 0;
    while t.elapsed().as_millis() < 20 {
        f();
        calls += 1;
    }
    let per = t.elapsed().as_secs_f64() / calls as f64;
    let reps = ((0.06 / per) as usize).max(1);
    (0..5)
        .map(|_| {
            let t = Instant::now();
            let c = thread_cpu_ns();
            for _ in 0..reps {
                f();
            }
            let cpu = (thread_cpu_ns() - c) as f64 / 1e3 / reps as f64;
            (t.elapsed().as_secs_f64() * 1e6 / reps as f64, cpu)
        })
        .fold((f64::INFINITY, f64::INFINITY), |a, b| {
            (a.0.min(b.0), a.1.min(b.1))
        })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cold = args.iter().any(|a| a == "--cold");
    let isa = args
        .iter()
        .position(|a| a == "--isa")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| Isa::parse(s))
        .unwrap_or_else(cpu::isa);
    let pool = ThreadPool::global();
    println!(
        "isa {:?} (best {:?}, features {:?}), {} threads",
        isa.clamp(),
        cpu::best(),
        cpu::features(),
        pool.n_threads()
    );
    println!(
        "{:<22} {:>4} {:>10} {:>8} {:>9} {:>7} {:>12}",
        "matrix", "n", "us/call", "GB/s", "GFLOP/s", "x n=1", "caller cpu us"
    );
    let shapes = [
        (WeightType::Q4_1, 576, 576),
        (WeightType::Q4_1, 1536, 576),
        (WeightType::Q4_1, 576, 1536),
        (WeightType::Q8_0, 49152, 576),
    ];
    for (ty, rows, cols) in shapes {
        let m = QMatrix::from_ggml(ty, rows, cols, &raw(ty, rows, cols, 1)).expect("valid");
        let mut base = 0.0;
        for n in [1, 4, 16, 64] {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut out = vec![0f32; n * rows];
            let us = time(|| m.matmul_with(isa, &x, n, &mut out, pool));
            if n == 1 {
                base = us.0;
            }
            report(&format!("{ty:?} {rows}x{cols}"), n, us, &m, base);
        }
    }
    if cold {
        let (rows, cols) = (1536, 576);
        let one = QMatrix::from_ggml(
            WeightType::Q4_1,
            rows,
            cols,
            &raw(WeightType::Q4_1, rows, cols, 1),
        )
        .expect("valid");
        let copies = (400 << 20) / one.weight_bytes();
        let ms: Vec<QMatrix> = (0..copies)
            .map(|i| {
                QMatrix::from_ggml(
                    WeightType::Q4_1,
                    rows,
                    cols,
                    &raw(WeightType::Q4_1, rows, cols, i as u64),
                )
                .expect("valid")
            })
            .collect();
        let mut base = 0.0;
        for n in [1, 4, 16, 64] {
            let x = vec![0.5f32; n * cols];
            let mut out = vec![0f32; n * rows];
            let mut i = 0;
            let us = time(|| {
                ms[i % copies].matmul_with(isa, &x, n, &mut out, pool);
                i += 1;
            });
            if n == 1 {
                base = us.0;
            }
            report(&format!("cold Q4_1 {rows}x{cols}"), n, us, &one, base);
        }
    }
}

fn report(name: &str, n: usize, (us, cpu): (f64, f64), m: &QMatrix, base: f64) {
    let gbs = m.weight_bytes() as f64 / us / 1e3;
    let gflops = 2.0 * (m.rows() * m.cols() * n) as f64 / us / 1e3;
    println!(
        "{name:<22} {n:>4} {us:>10.1} {gbs:>8.1} {gflops:>9.1} {:>7.2} {cpu:>12.1}",
        us / base
    );
}
