//! q4c keys (per channel over each 16-token page) end to end through the paged cache: rows
//! wait in f16 until their page fills and are then encoded once, logits stay close to f16
//! KV, a batch equals its sequences alone, prefix-shared pages (exact block ids) and
//! copy-on-write of a staged tail give an unshared cache's logits, encoded pages survive
//! the disk tier's export and import bit for bit, and past the staging limit the oldest
//! page is encoded early and restaged when written again.

mod kv_tiny;

use folio_kernels::pool::ThreadPool;
use folio_model::kv_stage::MAX_STAGED;
use folio_model::{ForwardBatch, KvCache, KvFormat, KvFormats, KvLayout, Model};
use folio_testkit::tiny::{randn, rel_err};
use kv_tiny::{prompt, tiny_model, HD, SHAPE, VOCAB};
use rand::rngs::StdRng;
use rand::SeedableRng;

const BS: usize = 16;

fn q4c(v: KvFormat) -> KvFormats {
    KvFormats {
        k: KvFormat::Q4c,
        v,
    }
}

/// Logits of a 20-token prefill, an 11-token chunk, then decode steps that fill page 1
/// (position 31) and open page 2, through a scattered block table.
fn run16(model: &Model, formats: KvFormats) -> Vec<Vec<f32>> {
    let toks = prompt(3, 35);
    let mut kv = model.new_kv_cache(BS, 6, formats);
    let table: Vec<u32> = vec![4, 1, 5];
    let pool = ThreadPool::global();
    let (mut pos, mut rows) = (0, Vec::new());
    for len in [20usize, 11, 1, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, table.clone(), len);
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        rows.extend(logits.chunks(VOCAB).map(|r| r.to_vec()));
        pos += len;
    }
    rows
}

#[test]
fn rows_wait_in_f16_until_their_page_fills() {
    let mut rng = StdRng::seed_from_u64(9);
    let heads = 3;
    let mut kv = KvCache::new(KvLayout::single(2), heads, HD, BS, 5, q4c(KvFormat::Q4h));
    assert_eq!(
        kv.k_row_bytes(),
        48,
        "64 values: 32 bytes of codes + 16 of scales"
    );
    let rows: Vec<Vec<f32>> = (0..BS * heads).map(|_| randn(&mut rng, HD, 2.0)).collect();
    let v = randn(&mut rng, HD, 0.5);
    let (mut k, mut vv) = (vec![0f32; HD], vec![0f32; HD]);
    for s in 0..BS {
        for h in 0..heads {
            kv.write_row(1, 3, h, s, &rows[s * heads + h], &v);
        }
        if s < BS - 1 {
            // Staged: the key reads back as its f16 rounding.
            assert_eq!(kv.staged_pages(1), 1);
            kv.read_row(1, 3, 2, s, &mut k, &mut vv);
            let want: Vec<f32> = rows[s * heads + 2]
                .iter()
                .map(|&x| half::f16::from_f32(x).to_f32())
                .collect();
            assert_eq!(k, want, "slot {s}");
        }
    }
    // The 16th row of the last head encoded the page and freed its staging slot.
    assert_eq!(kv.staged_pages(1), 0);
    assert_eq!(kv.staged_pages(0), 0, "layer 0 was never written");
    for s in 0..BS {
        kv.read_row(1, 3, 1, s, &mut k, &mut vv);
        let x = &rows[s * heads + 1];
        let worst = x
            .iter()
            .zip(&k)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // Random normal keys times 2: a channel's 16 values span ~12, so a step of ~0.8.
        assert!(worst > 0.0 && worst < 0.6, "slot {s}: {worst}");
    }
}

#[test]
fn logits_stay_close_to_f16_kv() {
    let model = tiny_model(42);
    let f16 = run16(&model, KvFormat::F16.into());
    for (f, tol) in [(q4c(KvFormat::F16), 0.3), (q4c(KvFormat::Q4h), 0.5)] {
        let got = run16(&model, f);
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
    let prompts: Vec<Vec<u32>> = [9usize, 17, 33]
        .iter()
        .map(|&n| prompt(n as u64, n))
        .collect();
    let f = q4c(KvFormat::Q4h);
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut kv = model.new_kv_cache(BS, 3, f);
            let mut b = ForwardBatch::new();
            b.push(p, 0, vec![0, 1, 2], 1);
            model.forward(&b, &mut kv, pool).expect("forward")
        })
        .collect();
    let mut kv = model.new_kv_cache(BS, 9, f);
    let mut b = ForwardBatch::new();
    for (i, p) in prompts.iter().enumerate() {
        let t = i as u32 * 3;
        b.push(p, 0, vec![t, t + 1, t + 2], 1);
    }
    let together = model.forward(&b, &mut kv, pool).expect("forward");
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(&together[i * VOCAB..(i + 1) * VOCAB], &a[..], "seq {i}");
    }
    // Sequence 1 (17 tokens) and 2 (33) filled pages 3, 6 and 7; their tails are staged.
    assert_eq!(kv.staged_pages(0), 3);
}

