//! The paged attention kernel and the KV row formats: exact encodings, the AVX-512 kernel
//! bit-identical to the scalar reference in both summation orders, and both close to a
//! plain f64 attention.

mod common;

use common::{plain_window, rand_vec, run_window, Cache};
use folio_kernels::attn::{self, KvFormat, SumOrder};

use folio_kernels::Isa;
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn round_f16(v: &mut [f32]) {
    for x in v {
        *x = f16::from_f32(*x).to_f32();
    }
}

fn run(isa: Isa, c: &Cache, head: usize, n_ctx: usize, q: &[f32], n_q: usize) -> Vec<f32> {
    run_in(isa, SumOrder::Batched, c, head, n_ctx, q, n_q)
}

fn run_in(
    isa: Isa,
    order: SumOrder,
    c: &Cache,
    head: usize,
    n_ctx: usize,
    q: &[f32],
    n_q: usize,
) -> Vec<f32> {
    run_window(isa, order, c, head, 0, n_ctx, q, n_q, None)
}

/// Plain attention in f64 over the decoded rows (no f16 rounding of the weights).
fn plain(c: &Cache, head: usize, n_ctx: usize, q: &[f32], n_q: usize) -> Vec<f32> {
    plain_window(c, head, 0, n_ctx, q, n_q, None)
}

fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "{what}[{i}]: {x} vs {y}");
    }
}

const SHAPES: [(usize, usize); 6] = [(1, 1), (5, 4), (16, 16), (17, 16), (50, 4), (200, 16)];

#[test]
fn every_isa_matches_scalar_and_plain_attention() {
    for format in KvFormat::ALL {
        // 64 and 128: the AVX-512 path; 48 and 40: the reference on every ISA.
        for hd in [64, 128, 48, 40] {
            for n_q in [1, 2, 3, 4, 5, 8, 9] {
                for &(n_ctx, bs) in &SHAPES {
                    let c = Cache::one(format, hd, bs, 3, n_ctx, (hd * 1000 + n_ctx) as u64);
                    let mut r = StdRng::seed_from_u64(n_q as u64);
                    let mut q = rand_vec(n_q * hd, &mut r, 1.0);
                    round_f16(&mut q);
                    let what = format!("{} hd={hd} n_q={n_q} n_ctx={n_ctx} bs={bs}", format.name());
                    let reference = run(Isa::Scalar, &c, 1, n_ctx, &q, n_q);
                    // Weights rounded to f16 move each output by at most ~2^-11 of Σ|p v|.
                    close(&reference, &plain(&c, 1, n_ctx, &q, n_q), 2e-3, &what);
                    for isa in Isa::available() {
                        let got = run(isa, &c, 1, n_ctx, &q, n_q);
                        close(&got, &reference, 2e-3, &format!("{what} {isa:?}"));
                    }
                }
            }
        }
    }
}

/// A sliding window (`Queries::first`): every ISA and order attends to exactly the
/// positions `first..n_ctx`, whether the window starts on a block boundary or inside one,
/// and never reads the blocks before it (their table entries point past the buffers here).
#[test]
fn a_window_sees_only_its_positions() {
    for format in KvFormat::ALL {
        for hd in [64, 80] {
            for (n_ctx, bs, first) in [
                (50, 16, 16),
                (50, 16, 21),
                (200, 16, 199),
                (17, 4, 3),
                (9, 4, 8),
            ] {
                let mut c = Cache::one(format, hd, bs, 3, n_ctx, (hd + n_ctx + first) as u64);
                let mut r = StdRng::seed_from_u64(first as u64);
                let mut q = rand_vec(3 * hd, &mut r, 1.0);
                round_f16(&mut q);
                let want = plain_window(&c, 1, first, n_ctx, &q, 3, None);
                // Blocks wholly before the window are freed: poison their ids.
                for b in &mut c.table[..first / bs] {
                    *b = u32::MAX / 2;
                }
                let what = format!(
                    "{} hd={hd} n_ctx={n_ctx} bs={bs} first={first}",
                    format.name()
                );
                for isa in Isa::available() {
                    for order in [SumOrder::Batched, SumOrder::Single] {
                        let got = run_window(isa, order, &c, 1, first, n_ctx, &q, 3, None);
                        close(&got, &want, 2e-3, &format!("{what} {isa:?} {order:?}"));
                    }
                }
            }
        }
    }
}

