//! Quantized and dense matmul: every weight type against a plain f32 reference (weights
//! dequantized by straightforward code written here, independent of the crate), and every
//! SIMD ISA against the scalar kernel.

use folio_gguf::GgmlType;
use folio_kernels::matmul::{amx_available, KernelError, QMatrix, Sums, Tiles, WeightType};
use folio_kernels::{Isa, ThreadPool};
use half::{bf16, f16};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ALL: [WeightType; 25] = WeightType::ALL;

fn is_dense(ty: WeightType) -> bool {
    matches!(ty, WeightType::F32 | WeightType::F16 | WeightType::BF16)
}

/// The same type as the GGUF crate names it (its dequantizer is the reference).
fn ggml(ty: WeightType) -> GgmlType {
    let id = match ty {
        WeightType::F32 => 0,
        WeightType::F16 => 1,
        WeightType::Q4_0 => 2,
        WeightType::Q4_1 => 3,
        WeightType::Q5_0 => 6,
        WeightType::Q5_1 => 7,
        WeightType::Q8_0 => 8,
        WeightType::Q2_K => 10,
        WeightType::Q3_K => 11,
        WeightType::Q4_K => 12,
        WeightType::Q5_K => 13,
        WeightType::Q6_K => 14,
        WeightType::IQ4_NL => 20,
        WeightType::IQ4_XS => 23,
        WeightType::BF16 => 30,
        WeightType::MXFP4 => 39,
        WeightType::TQ1_0 => 34,
        WeightType::TQ2_0 => 35,
        WeightType::IQ1_S => 19,
        WeightType::IQ1_M => 29,
        WeightType::IQ2_XXS => 16,
        WeightType::IQ2_XS => 17,
        WeightType::IQ3_XXS => 18,
        WeightType::IQ3_S => 21,
        WeightType::IQ2_S => 22,
    };
    GgmlType::from_u32(id)
}

/// `(offset, lo, hi)` of each f16 scale field in a ggml block of `ty`, with the range its
/// random value is drawn from (so weights stay around 0.1-1).
fn f16_fields(ty: WeightType) -> &'static [(usize, f32, f32)] {
    match ty {
        WeightType::Q4_0 | WeightType::Q5_0 => &[(0, 0.001, 0.05)],
        WeightType::Q4_1 | WeightType::Q5_1 => &[(0, 0.001, 0.05), (2, -0.4, 0.0)],
        WeightType::Q8_0 => &[(0, 0.0001, 0.01)],
        WeightType::IQ4_NL => &[(0, 0.0001, 0.005)],
        WeightType::Q2_K => &[(80, 0.001, 0.02), (82, 0.001, 0.02)],
        WeightType::Q3_K => &[(108, 0.0005, 0.005)],
        WeightType::Q4_K | WeightType::Q5_K => &[(0, 0.0001, 0.002), (2, 0.0001, 0.002)],
        WeightType::Q6_K => &[(208, 0.00001, 0.0005)],
        WeightType::IQ4_XS => &[(0, 0.00005, 0.0005)],
        WeightType::TQ1_0 => &[(52, 0.001, 0.05)],
        WeightType::TQ2_0 => &[(64, 0.001, 0.05)],
        WeightType::IQ1_S => &[(0, 0.0005, 0.005)],
        // Scales not stored as an f16 field: see `fix_scales`.
        WeightType::MXFP4 | WeightType::IQ1_M => &[],
        WeightType::IQ2_XXS | WeightType::IQ2_XS | WeightType::IQ2_S => &[(0, 0.0005, 0.005)],
        WeightType::IQ3_XXS | WeightType::IQ3_S => &[(0, 0.0002, 0.002)],
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => &[],
    }
}

