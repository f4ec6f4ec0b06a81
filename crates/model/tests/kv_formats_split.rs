//! K and V in different formats, and the formats beyond ggml's plain ones (`iq4_nl`, the
//! rotated `q4h` and `q8h`), end to end through the paged cache: rows read back as written
//! (up to each format's rounding), logits stay close to f16 KV, a batch equals its
//! sequences alone, prefix-shared blocks (exact block ids) and copy-on-write give the
//! logits of an unshared cache, and a block exported and imported (the disk tier's
//! payload) reads back bit for bit.

mod kv_tiny;

use folio_testkit::tiny as common;
use kv_tiny::{prompt, run, tiny_model, HD, SHAPE, VOCAB};

use common::{build, randn, rel_err};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::attn;
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvCache, KvFormat, KvFormats, KvLayout, Model};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn pair(k: KvFormat, v: KvFormat) -> KvFormats {
    KvFormats { k, v }
}

/// The configurations these tests run: each new format for both, and mixed pairs.
fn configs() -> Vec<KvFormats> {
    let mut c: Vec<KvFormats> = KvFormat::MORE.iter().map(|&f| f.into()).collect();
    c.extend([
        pair(KvFormat::Q4h, KvFormat::Q4_0),
        pair(KvFormat::Q8_0, KvFormat::Q4h),
        pair(KvFormat::Q8h, KvFormat::Q4h),
        pair(KvFormat::F16, KvFormat::Q8_0),
    ]);
    c
}

#[test]
fn rows_read_back_in_each_sides_format() {
    let mut rng = StdRng::seed_from_u64(9);
    for f in configs() {
        let mut kv = KvCache::new(KvLayout::single(2), 3, HD, 4, 5, f);
        assert_eq!(kv.k_row_bytes(), f.k.row_bytes(HD));
        assert_eq!(kv.v_row_bytes(), f.v.row_bytes(HD));
        let k = randn(&mut rng, HD, 3.0);
        let v = randn(&mut rng, HD, 0.5);
        kv.write_row(1, 3, 2, 1, &k, &v);
        let want = |fmt: KvFormat, x: &[f32]| {
            let mut b = vec![0u8; fmt.row_bytes(HD)];
            attn::store_row_scalar(fmt, x, &mut b);
            let mut y = vec![0f32; HD];
            attn::load_row_unrotated(fmt, &b, &mut y);
            y
        };
        let (mut gk, mut gv) = (vec![0f32; HD], vec![0f32; HD]);
        kv.read_row(1, 3, 2, 1, &mut gk, &mut gv);
        assert_eq!(gk, want(f.k, &k), "{} K", f.name());
        assert_eq!(gv, want(f.v, &v), "{} V", f.name());
        // Nothing else was touched.
        kv.read_row(1, 3, 2, 0, &mut gk, &mut gv);
        assert_eq!((gk.clone(), gv.clone()), (vec![0f32; HD], vec![0f32; HD]));
        kv.read_row(0, 3, 2, 1, &mut gk, &mut gv);
        assert_eq!((gk, gv), (vec![0f32; HD], vec![0f32; HD]));
    }
}

#[test]
fn logits_stay_close_to_f16_kv() {
    let model = tiny_model(42);
    let f16 = run(&model, KvFormat::F16);
    // Worst error relative to the logits' RMS; the bounds leave about 2-4x margin over
    // what this model measures (random keys: no outliers for the rotation to spread).
    for (f, tol) in [
        (KvFormats::same(KvFormat::Q8h), 0.04),
        (KvFormats::same(KvFormat::Iq4Nl), 0.45),
        (KvFormats::same(KvFormat::Q4h), 0.45),
        (pair(KvFormat::Q8_0, KvFormat::Q4h), 0.45),
        (pair(KvFormat::Q4h, KvFormat::F16), 0.45),
    ] {
        let got = run(&model, f);
        let worst = got
            .iter()
            .zip(&f16)
            .map(|(a, b)| rel_err(a, b))
            .fold(0.0, f32::max);
        eprintln!("{}: worst logit error vs f16 KV = {worst}", f.name());
        assert!(worst < tol, "{}: {worst} (tolerance {tol})", f.name());
        assert!(worst > 0.0, "{}: the format changed nothing", f.name());
    }
}