/// A window's sums keep llama.cpp's cell lanes: a query seeing `first..n_ctx` gives, bit
/// for bit, what it gives seeing `0..n_ctx` when the keys before `first` score so low that
/// their probabilities are exactly 0 (how llama.cpp's full cache masks them). Its lanes,
/// accumulator sets and softmax chunks are those of the absolute position, not of the
/// position within the window (which a window starting off a multiple of 64 would shift).
/// This pins the invariant; on this data the shifted order happened to round alike too, so
/// the case that tells the two apart is Gemma 3's greedy parity with llama.cpp
/// (`folio-engine`'s `llama_numerics`), whose long prompt parts without it.
#[test]
fn a_window_sums_in_the_lanes_of_its_absolute_positions() {
    for format in [KvFormat::F16, KvFormat::Q8_0] {
        for (hd, n_ctx, first) in [
            (64, 90, 9),
            (256, 1100, 590),
            (80, 600, 89),
            (128, 700, 189),
        ] {
            let mut c = Cache::one(format, hd, 16, 2, n_ctx, (n_ctx + first) as u64);
            let mut r = StdRng::seed_from_u64(first as u64);
            let mut q = rand_vec(3 * hd, &mut r, 1.0);
            for g in 0..3 {
                q[g * hd] = 1.0;
            }
            round_f16(&mut q);
            // Keys before the window: -60000 on channel 0, 0 elsewhere (scores ~-60000/√hd).
            // Values in the window spread over six decades, probabilities over many: f16
            // products of one size would sum exactly in f32, in any order.
            let mut far = vec![0f32; hd];
            far[0] = -60000.0;
            let (kr, vr) = (format.row_bytes(hd), format.row_bytes(hd));
            let row = |j: usize| c.view(1).row_index(c.table[j / c.bs] as usize, j % c.bs);
            let rows: Vec<usize> = (0..n_ctx).map(row).collect();
            for (j, &i) in rows.iter().enumerate() {
                if j < first {
                    attn::store_row_scalar(format, &far, &mut c.k[i * kr..(i + 1) * kr]);
                } else {
                    let k = rand_vec(hd, &mut r, 1.0);
                    let v: Vec<f32> = (0..hd)
                        .map(|_| r.gen_range(-1f32..1.0) * 10f32.powf(r.gen_range(-3.0..3.0)))
                        .collect();
                    attn::store_row_scalar(format, &k, &mut c.k[i * kr..(i + 1) * kr]);
                    attn::store_row_scalar(format, &v, &mut c.v[i * vr..(i + 1) * vr]);
                }
            }
            for isa in Isa::available() {
                for order in [SumOrder::Batched, SumOrder::Single] {
                    let windowed = run_window(isa, order, &c, 1, first, n_ctx, &q, 3, None);
                    let whole = run_window(isa, order, &c, 1, 0, n_ctx, &q, 3, None);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&windowed),
                        bits(&whole),
                        "{} hd={hd} n_ctx={n_ctx} first={first} {isa:?} {order:?}",
                        format.name()
                    );
                }
            }
        }
    }
}

/// Soft-capped scores (Gemma 2): every ISA and order equals plain attention over
/// `c · tanh(s / c)`, with and without a window; a cap far above the scores changes nothing.
#[test]
fn soft_capped_scores_match_plain_attention() {
    for format in [KvFormat::F16, KvFormat::Q8_0] {
        for (n_ctx, first, cap) in [(40, 0, 0.5f32), (40, 9, 0.5), (70, 0, 2.0), (17, 0, 1e6)] {
            let c = Cache::one(format, 64, 16, 2, n_ctx, (n_ctx + first) as u64);
            let mut r = StdRng::seed_from_u64(7);
            // Large queries, so the cap bends the scores.
            let mut q = rand_vec(2 * 64, &mut r, 4.0);
            round_f16(&mut q);
            let want = plain_window(&c, 0, first, n_ctx, &q, 2, Some(cap));
            let uncapped = plain_window(&c, 0, first, n_ctx, &q, 2, None);
            let moved = want
                .iter()
                .zip(&uncapped)
                .any(|(a, b)| (a - b).abs() > 1e-2);
            assert_eq!(
                moved,
                cap < 10.0,
                "cap {cap}: capping should matter only when small"
            );
            for isa in Isa::available() {
                for order in [SumOrder::Batched, SumOrder::Single] {
                    let got = run_window(isa, order, &c, 0, first, n_ctx, &q, 2, Some(cap));
                    let what = format!(
                        "{} n_ctx={n_ctx} first={first} cap={cap} {isa:?} {order:?}",
                        format.name()
                    );
                    close(&got, &want, 2e-3, &what);
                }
            }
        }
    }
}