/// Sane scales of the types whose scale is not a plain f16 field: MXFP4's e8m0 exponent
/// (now and then one of the two subnormal scales), IQ1_M's f16 spread over the top
/// nibbles of its four scale words.
fn fix_scales(ty: WeightType, b: &mut [u8], rng: &mut StdRng) {
    match ty {
        WeightType::MXFP4 => {
            b[0] = if rng.gen_bool(0.1) {
                rng.gen_range(0..2)
            } else {
                rng.gen_range(118..126)
            }
        }
        WeightType::IQ1_M => {
            let d = f16::from_f32(rng.gen_range(0.0005f32..0.005)).to_bits();
            for i in 0..4 {
                let at = 48 + 2 * i;
                let w = u16::from_le_bytes([b[at], b[at + 1]]) & 0x0fff;
                let w = w | (((d >> (4 * i)) & 0xf) << 12);
                b[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        }
        _ => {}
    }
}

/// Random raw ggml bytes for a `rows x cols` tensor of type `ty`: random codes and scale
/// bits, sane f16 scales.
fn random_raw(ty: WeightType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::new();
    let (bv, bb) = ty.block();
    for _ in 0..rows * cols / bv {
        match ty {
            WeightType::F32 => out.extend_from_slice(&rng.gen_range(-1f32..1.0).to_le_bytes()),
            WeightType::F16 => {
                out.extend_from_slice(&f16::from_f32(rng.gen_range(-1f32..1.0)).to_le_bytes())
            }
            WeightType::BF16 => {
                out.extend_from_slice(&bf16::from_f32(rng.gen_range(-1f32..1.0)).to_le_bytes())
            }
            _ => {
                let mut b: Vec<u8> = (0..bb).map(|_| rng.gen()).collect();
                for &(off, lo, hi) in f16_fields(ty) {
                    let v = f16::from_f32(rng.gen_range(lo..hi)).to_le_bytes();
                    b[off..off + 2].copy_from_slice(&v);
                }
                fix_scales(ty, &mut b, rng);
                out.extend_from_slice(&b);
            }
        }
    }
    assert_eq!(out.len(), ty.ggml_bytes(rows, cols).unwrap());
    out
}

/// Reference dequantization: the GGUF crate's (ggml's `dequantize_row_*`, checked there
/// against gguf-py bit for bit).
fn dequant(ty: WeightType, raw: &[u8], n_values: usize) -> Vec<f32> {
    let mut y = vec![0f32; n_values];
    folio_gguf::dequant::dequantize(ggml(ty), raw, &mut y)
        .expect("reference dequantizes every type");
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
    // 8-bit activations err by <= amax/254 per value.
    let rel = if is_dense(c.ty) { 1e-5 } else { 1e-2 };
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
    let dense = is_dense(c.ty);
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
        WeightType::Q2_K
        | WeightType::Q3_K
        | WeightType::Q4_K
        | WeightType::Q5_K
        | WeightType::Q6_K
        | WeightType::IQ4_XS
        | WeightType::TQ1_0
        | WeightType::TQ2_0
        | WeightType::IQ1_S
        | WeightType::IQ1_M
        | WeightType::IQ2_XXS
        | WeightType::IQ2_XS
        | WeightType::IQ2_S
        | WeightType::IQ3_XXS
        | WeightType::IQ3_S => 512,
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
            let same = row
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{ty:?} row {r}: not ggml's exact dequantization");
        }
    }
}

