//! Tiny synthetic GGUF models written in memory, and a plain reference forward pass.

pub mod reference;

use folio_gguf::{GgmlType, GgufWriter, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const EPS: f32 = 1e-5;
pub const BASE: f32 = 10000.0;
/// The tiny Gemma 3: layers alternate window / global (pattern 2), a 5-token window with
/// its own RoPE base, and final logit soft-capping switched on (as Gemma 2 files set it).
pub const GEMMA_WINDOW: usize = 5;
pub const GEMMA_PATTERN: usize = 2;
pub const GEMMA_BASE_WINDOW: f32 = 1000.0;
pub const GEMMA_SOFTCAP: f32 = 3.0;
/// The tiny Gemma 2's attention score cap (low enough to bend its scores).
pub const GEMMA2_ATTN_SOFTCAP: f32 = 1.5;

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
    moe_writer(sh, arch, None, ty_of, seed)
}

/// The experts of a tiny MoE model (`qwen2moe`, `qwen3moe`, or `llama` = Mixtral), and
/// ways to write it wrong.
#[derive(Clone, Copy)]
pub struct MoeShape {
    pub experts: usize,
    pub used: usize,
    pub ffn_exp: usize,
    /// Shared expert width (qwen2moe); 0 = none.
    pub shared: usize,
    /// Written as `expert_count` / `expert_used_count` instead of the true values.
    pub meta_experts: Option<u32>,
    pub meta_used: Option<u32>,
    /// A tensor name (`blk.N.x`) left out of the file.
    pub omit: Option<&'static str>,
}

impl MoeShape {
    pub const fn new(experts: usize, used: usize, ffn_exp: usize, shared: usize) -> MoeShape {
        MoeShape {
            experts,
            used,
            ffn_exp,
            shared,
            meta_experts: None,
            meta_used: None,
            omit: None,
        }
    }
}

/// [`build_with`], plus the expert tensors and keys of `moe` (the dense FFN tensors are
/// written too; a MoE model ignores them).
pub fn build_moe_with(
    sh: &Shape,
    arch: &str,
    moe: Option<&MoeShape>,
    ty_of: &dyn Fn(&str) -> GgmlType,
    seed: u64,
) -> Vec<u8> {
    moe_writer(sh, arch, moe, ty_of, seed).to_bytes()
}

/// The writer [`build_moe_with`] fills.
pub fn moe_writer(
    sh: &Shape,
    arch: &str,
    moe: Option<&MoeShape>,
    ty_of: &dyn Fn(&str) -> GgmlType,
    seed: u64,
) -> GgufWriter {
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
    if arch == "gemma2" {
        w.add_metadata(
            &k("attn_logit_softcapping"),
            Value::F32(GEMMA2_ATTN_SOFTCAP),
        );
    }
    if arch == "gemma3" || arch == "gemma2" {
        w.add_metadata(&k("attention.key_length"), Value::U32(sh.hd as u32));
        w.add_metadata(&k("attention.value_length"), Value::U32(sh.hd as u32));
        w.add_metadata(
            &k("attention.sliding_window"),
            Value::U32(GEMMA_WINDOW as u32),
        );
        w.add_metadata(
            &k("attention.sliding_window_pattern"),
            Value::U32(GEMMA_PATTERN as u32),
        );
        w.add_metadata(&k("rope.freq_base_swa"), Value::F32(GEMMA_BASE_WINDOW));
        w.add_metadata(&k("final_logit_softcapping"), Value::F32(GEMMA_SOFTCAP));
    }
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
        if arch.starts_with("qwen2") {
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
        if arch.starts_with("qwen3") || arch == "gemma3" {
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
        if arch == "gemma3" || arch == "gemma2" {
            let (a, f) = (n("post_attention_norm.weight"), n("post_ffw_norm.weight"));
            vec_(&mut w, &mut rng, &a, sh.d, 1.0, 0.2);
            vec_(&mut w, &mut rng, &f, sh.d, 1.0, 0.2);
        }
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
        if let Some(m) = moe {
            add_experts(&mut w, &mut rng, sh, m, l, ty_of);
        }
    }
    if let Some(m) = moe {
        let e = m.meta_experts.unwrap_or(m.experts as u32);
        w.add_metadata(&k("expert_count"), Value::U32(e));
        let u = m.meta_used.unwrap_or(m.used as u32);
        w.add_metadata(&k("expert_used_count"), Value::U32(u));
        w.add_metadata(
            &k("expert_feed_forward_length"),
            Value::U32(m.ffn_exp as u32),
        );
        if m.shared > 0 {
            w.add_metadata(
                &k("expert_shared_feed_forward_length"),
                Value::U32(m.shared as u32),
            );
        }
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
    if arch != "llama" && !arch.starts_with("gemma") {
        // Untied head for the Qwen shapes, tied for llama and gemma: both paths covered.
        mat(&mut w, &mut rng, "output.weight", sh.d, sh.vocab, s * 4.0);
    }
    w
}

fn add_experts(
    w: &mut GgufWriter,
    rng: &mut StdRng,
    sh: &Shape,
    m: &MoeShape,
    l: usize,
    ty_of: &dyn Fn(&str) -> GgmlType,
) {
    let (d, e, f) = (sh.d as u64, m.experts as u64, m.ffn_exp as u64);
    let s = 1.0 / (sh.d as f32).sqrt();
    let mut add = |w: &mut GgufWriter, name: String, dims: &[u64], ty: GgmlType, scale: f32| {
        let v = randn(rng, dims.iter().product::<u64>() as usize, scale);
        if m.omit != Some(&name[..]) {
            w.add_tensor_f32(&name, dims, ty, &v).expect("quantize");
        }
    };
    let n = |x: &str| format!("blk.{l}.{x}");
    // The router stays f32, as llama.cpp's quantizer leaves it.
    add(w, n("ffn_gate_inp.weight"), &[d, e], GgmlType::F32, s * 4.0);
    for (x, dims, scale) in [
        ("ffn_gate_exps.weight", [d, f, e], s * 2.0),
        ("ffn_up_exps.weight", [d, f, e], s * 2.0),
        ("ffn_down_exps.weight", [f, d, e], 1.0 / (f as f32).sqrt()),
    ] {
        add(w, n(x), &dims, ty_of(&n(x)), scale);
    }
    if m.shared > 0 {
        let sf = m.shared as u64;
        add(
            w,
            n("ffn_gate_inp_shexp.weight"),
            &[d],
            GgmlType::F32,
            s * 4.0,
        );
        for (x, dims, scale) in [
            ("ffn_gate_shexp.weight", [d, sf], s * 2.0),
            ("ffn_up_shexp.weight", [d, sf], s * 2.0),
            ("ffn_down_shexp.weight", [sf, d], 1.0 / (sf as f32).sqrt()),
        ] {
            add(w, n(x), &dims, ty_of(&n(x)), scale);
        }
    }
}