/// Every ISA computes exactly the reference's operations (llama.cpp's lane order, exp
/// approximation and reductions): every output bit equal, in every format, for head sizes
/// the AVX-512 kernel handles (64, 128) and one it leaves to the AVX2 kernel (80, batched
/// order) or to the reference compiled with FMA (80, single order); `scale` large enough
/// that some probabilities underflow (the vector exp's scalar fallback).
#[test]
fn every_isa_is_bit_identical_to_the_reference() {
    for format in KvFormat::ALL {
        for hd in [64, 128, 80] {
            for &(n_ctx, bs) in &SHAPES {
                for (n_q, order, lim) in [
                    (1, SumOrder::Batched, 1.0),
                    (3, SumOrder::Single, 1.0),
                    (5, SumOrder::Batched, 1.0),
                    (1, SumOrder::Single, 1.0),
                    (2, SumOrder::Batched, 1.0),
                    (3, SumOrder::Batched, 1.0),
                    (4, SumOrder::Batched, 1.0),
                    (3, SumOrder::Batched, 60.0),
                ] {
                    let c = Cache::one(format, hd, bs, 2, n_ctx, 7 + n_ctx as u64);
                    let mut r = StdRng::seed_from_u64(11 + n_q as u64);
                    let mut q = rand_vec(n_q * hd, &mut r, lim);
                    round_f16(&mut q);
                    let want = run_in(Isa::Scalar, order, &c, 1, n_ctx, &q, n_q);
                    for isa in Isa::available() {
                        let got = run_in(isa, order, &c, 1, n_ctx, &q, n_q);
                        assert_eq!(
                            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            "{isa:?} {} hd={hd} n_ctx={n_ctx} bs={bs} n_q={n_q} {order:?} q within ±{lim}",
                            format.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn one_position_returns_its_value_row() {
    // softmax over one score is exactly 1, so the output is V's row for every head.
    for format in KvFormat::ALL {
        let c = Cache::one(format, 64, 4, 3, 1, 5);
        let q = vec![0.25f32; 2 * 64];
        let (_, v) = c.row(2, 0);
        for isa in Isa::available() {
            let out = run(isa, &c, 2, 1, &q, 2);
            assert_eq!(&out[..64], &v[..], "{} {isa:?}", format.name());
            assert_eq!(&out[64..], &v[..], "{} {isa:?}", format.name());
        }
    }
}

#[test]
fn empty_context_gives_zeros() {
    let c = Cache::one(KvFormat::Q8_0, 64, 4, 1, 4, 1);
    for isa in Isa::available() {
        assert_eq!(run(isa, &c, 0, 0, &[1.0; 64], 1), vec![0.0; 64]);
    }
}

#[test]
#[should_panic(expected = "attend: block")]
fn table_outside_the_buffer_is_refused() {
    let mut c = Cache::one(KvFormat::F16, 64, 4, 1, 8, 1);
    c.table[1] = 1000;
    run(folio_kernels::cpu::isa(), &c, 0, 8, &[1.0; 64], 1);
}

#[test]
fn formats_parse_name_and_size() {
    for f in KvFormat::ALL {
        assert_eq!(KvFormat::parse(f.name()), Some(f));
        assert_eq!(KvFormat::parse(&f.name().to_uppercase()), Some(f));
    }
    assert_eq!(KvFormat::parse("q4_1"), None);
    let bpv: Vec<f64> = KvFormat::ALL.iter().map(|f| f.bytes_per_value()).collect();
    assert_eq!(bpv, [2.0, 2.0, 34.0 / 32.0, 18.0 / 32.0]);
    let rows: Vec<usize> = KvFormat::ALL.iter().map(|f| f.row_bytes(64)).collect();
    assert_eq!(rows, [128, 128, 68, 36]);
    // A partial last group is padded: 40 values take 2 groups.
    assert_eq!(KvFormat::Q8_0.row_bytes(40), 68);
}

#[test]
fn q8_0_encoding_is_ggml_reference() {
    // amax 127 -> d = 1 exactly; q = round(x), half away from zero.
    let mut x = [0f32; 32];
    x[0] = 127.0;
    x[1] = -2.5;
    x[2] = 2.5;
    x[3] = 0.49;
    x[31] = -127.0;
    let mut b = [0u8; 34];
    attn::store_row_scalar(KvFormat::Q8_0, &x, &mut b);
    assert_eq!(&b[..2], &f16::from_f32(1.0).to_le_bytes());
    assert_eq!(b[2] as i8, 127);
    assert_eq!(b[3] as i8, -3);
    assert_eq!(b[4] as i8, 3);
    assert_eq!(b[5] as i8, 0);
    assert_eq!(b[33] as i8, -127);
    let mut back = [0f32; 32];
    attn::load_row_scalar(KvFormat::Q8_0, &b, &mut back);
    assert_eq!(&back[..4], &[127.0, -3.0, 3.0, 0.0]);
}

#[test]
fn q4_0_encoding_is_ggml_reference() {
    // Largest magnitude -8 -> d = 1; q = min(15, trunc(x + 8.5)); x[j] low nibble,
    // x[j + 16] high nibble of byte j.
    let mut x = [0f32; 32];
    x[0] = -8.0;
    x[1] = 7.0;
    x[16] = 3.2;
    x[17] = -1.6;
    let mut b = [0u8; 18];
    attn::store_row_scalar(KvFormat::Q4_0, &x, &mut b);
    assert_eq!(&b[..2], &f16::from_f32(1.0).to_le_bytes());
    // d = max / -8 = 1; x/d + 8.5: -8 -> 0, 7 -> 15, 3.2 -> 11, -1.6 -> 6, 0 -> 8.
    assert_eq!(b[2], 11 << 4); // low nibble 0, high nibble 11
    assert_eq!(b[3], 15 | (6 << 4));
    assert_eq!(b[4], 8 | (8 << 4));
    let mut back = [0f32; 32];
    attn::load_row_scalar(KvFormat::Q4_0, &b, &mut back);
    assert_eq!(
        [back[0], back[1], back[2], back[16], back[17]],
        [-8.0, 7.0, 0.0, 3.0, -2.0]
    );
    // An all-zero group has scale 0 and decodes to zeros.
    attn::store_row_scalar(KvFormat::Q4_0, &[0.0; 32], &mut b);
    attn::load_row_scalar(KvFormat::Q4_0, &b, &mut back);
    assert_eq!(back, [0.0; 32]);
}

#[test]
fn bf16_and_f16_rows_round_to_nearest_even() {
    let x = [
        1.0f32,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        -3.3e38,
        65504.0,
        1e-8,
    ];
    let mut b = [0u8; 12];
    attn::store_row_scalar(KvFormat::Bf16, &x, &mut b);
    let bits: Vec<u16> = b
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    // 1 + 2^-8 is a tie -> even (1.0); 1 + 3·2^-8 ties up to 1 + 2^-6.
    assert_eq!(&bits[..3], &[0x3f80, 0x3f80, 0x3f82]);
    for isa in Isa::available() {
        let src: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.3711).collect();
        let (mut a, mut s) = (vec![0u8; 74], vec![0u8; 74]);
        attn::store_row_with(isa, KvFormat::F16, &src, &mut a);
        attn::store_row_scalar(KvFormat::F16, &src, &mut s);
        assert_eq!(a, s, "{isa:?}");
    }
}

#[test]
fn round_to_f16_matches_half_on_every_isa() {
    let mut r = StdRng::seed_from_u64(3);
    let src: Vec<f32> = (0..53)
        .map(|_| r.gen_range(-70000.0f32..70000.0) * r.gen::<f32>().powi(9))
        .collect();
    let mut want = src.clone();
    round_f16(&mut want);
    for isa in Isa::available() {
        let mut got = src.clone();
        attn::round_to_f16_with(isa, &mut got);
        assert_eq!(got, want, "{isa:?}");
    }
}

#[test]
fn round_queries_rounds_each_row_to_the_format() {
    let mut r = StdRng::seed_from_u64(11);
    let hd = 64;
    let src = rand_vec(3 * hd, &mut r, 4.0);
    for format in KvFormat::ALL {
        let mut got = src.clone();
        attn::round_queries(format, hd, &mut got);
        // Each row equals its stored-then-loaded self, and rows are rounded apart (a q8_0
        // group never spans two heads).
        let mut want = vec![0f32; src.len()];
        let mut bytes = vec![0u8; format.row_bytes(hd)];
        for (s, w) in src.chunks(hd).zip(want.chunks_mut(hd)) {
            attn::store_row_scalar(format, s, &mut bytes);
            attn::load_row_scalar(format, &bytes, w);
        }
        assert_eq!(got, want, "{}", format.name());
        assert_ne!(got, src, "{}: rounding changed nothing", format.name());
    }
    let mut f16s = src.clone();
    attn::round_to_f16(&mut f16s);
    let mut got = src.clone();
    attn::round_queries(KvFormat::F16, hd, &mut got);
    assert_eq!(got, f16s);
}

/// Attention sinks (GPT-OSS): each head's sink logit joins its softmax denominator only.
/// Every ISA and order gives the scalar reference's exact bits (full context, for the
/// AVX-512 kernel, and a window), close to a plain f64 attention with the sink's
/// `exp(sink − max)` in the total; a sink far below the scores changes nothing.
#[test]
fn sinks_join_the_softmax_denominator_on_every_isa() {
    for format in [KvFormat::F16, KvFormat::Q8_0] {
        for (hd, n_ctx, first) in [(64, 40, 0), (64, 40, 9), (80, 33, 0), (64, 1, 0)] {
            let c = Cache::one(format, hd, 16, 2, n_ctx, (hd + n_ctx + first) as u64);
            let mut r = StdRng::seed_from_u64(11);
            let mut q = rand_vec(3 * hd, &mut r, 1.0);
            round_f16(&mut q);
            // Above, among and far below the scores.
            for sinks in [[3.0f32, 0.1, -0.5], [-1e4, -1e4, -1e4]] {
                let go = |isa: Isa, order: SumOrder| {
                    let mut out = vec![f32::NAN; 3 * hd];
                    let qs = attn::Queries {
                        q: &q,
                        n: 3,
                        scale: 1.0 / (hd as f32).sqrt(),
                        order,
                        first,
                        softcap: None,
                        sinks: Some(&sinks),
                    };
                    attn::attend_with(
                        isa,
                        &c.view(1),
                        &c.table,
                        n_ctx,
                        &qs,
                        &mut Vec::new(),
                        &mut out,
                    );
                    out
                };
                let what = format!(
                    "{} hd={hd} n_ctx={n_ctx} first={first} sinks={sinks:?}",
                    format.name()
                );
                // Plain f64 attention with the sink in the denominator.
                let rows: Vec<_> = (first..n_ctx).map(|j| c.row(1, j)).collect();
                let mut want = vec![0f32; 3 * hd];
                for g in 0..3 {
                    let qg = &q[g * hd..(g + 1) * hd];
                    let s: Vec<f64> = rows
                        .iter()
                        .map(|(k, _)| {
                            qg.iter()
                                .zip(k)
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(sinks[g] as f64, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum::<f64>() + (sinks[g] as f64 - m).exp();
                    for d in 0..hd {
                        want[g * hd + d] = rows
                            .iter()
                            .zip(&e)
                            .map(|((_, v), w)| w / z * v[d] as f64)
                            .sum::<f64>() as f32;
                    }
                }
                for order in [SumOrder::Batched, SumOrder::Single] {
                    let reference = go(Isa::Scalar, order);
                    close(
                        &reference,
                        &want,
                        2e-3,
                        &format!("{what} {order:?} vs plain"),
                    );
                    for isa in Isa::available() {
                        let got = go(isa, order);
                        let same = got
                            .iter()
                            .zip(&reference)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{what} {isa:?} {order:?}: bits differ from the reference"
                        );
                    }
                }
                if sinks[0] < -1e3 {
                    let plain = plain_window(&c, 1, first, n_ctx, &q, 3, None);
                    close(
                        &want,
                        &plain,
                        1e-6,
                        &format!("{what}: a far sink is no sink"),
                    );
                }
            }
        }
    }
}

/// A tile of consecutive tokens (prefill) gives each token, bit for bit, what the per-token
/// kernel gives it alone in the batched order: tiles starting at position 0 and after a
/// cached prefix (inside a block and on its boundary), 1-9 tokens, groups of 1-8 heads (the
/// kernel's 8-row score and 6-row value passes, whole and partial), head sizes 64-256,
/// with and without sinks; the rows widened in pieces. Skips with a printed reason on a host without AVX-512.
#[test]
fn a_tile_of_tokens_equals_each_token_alone() {
    let isa = *Isa::available().last().expect("an ISA");
    let probe = Cache::one(KvFormat::F16, 64, 16, 1, 1, 0);
    if !attn::tile_supports(isa, &probe.view(0)) {
        println!("skipped: no tile kernel on this host ({isa:?}): it needs AVX-512");
        return;
    }
    let mut cases = 0;
    for hd in [64, 128, 256] {
        for (first_pos, tokens, bs) in [(0, 1, 16), (0, 9, 16), (5, 8, 16), (16, 3, 4), (37, 7, 32)]
        {
            for group in [1, 3, 6, 8] {
                for sinks in [false, true] {
                    let n_max = first_pos + tokens;
                    let c = Cache::one(KvFormat::F16, hd, bs, 3, n_max, (hd + n_max) as u64);
                    let mut r = StdRng::seed_from_u64((group * 31 + tokens) as u64);
                    let mut q = rand_vec(tokens * group * hd, &mut r, 1.0);
                    round_f16(&mut q);
                    let sink = rand_vec(group, &mut r, 2.0);
                    let scale = 1.0 / (hd as f32).sqrt();
                    let sinks = sinks.then_some(&sink[..]);
                    let tile = attn::QueryTile {
                        q: &q,
                        tokens,
                        group,
                        first_pos,
                        scale,
                        sinks,
                    };
                    // Widened in two pieces (a split inside the context and one past it).
                    let rows = n_max.next_multiple_of(16) + 16;
                    let (mut k, mut v) = (vec![f32::NAN; rows * hd], vec![f32::NAN; rows * hd]);
                    let cut = 16 * (n_max / 32);
                    let (k0, k1) = k.split_at_mut(cut * hd);
                    let (v0, v1) = v.split_at_mut(cut * hd);
                    attn::widen(isa, &c.view(1), &c.table, 0..cut, n_max, k0, v0);
                    attn::widen(isa, &c.view(1), &c.table, cut..rows, n_max, k1, v1);
                    let wide = attn::WideRows {
                        k: &k,
                        v: &v,
                        head_dim: hd,
                    };
                    let mut got = vec![f32::NAN; q.len()];
                    attn::attend_tile(isa, &wide, &tile, &mut got);
                    let what = format!("hd={hd} first={first_pos} tokens={tokens} group={group}");
                    for t in 0..tokens {
                        let rows = t * group * hd..(t + 1) * group * hd;
                        let mut want = vec![f32::NAN; group * hd];
                        attn::attend_with(
                            isa,
                            &c.view(1),
                            &c.table,
                            first_pos + t + 1,
                            &attn::Queries {
                                q: &q[rows.clone()],
                                n: group,
                                scale,
                                order: SumOrder::Batched,
                                first: 0,
                                softcap: None,
                                sinks,
                            },
                            &mut Vec::new(),
                            &mut want,
                        );
                        let (g, w): (Vec<u32>, Vec<u32>) = (
                            got[rows].iter().map(|v| v.to_bits()).collect(),
                            want.iter().map(|v| v.to_bits()).collect(),
                        );
                        assert_eq!(g, w, "{what} token {t} sinks={}", sinks.is_some());
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 3 * (1 + 9 + 8 + 3 + 7) * 4 * 2);
}