/// The kernels compute the f32 dot product of the exactly dequantized weights with the
/// int8-quantized activations, up to float rounding: no requantization of any type.
#[test]
fn dot_product_equals_the_exactly_dequantized_one() {
    use folio_kernels::quant_act::quantize_scalar;
    let pool = ThreadPool::new(2);
    for (i, ty) in ALL.into_iter().filter(|&t| !is_dense(t)).enumerate() {
        let cols = 1024;
        let c = case(ty, 33, cols, 300 + i as u64);
        let n = 3;
        let x = random_x(n, cols, 11);
        let nb = cols / 32;
        let (mut q, mut d, mut s, mut is) = (
            vec![0i8; n * cols],
            vec![0f32; n * nb],
            vec![0f32; n * nb],
            vec![0i32; n * nb],
        );
        let per = if ty.superblock_acts() { 8 } else { 1 };
        quantize_scalar(per, &x, &mut q, &mut d, &mut s, &mut is);
        let xq: Vec<f64> = (0..n * cols)
            .map(|k| q[k] as f64 * d[k / 32] as f64)
            .collect();
        for isa in Isa::available() {
            let mut got = vec![f32::NAN; n * c.rows];
            c.m.matmul_with(isa, &x, n, &mut got, &pool);
            for b in 0..n {
                for r in 0..c.rows {
                    let w = &c.w[r * cols..(r + 1) * cols];
                    let xb = &xq[b * cols..(b + 1) * cols];
                    let want: f64 = w.iter().zip(xb).map(|(&a, &v)| a as f64 * v).sum();
                    let mag: f64 = w.iter().zip(xb).map(|(&a, &v)| (a as f64 * v).abs()).sum();
                    // One product and one FMA rounding per 32-block, plus the min term's
                    // f16 activation sum for the legacy Q4_1 layout (ggml's q8_1 `s`).
                    let rel = if ty == WeightType::Q4_1 { 2e-3 } else { 2e-6 };
                    let g = got[b * c.rows + r] as f64;
                    assert!(
                        (g - want).abs() <= rel * mag + 1e-9,
                        "{ty:?} {isa:?} row {r}: {g} vs exact {want} (sum |terms| {mag})"
                    );
                }
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
    // Every other quantized type: exactly the GGUF tensor's bytes once rows fill panels,
    // except the ones stored decoded: TQ1_0 as TQ2_0 (66 bytes per 256 values), IQ1_S /
    // IQ1_M with 3-bit codes (96 bytes) and their header (6 / 10 bytes), and the grid
    // i-quants per superblock of a panel: header (f16 d + scale words) x 16 rows, then 8
    // sub-blocks of 3-bit (IQ2) or 4-bit (IQ3) codes, 64 bytes per bit.
    let decoded = |t: WeightType| match t {
        WeightType::TQ1_0 => Some(66),
        WeightType::IQ1_S => Some(102),
        WeightType::IQ1_M => Some(106),
        _ => None,
    };
    let grid = |ty| match ty {
        WeightType::IQ2_XXS => Some(16 * (2 + 4) + 8 * 3 * 64),
        WeightType::IQ2_XS | WeightType::IQ2_S => Some(16 * (2 + 4 + 4) + 8 * 3 * 64),
        WeightType::IQ3_XXS | WeightType::IQ3_S => Some(16 * (2 + 4) + 8 * 4 * 64),
        _ => None,
    };
    for ty in ALL.into_iter().filter(|&t| !is_dense(t)) {
        let cols = cols_for(ty);
        let m = case(ty, 32, cols, 1).m;
        let want = match (decoded(ty), grid(ty)) {
            (Some(per_256), _) => 32 * cols / 256 * per_256,
            (_, Some(sb)) => 2 * (cols / 256) * sb,
            (None, None) => ty.ggml_bytes(32, cols).unwrap(),
        };
        assert_eq!(m.weight_bytes(), want, "{ty:?}");
    }
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

/// A stack of different types computes each part's rows with its own kernel, exactly as
/// the parts alone do, and counts every part's bytes.
/// AMX tiles (hosts with AMX-INT8): every quantized type in block sums, forced onto the
/// tiles, equals the scalar reference bit for bit at batches below, at and above the 16-row
/// tile and with a padded last tile; so does a stacked Q4_K + Q6_K + Q8_0 matrix.
#[test]
fn amx_tiles_equal_the_scalar_reference() {
    if !amx_available() {
        eprintln!("skipped: no AMX-INT8 here (or the OS does not grant the tile state)");
        return;
    }
    let pool = ThreadPool::new(2);
    let check = |m: &QMatrix, n: usize, what: &str| {
        let x = random_x(n, m.cols(), 11 + n as u64);
        let mut scalar = vec![f32::NAN; n * m.rows()];
        m.matmul_with(Isa::Scalar, &x, n, &mut scalar, &pool);
        let mut amx = vec![f32::NAN; n * m.rows()];
        m.matmul_tiles(Isa::Avx512, Tiles::Amx, &x, n, &mut amx, &pool);
        for (i, (a, s)) in amx.iter().zip(&scalar).enumerate() {
            assert_eq!(
                a.to_bits(),
                s.to_bits(),
                "{what} n={n} out[{i}]: AMX {a} vs scalar {s}"
            );
        }
    };
    for (i, ty) in ALL.into_iter().enumerate().filter(|(_, t)| !is_dense(*t)) {
        // 40 rows: two whole panels and a partial one; an odd block count for the 32-types.
        let c = case(ty, 40, cols_for(ty), 300 + i as u64);
        for n in [1, 15, 16, 17, 33, 48] {
            check(&c.m, n, ty.name());
        }
    }
    // Five superblocks: the integer-superblock kernels' epilogue runs a superblock behind
    // the stores, and the last one after the loop; one row group (1, 16 rows) unpacks them
    // into a ring of four as the products go, so the fifth reuses the first's slot. One
    // superblock: the pipeline's first product is its last.
    for (i, ty) in [WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K]
        .into_iter()
        .enumerate()
    {
        for sbs in [1, 5] {
            let c = case(ty, 24, sbs * 256, 400 + i as u64);
            for n in [1, 16, 35] {
                check(&c.m, n, ty.name());
            }
        }
    }
    let parts = [
        (WeightType::Q4_K, 24),
        (WeightType::Q6_K, 8),
        (WeightType::Q8_0, 17),
    ];
    let stack = QMatrix::stack(
        parts
            .iter()
            .enumerate()
            .map(|(i, &(t, r))| case(t, r, 256, 50 + i as u64).m)
            .collect(),
    )
    .unwrap();
    for n in [7, 16, 40] {
        check(&stack, n, "Q4_K+Q6_K+Q8_0 stack");
    }
}

#[test]
fn stacked_parts_of_mixed_types_equal_the_parts_alone() {
    let pool = ThreadPool::new(2);
    let types = [WeightType::Q4_K, WeightType::Q6_K, WeightType::Q8_0];
    let rows = [24, 8, 17];
    let cols = 256;
    let parts: Vec<Case> = types
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(i, (&t, r))| case(t, r, cols, 40 + i as u64))
        .collect();
    let total: usize = rows.iter().sum();
    let raws: Vec<QMatrix> = types
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(i, (&t, r))| case(t, r, cols, 40 + i as u64).m)
        .collect();
    let bytes: usize = raws.iter().map(|m| m.weight_bytes()).sum();
    let stack = QMatrix::stack(raws).unwrap();
    assert_eq!(
        (stack.rows(), stack.cols(), stack.weight_bytes()),
        (total, cols, bytes)
    );
    // Both accumulation forms (the fast one quantizes the activations once for all parts
    // and spreads all parts' panels in one hand-off), batches below, at and above a tile.
    let (mut stack, mut parts) = (stack, parts);
    for sums in [Sums::Block, Sums::Ggml] {
        stack.set_sums(sums);
        for p in parts.iter_mut() {
            p.m.set_sums(sums);
        }
        for n in [1, 5, 8, 16, 17, 40] {
            let x = random_x(n, cols, 3 + n as u64);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; n * total];
                stack.matmul_with(isa, &x, n, &mut got, &pool);
                let mut r0 = 0;
                for p in &parts {
                    let mut want = vec![0f32; n * p.rows];
                    p.m.matmul_with(isa, &x, n, &mut want, &pool);
                    for b in 0..n {
                        assert_eq!(
                            &got[b * total + r0..b * total + r0 + p.rows],
                            &want[b * p.rows..(b + 1) * p.rows],
                            "{isa:?} {sums:?} n={n} {:?}",
                            p.ty
                        );
                    }
                    r0 += p.rows;
                }
            }
        }
    }
    let mut row = vec![0f32; cols];
    stack.row_f32(30, &mut row);
    assert_eq!(&row[..], &parts[1].w[6 * cols..7 * cols]);
    let e = QMatrix::stack(vec![
        case(WeightType::Q8_0, 2, 64, 1).m,
        case(WeightType::Q8_0, 2, 32, 1).m,
    ])
    .unwrap_err();
    assert_eq!(
        e,
        KernelError::WrongLength {
            field: "cols of a stacked part",
            expected: 64,
            value: 32
        }
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

/// ggml's `quantize_row_q8_K_ref` of one 256-value block: (qs, bsums, d).
fn q8k_ref(x: &[f32]) -> ([i32; 256], [i32; 16], f32) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut qs = [0i32; 256];
    if amax == 0.0 {
        return (qs, [0; 16], 0.0);
    }
    let iscale = -127.0f32 / max;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = ((iscale * v).round_ties_even() as i32).min(127);
    }
    let mut bs = [0i32; 16];
    for (j, b) in bs.iter_mut().enumerate() {
        *b = qs[16 * j..16 * j + 16].iter().sum();
    }
    (qs, bs, 1.0 / iscale)
}