#[test]
fn a_batch_equals_its_sequences_alone() {
    let model = tiny_model(5);
    let pool = ThreadPool::global();
    let prompts: Vec<Vec<u32>> = [9usize, 1, 14]
        .iter()
        .map(|&n| prompt(n as u64, n))
        .collect();
    for f in configs() {
        let alone: Vec<Vec<f32>> = prompts
            .iter()
            .map(|p| {
                let mut kv = model.new_kv_cache(4, 8, f);
                let mut b = ForwardBatch::new();
                b.push(p, 0, (0..8).collect(), 1);
                model.forward(&b, &mut kv, pool).expect("forward")
            })
            .collect();
        let mut kv = model.new_kv_cache(4, 24, f);
        let mut b = ForwardBatch::new();
        for (i, p) in prompts.iter().enumerate() {
            b.push(p, 0, (i as u32 * 8..(i as u32 + 1) * 8).collect(), 1);
        }
        let together = model.forward(&b, &mut kv, pool).expect("forward");
        for (i, a) in alone.iter().enumerate() {
            assert_eq!(
                &together[i * VOCAB..(i + 1) * VOCAB],
                &a[..],
                "{} seq {i}",
                f.name()
            );
        }
    }
}

#[test]
fn prefix_shared_blocks_and_copy_on_write_match_an_unshared_cache() {
    let model = tiny_model(7);
    let pool = ThreadPool::global();
    let toks = prompt(5, 7);
    for f in configs() {
        // 7 tokens into blocks 0 and 1 (block 1 holds 3 of 4 slots).
        let mut kv = model.new_kv_cache(4, 8, f);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![0, 1], 1);
        model.forward(&b, &mut kv, pool).expect("prefill");
        // A second sequence shares block 0 (whole, prefix-cached) and gets a copy of the
        // partial tail in block 3 (copy-on-write); both decode a different token.
        kv.copy_block(1, 3, 3);
        let step = |kv: &mut KvCache, table: Vec<u32>, tok: u32| {
            let mut b = ForwardBatch::new();
            b.push(&[tok], 7, table, 1);
            model.forward(&b, kv, pool).expect("decode")
        };
        let shared = step(&mut kv, vec![0, 3], 17);
        let original = step(&mut kv, vec![0, 1], 23);
        // The same two sequences, each in blocks of its own in a fresh cache.
        let fresh = |tok: u32| {
            let mut kv = model.new_kv_cache(4, 8, f);
            let mut b = ForwardBatch::new();
            b.push(&toks, 0, vec![5, 6], 1);
            model.forward(&b, &mut kv, pool).expect("prefill");
            step(&mut kv, vec![5, 6], tok)
        };
        assert_eq!(shared, fresh(17), "{} shared + copied tail", f.name());
        assert_eq!(original, fresh(23), "{} original", f.name());
        // The shared block 0 was not written by either decode: its bytes equal the
        // fresh cache's block 5 (both hold positions 0..4).
        let mut fresh_kv = model.new_kv_cache(4, 8, f);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![5, 6], 1);
        model.forward(&b, &mut fresh_kv, pool).expect("prefill");
        let (kb, vb) = (kv.k_block_bytes(), kv.v_block_bytes());
        let (p0, p5) = (kv.export_block(0), fresh_kv.export_block(5));
        assert_eq!(p0.len(), 2 * (kb + vb));
        assert_eq!(p0, p5, "{} block 0 vs 5", f.name());
    }
}

