//! Quantized and dense matmul: every weight type against a plain f32 reference (weights
//! dequantized by straightforward code written here, independent of the crate), and every
//! SIMD ISA against the scalar kernel.

use folio_kernels::matmul::{KernelError, QMatrix, Sums, WeightType};
use folio_kernels::{Isa, ThreadPool};
use half::{bf16, f16};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ALL: [WeightType; 8] = [
    WeightType::F32,
    WeightType::F16,
    WeightType::BF16,
    WeightType::Q4_0,
    WeightType::Q4_1,
    WeightType::Q8_0,
    WeightType::Q4_K,
    WeightType::Q6_K,
];

fn push_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Random raw ggml bytes for a `rows x cols` tensor of type `ty`: random codes, sane scales.
fn random_raw(ty: WeightType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::new();
    let (bv, _) = ty.block();
    for _ in 0..rows * cols / bv {
        match ty {
            WeightType::F32 => out.extend_from_slice(&rng.gen_range(-1f32..1.0).to_le_bytes()),
            WeightType::F16 => push_f16(&mut out, rng.gen_range(-1f32..1.0)),
            WeightType::BF16 => {
                out.extend_from_slice(&bf16::from_f32(rng.gen_range(-1f32..1.0)).to_le_bytes())
            }
            WeightType::Q4_0 => {
                push_f16(&mut out, rng.gen_range(0.001f32..0.05));
                out.extend((0..16).map(|_| rng.gen::<u8>()));
            }
            WeightType::Q4_1 => {
                push_f16(&mut out, rng.gen_range(0.001f32..0.05));
                push_f16(&mut out, rng.gen_range(-0.4f32..0.0));
                out.extend((0..16).map(|_| rng.gen::<u8>()));
            }
            WeightType::Q8_0 => {
                push_f16(&mut out, rng.gen_range(0.0001f32..0.01));
                out.extend((0..32).map(|_| rng.gen::<u8>()));
            }
            WeightType::Q4_K => {
                push_f16(&mut out, rng.gen_range(0.0001f32..0.002));
                push_f16(&mut out, rng.gen_range(0.0001f32..0.002));
                out.extend((0..12 + 128).map(|_| rng.gen::<u8>()));
            }
            WeightType::Q6_K => {
                out.extend((0..128 + 64 + 16).map(|_| rng.gen::<u8>()));
                push_f16(&mut out, rng.gen_range(0.00001f32..0.0005));
            }
        }
    }
    assert_eq!(out.len(), ty.ggml_bytes(rows, cols).unwrap());
    out
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Reference dequantization, written from the ggml C code.
fn dequant(ty: WeightType, raw: &[u8], n_values: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(n_values);
    match ty {
        WeightType::F32 => {
            for c in raw.chunks_exact(4) {
                y.push(f32::from_le_bytes(c.try_into().unwrap()));
            }
        }
        WeightType::F16 => {
            for c in raw.chunks_exact(2) {
                y.push(f16_at(c, 0));
            }
        }
        WeightType::BF16 => {
            for c in raw.chunks_exact(2) {
                y.push(bf16::from_le_bytes([c[0], c[1]]).to_f32());
            }
        }
        WeightType::Q4_0 => {
            for b in raw.chunks_exact(18) {
                let d = f16_at(b, 0);
                let qs = &b[2..];
                let mut v = [0f32; 32];
                for j in 0..16 {
                    v[j] = ((qs[j] & 0xf) as i32 - 8) as f32 * d;
                    v[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
                }
                y.extend_from_slice(&v);
            }
        }
        WeightType::Q4_1 => {
            for b in raw.chunks_exact(20) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let qs = &b[4..];
                let mut v = [0f32; 32];
                for j in 0..16 {
                    v[j] = (qs[j] & 0xf) as f32 * d + m;
                    v[j + 16] = (qs[j] >> 4) as f32 * d + m;
                }
                y.extend_from_slice(&v);
            }
        }
        WeightType::Q8_0 => {
            for b in raw.chunks_exact(34) {
                let d = f16_at(b, 0);
                y.extend(b[2..].iter().map(|&q| q as i8 as f32 * d));
            }
        }
        WeightType::Q4_K => {
            for b in raw.chunks_exact(144) {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                let sc = &b[4..16];
                let get = |j: usize| -> (f32, f32) {
                    let (s, m) = if j < 4 {
                        (sc[j] & 63, sc[j + 4] & 63)
                    } else {
                        (
                            (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4),
                            (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                        )
                    };
                    (s as f32, m as f32)
                };
                for g in 0..4 {
                    let q = &b[16 + 32 * g..16 + 32 * g + 32];
                    let (s1, m1) = get(2 * g);
                    let (s2, m2) = get(2 * g + 1);
                    let (d1, m1) = (d * s1, dmin * m1);
                    let (d2, m2) = (d * s2, dmin * m2);
                    y.extend(q.iter().map(|&v| d1 * (v & 0xf) as f32 - m1));
                    y.extend(q.iter().map(|&v| d2 * (v >> 4) as f32 - m2));
                }
            }
        }
        WeightType::Q6_K => {
            for b in raw.chunks_exact(210) {
                let d = f16_at(b, 208);
                let mut v = [0f32; 256];
                for h in 0..2 {
                    let ql = &b[64 * h..];
                    let qh = &b[128 + 32 * h..];
                    let sc = &b[192 + 8 * h..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |k: usize| d * sc[k] as i8 as f32;
                        v[128 * h + l] = s(is) * q1 as f32;
                        v[128 * h + l + 32] = s(is + 2) * q2 as f32;
                        v[128 * h + l + 64] = s(is + 4) * q3 as f32;
                        v[128 * h + l + 96] = s(is + 6) * q4 as f32;
                    }
                }
                y.extend_from_slice(&v);
            }
        }
    }
    assert_eq!(y.len(), n_values);
    y
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

struct Case {
    ty: WeightType,
    rows: usize,
    cols: usize,
    w: Vec<f32>,
    m: QMatrix,
}

fn case(ty: WeightType, rows: usize, cols: usize, seed: u64) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let raw = random_raw(ty, rows, cols, &mut rng);
    let w = dequant(ty, &raw, rows * cols);
    let m = QMatrix::from_ggml(ty, rows, cols, &raw).expect("valid random tensor");
    Case {
        ty,
        rows,
        cols,
        w,
        m,
    }
}

fn random_x(n: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n * cols).map(|_| rng.gen_range(-2f32..2.0)).collect()
}

/// Scalar kernel vs f32 reference (tolerance of 8-bit activations), then every SIMD ISA
/// vs the scalar kernel. Quantized kernels do the same f32 operations in the same order
/// on every ISA, so they must agree exactly; dense ones only up to summation order.
fn check(c: &Case, n: usize, pool: &ThreadPool) {
    let x = random_x(n, c.cols, 7 + n as u64);
    let mut scalar = vec![f32::NAN; n * c.rows];
    c.m.matmul_with(Isa::Scalar, &x, n, &mut scalar, pool);
    // 8-bit activations err by <= amax/254 per value; Q6_K weights are requantized too.
    let rel = match c.ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => 1e-5,
        WeightType::Q6_K => 1.5e-2,
        _ => 1e-2,
    };
    for b in 0..n {
        let xb = &x[b * c.cols..(b + 1) * c.cols];
        for r in 0..c.rows {
            let wr = &c.w[r * c.cols..(r + 1) * c.cols];
            let want: f32 = wr.iter().zip(xb).map(|(a, b)| a * b).sum();
            let got = scalar[b * c.rows + r];
            let tol = rel * norm(wr) * norm(xb) + 1e-6;
            assert!(
                (got - want).abs() <= tol,
                "{:?} {}x{} n={n} b={b} r={r}: scalar {got} vs reference {want} (tol {tol})",
                c.ty,
                c.rows,
                c.cols
            );
        }
    }
    let dense = matches!(c.ty, WeightType::F32 | WeightType::F16 | WeightType::BF16);
    for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
        let mut got = vec![f32::NAN; n * c.rows];
        c.m.matmul_with(isa, &x, n, &mut got, pool);
        for (i, (&g, &s)) in got.iter().zip(&scalar).enumerate() {
            let ok = if dense {
                let (b, r) = (i / c.rows, i % c.rows);
                let tol = 1e-6
                    * norm(&c.w[r * c.cols..(r + 1) * c.cols])
                    * norm(&x[b * c.cols..(b + 1) * c.cols]);
                (g - s).abs() <= tol + 1e-6
            } else {
                g.to_bits() == s.to_bits()
            };
            assert!(ok, "{:?} {isa:?} n={n} out[{i}]: {g} vs scalar {s}", c.ty);
        }
    }
}

