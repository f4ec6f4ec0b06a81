//! KV storage formats end to end: the cache stores f16, bf16, q8_0 and q4_0 natively
//! (rows bit-compatible with ggml's quantizers), attention reads each directly, logits of
//! a tiny synthetic model with quantized KV stay close to f16 KV, copy-on-write copies are
//! exact, and capacity follows bytes per token.

mod kv_tiny;

use folio_testkit::tiny as common;
use kv_tiny::{prompt, run, tiny_model, HD};

use common::{randn, rel_err};
use folio_gguf::GgmlType;
use folio_kernels::pool::ThreadPool;
use folio_model::{AttnPrecision, ForwardBatch, KvCache, KvFormat, KvLayout};
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn quantized_kv_logits_stay_close_to_f16() {
    let model = tiny_model(42);
    let f16 = run(&model, KvFormat::F16);
    // Worst error relative to the logits' RMS, measured on this model: bf16 0.005,
    // q8_0 0.013, q4_0 0.21 (random keys have no outlier structure, so 4 bits hurt); the
    // bounds leave about 2-4x margin. The errors must also grow as bits shrink.
    let mut last = 0.0;
    for (format, tol) in [
        (KvFormat::Bf16, 0.02),
        (KvFormat::Q8_0, 0.04),
        (KvFormat::Q4_0, 0.45),
    ] {
        let got = run(&model, format);
        let worst = got
            .iter()
            .zip(&f16)
            .map(|(a, b)| rel_err(a, b))
            .fold(0.0, f32::max);
        eprintln!("{}: worst logit error vs f16 KV = {worst}", format.name());
        assert!(
            worst < tol,
            "{}: logits off f16 KV by {worst} (tolerance {tol})",
            format.name()
        );
        // The format is really used, and coarser formats cost more accuracy.
        assert!(
            worst > last,
            "{}: error {worst} not above {last}",
            format.name()
        );
        last = worst;
    }
}

#[test]
fn attn_precision_is_a_switch_apart_from_the_storage_format() {
    let mut model = tiny_model(42);
    assert_eq!(model.attn_precision(), AttnPrecision::F16);
    let default_f16 = run(&model, KvFormat::F16);
    let default_bf16 = run(&model, KvFormat::Bf16);
    // `kv` against an f16 cache is the default (queries rounded to f16).
    model.set_attn_precision(AttnPrecision::Kv);
    assert_eq!(run(&model, KvFormat::F16), default_f16);
    // Against bf16 it rounds the queries to bf16 instead: a different compute precision
    // over the same storage, close to it.
    let kv_bf16 = run(&model, KvFormat::Bf16);
    assert_ne!(kv_bf16, default_bf16);
    let q8_kv = run(&model, KvFormat::Q8_0);
    // f32 queries: only the storage rounds.
    model.set_attn_precision(AttnPrecision::F32);
    let f32_f16 = run(&model, KvFormat::F16);
    assert_ne!(f32_f16, default_f16);
    assert_ne!(run(&model, KvFormat::Q8_0), q8_kv);
    for (a, b) in f32_f16.iter().zip(&default_f16) {
        assert!(
            rel_err(a, b) < 0.01,
            "f32 vs f16 queries: {}",
            rel_err(a, b)
        );
    }
    for (a, b) in kv_bf16.iter().zip(&default_bf16) {
        assert!(
            rel_err(a, b) < 0.02,
            "bf16 vs f16 queries: {}",
            rel_err(a, b)
        );
    }
    assert_eq!(
        AttnPrecision::Kv.query_format(KvFormat::Q4_0),
        Some(KvFormat::Q8_0)
    );
    assert_eq!(AttnPrecision::F32.query_format(KvFormat::F16), None);
    for p in [AttnPrecision::F16, AttnPrecision::F32, AttnPrecision::Kv] {
        assert_eq!(AttnPrecision::parse(p.name()), Some(p));
    }
}