/// ggml's x86 `ggml_vec_dot_q{4,5,6}_K_q8_K` (AVX2 branch) on the
/// GGUF bytes of one row, lane by lane, decoded as ggml's `dequantize_row_*` reads them.
fn ggml_k_dot(ty: WeightType, row: &[u8], x: &[f32]) -> f32 {
    let h16 = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    let mut acc_m = [0f32; 4];
    let bytes = ty.block().1;
    for (b, xs) in row.chunks_exact(bytes).zip(x.chunks_exact(256)) {
        let (qs, bs, yd) = q8k_ref(xs);
        let mut q = [0i32; 256];
        let mut s16 = [0i32; 16];
        let mut off = 0;
        let d;
        if ty == WeightType::Q6_K {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            d = h16(b, 208);
            for n in 0..2 {
                let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
                for l in 0..32 {
                    let v = 128 * n + l;
                    q[v] = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i32;
                    q[v + 32] = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i32;
                    q[v + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32;
                    q[v + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32;
                }
            }
            for i in 0..16 {
                s16[i] = sc[i] as i8 as i32;
            }
            off = 32;
        } else {
            d = h16(b, 0);
            let dmin = h16(b, 2);
            let sc = &b[4..16];
            let sm = |j: usize| -> (i32, i32) {
                if j < 4 {
                    ((sc[j] & 63) as i32, (sc[j + 4] & 63) as i32)
                } else {
                    (
                        ((sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4)) as i32,
                        ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) as i32,
                    )
                }
            };
            let mut isum = 0;
            for j in 0..8 {
                let (s, m) = sm(j);
                s16[2 * j] = s;
                s16[2 * j + 1] = s;
                isum += m * (bs[2 * j] + bs[2 * j + 1]);
            }
            if ty == WeightType::Q4_K {
                // Q4_K: `qs[128]`; its mins go to a 4-lane accumulator, lane m the 32-blocks
                // 2m and 2m+1.
                let ql = &b[16..144];
                for j in 0..4 {
                    for l in 0..32 {
                        q[64 * j + l] = (ql[32 * j + l] & 15) as i32;
                        q[64 * j + 32 + l] = (ql[32 * j + l] >> 4) as i32;
                    }
                }
                for (m, a) in acc_m.iter_mut().enumerate() {
                    let pair = |j: usize| bs[2 * j] + bs[2 * j + 1];
                    let prod = sm(2 * m).1 * pair(2 * m) + sm(2 * m + 1).1 * pair(2 * m + 1);
                    *a = (-yd * dmin).mul_add(prod as f32, *a);
                }
            } else {
                let (qh, ql) = (&b[16..48], &b[48..176]);
                for j in 0..4 {
                    for l in 0..32 {
                        let h = qh[l] >> (2 * j);
                        q[64 * j + l] = ((ql[32 * j + l] & 15) | ((h & 1) << 4)) as i32;
                        q[64 * j + 32 + l] = ((ql[32 * j + l] >> 4) | (((h >> 1) & 1) << 4)) as i32;
                    }
                }
                summs = (-yd * dmin).mul_add(isum as f32, summs);
            }
        }
        let dd = yd * d;
        for l in 0..8 {
            let mut s = 0i32;
            for c in 0..8 {
                for t in 0..4 {
                    let k = 32 * c + 4 * l + t;
                    s += s16[k / 16] * q[k] * qs[k];
                }
            }
            s -= off * (bs[2 * l] * s16[2 * l] + bs[2 * l + 1] * s16[2 * l + 1]);
            acc[l] = dd.mul_add(s as f32, acc[l]);
        }
    }
    let h = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    match ty {
        WeightType::Q4_K => h + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])),
        WeightType::Q5_K => h + summs,
        _ => h,
    }
}