fn cols_for(ty: WeightType) -> usize {
    match ty {
        WeightType::Q4_K | WeightType::Q6_K => 512,
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => 72, // not a multiple of 16
        _ => 96,
    }
}

#[test]
fn every_type_every_isa_every_batch() {
    let pool = ThreadPool::new(3);
    for (i, ty) in ALL.into_iter().enumerate() {
        for rows in [40, 16, 1] {
            let mut c = case(ty, rows, cols_for(ty), 100 + i as u64);
            for sums in [Sums::Block, Sums::Ggml] {
                c.m.set_sums(sums);
                for n in [1, 3, 16, 17, 64] {
                    check(&c, n, &pool);
                }
            }
        }
    }
}

/// The two accumulation forms compute the same products and differ only in rounding:
/// within a few float ulps of each other, and not bit-identical (the test would not
/// notice if `set_sums` did nothing).
#[test]
fn ggml_and_block_sums_differ_only_in_rounding() {
    let mut c = case(WeightType::Q4_1, 48, 256, 3);
    let x = random_x(5, 256, 4);
    let pool = ThreadPool::new(2);
    let (mut a, mut b) = (vec![0f32; 5 * 48], vec![0f32; 5 * 48]);
    c.m.set_sums(Sums::Block);
    c.m.matmul(&x, 5, &mut a, &pool);
    c.m.set_sums(Sums::Ggml);
    c.m.matmul(&x, 5, &mut b, &pool);
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale));
    assert_ne!(a, b, "the forms round differently somewhere in 240 outputs");
}