#[test]
fn prefix_shared_pages_and_copy_on_write_of_a_staged_tail_match_an_unshared_cache() {
    let model = tiny_model(7);
    let pool = ThreadPool::global();
    let toks = prompt(5, 21);
    let f = q4c(KvFormat::Q4h);
    // 21 tokens into blocks 0 (encoded, full) and 1 (5 rows staged).
    let mut kv = model.new_kv_cache(BS, 8, f);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, vec![0, 1], 1);
    model.forward(&b, &mut kv, pool).expect("prefill");
    assert_eq!(kv.staged_pages(0), 1);
    // A second sequence shares block 0 and gets a copy of the staged tail in block 3.
    kv.copy_block(1, 3, 5);
    assert_eq!(kv.staged_pages(0), 2);
    let step = |kv: &mut KvCache, table: Vec<u32>, tok: u32| {
        let mut b = ForwardBatch::new();
        b.push(&[tok], 21, table, 1);
        model.forward(&b, kv, pool).expect("decode")
    };
    let shared = step(&mut kv, vec![0, 3], 17);
    let original = step(&mut kv, vec![0, 1], 23);
    let fresh = |tok: u32| {
        let mut kv = model.new_kv_cache(BS, 8, f);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![5, 6], 1);
        model.forward(&b, &mut kv, pool).expect("prefill");
        let l = step(&mut kv, vec![5, 6], tok);
        (l, kv)
    };
    let (f17, fresh_kv) = fresh(17);
    assert_eq!(shared, f17, "shared + copied tail");
    assert_eq!(original, fresh(23).0, "original");
    // The shared block 0 holds the bytes of the fresh cache's block 5.
    assert_eq!(kv.export_block(0), fresh_kv.export_block(5));
}

#[test]
fn encoded_pages_export_and_import_bit_for_bit() {
    let model = tiny_model(3);
    let pool = ThreadPool::global();
    let toks = prompt(8, 40);
    let f = q4c(KvFormat::Q8_0);
    let mut kv = model.new_kv_cache(BS, 6, f);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, vec![4, 1, 2], 1);
    model.forward(&b, &mut kv, pool).expect("prefill");
    let per_layer = SHAPE.kv_heads * BS * (f.k.row_bytes(HD) + f.v.row_bytes(HD));
    assert_eq!(kv.block_payload_bytes(), SHAPE.layers * per_layer);
    let mut other = model.new_kv_cache(BS, 6, f);
    for (src, dst) in [(4, 0), (1, 5)] {
        other
            .import_block(dst, &kv.export_block(src))
            .expect("import");
    }
    assert_eq!(other.export_block(5), kv.export_block(1));
    // The staged tail (block 2, 8 rows) leaves encoded; imported, it is encoded there.
    other.import_block(3, &kv.export_block(2)).expect("import");
    assert_eq!(other.staged_pages(0), 0);
    assert_eq!(
        kv.staged_pages(0),
        1,
        "exporting does not encode the page in place"
    );
    // Attention through the two full pages equals the original's.
    let step = |kv: &mut KvCache, table: Vec<u32>, at: usize| {
        let mut b = ForwardBatch::new();
        b.push(&[11], at, table, 1);
        model.forward(&b, kv, pool).expect("decode")
    };
    let mut a = model.new_kv_cache(BS, 6, f);
    a.import_block(0, &kv.export_block(4)).expect("import");
    a.import_block(5, &kv.export_block(1)).expect("import");
    assert_eq!(
        step(&mut a, vec![0, 5, 3], 32),
        step(&mut other, vec![0, 5, 2], 32)
    );
}

#[test]
fn past_the_staging_limit_the_oldest_page_is_encoded_early_and_restaged() {
    let mut rng = StdRng::seed_from_u64(4);
    let n = MAX_STAGED + 1;
    let mut kv = KvCache::new(KvLayout::single(1), 1, 32, BS, n, q4c(KvFormat::F16));
    let first: Vec<Vec<f32>> = (0..2).map(|_| randn(&mut rng, 32, 1.0)).collect();
    let v = vec![0f32; 32];
    kv.write_row(0, 0, 0, 0, &first[0], &v);
    for b in 1..n {
        kv.write_row(0, b, 0, 0, &randn(&mut rng, 32, 1.0), &v);
    }
    assert_eq!(kv.staged_pages(0), MAX_STAGED);
    // Block 0 was encoded early with its one row: each channel's minimum is the value (in
    // f16), so it reads back to f16 precision.
    let (mut k, mut vv) = (vec![0f32; 32], vec![0f32; 32]);
    let close = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-3 * x.abs().max(1.0))
    };
    kv.read_row(0, 0, 0, 0, &mut k, &mut vv);
    assert!(close(&k, &first[0]), "{k:?} vs {:?}", first[0]);
    // Its next row restages it (taking the oldest slot, block 1's, in turn): row 0 decoded
    // back, row 1 in f16.
    kv.write_row(0, 0, 0, 1, &first[1], &v);
    assert_eq!(kv.staged_pages(0), MAX_STAGED);
    for (s, row) in first.iter().enumerate() {
        kv.read_row(0, 0, 0, s, &mut k, &mut vv);
        assert!(close(&k, row), "slot {s}: {k:?} vs {row:?}");
    }
    kv.read_row(0, 0, 0, 1, &mut k, &mut vv);
    let f16: Vec<f32> = first[1]
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32())
        .collect();
    assert_eq!(k, f16, "the new row is staged in f16");
}