#[test]
fn exported_blocks_import_bit_for_bit() {
    // The disk tier stores `export_block`'s payload as it is and writes it back with
    // `import_block`: K and V each in its own format, rotated rows still rotated.
    let model = tiny_model(3);
    let pool = ThreadPool::global();
    let toks = prompt(8, 10);
    for f in configs() {
        let mut kv = model.new_kv_cache(4, 6, f);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![4, 1, 2], 1);
        model.forward(&b, &mut kv, pool).expect("prefill");
        let payload = kv.export_block(1);
        let per_layer = 2 * 4 * (f.k.row_bytes(HD) + f.v.row_bytes(HD));
        assert_eq!(payload.len(), SHAPE.layers * per_layer, "{}", f.name());
        assert_eq!(payload.len(), kv.block_payload_bytes());
        // Into another cache's block 5, then attention through it equals the original.
        let mut other = model.new_kv_cache(4, 6, f);
        for (src, dst) in [(4, 0), (1, 5), (2, 3)] {
            other
                .import_block(dst, &kv.export_block(src))
                .expect("import");
        }
        assert_eq!(other.export_block(5), payload);
        let step = |kv: &mut KvCache, table: Vec<u32>| {
            let mut b = ForwardBatch::new();
            b.push(&[11], 10, table, 1);
            model.forward(&b, kv, pool).expect("decode")
        };
        assert_eq!(
            step(&mut other, vec![0, 5, 3]),
            step(&mut kv, vec![4, 1, 2]),
            "{}",
            f.name()
        );
        // A payload of another size (another format's) is refused.
        assert!(other.import_block(0, &payload[1..]).is_err());
    }
}

#[test]
fn bytes_per_token_count_k_and_v_apart() {
    // SmolLM2-135M shapes: 30 layers, 3 KV heads, head_dim 64.
    let bpt = |f: KvFormats| {
        let c = KvCache::new(KvLayout::single(30), 3, 64, 16, 1, f);
        (
            c.k_bytes_per_token(),
            c.v_bytes_per_token(),
            c.bytes_per_token(),
        )
    };
    assert_eq!(bpt(KvFormat::Q4h.into()), (3_240, 3_240, 6_480));
    assert_eq!(
        bpt(pair(KvFormat::Q8_0, KvFormat::Q4h)),
        (6_120, 3_240, 9_360)
    );
    assert_eq!(
        bpt(pair(KvFormat::F16, KvFormat::Q8h)),
        (11_520, 6_120, 17_640)
    );
    // The engine sizes its pool from bytes_per_value; it agrees with the real cache.
    let model = tiny_model(1);
    for f in configs() {
        let planned = model.config.kv_bytes_per_token(f.bytes_per_value());
        let real = model.new_kv_cache(16, 1, f).bytes_per_token();
        assert_eq!(planned, real as f64, "{}", f.name());
        let page = KvCache::page_bytes(&KvLayout::single(2), 2, HD, 16, f);
        assert_eq!(page, 16 * real, "{}", f.name());
    }
}

#[test]
fn qwen2_keys_stored_minus_their_bias_keep_the_logits() {
    // A rotated K format stores k − b_k; q·b_k is common to all keys, so the logits stay
    // those of f16 KV up to the format's rounding (measured worst error well under 0.04
    // for q8h). The stored key is really shifted: it differs from f16's by about b_k.
    let f = GgufFile::from_bytes(build(&SHAPE, "qwen2", GgmlType::F32, 42)).expect("tiny gguf");
    let model = Model::from_gguf(&f).expect("load");
    let f16 = run(&model, KvFormat::F16);
    let got = run(&model, pair(KvFormat::Q8h, KvFormat::F16));
    let worst = got
        .iter()
        .zip(&f16)
        .map(|(a, b)| rel_err(a, b))
        .fold(0.0, f32::max);
    eprintln!("qwen2 q8h K: worst logit error vs f16 KV = {worst}");
    assert!(worst < 0.04, "{worst}");
    let pool = ThreadPool::global();
    let toks = prompt(3, 5);
    let row = |formats: KvFormats| {
        let mut kv = model.new_kv_cache(4, 2, formats);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![0, 1], 1);
        model.forward(&b, &mut kv, pool).expect("forward");
        let (mut k, mut v) = (vec![0f32; HD], vec![0f32; HD]);
        kv.read_row(0, 0, 1, 2, &mut k, &mut v);
        k
    };
    let (plain, shifted) = (
        row(KvFormat::F16.into()),
        row(pair(KvFormat::Q8h, KvFormat::F16)),
    );
    let diff = plain
        .iter()
        .zip(&shifted)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        diff > 1e-3,
        "the q8h key equals the f16 key: no bias removed ({diff})"
    );
}