#[test]
fn rows_are_stored_as_ggml_encodes_them() {
    // The cache's bytes decode to what folio-gguf's independent ggml quantizer and
    // dequantizer give for the same row.
    let mut rng = StdRng::seed_from_u64(9);
    for (format, ty) in [
        (KvFormat::F16, GgmlType::F16),
        (KvFormat::Bf16, GgmlType::BF16),
        (KvFormat::Q8_0, GgmlType::Q8_0),
        (KvFormat::Q4_0, GgmlType::Q4_0),
    ] {
        let mut kv = KvCache::new(KvLayout::single(2), 3, HD, 4, 5, format);
        let k = randn(&mut rng, HD, 3.0);
        let v = randn(&mut rng, HD, 0.5);
        kv.write_row(1, 3, 2, 1, &k, &v);
        for (src, is_k) in [(&k, true), (&v, false)] {
            let bytes = folio_gguf::quant::quantize(ty, src).expect("quantize");
            let mut want = vec![0f32; HD];
            folio_gguf::dequant::dequantize(ty, &bytes, &mut want).expect("dequantize");
            let (mut gk, mut gv) = (vec![0f32; HD], vec![0f32; HD]);
            kv.read_row(1, 3, 2, 1, &mut gk, &mut gv);
            let got = if is_k { gk } else { gv };
            assert_eq!(
                got,
                want,
                "{} {}",
                format.name(),
                if is_k { "K" } else { "V" }
            );
        }
        // Nothing else was touched.
        let (mut gk, mut gv) = (vec![1f32; HD], vec![1f32; HD]);
        kv.read_row(1, 3, 2, 0, &mut gk, &mut gv);
        kv.read_row(0, 3, 2, 1, &mut gk, &mut gv);
        assert_eq!((gk, gv), (vec![0f32; HD], vec![0f32; HD]));
    }
}

#[test]
fn copy_block_is_exact_in_every_format() {
    let model = tiny_model(7);
    let pool = ThreadPool::global();
    let toks = prompt(5, 7);
    for format in KvFormat::ALL {
        // 7 tokens: block 0 full, block 1 holds 3 of 4 slots (a partial tail).
        let mut kv = model.new_kv_cache(4, 4, format);
        let mut b = ForwardBatch::new();
        b.push(&toks, 0, vec![0, 1], 1);
        model.forward(&b, &mut kv, pool).expect("prefill");
        // Fork: copy the tail into block 3, then both branches decode the same token.
        kv.copy_block(1, 3, 3);
        let step = |kv: &mut KvCache, table: Vec<u32>| {
            let mut b = ForwardBatch::new();
            b.push(&[17], 7, table, 1);
            model.forward(&b, kv, pool).expect("decode")
        };
        let forked = step(&mut kv, vec![0, 3]);
        let original = step(&mut kv, vec![0, 1]);
        assert_eq!(forked, original, "{}", format.name());
    }
}

#[test]
fn bytes_per_token_and_capacity_follow_the_format() {
    // SmolLM2-135M shapes: 30 layers, 3 KV heads, head_dim 64.
    let bpt = |f| KvCache::new(KvLayout::single(30), 3, 64, 16, 1, f).bytes_per_token();
    let (f16, bf16, q8, q4) = (
        bpt(KvFormat::F16),
        bpt(KvFormat::Bf16),
        bpt(KvFormat::Q8_0),
        bpt(KvFormat::Q4_0),
    );
    assert_eq!((f16, bf16, q8, q4), (23_040, 23_040, 12_240, 6_480));
    // Tokens that fit a fixed budget: q8_0 and q4_0 hold 64/34 and 64/18 times as many
    // as f16/bf16 (exactly, as integer ratios).
    assert_eq!(f16 * 34, q8 * 64);
    assert_eq!(bf16 * 18, q4 * 64);
    let budget = 23_040 * 34 * 18;
    let tokens = |b: usize| budget / b;
    assert_eq!(tokens(q8) * 34, tokens(f16) * 64);
    assert_eq!(tokens(q4) * 18, tokens(bf16) * 64);
    // The engine sizes its pool from the config and bytes_per_value; it must agree with
    // what the cache really takes.
    let model = tiny_model(1);
    for f in KvFormat::ALL {
        let planned = model.config.kv_bytes_per_token(f.bytes_per_value());
        let real = model.new_kv_cache(16, 1, f).bytes_per_token();
        assert_eq!(planned, real as f64, "{}", f.name());
    }
}

#[test]
fn format_names_round_trip() {
    for f in KvFormat::ALL {
        assert_eq!(KvFormat::parse(f.name()), Some(f));
    }
    let names: Vec<&str> = KvFormat::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["f16", "bf16", "q8_0", "q4_0"]);
    assert_eq!(KvFormat::parse("fp8"), None);
}