#[test]
fn single_thread_pool_gives_identical_results() {
    let c = case(WeightType::Q4_1, 70, 160, 5);
    let x = random_x(9, 160, 1);
    let (mut a, mut b) = (vec![0f32; 9 * 70], vec![0f32; 9 * 70]);
    c.m.matmul(&x, 9, &mut a, &ThreadPool::new(1));
    c.m.matmul(&x, 9, &mut b, &ThreadPool::new(4));
    assert_eq!(a, b);
}

#[test]
fn large_batch_uses_parallel_quantization() {
    // n * cols >= 16K takes the pooled activation-quantization path.
    let c = case(WeightType::Q8_0, 48, 256, 9);
    check(&c, 70, &ThreadPool::new(2));
}

#[test]
fn row_f32_matches_reference_dequantization() {
    for (i, ty) in ALL.into_iter().enumerate() {
        let c = case(ty, 19, cols_for(ty), 200 + i as u64);
        let mut row = vec![0f32; c.cols];
        for r in [0, 7, 16, 18] {
            c.m.row_f32(r, &mut row);
            let want = &c.w[r * c.cols..(r + 1) * c.cols];
            if ty == WeightType::Q6_K {
                // Requantized to 8 bits per 32: within half a step of the block max.
                for (blk, wb) in want.chunks(32).enumerate() {
                    let amax = wb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    for (k, &v) in wb.iter().enumerate() {
                        let got = row[blk * 32 + k];
                        assert!(
                            (got - v).abs() <= amax / 254.0 * 1.01 + 1e-9,
                            "{got} vs {v}"
                        );
                    }
                }
            } else {
                assert_eq!(&row[..], want, "{ty:?} row {r}");
            }
        }
    }
}

#[test]
fn weight_bytes_counts_the_packed_panels() {
    // Q4_1 40 x 96: 3 panels of 16 rows, 3 blocks, 256 code + 2 * 32 scale bytes each.
    assert_eq!(
        case(WeightType::Q4_1, 40, 96, 1).m.weight_bytes(),
        3 * 3 * 320
    );
    // Q8_0: 512 code bytes + 32 for d (the min is implicit).
    assert_eq!(
        case(WeightType::Q8_0, 40, 96, 1).m.weight_bytes(),
        3 * 3 * 544
    );
    assert_eq!(case(WeightType::F16, 5, 72, 1).m.weight_bytes(), 5 * 72 * 2);
}

#[test]
fn bad_shapes_are_errors_naming_the_field() {
    let e = QMatrix::from_ggml(WeightType::Q4_1, 4, 48, &[0; 4 * 30]).unwrap_err();
    assert_eq!(
        e,
        KernelError::NotMultiple {
            field: "cols",
            multiple: 32,
            value: 48
        }
    );
    let e = QMatrix::from_ggml(WeightType::Q8_0, 2, 32, &[0; 67]).unwrap_err();
    assert_eq!(
        e,
        KernelError::WrongLength {
            field: "raw",
            expected: 68,
            value: 67
        }
    );
    let e = QMatrix::from_ggml(WeightType::Q4_K, 0, 256, &[]).unwrap_err();
    assert_eq!(
        e,
        KernelError::TooSmall {
            field: "rows",
            min: 1,
            value: 0
        }
    );
    let e = QMatrix::from_ggml(WeightType::F32, usize::MAX / 2, 4, &[]).unwrap_err();
    assert!(
        matches!(e, KernelError::TooLarge { field: "rows", .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("rows = {} exceeds the limit 16777216", usize::MAX / 2)
    );
}

#[test]
fn zero_batch_is_a_no_op() {
    let c = case(WeightType::Q4_0, 16, 32, 3);
    let mut out: Vec<f32> = vec![];
    c.m.matmul(&[], 0, &mut out, ThreadPool::global());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn q4_1_random_shapes(rows in 1usize..70, nb in 1usize..10, n in 1usize..20, seed in 0u64..1000) {
        let c = case(WeightType::Q4_1, rows, nb * 32, seed);
        check(&c, n, &ThreadPool::new(2));
    }
}
