//! Single-thread speed of the quantized matmul per activation-row count, as cycles per
//! (16-row panel, 32-value block, activation row) at an assumed clock (`GHZ`, default 2.87):
//! `cargo run --release -p folio-kernels --example matmul_speed [TYPE] [rows] [cols]`
//! (TYPE: any ggml type folio multiplies, e.g. q4_1, q4_k, q6_k; default q4_1; `NS=16,512`
//! picks the row counts, `THREADS=2` the pool, `TILES=amx|vector` forces the AMX or the
//! vector kernels where the default picks by row count, `COPIES=150` streams the weights
//! from DRAM).

use folio_kernels::cpu;
use folio_kernels::matmul::{QMatrix, Tiles, WeightType};
use folio_kernels::pool::ThreadPool;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ty = args
        .get(1)
        .map(|s| WeightType::from_name(s).unwrap_or_else(|| panic!("unknown type {s}")))
        .unwrap_or(WeightType::Q4_1);
    let rows: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1536);
    let cols: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1536);
    let ghz: f64 = std::env::var("GHZ")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.87);
    let (bv, bb) = ty.block();
    let mut s = 12345u64;
    let mut rnd = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as u32
    };
    let mut raw = vec![0u8; rows * cols / bv * bb];
    for (i, b) in raw.iter_mut().enumerate() {
        // Keep scales small and finite: every even byte is 0x20, i.e. each f16 wherever it
        // sits is in 0x20xx (~0.008); odd bytes random.
        *b = if i % 2 == 1 { 0x20 } else { rnd() as u8 };
    }
    // COPIES=N: cycle through that many copies of the matrix, so that (with enough
    // copies to outgrow the last-level cache) every call streams its weights from DRAM,
    // as a decode step over a whole model does.
    let copies: usize = std::env::var("COPIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let ms: Vec<QMatrix> = (0..copies)
        .map(|_| QMatrix::from_ggml(ty, rows, cols, &raw).expect("matrix"))
        .collect();
    let mut next = 0;
    let threads: usize = std::env::var("THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let pool = ThreadPool::new(threads);
    let tiles = match std::env::var("TILES").as_deref() {
        Ok("amx") => Tiles::Amx,
        Ok("vector") => Tiles::Vector,
        _ => Tiles::Auto,
    };
    let isa = cpu::isa();
    // NS=16,512: the activation-row counts to time (default 1 … 32).
    let ns: Vec<usize> = std::env::var("NS")
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32]);
    for n in ns {
        let x: Vec<f32> = (0..n * cols)
            .map(|_| (rnd() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let mut out = vec![0f32; n * rows];
        let reps = (400_000_000 / (rows * cols * n)).max(50);
        let mut call = || {
            ms[next % copies].matmul_tiles(isa, tiles, &x, n, &mut out, &pool);
            next += 1;
        };
        for _ in 0..reps / 4 {
            call();
        }
        // The best of five timed rounds: the host's other tenants come and go.
        let mut s = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps.div_ceil(5) {
                call();
            }
            s = s.min(t.elapsed().as_secs_f64() / reps.div_ceil(5) as f64);
        }
        let units = (rows / 16) * (cols / 32) * n;
        println!(
            "n={n:>3}  {:>8.1} us  {:>6.2} cycles/(panel,block,row)  {:>6.1} GMAC/s",
            s * 1e6,
            s * ghz * 1e9 / units as f64,
            (rows * cols * n) as f64 / s / 1e9
        );
    }
}