/// ggml's x86 `ggml_vec_dot_{tq1_0,tq2_0,iq1_s,iq1_m}_q8_K` (AVX2 branch) on the GGUF bytes
/// of one row, lane by lane (lane `l` holds values `32c + 4l .. +4` of every 32-chunk `c`),
/// decoded as ggml's `dequantize_row_*` reads them.
fn ggml_low_dot(ty: WeightType, row: &[u8], x: &[f32]) -> f32 {
    use folio_gguf::dequant::iq1s_grid_value;
    let h16 = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let lane = |k: usize| (k % 32) / 4;
    let (mut acc, mut acc2, mut acc1) = ([0f32; 8], [0f32; 8], 0f32);
    let bytes = ty.block().1;
    for (b, xs) in row.chunks_exact(bytes).zip(x.chunks_exact(256)) {
        let (qs, bs, yd) = q8k_ref(xs);
        let (mut sumi, mut sumi2) = ([0i32; 8], [0i32; 8]);
        let d = match ty {
            WeightType::TQ1_0 | WeightType::TQ2_0 => {
                let mut q = [0i32; 256];
                if ty == WeightType::TQ2_0 {
                    for j in 0..2 {
                        for l in 0..4 {
                            for m in 0..32 {
                                q[128 * j + 32 * l + m] = ((b[32 * j + m] >> (2 * l)) & 3) as i32;
                            }
                        }
                    }
                } else {
                    let digit =
                        |byte: u8, n: u32| ((byte.wrapping_mul(3u8.pow(n)) as i32) * 3) >> 8;
                    for k in 0..256 {
                        q[k] = match k {
                            0..160 => digit(b[k % 32], (k / 32) as u32),
                            160..240 => digit(b[32 + (k - 160) % 16], ((k - 160) / 16) as u32),
                            _ => digit(b[48 + (k - 240) % 4], ((k - 240) / 4) as u32),
                        };
                    }
                }
                for k in 0..256 {
                    sumi[lane(k)] += q[k] * qs[k];
                }
                for (l, s) in sumi.iter_mut().enumerate() {
                    *s -= bs[2 * l] + bs[2 * l + 1];
                }
                h16(b, bytes - 2)
            }
            WeightType::IQ1_S => {
                let mut isum = 0;
                for ib in 0..8 {
                    let qh = u16::from_le_bytes([b[34 + 2 * ib], b[35 + 2 * ib]]) as usize;
                    let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
                    for l in 0..4 {
                        let idx = b[2 + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
                        for j in 0..8 {
                            let k = 32 * ib + 8 * l + j;
                            sumi[lane(k)] += ls * iq1s_grid_value(idx, j) as i32 * qs[k];
                        }
                    }
                    let sign = if qh & 0x8000 != 0 { -1 } else { 1 };
                    isum += (bs[2 * ib] + bs[2 * ib + 1]) * sign * ls;
                }
                let d = yd * h16(b, 0);
                acc1 = d.mul_add(isum as f32, acc1);
                h16(b, 0)
            }
            WeightType::IQ1_M => {
                let sc = |i: usize| u16::from_le_bytes([b[48 + 2 * i], b[49 + 2 * i]]);
                let bits = (sc(0) >> 12)
                    | ((sc(1) >> 8) & 0xf0)
                    | ((sc(2) >> 4) & 0xf00)
                    | (sc(3) & 0xf000);
                for ib in 0..8 {
                    for l in 0..4 {
                        let nib = (b[32 + 2 * ib + l / 2] >> (4 * (l % 2))) as usize;
                        let idx = b[4 * ib + l] as usize | ((nib & 7) << 8);
                        let s = 2 * ((sc(ib / 2) >> (6 * (ib % 2) + 3 * (l / 2))) & 7) as i32 + 1;
                        let delta = if nib & 8 != 0 { -1 } else { 1 };
                        for j in 0..8 {
                            let k = 32 * ib + 8 * l + j;
                            sumi[lane(k)] += s * iq1s_grid_value(idx, j) as i32 * qs[k];
                            sumi2[lane(k)] += s * delta * qs[k];
                        }
                    }
                }
                f16::from_bits(bits).to_f32()
            }
            other => unreachable!("{other:?}"),
        };
        let dd = yd * d;
        for l in 0..8 {
            acc[l] = dd.mul_add(sumi[l] as f32, acc[l]);
            acc2[l] = dd.mul_add(sumi2[l] as f32, acc2[l]);
        }
    }
    let hsum = |a: &[f32; 8]| ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    match ty {
        WeightType::IQ1_S => hsum(&acc) + 0.125 * acc1,
        WeightType::IQ1_M => hsum(&acc) + 0.125 * hsum(&acc2),
        _ => hsum(&acc),
    }
}

/// ggml's x86 `ggml_vec_dot_q2_K_q8_K` / `ggml_vec_dot_iq2_xxs_q8_K` (AVX2 branch) on the
/// GGUF bytes of one row, lane by lane, decoded as ggml's `dequantize_row_*` reads them.
fn ggml_q2_dot(ty: WeightType, row: &[u8], x: &[f32]) -> f32 {
    use folio_gguf::grids::{IQ2XXS_GRID, KSIGNS_IQ2XS};
    let h16 = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut acc = [0f32; 8];
    for (b, xs) in row.chunks_exact(ty.block().1).zip(x.chunks_exact(256)) {
        let (qs, bs, yd) = q8k_ref(xs);
        let mut sumi = [0i32; 8];
        let d = if ty == WeightType::Q2_K {
            let dmin = -yd * h16(b, 82);
            for l in 0..8 {
                let prod =
                    (b[2 * l] >> 4) as i32 * bs[2 * l] + (b[2 * l + 1] >> 4) as i32 * bs[2 * l + 1];
                acc[l] = dmin.mul_add(prod as f32, acc[l]);
            }
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        let k = 128 * n + 32 * j + l;
                        let q = ((b[16 + 32 * n + l] >> (2 * j)) & 3) as i32;
                        sumi[(k % 32) / 4] += (b[k / 16] & 15) as i32 * q * qs[k];
                    }
                }
            }
            h16(b, 80)
        } else {
            for ib in 0..8 {
                let (a0, a1) = (u32_at(b, 2 + 8 * ib), u32_at(b, 6 + 8 * ib));
                let ls = 2 * (a1 >> 28) as i32 + 1;
                for l in 0..4 {
                    let grid = IQ2XXS_GRID[((a0 >> (8 * l)) & 255) as usize].to_le_bytes();
                    let signs = KSIGNS_IQ2XS[((a1 >> (7 * l)) & 127) as usize];
                    for (j, &g) in grid.iter().enumerate() {
                        let k = 32 * ib + 8 * l + j;
                        let v = if signs & (1 << j) != 0 {
                            -(g as i32)
                        } else {
                            g as i32
                        };
                        sumi[(k % 32) / 4] += ls * v * qs[k];
                    }
                }
            }
            h16(b, 0)
        };
        let dd = yd * d;
        for l in 0..8 {
            acc[l] = dd.mul_add(sumi[l] as f32, acc[l]);
        }
    }
    let h = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    if ty == WeightType::IQ2_XXS {
        0.125 * h
    } else {
        h
    }
}

