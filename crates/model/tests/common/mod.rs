//! Shared by the model's tests: tiny synthetic GGUF models written here, and helpers.
#![allow(dead_code)]

use folio_gguf::{GgmlType, GgufWriter, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const EPS: f32 = 1e-5;
pub const BASE: f32 = 10000.0;

/// Dimensions of a tiny model.
pub struct Shape {
    pub d: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub hd: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub layers: usize,
    pub ctx: usize,
}

pub fn randn(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale)
        .collect()
}

pub fn prompt(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..vocab as u32)).collect()
}

/// Worst |a - b| relative to the reference row's RMS.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let rms = (b.iter().map(|v| v * v).sum::<f32>() / b.len() as f32).sqrt();
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
        / rms
}

/// The GGUF bytes of a random model of `arch` (`llama`, `qwen2` with QKV biases, `qwen3`
/// with per-head Q/K norms, `phi3` with fused QKV, fused gate-up and LongRoPE factors) with
/// every matrix stored as `ty`; llama ties its head to the embedding, the others have their
/// own (both paths covered).
pub fn build(sh: &Shape, arch: &str, ty: GgmlType, seed: u64) -> Vec<u8> {
    build_with(sh, arch, &|_| ty, seed)
}

/// [`build`] with each matrix's type chosen by its tensor name (mixed-type files).
pub fn build_with(sh: &Shape, arch: &str, ty_of: &dyn Fn(&str) -> GgmlType, seed: u64) -> Vec<u8> {
    writer(sh, arch, ty_of, seed).to_bytes()
}

/// The writer [`build_with`] fills, for tests that change a key or add a tensor before
/// writing (`add_metadata` replaces a key in place).
pub fn writer(sh: &Shape, arch: &str, ty_of: &dyn Fn(&str) -> GgmlType, seed: u64) -> GgufWriter {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String(arch.into()));
    let k = |s: &str| format!("{arch}.{s}");
    w.add_metadata(&k("block_count"), Value::U32(sh.layers as u32));
    w.add_metadata(&k("embedding_length"), Value::U32(sh.d as u32));
    w.add_metadata(&k("feed_forward_length"), Value::U32(sh.ffn as u32));
    w.add_metadata(&k("attention.head_count"), Value::U32(sh.heads as u32));
    w.add_metadata(
        &k("attention.head_count_kv"),
        Value::U32(sh.kv_heads as u32),
    );
    w.add_metadata(&k("context_length"), Value::U32(sh.ctx as u32));
    w.add_metadata(&k("attention.layer_norm_rms_epsilon"), Value::F32(EPS));
    w.add_metadata(&k("rope.freq_base"), Value::F32(BASE));
    w.add_metadata(&k("vocab_size"), Value::U32(sh.vocab as u32));
    let s = 1.0 / (sh.d as f32).sqrt();
    let mat =
        |w: &mut GgufWriter, rng: &mut StdRng, name: &str, cols: usize, rows: usize, scale: f32| {
            let v = randn(rng, cols * rows, scale);
            w.add_tensor_f32(name, &[cols as u64, rows as u64], ty_of(name), &v)
                .expect("quantize");
        };
    let vec_ =
        |w: &mut GgufWriter, rng: &mut StdRng, name: &str, n: usize, base: f32, spread: f32| {
            let v: Vec<f32> = (0..n)
                .map(|_| base + (rng.gen::<f32>() * 2.0 - 1.0) * spread)
                .collect();
            w.add_tensor_f32(name, &[n as u64], GgmlType::F32, &v)
                .expect("f32");
        };
    mat(&mut w, &mut rng, "token_embd.weight", sh.d, sh.vocab, 1.0);
    for l in 0..sh.layers {
        let n = |x: &str| format!("blk.{l}.{x}");
        vec_(&mut w, &mut rng, &n("attn_norm.weight"), sh.d, 1.0, 0.2);
        if arch == "phi3" {
            // Q, K and V fused, rows in that order.
            let rows = (sh.heads + 2 * sh.kv_heads) * sh.hd;
            mat(&mut w, &mut rng, &n("attn_qkv.weight"), sh.d, rows, s * 2.0);
        } else {
            mat(
                &mut w,
                &mut rng,
                &n("attn_q.weight"),
                sh.d,
                sh.heads * sh.hd,
                s * 2.0,
            );
            mat(
                &mut w,
                &mut rng,
                &n("attn_k.weight"),
                sh.d,
                sh.kv_heads * sh.hd,
                s * 2.0,
            );
            mat(
                &mut w,
                &mut rng,
                &n("attn_v.weight"),
                sh.d,
                sh.kv_heads * sh.hd,
                s,
            );
        }
        if arch == "qwen2" {
            vec_(
                &mut w,
                &mut rng,
                &n("attn_q.bias"),
                sh.heads * sh.hd,
                0.0,
                0.3,
            );
            vec_(
                &mut w,
                &mut rng,
                &n("attn_k.bias"),
                sh.kv_heads * sh.hd,
                0.0,
                0.3,
            );
            vec_(
                &mut w,
                &mut rng,
                &n("attn_v.bias"),
                sh.kv_heads * sh.hd,
                0.0,
                0.3,
            );
        }
        if arch == "qwen3" {
            vec_(&mut w, &mut rng, &n("attn_q_norm.weight"), sh.hd, 1.0, 0.3);
            vec_(&mut w, &mut rng, &n("attn_k_norm.weight"), sh.hd, 1.0, 0.3);
        }
        mat(
            &mut w,
            &mut rng,
            &n("attn_output.weight"),
            sh.heads * sh.hd,
            sh.d,
            s,
        );
        vec_(&mut w, &mut rng, &n("ffn_norm.weight"), sh.d, 1.0, 0.2);
        if arch == "phi3" {
            // Gate then up, fused in ffn_up.
            mat(
                &mut w,
                &mut rng,
                &n("ffn_up.weight"),
                sh.d,
                2 * sh.ffn,
                s * 2.0,
            );
        } else {
            mat(
                &mut w,
                &mut rng,
                &n("ffn_gate.weight"),
                sh.d,
                sh.ffn,
                s * 2.0,
            );
            mat(&mut w, &mut rng, &n("ffn_up.weight"), sh.d, sh.ffn, s * 2.0);
        }
        mat(
            &mut w,
            &mut rng,
            &n("ffn_down.weight"),
            sh.ffn,
            sh.d,
            1.0 / (sh.ffn as f32).sqrt(),
        );
    }
    if arch == "phi3" {
        // LongRoPE factors (one per pair); the original context is the context, so the
        // short ones apply unless a test lowers it.
        w.add_metadata(&k("rope.dimension_count"), Value::U32(sh.hd as u32));
        w.add_metadata(
            &k("rope.scaling.original_context_length"),
            Value::U32(sh.ctx as u32),
        );
        w.add_metadata(&k("rope.scaling.attn_factor"), Value::F32(1.0));
        vec_(
            &mut w,
            &mut rng,
            "rope_factors_short.weight",
            sh.hd / 2,
            1.5,
            0.5,
        );
        vec_(
            &mut w,
            &mut rng,
            "rope_factors_long.weight",
            sh.hd / 2,
            6.0,
            2.0,
        );
    }
    vec_(&mut w, &mut rng, "output_norm.weight", sh.d, 1.0, 0.2);
    if arch != "llama" {
        // Untied head for the Qwen shapes, tied for llama: both paths get covered.
        mat(&mut w, &mut rng, "output.weight", sh.d, sh.vocab, s * 4.0);
    }
    w
}
