//! Batched forward of several sequences equals each sequence alone, bad batches are
//! errors not panics, and shared-slot writes land in token order.

use folio_testkit::tiny as common;

use common::reference::{prompt, CTX, HD, KV_HEADS, LAYERS, SHAPE, VOCAB};
use common::{build, rel_err};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

#[test]
fn batched_equals_alone() {
    for arch in ["llama", "phi3"] {
        batched_equals_alone_for(arch);
    }
}

fn batched_equals_alone_for(arch: &str) {
    let tiny = build(&SHAPE, arch, GgmlType::Q4_1, 3);
    let f = GgufFile::from_bytes(tiny).expect("valid tiny gguf");
    let model = Model::from_gguf(&f).expect("load");
    let pool = ThreadPool::global();
    let lens = [9usize, 1, 23, 4];
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(10 + i as u64, n))
        .collect();
    // Alone: each sequence in its own cache.
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
            let mut b = ForwardBatch::new();
            b.push(p, 0, (0..8).collect(), 1);
            model.forward(&b, &mut kv, pool).expect("forward")
        })
        .collect();
    // Together: one batch, one shared cache, disjoint block tables.
    let mut kv = model.new_kv_cache(4, 32, KvFormat::F16);
    let mut b = ForwardBatch::new();
    for (i, p) in prompts.iter().enumerate() {
        b.push(p, 0, (i as u32 * 8..(i as u32 + 1) * 8).collect(), 1);
    }
    let together = model.forward(&b, &mut kv, pool).expect("forward");
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(
            &together[i * VOCAB..(i + 1) * VOCAB],
            &a[..],
            "sequence {i} differs when batched"
        );
    }
    // Then decode one token for all four together vs alone.
    let next: Vec<u32> = (0..4).map(|i| (i * 37 + 5) as u32 % VOCAB as u32).collect();
    let mut b = ForwardBatch::new();
    for (i, p) in prompts.iter().enumerate() {
        b.push(
            &[next[i]],
            p.len(),
            (i as u32 * 8..(i as u32 + 1) * 8).collect(),
            1,
        );
    }
    let together = model.forward(&b, &mut kv, pool).expect("decode");
    for (i, p) in prompts.iter().enumerate() {
        let mut kv1 = model.new_kv_cache(4, 8, KvFormat::F16);
        let mut b = ForwardBatch::new();
        let mut all = p.clone();
        all.push(next[i]);
        b.push(&all, 0, (0..8).collect(), 1);
        let one = model.forward(&b, &mut kv1, pool).expect("forward");
        let e = rel_err(&together[i * VOCAB..(i + 1) * VOCAB], &one);
        // Same math up to activation-quantization grouping: prefill vs decode rows are
        // quantized identically per row, so this is exact in practice; allow f32 noise.
        assert!(
            e < 1e-4,
            "sequence {i}: decode-after-prefill differs from full prefill by {e}"
        );
    }
}

#[test]
fn bad_batches_are_errors_not_panics() {
    let tiny = build(&SHAPE, "llama", GgmlType::F32, 5);
    let f = GgufFile::from_bytes(tiny).expect("valid");
    let model = Model::from_gguf(&f).expect("load");
    let pool = ThreadPool::global();
    let mut kv = model.new_kv_cache(4, 2, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&[VOCAB as u32], 0, vec![0, 1], 1);
    let e = model.forward(&b, &mut kv, pool).unwrap_err().to_string();
    assert!(e.contains("vocab_size 300"), "{e}");
    let mut b = ForwardBatch::new();
    b.push(&[1; 9], 0, vec![0, 1], 1);
    let e = model.forward(&b, &mut kv, pool).unwrap_err().to_string();
    assert!(e.contains("3 needed"), "{e}");
    let mut b = ForwardBatch::new();
    b.push(&[1], 0, vec![5], 1);
    let e = model.forward(&b, &mut kv, pool).unwrap_err().to_string();
    assert!(e.contains("block 5 >= num_blocks 2"), "{e}");
    let mut b = ForwardBatch::new();
    b.push(&[1], CTX, vec![0; 64], 1);
    let e = model.forward(&b, &mut kv, pool).unwrap_err().to_string();
    assert!(e.contains("context_length 128"), "{e}");
}

/// Two sequences that write the same cache slot in one step (a caller sharing a block
/// without copying it) are written one after another in token order, never concurrently:
/// the slot ends up holding the later token's K/V, exactly as writing that token alone.
#[test]
fn shared_slot_writes_land_in_token_order() {
    let tiny = build(&SHAPE, "llama", GgmlType::Q8_0, 9);
    let f = GgufFile::from_bytes(tiny).expect("valid tiny gguf");
    let model = Model::from_gguf(&f).expect("load");
    let pool = ThreadPool::global();
    let p = prompt(21, 6);
    let (a, b_tok) = (7u32, 211u32);
    // Both sequences: the same 6-token prefix in blocks 0-1, then different tokens at
    // position 6, the same slot of block 1. Several of each so the rows span pool tasks.
    let mut kv = model.new_kv_cache(4, 4, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&p, 0, vec![0, 1], 0);
    model.forward(&b, &mut kv, pool).expect("prefill");
    let mut b = ForwardBatch::new();
    for t in [a, a, a, b_tok] {
        b.push(&[t], 6, vec![0, 1], 1);
    }
    model.forward(&b, &mut kv, pool).expect("shared slot");
    // The reference: the prefix, then only the last token.
    let mut kv1 = model.new_kv_cache(4, 4, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&p, 0, vec![0, 1], 0);
    model.forward(&b, &mut kv1, pool).expect("prefill");
    let mut b = ForwardBatch::new();
    b.push(&[b_tok], 6, vec![0, 1], 1);
    model.forward(&b, &mut kv1, pool).expect("alone");
    let (mut k, mut v, mut k1, mut v1) = (
        vec![0f32; HD],
        vec![0f32; HD],
        vec![0f32; HD],
        vec![0f32; HD],
    );
    for layer in 0..LAYERS {
        for head in 0..KV_HEADS {
            kv.read_row(layer, 1, head, 2, &mut k, &mut v);
            kv1.read_row(layer, 1, head, 2, &mut k1, &mut v1);
            assert_eq!((&k, &v), (&k1, &v1), "layer {layer} head {head}");
        }
    }
}