/// `--numerics llama` on Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, TQ1_0, TQ2_0, IQ1_S, IQ1_M: every output equals
/// ggml's x86 dot product on the GGUF
/// bytes (written here from ggml's code, independent of the crate's decoder), for every
/// ISA, several row and batch counts; the default numerics is untouched by the switch.
#[test]
fn ggml_sums_equal_ggmls_dot_product() {
    let pool = ThreadPool::new(3);
    let types = [
        WeightType::Q2_K,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
        WeightType::IQ2_XXS,
        WeightType::TQ1_0,
        WeightType::TQ2_0,
        WeightType::IQ1_S,
        WeightType::IQ1_M,
    ];
    for ty in types {
        for (rows, cols) in [(1, 256), (17, 512), (40, 768)] {
            let mut rng = StdRng::seed_from_u64(rows as u64);
            let raw = random_raw(ty, rows, cols, &mut rng);
            let mut m = QMatrix::from_ggml(ty, rows, cols, &raw).expect("valid");
            let row_bytes = raw.len() / rows;
            for n in [1, 4, 9] {
                let x = random_x(n, cols, n as u64);
                let mut block = vec![0f32; n * rows];
                m.matmul(&x, n, &mut block, &pool);
                m.set_sums(Sums::Ggml);
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; n * rows];
                    m.matmul_with(isa, &x, n, &mut got, &pool);
                    for b in 0..n {
                        for r in 0..rows {
                            let (w, xs) = (
                                &raw[r * row_bytes..(r + 1) * row_bytes],
                                &x[b * cols..(b + 1) * cols],
                            );
                            let want = match ty {
                                WeightType::Q4_K | WeightType::Q5_K | WeightType::Q6_K => {
                                    ggml_k_dot(ty, w, xs)
                                }
                                WeightType::Q2_K | WeightType::IQ2_XXS => ggml_q2_dot(ty, w, xs),
                                _ => ggml_low_dot(ty, w, xs),
                            };
                            let g = got[b * rows + r];
                            assert_eq!(
                                g.to_bits(),
                                want.to_bits(),
                                "{ty:?} {isa:?} {rows}x{cols} n={n} b={b} r={r}: {g} vs {want}"
                            );
                        }
                    }
                }
                m.set_sums(Sums::Block);
                let mut again = vec![0f32; n * rows];
                m.matmul(&x, n, &mut again, &pool);
                assert_eq!(block, again, "{ty:?}: Block numerics changed by the switch");
            }
        }
    }
}

/// `--numerics llama` on Q5_0: ggml's `ggml_vec_dot_q5_0_q8_0` (and tinyBLAS) sign-extend
/// each 5-bit code to the byte `code - 16` and then sum exactly as for Q8_0, so a Q5_0
/// matrix must give, bit for bit, what the Q8_0 matrix of the same values gives (the Q8_0
/// bytes written here from the GGUF block layout), on every ISA, below, at and above one
/// 16-row panel, for single and batched activations.
#[test]
fn ggml_sums_of_q5_0_are_those_of_its_q8_0_bytes() {
    let pool = ThreadPool::new(3);
    for (rows, cols) in [(1, 32), (16, 64), (17, 96), (40, 640)] {
        let mut rng = StdRng::seed_from_u64(rows as u64 + 5);
        let raw = random_raw(WeightType::Q5_0, rows, cols, &mut rng);
        let mut q8 = Vec::with_capacity(rows * cols / 32 * 34);
        for b in raw.chunks_exact(22) {
            q8.extend_from_slice(&b[0..2]);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..32 {
                let lo = if j < 16 {
                    b[6 + j] & 15
                } else {
                    b[6 + j - 16] >> 4
                };
                let code = lo | (((qh >> j) & 1) as u8) << 4;
                q8.push((code as i8 - 16) as u8);
            }
        }
        let mut m5 = QMatrix::from_ggml(WeightType::Q5_0, rows, cols, &raw).expect("valid");
        let mut m8 = QMatrix::from_ggml(WeightType::Q8_0, rows, cols, &q8).expect("valid");
        m5.set_sums(Sums::Ggml);
        m8.set_sums(Sums::Ggml);
        for n in [1, 4, 9] {
            let x = random_x(n, cols, n as u64);
            for isa in Isa::available() {
                let (mut a, mut b) = (vec![f32::NAN; n * rows], vec![f32::NAN; n * rows]);
                m5.matmul_with(isa, &x, n, &mut a, &pool);
                m8.matmul_with(isa, &x, n, &mut b, &pool);
                let (a, b): (Vec<u32>, Vec<u32>) = (
                    a.iter().map(|v| v.to_bits()).collect(),
                    b.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(a, b, "Q5_0 {isa:?} {rows}x{cols} n={n}");
            }
        }
        // Back to the default numerics: the superblock kernel again, within rounding.
        m5.set_sums(Sums::Block);
        let x = random_x(2, cols, 7);
        let (mut a, mut b) = (vec![0f32; 2 * rows], vec![0f32; 2 * rows]);
        m5.matmul(&x, 2, &mut a, &pool);
        m8.matmul(&x, 2, &mut b, &pool);
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-3 * (1.0 + v.abs()), "{u} vs {v}");
        }
    }
}

/// A down projection fed `[gate | up]` rows (the activation computed while quantizing)
/// gives exactly the bits of activating into a buffer first, for every type, both
/// accumulation forms, every ISA, the tiles where the host has them, serial and pooled
/// quantization (70 rows of 512), rows longer than the piece the quantization activates
/// at a time (2,816 values: one piece of 2,048 and a shorter one), and both forms of a
/// stacked matrix.
#[test]
fn gated_input_equals_activating_first() {
    use folio_kernels::ops::Activation;
    use folio_kernels::quant_act::Input;
    let pool = ThreadPool::new(2);
    let acts = [Activation::Silu, Activation::Gelu, Activation::SwigluOai];
    let mut tiles = vec![Tiles::Vector, Tiles::Auto];
    if amx_available() {
        tiles.push(Tiles::Amx);
    }
    let run = |m: &QMatrix, sums: Sums, what: String| {
        let (rows, cols) = (m.rows(), m.cols());
        for (k, n) in [1, 3, 17, 70].into_iter().enumerate() {
            let act = acts[k % acts.len()];
            let gu = random_x(n, 2 * cols, 11 + n as u64);
            let mut x = vec![0f32; n * cols];
            for (t, row) in x.chunks_exact_mut(cols).enumerate() {
                let (g, u) = gu[t * 2 * cols..(t + 1) * 2 * cols].split_at(cols);
                act.apply(g, u, row);
            }
            for isa in Isa::available() {
                for &t in &tiles {
                    if t == Tiles::Amx && (isa != Isa::Avx512 || sums != Sums::Block) {
                        continue;
                    }
                    let mut want = vec![f32::NAN; n * rows];
                    m.matmul_tiles(isa, t, &x, n, &mut want, &pool);
                    let mut got = vec![f32::NAN; n * rows];
                    m.matmul_input(isa, t, Input::Gated(&gu, act), n, &mut got, &pool);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{what} {sums:?} {isa:?} {t:?} {act:?} n={n}");
                }
            }
        }
    };
    for (i, ty) in ALL.into_iter().enumerate() {
        let mut c = case(ty, 40, cols_for(ty), 300 + i as u64);
        for sums in [Sums::Block, Sums::Ggml] {
            c.m.set_sums(sums);
            run(&c.m, sums, format!("{ty:?}"));
        }
    }
    for ty in [WeightType::Q4_K, WeightType::Q4_0] {
        let c = case(ty, 16, 2816, 77);
        run(&c.m, Sums::Block, format!("{ty:?}, 2,816 columns"));
    }
    // One quantization for both parts (Q4_K + Q6_K), and one per part (Q4_0 + Q4_K).
    for (a, b) in [
        (WeightType::Q4_K, WeightType::Q6_K),
        (WeightType::Q4_0, WeightType::Q4_K),
    ] {
        let s =
            QMatrix::stack(vec![case(a, 32, 512, 1).m, case(b, 16, 512, 2).m]).expect("same cols");
        run(&s, Sums::Block, format!("stack {a:?} + {b:?}"));
    }
}

/// A matmul into a cache-line buffer (streamed from 256 rows on the AMX kernels) writes
/// exactly the bits of the plain matmul: whole and partial last panels, a stack whose
/// second part starts mid-row, below and above the streaming threshold.
#[test]
fn matmul_into_lines_equals_matmul() {
    use folio_kernels::lines::Lines;
    let pool = ThreadPool::new(2);
    // The first part streams up to its partial last panel; the second starts off a line.
    let stack = QMatrix::stack(vec![
        case(WeightType::Q4_K, 40, 512, 1).m,
        case(WeightType::Q6_K, 40, 512, 2).m,
    ])
    .expect("same cols");
    let mats = [
        case(WeightType::Q4_K, 48, 512, 3).m,
        case(WeightType::Q8_0, 40, 256, 4).m,
        stack,
    ];
    for m in &mats {
        for n in [17, 256, 300] {
            let x = random_x(n, m.cols(), n as u64);
            let mut want = vec![f32::NAN; n * m.rows()];
            m.matmul(&x, n, &mut want, &pool);
            let mut got = Lines::zeroed(n * m.rows());
            got.fill(f32::NAN);
            m.matmul_lines(&x, n, &mut got, &pool);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{}x{} n={n}", m.rows(), m.cols());
        }
    }
}
