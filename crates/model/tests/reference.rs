//! The forward pass against a plain, obviously-correct f32 implementation written here,
//! on tiny synthetic GGUF models (llama, qwen2, qwen3 shapes; every weight type), and
//! batched forward of several sequences equal to each sequence alone.

mod common;

use common::{
    build, build_moe_with, build_with, prompt as prompt_in, rel_err, writer, MoeShape, Shape, BASE,
    EPS, GEMMA2_ATTN_SOFTCAP, GEMMA_BASE_WINDOW, GEMMA_PATTERN, GEMMA_SOFTCAP, GEMMA_WINDOW,
};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

const D: usize = 256;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HD: usize = 64;
const FFN: usize = 512;
const VOCAB: usize = 300;
const LAYERS: usize = 2;
const CTX: usize = 128;
fn prompt(seed: u64, n: usize) -> Vec<u32> {
    prompt_in(seed, n, VOCAB)
}

const SHAPE: Shape = Shape {
    d: D,
    heads: HEADS,
    kv_heads: KV_HEADS,
    hd: HD,
    ffn: FFN,
    vocab: VOCAB,
    layers: LAYERS,
    ctx: CTX,
};

// ---- the plain reference ----------------------------------------------------------

fn rmsnorm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * b).collect()
}

/// y[r] = Σ_c W[r][c] x[c]; W stored row-major [rows][cols] as GGUF dims [cols, rows].
fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
    let cols = x.len();
    (0..rows)
        .map(|r| (0..cols).map(|c| w[r * cols + c] * x[c]).sum())
        .collect()
}

/// RoPE over whole heads; pair i's angle divided by `factors[i]` when given (Llama 3's
/// `rope_freqs`, Phi-3's LongRoPE factors, as ggml's `rope_ext` uses them). `yarn`:
/// (factor, original context) as HF's `_compute_yarn_parameters` defines YaRN: pairs below
/// the correction range keep their angle, pairs above it are divided by the factor, a
/// linear ramp between, and cos/sin scaled by `0.1 ln(factor) + 1`. `base`: the layer's
/// RoPE base (Gemma's window layers have their own).
fn rope(
    x: &mut [f32],
    n_heads: usize,
    pos: usize,
    neox: bool,
    factors: Option<&[f32]>,
    yarn: Option<(f32, f32)>,
    base: f32,
) {
    let corr = |rot: f32| {
        HD as f32 * (yarn.map_or(1.0, |y| y.1) / (rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let (low, high) = (
        corr(32.0).floor().max(0.0),
        corr(1.0).ceil().min(HD as f32 - 1.0),
    );
    for h in 0..n_heads {
        let v = &mut x[h * HD..(h + 1) * HD];
        for i in 0..HD / 2 {
            let ff = factors.map_or(1.0, |f| f[i]);
            let mut theta = pos as f32 * base.powf(-2.0 * i as f32 / HD as f32) / ff;
            let mut mscale = 1.0;
            if let Some((factor, _)) = yarn {
                let extrapolate =
                    1.0 - ((i as f32 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                theta = theta / factor * (1.0 - extrapolate) + theta * extrapolate;
                mscale = 0.1 * factor.ln() + 1.0;
            }
            let (s, c) = theta.sin_cos();
            let (s, c) = (s * mscale, c * mscale);
            let (a, b) = if neox {
                (i, i + HD / 2)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (v[a], v[b]);
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/// `down(silu(gate h) · up h)` for row-major `[ff][D]` gate/up and `[D][ff]` down.
fn swiglu(gate: &[f32], up: &[f32], down: &[f32], h: &[f32], ff: usize) -> Vec<f32> {
    let g = matvec(gate, h, ff);
    let u = matvec(up, h, ff);
    let a: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    matvec(down, &a, D)
}

/// Gemma's FFN: tanh-GELU of the gate times up, then down.
fn geglu(gate: &[f32], up: &[f32], down: &[f32], h: &[f32], ff: usize) -> Vec<f32> {
    let g = matvec(gate, h, ff);
    let u = matvec(up, h, ff);
    let a: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(&g, u)| 0.5 * g * (1.0 + (0.797_884_6 * g * (1.0 + 0.044715 * g * g)).tanh()) * u)
        .collect();
    matvec(down, &a, D)
}

/// The MoE FFN of layer `l` for one normed row `h`, the naive way (llama.cpp's
/// `build_moe_ffn`): softmax over all experts, the top k, renormalized unless qwen2moe, the
/// weighted sum of their FFNs, plus qwen2moe's sigmoid-gated shared expert. Also returns
/// the token's experts and the router-logit gap between the last one chosen and the first
/// one not. `None` for a dense layer. `forced`: use these experts instead of the top k
/// (still weighted by their softmax probabilities, renormalized as the arch does).
fn moe_ffn(
    f: &GgufFile,
    arch: &str,
    l: usize,
    h: &[f32],
    forced: Option<&[usize]>,
) -> Option<(Vec<f32>, Vec<usize>, f32)> {
    let n = |x: &str| format!("blk.{l}.{x}");
    let t = |x: &str| f.tensor_f32(&n(x)).expect(x);
    let router = f.tensor_f32(&n("ffn_gate_inp.weight")).ok()?;
    let e = router.len() / D;
    let key = |k: &str| f.get_u64(&format!("{arch}.{k}")).expect(k) as usize;
    let (k, ff) = (key("expert_used_count"), key("expert_feed_forward_length"));
    let logits = matvec(&router, h, e);
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let z: f32 = logits.iter().map(|v| (v - m).exp()).sum();
    let probs: Vec<f32> = logits.iter().map(|v| (v - m).exp() / z).collect();
    let mut idx: Vec<usize> = (0..e).collect();
    idx.sort_by(|&a, &b| probs[b].partial_cmp(&probs[a]).unwrap());
    let margin = if k < e {
        logits[idx[k - 1]] - logits[idx[k]]
    } else {
        f32::INFINITY
    };
    idx.truncate(k);
    let chosen = idx.clone();
    if let Some(fx) = forced {
        idx = fx.to_vec();
    }
    let mut ws: Vec<f32> = idx.iter().map(|&i| probs[i]).collect();
    if arch != "qwen2moe" {
        let sum: f32 = ws.iter().sum();
        ws.iter_mut().for_each(|w| *w /= sum);
    }
    let (g, u, dn) = (
        t("ffn_gate_exps.weight"),
        t("ffn_up_exps.weight"),
        t("ffn_down_exps.weight"),
    );
    let per = ff * D;
    let mut y = vec![0f32; D];
    for (&x, &w) in idx.iter().zip(&ws) {
        let r = x * per..(x + 1) * per;
        let o = swiglu(&g[r.clone()], &u[r.clone()], &dn[r], h, ff);
        y.iter_mut().zip(o).for_each(|(y, o)| *y += w * o);
    }
    if f.tensor(&n("ffn_gate_shexp.weight")).is_some() {
        let down = t("ffn_down_shexp.weight");
        let o = swiglu(
            &t("ffn_gate_shexp.weight"),
            &t("ffn_up_shexp.weight"),
            &down,
            h,
            down.len() / D,
        );
        let zg: f32 = t("ffn_gate_inp_shexp.weight")
            .iter()
            .zip(h)
            .map(|(a, b)| a * b)
            .sum();
        let gate = 1.0 / (1.0 + (-zg).exp());
        y.iter_mut().zip(o).for_each(|(y, o)| *y += gate * o);
    }
    Some((y, chosen, margin))
}

/// Logits at every position of one sequence, computed from scratch.
fn reference(f: &GgufFile, arch: &str, tokens: &[u32]) -> Vec<Vec<f32>> {
    reference_routed(f, arch, tokens, None).0
}

/// Each position's experts, `[layer][pos]`, and each one's routing margin (see
/// [`moe_ffn`]).
struct Routing {
    experts: Vec<Vec<Vec<usize>>>,
    margins: Vec<Vec<f32>>,
}

/// [`reference`], and for MoE models the routing it chose; `forced` (`[layer][pos]`) makes
/// it run those experts instead.
fn reference_routed(
    f: &GgufFile,
    arch: &str,
    tokens: &[u32],
    forced: Option<&[Vec<Vec<usize>>]>,
) -> (Vec<Vec<f32>>, Routing) {
    let mut routes = Routing {
        experts: vec![Vec::new(); LAYERS],
        margins: vec![Vec::new(); LAYERS],
    };
    let t = |n: &str| f.tensor_f32(n).expect(n);
    let emb = t("token_embd.weight");
    let neox = arch != "llama";
    // Gemma 3 and Gemma 2 share the block; Gemma 2 has no Q/K norms and soft-caps scores.
    let gemma = arch.starts_with("gemma");
    let mistral_window = match arch {
        "llama" => f
            .get_u64("llama.attention.sliding_window")
            .ok()
            .map(|w| w as usize),
        _ => None,
    };
    // Gemma scales the embeddings by √d.
    let embed_scale = if gemma { (D as f32).sqrt() } else { 1.0 };
    // Phi-3's LongRoPE: the long factors when the context exceeds the original one.
    let key = |k: &str| f.get_u64(&format!("{arch}.{k}")).ok();
    let long = key("context_length") > key("rope.scaling.original_context_length");
    let longrope = if long {
        "rope_factors_long.weight"
    } else {
        "rope_factors_short.weight"
    };
    let factors = ["rope_freqs.weight", longrope]
        .into_iter()
        .find(|n| f.tensor(n).is_some())
        .map(t);
    let yarn = (f.get_str(&format!("{arch}.rope.scaling.type")).ok() == Some("yarn")).then(|| {
        let factor = f.get_f32(&format!("{arch}.rope.scaling.factor")).unwrap();
        (
            factor,
            key("rope.scaling.original_context_length").unwrap() as f32,
        )
    });
    let mut xs: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&id| {
            emb[id as usize * D..(id as usize + 1) * D]
                .iter()
                .map(|v| v * embed_scale)
                .collect()
        })
        .collect();
    for l in 0..LAYERS {
        let n = |x: &str| format!("blk.{l}.{x}");
        // Gemma: of every GEMMA_PATTERN layers all but the last see only the window.
        // A Mistral-style file (llama with `attention.sliding_window`) windows every layer.
        let window = match mistral_window {
            Some(_) => true,
            None => gemma && l % GEMMA_PATTERN < GEMMA_PATTERN - 1,
        };
        // The tiny Gemmas' files set `rope.freq_base_swa` for their window layers.
        let base = if window && gemma {
            GEMMA_BASE_WINDOW
        } else {
            BASE
        };
        let (wq, wk, wv) = if arch == "phi3" {
            // Rows Q, then K, then V.
            let qkv = t(&n("attn_qkv.weight"));
            let (q, kv) = (HEADS * HD * D, KV_HEADS * HD * D);
            (
                qkv[..q].to_vec(),
                qkv[q..q + kv].to_vec(),
                qkv[q + kv..].to_vec(),
            )
        } else {
            (
                t(&n("attn_q.weight")),
                t(&n("attn_k.weight")),
                t(&n("attn_v.weight")),
            )
        };
        let wo = t(&n("attn_output.weight"));
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        let mut qs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = rmsnorm(x, &t(&n("attn_norm.weight")));
            let mut q = matvec(&wq, &h, HEADS * HD);
            let mut k = matvec(&wk, &h, KV_HEADS * HD);
            let mut v = matvec(&wv, &h, KV_HEADS * HD);
            if arch.starts_with("qwen2") {
                for (a, b) in q.iter_mut().zip(t(&n("attn_q.bias"))) {
                    *a += b;
                }
                for (a, b) in k.iter_mut().zip(t(&n("attn_k.bias"))) {
                    *a += b;
                }
                for (a, b) in v.iter_mut().zip(t(&n("attn_v.bias"))) {
                    *a += b;
                }
            }
            if arch.starts_with("qwen3") || arch == "gemma3" {
                let (qn, kn) = (t(&n("attn_q_norm.weight")), t(&n("attn_k_norm.weight")));
                for hh in 0..HEADS {
                    let r = rmsnorm(&q[hh * HD..(hh + 1) * HD], &qn);
                    q[hh * HD..(hh + 1) * HD].copy_from_slice(&r);
                }
                for hh in 0..KV_HEADS {
                    let r = rmsnorm(&k[hh * HD..(hh + 1) * HD], &kn);
                    k[hh * HD..(hh + 1) * HD].copy_from_slice(&r);
                }
            }
            rope(&mut q, HEADS, pos, neox, factors.as_deref(), yarn, base);
            rope(&mut k, KV_HEADS, pos, neox, factors.as_deref(), yarn, base);
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for pos in 0..xs.len() {
            let mut o = vec![0f32; HEADS * HD];
            for h in 0..HEADS {
                let kh = h / (HEADS / KV_HEADS);
                let q = &qs[pos][h * HD..(h + 1) * HD];
                let first = if window {
                    (pos + 1).saturating_sub(mistral_window.unwrap_or(GEMMA_WINDOW))
                } else {
                    0
                };
                let sc: Vec<f32> = (0..=pos)
                    .map(|j| {
                        if j < first {
                            return f32::NEG_INFINITY;
                        }
                        let s = q
                            .iter()
                            .zip(&ks[j][kh * HD..(kh + 1) * HD])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            / (HD as f32).sqrt();
                        match arch {
                            "gemma2" => (s / GEMMA2_ATTN_SOFTCAP).tanh() * GEMMA2_ATTN_SOFTCAP,
                            _ => s,
                        }
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = sc.iter().map(|s| (s - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for j in 0..=pos {
                    for d in 0..HD {
                        o[h * HD + d] += e[j] / z * vs[j][kh * HD + d];
                    }
                }
            }
            let mut proj = matvec(&wo, &o, D);
            if gemma {
                proj = rmsnorm(&proj, &t(&n("post_attention_norm.weight")));
            }
            for (a, b) in xs[pos].iter_mut().zip(proj) {
                *a += b;
            }
            let h = rmsnorm(&xs[pos], &t(&n("ffn_norm.weight")));
            let fx = forced.map(|r| &r[l][pos][..]);
            let down = match moe_ffn(f, arch, l, &h, fx) {
                Some((y, experts, margin)) => {
                    routes.experts[l].push(experts);
                    routes.margins[l].push(margin);
                    y
                }
                None => {
                    let (g, u) = if arch == "phi3" {
                        // Gate rows then up rows, fused in ffn_up.
                        let gu = t(&n("ffn_up.weight"));
                        (gu[..FFN * D].to_vec(), gu[FFN * D..].to_vec())
                    } else {
                        (t(&n("ffn_gate.weight")), t(&n("ffn_up.weight")))
                    };
                    let down = t(&n("ffn_down.weight"));
                    if gemma {
                        let y = geglu(&g, &u, &down, &h, FFN);
                        rmsnorm(&y, &t(&n("post_ffw_norm.weight")))
                    } else {
                        swiglu(&g, &u, &down, &h, FFN)
                    }
                }
            };
            for (x, d) in xs[pos].iter_mut().zip(down) {
                *x += d;
            }
        }
    }
    let head = if f.tensor("output.weight").is_some() {
        t("output.weight")
    } else {
        emb
    };
    let on = t("output_norm.weight");
    let logits = xs
        .iter()
        .map(|x| {
            let logits = matvec(&head, &rmsnorm(x, &on), VOCAB);
            if gemma {
                let c = GEMMA_SOFTCAP;
                logits.iter().map(|v| c * (v / c).tanh()).collect()
            } else {
                logits
            }
        })
        .collect();
    (logits, routes)
}

/// Float weights run an f32 kernel: near-exact. Quantized weights run against 8-bit
/// quantized activations (as llama.cpp does), which bounds the error at a few percent of
/// the logits' RMS after two layers.
fn tolerance(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 2e-3,
        _ => 0.1,
    }
}

fn check(arch: &str, ty: GgmlType) {
    check_file(arch, ty, build(&SHAPE, arch, ty, 42));
}

fn check_file(arch: &str, ty: GgmlType, tiny: Vec<u8>) {
    let tol = tolerance(ty);
    let f = GgufFile::from_bytes(tiny).expect("valid tiny gguf");
    let model = Model::from_gguf(&f).expect("load tiny model");
    let toks = prompt(1, 19);
    let want = reference(&f, arch, &toks);
    // Prefill 12 tokens, then a 5-token chunk, then 2 single decode steps: covers chunked
    // attention over cached context as well as decode.
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let table: Vec<u32> = vec![7, 2, 5, 0, 1, 3];
    let pool = ThreadPool::global();
    let mut pos = 0;
    for len in [12usize, 5, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, table.clone(), len);
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        for i in 0..len {
            let e = rel_err(&logits[i * VOCAB..(i + 1) * VOCAB], &want[pos + i]);
            assert!(
                e < tol,
                "{arch} {ty:?}: position {} logits off by {e} (tolerance {tol})",
                pos + i
            );
        }
        pos += len;
    }
}

// The reference dequantizes the same stored weights, so weight quantization itself is not
// in the error; see `tolerance`.
#[test]
fn llama_every_type_matches_reference() {
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        check("llama", ty);
    }
}

/// A Q4_K_M-like file: Q4_K matrices with Q6_K V projections, FFN down and output (the
/// fused Q/K/V then stacks parts of two types).
#[test]
fn mixed_types_match_reference() {
    let ty_of = |name: &str| {
        if name.contains("attn_v") || name.contains("ffn_down") || name == "output.weight" {
            GgmlType::Q6_K
        } else if name.contains("attn_k") {
            GgmlType::Q5_0
        } else {
            GgmlType::Q4_K
        }
    };
    for arch in ["llama", "qwen2"] {
        check_file(arch, GgmlType::Q4_K, build_with(&SHAPE, arch, &ty_of, 42));
    }
}

/// Llama 3.1-style frequency factors (`rope_freqs.weight`, 1 for the fast pairs up to 8 for
/// the slow ones) through the whole model; without them the logits differ.
#[test]
fn llama_rope_freqs_match_reference() {
    let factors: Vec<f32> = (0..HD / 2)
        .map(|i| 1.0 + 7.0 * (i as f32 / (HD / 2 - 1) as f32).powi(2))
        .collect();
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        let mut w = writer(&SHAPE, "llama", &|_| ty, 42);
        w.add_tensor_f32(
            "rope_freqs.weight",
            &[HD as u64 / 2],
            GgmlType::F32,
            &factors,
        )
        .expect("f32");
        check_file("llama", ty, w.to_bytes());
    }
    // The factors matter: the model without them is off against this reference.
    let mut w = writer(&SHAPE, "llama", &|_| GgmlType::F32, 42);
    w.add_tensor_f32(
        "rope_freqs.weight",
        &[HD as u64 / 2],
        GgmlType::F32,
        &factors,
    )
    .expect("f32");
    let with = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let plain = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, 42)).unwrap();
    let toks = prompt(1, 19);
    let want = reference(&with, "llama", &toks);
    let model = Model::from_gguf(&plain).unwrap();
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, (0..5).collect(), toks.len());
    let got = model.forward(&b, &mut kv, ThreadPool::global()).unwrap();
    let e = rel_err(&got[18 * VOCAB..], &want[18]);
    assert!(e > 1e-2, "factors made no difference ({e})");
}

/// YaRN (factor 4 over an original context of 1024: pairs 5..18 on the ramp) through the
/// whole model, llama and NeoX pairings, against HF's definition of it.
#[test]
fn yarn_matches_reference() {
    for arch in ["llama", "qwen2"] {
        let mut w = writer(&SHAPE, arch, &|_| GgmlType::F32, 42);
        let k = |s: &str| format!("{arch}.{s}");
        w.add_metadata(
            &k("rope.scaling.type"),
            folio_gguf::Value::String("yarn".into()),
        )
        .add_metadata(&k("rope.scaling.factor"), folio_gguf::Value::F32(4.0))
        .add_metadata(
            &k("rope.scaling.original_context_length"),
            folio_gguf::Value::U32(1024),
        );
        check_file(arch, GgmlType::F32, w.to_bytes());
    }
}

/// A wrong-length `rope_freqs` is an error naming the tensor and the key.
#[test]
fn rope_freqs_of_wrong_length_are_refused() {
    let mut w = writer(&SHAPE, "llama", &|_| GgmlType::F32, 42);
    w.add_tensor_f32("rope_freqs.weight", &[HD as u64], GgmlType::F32, &[1.0; HD])
        .expect("f32");
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let e = Model::from_gguf(&f).err().expect("refused").to_string();
    assert!(
        e.contains("rope_freqs.weight") && e.contains("llama.rope.dimension_count / 2 = 32"),
        "{e}"
    );
}

#[test]
fn qwen2_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0] {
        check("qwen2", ty);
    }
}

#[test]
fn qwen3_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_K, GgmlType::Q6_K] {
        check("qwen3", ty);
    }
}

/// Gemma 3: √d embeddings, Q/K norms, post-norms, GeGLU, a window layer (5 tokens, its own
/// RoPE base) and a global one, soft-capped logits; 19 tokens, so the window matters.
#[test]
fn gemma3_matches_reference() {
    for ty in [
        GgmlType::F32,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
    ] {
        check("gemma3", ty);
    }
}

#[test]
fn phi3_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_K, GgmlType::Q8_0] {
        check("phi3", ty);
    }
    // A context past the original one takes the long LongRoPE factors.
    let mut w = writer(&SHAPE, "phi3", &|_| GgmlType::F32, 42);
    w.add_metadata(
        "phi3.rope.scaling.original_context_length",
        folio_gguf::Value::U32(CTX as u32 / 4),
    );
    check_file("phi3", GgmlType::F32, w.to_bytes());
}

/// Gemma 2: Gemma 3's block without Q/K norms, attention scores soft-capped (a cap of 1.5
/// bends this model's scores), a window layer and a global one.
#[test]
fn gemma2_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        check("gemma2", ty);
    }
}

/// Mistral: a llama file with `attention.sliding_window` attends through a 6-token window
/// in every layer (19 tokens: the window matters from position 6 on).
#[test]
fn mistral_sliding_window_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_0] {
        let mut w = writer(&SHAPE, "llama", &|_| ty, 42);
        w.add_metadata("llama.attention.sliding_window", folio_gguf::Value::U32(6));
        let bytes = w.to_bytes();
        let f = GgufFile::from_bytes(bytes.clone()).expect("tiny gguf");
        let cfg = folio_model::ModelConfig::from_gguf(&f).expect("config");
        assert_eq!(cfg.sliding_window, Some(6));
        assert!(cfg.window_layers.iter().all(|&w| w));
        check_file("llama", ty, bytes);
    }
}

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

// ---- mixture of experts -----------------------------------------------------------

/// qwen2moe: 8 experts, 2 used (weights not renormalized), a sigmoid-gated shared expert.
const QWEN2MOE: MoeShape = MoeShape::new(8, 2, 256, 512);
/// qwen3moe: 8 experts, 3 used, renormalized top-k, QK norm.
const QWEN3MOE: MoeShape = MoeShape::new(8, 3, 256, 0);
/// Mixtral (llama + expert_count): 4 experts, 2 used, renormalized.
const MIXTRAL: MoeShape = MoeShape::new(4, 2, 512, 0);

fn moe_file(arch: &str, m: &MoeShape, ty: GgmlType, seed: u64) -> Vec<u8> {
    build_moe_with(&SHAPE, arch, Some(m), &|_| ty, seed)
}

/// Quantized weights run on 8-bit activations: a token whose k-th and (k+1)-th router
/// logits are within that noise may pick another expert than the f32 reference (a
/// different, equally valid FFN, and a large logit difference that says nothing about the
/// arithmetic). So the reference runs the experts the model chose, and the model must have
/// chosen the reference's own wherever its margin is clear of the noise.
const CLEAR_MARGIN: f32 = 0.05;

fn check_moe(arch: &str, m: &MoeShape, ty_of: &dyn Fn(&str) -> GgmlType, ty: GgmlType) {
    let tol = tolerance(ty);
    let tiny = build_moe_with(&SHAPE, arch, Some(m), ty_of, 42);
    let f = GgufFile::from_bytes(tiny).expect("valid tiny gguf");
    let model = Model::from_gguf(&f).expect("load tiny model");
    let toks = prompt(1, 19);
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let table: Vec<u32> = vec![7, 2, 5, 0, 1, 3];
    let pool = ThreadPool::global();
    let (mut pos, mut got) = (0, Vec::new());
    let mut chosen = vec![Vec::new(); LAYERS];
    for len in [12usize, 5, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, table.clone(), len);
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        got.extend(logits.chunks_exact(VOCAB).map(|r| r.to_vec()));
        let st = model.moe_stats().expect("a MoE model");
        for (c, e) in chosen.iter_mut().zip(&st.last_experts) {
            c.extend(e.chunks_exact(m.used).map(|x| x.to_vec()));
        }
        pos += len;
    }
    let (want, routing) = reference_routed(&f, arch, &toks, Some(&chosen));
    for (l, layer) in chosen.iter().enumerate() {
        for (p, experts) in layer.iter().enumerate() {
            if routing.margins[l][p] > CLEAR_MARGIN || tol < 0.01 {
                // The same set (the order between chosen experts is not a margin).
                let sorted = |v: &[usize]| {
                    let mut v = v.to_vec();
                    v.sort_unstable();
                    v
                };
                assert_eq!(
                    sorted(experts),
                    sorted(&routing.experts[l][p]),
                    "{arch} {ty:?}: layer {l} position {p} routed differently"
                );
            }
        }
    }
    for (p, (g, w)) in got.iter().zip(&want).enumerate() {
        let e = rel_err(g, w);
        assert!(
            e < tol,
            "{arch} {ty:?}: position {p} logits off by {e} (tolerance {tol})"
        );
    }
}

#[test]
fn qwen2moe_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        check_moe("qwen2moe", &QWEN2MOE, &|_| ty, ty);
    }
}

#[test]
fn qwen3moe_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q6_K, GgmlType::Q4_0] {
        check_moe("qwen3moe", &QWEN3MOE, &|_| ty, ty);
    }
}

#[test]
fn mixtral_matches_reference() {
    for ty in [GgmlType::F32, GgmlType::Q4_K] {
        check_moe("llama", &MIXTRAL, &|_| ty, ty);
    }
    // Mixed expert types: Q6_K down projections, Q4_K gate/up (stacked per expert).
    let ty_of = |name: &str| {
        if name.contains("down") {
            GgmlType::Q6_K
        } else if name.contains("up_exps") {
            GgmlType::Q5_K
        } else {
            GgmlType::Q4_K
        }
    };
    check_moe("llama", &MIXTRAL, &ty_of, GgmlType::Q4_K);
}

/// Rows each expert gets in a step, `[layer][expert]`, from the reference's routing of the
/// step's positions `(sequence, position)`.
fn expected_rows(routes: &[Routing], step: &[(usize, usize)], n_exp: usize) -> Vec<Vec<usize>> {
    (0..LAYERS)
        .map(|l| {
            let mut rows = vec![0; n_exp];
            for &(s, p) in step {
                for &e in &routes[s].experts[l][p] {
                    rows[e] += 1;
                }
            }
            rows
        })
        .collect()
}

/// 16 sequences of different prompts, prefilled in one batch then decoded one token each in
/// one batch, give the same logits as each sequence alone; each step reads every expert
/// that got rows exactly once and no other, with the rows the reference's routing gives.
#[test]
fn moe_batched_equals_alone_and_reads_each_expert_once() {
    let pool = ThreadPool::global();
    for (arch, m, ty) in [
        ("qwen3moe", QWEN3MOE, GgmlType::F32),
        ("qwen2moe", QWEN2MOE, GgmlType::Q4_K),
        ("llama", MIXTRAL, GgmlType::Q8_0),
    ] {
        let f = GgufFile::from_bytes(moe_file(arch, &m, ty, 7)).expect("valid tiny gguf");
        let model = Model::from_gguf(&f).expect("load");
        let prompts: Vec<Vec<u32>> = (0..16)
            .map(|i| prompt(100 + i as u64, (i * 5) % 13 + 1))
            .collect();
        let next: Vec<u32> = (0..16).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
        let table = |i: usize| (i as u32 * 8..(i as u32 + 1) * 8).collect::<Vec<u32>>();
        // Alone: prefill then one decode step, each sequence in its own cache.
        let mut alone = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
            let mut b = ForwardBatch::new();
            b.push(p, 0, (0..8).collect(), 1);
            let pre = model.forward(&b, &mut kv, pool).expect("prefill");
            let mut b = ForwardBatch::new();
            b.push(&[next[i]], p.len(), (0..8).collect(), 1);
            alone.push((pre, model.forward(&b, &mut kv, pool).expect("decode")));
        }
        let routes: Vec<_> = prompts
            .iter()
            .zip(&next)
            .map(|(p, &t)| {
                let mut all = p.clone();
                all.push(t);
                reference_routed(&f, arch, &all, None).1
            })
            .collect();
        let mut kv = model.new_kv_cache(4, 16 * 8, KvFormat::F16);
        for decode in [false, true] {
            let mut b = ForwardBatch::new();
            let mut step = Vec::new();
            for (i, p) in prompts.iter().enumerate() {
                if decode {
                    b.push(&[next[i]], p.len(), table(i), 1);
                    step.push((i, p.len()));
                } else {
                    b.push(p, 0, table(i), 1);
                    step.extend((0..p.len()).map(|j| (i, j)));
                }
            }
            let before = model.moe_stats().expect("a MoE model");
            let together = model.forward(&b, &mut kv, pool).expect("forward");
            let after = model.moe_stats().expect("a MoE model");
            for (i, (pre, dec)) in alone.iter().enumerate() {
                let want = if decode { dec } else { pre };
                assert_eq!(
                    &together[i * VOCAB..(i + 1) * VOCAB],
                    &want[..],
                    "{arch} {ty:?}: sequence {i} differs when batched (decode: {decode})"
                );
            }
            for l in 0..LAYERS {
                let rows = &after.last_rows[l];
                assert_eq!(
                    rows.iter().sum::<usize>(),
                    step.len() * m.used,
                    "{arch} layer {l}"
                );
                assert_eq!(rows.len(), m.experts);
                for (e, &r) in rows.iter().enumerate() {
                    let reads = after.reads[l][e] - before.reads[l][e];
                    assert_eq!(
                        reads,
                        (r > 0) as u64,
                        "{arch} layer {l} expert {e}: {reads} reads for {r} rows"
                    );
                }
            }
            if ty == GgmlType::F32 {
                // Float weights: the model routes exactly as the reference.
                assert_eq!(
                    after.last_rows,
                    expected_rows(&routes, &step, m.experts),
                    "{arch}: rows per expert (decode: {decode})"
                );
            }
            let bound = model.weights.bytes_per_step();
            assert!(after.last_step_weight_bytes <= bound);
            if after.last_active_experts() < LAYERS * m.experts {
                assert!(after.last_step_weight_bytes < bound);
            }
        }
    }
}

#[test]
fn bad_moe_metadata_is_an_error_naming_it() {
    let err = |arch: &str, m: MoeShape| match Model::from_gguf(
        &GgufFile::from_bytes(moe_file(arch, &m, GgmlType::F32, 1)).expect("valid gguf"),
    ) {
        Ok(_) => panic!("{arch}: loaded a bad MoE file"),
        Err(e) => e.to_string(),
    };
    let cases: [(&str, MoeShape, &str); 7] = [
        (
            "qwen3moe",
            MoeShape {
                meta_used: Some(9),
                ..QWEN3MOE
            },
            "qwen3moe.expert_used_count",
        ),
        (
            "llama",
            MoeShape {
                meta_used: Some(0),
                ..MIXTRAL
            },
            "llama.expert_used_count",
        ),
        (
            "qwen3moe",
            MoeShape {
                meta_experts: Some(0),
                ..QWEN3MOE
            },
            "qwen3moe.expert_count",
        ),
        (
            "qwen2moe",
            MoeShape {
                meta_experts: Some(6),
                ..QWEN2MOE
            },
            "blk.0.ffn_gate_inp.weight",
        ),
        (
            "qwen3moe",
            MoeShape {
                omit: Some("blk.1.ffn_down_exps.weight"),
                ..QWEN3MOE
            },
            "blk.1.ffn_down_exps.weight",
        ),
        (
            "llama",
            MoeShape {
                omit: Some("blk.0.ffn_gate_inp.weight"),
                ..MIXTRAL
            },
            "blk.0.ffn_gate_inp.weight",
        ),
        (
            "qwen2moe",
            MoeShape {
                omit: Some("blk.0.ffn_gate_inp_shexp.weight"),
                ..QWEN2MOE
            },
            "blk.0.ffn_gate_inp_shexp.weight",
        ),
    ];
    for (arch, m, want) in cases {
        let e = err(arch, m);
        assert!(e.contains(want), "{arch}: error '{e}' does not name {want}");
    }
    // llama with expert_count 0 is the dense model.
    let dense = moe_file(
        "llama",
        &MoeShape {
            meta_experts: Some(0),
            ..MIXTRAL
        },
        GgmlType::F32,
        1,
    );
    let model = Model::from_gguf(&GgufFile::from_bytes(dense).expect("valid")).expect("dense");
    assert!(model.config.moe.is_none() && model.moe_stats().is_none());
}

// ---- LoRA adapters -------------------------------------------------------------------

/// `base` with every pair of `adapter` merged in at `scale`: `W + scale·(alpha/rank)·B·A`,
/// all tensors copied, merged ones written as F32.
fn merged(base: &GgufFile, adapter: &GgufFile, scale: f32) -> Vec<u8> {
    let mut w = folio_gguf::GgufWriter::new();
    for (k, v) in base.metadata() {
        w.add_metadata(k, v.clone());
    }
    let alpha = adapter.get_f32("adapter.lora.alpha").unwrap_or(0.0);
    for t in base.tensors() {
        let a_name = format!("{}.lora_a", t.name);
        if adapter.tensor(&a_name).is_none() {
            w.add_tensor(&t.name, &t.dims, t.ggml_type, base.tensor_data(t).to_vec());
            continue;
        }
        let (cols, rows) = (t.cols(), t.rows());
        let mut wm = base.tensor_f32(&t.name).unwrap();
        let a = adapter.tensor_f32(&a_name).unwrap();
        let b = adapter.tensor_f32(&format!("{}.lora_b", t.name)).unwrap();
        let rank = a.len() / cols;
        let s = scale
            * if alpha != 0.0 {
                alpha / rank as f32
            } else {
                1.0
            };
        for r in 0..rows {
            for c in 0..cols {
                let d: f64 = (0..rank)
                    .map(|k| b[r * rank + k] as f64 * a[k * cols + c] as f64)
                    .sum();
                wm[r * cols + c] += s * d as f32;
            }
        }
        w.add_tensor_f32(&t.name, &t.dims, GgmlType::F32, &wm)
            .unwrap();
    }
    w.to_bytes()
}

fn lora_of(
    model: &Model,
    seed: u64,
    rank: usize,
    alpha: f32,
) -> (GgufFile, folio_model::LoraAdapter) {
    let cfg = &model.config;
    let targets = folio_model::lora::default_targets(cfg);
    let bytes = folio_model::lora::random_adapter(cfg, &targets, rank, alpha, 0.05, seed)
        .unwrap()
        .to_bytes();
    let f = GgufFile::from_bytes(bytes).unwrap();
    let a = folio_model::LoraAdapter::from_gguf(&f, cfg, 64, seed).expect("adapter loads");
    (f, a)
}

/// Logits of `toks` through `model` (prefill 12, a 5-token chunk, then single tokens),
/// every position, under `lora`.
fn run_positions(model: &Model, toks: &[u32], lora: Option<folio_model::LoraSet>) -> Vec<Vec<f32>> {
    let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
    let pool = ThreadPool::global();
    let (mut pos, mut out) = (0, Vec::new());
    for len in [12usize, 5, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, vec![7, 2, 5, 0, 1, 3], len);
        b.seqs[0].lora = lora.clone();
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        out.extend(logits.chunks_exact(VOCAB).map(|r| r.to_vec()));
        pos += len;
    }
    out
}

/// With an adapter, folio's logits equal the plain f32 reference of the merged weights
/// `W + scale·B·A` (and differ clearly from the base model's), on llama (separate q/k/v,
/// gate/up) and phi3 (fused qkv and gate-up).
#[test]
fn lora_equals_merged_weights_reference() {
    for (arch, alpha, scale) in [
        ("llama", 16.0, 1.0),
        ("llama", 0.0, 0.5),
        ("phi3", 8.0, 2.0),
    ] {
        let f = GgufFile::from_bytes(build(&SHAPE, arch, GgmlType::F32, 42)).unwrap();
        let model = Model::from_gguf(&f).unwrap();
        let (af, adapter) = lora_of(&model, 9, 8, alpha);
        let set = folio_model::LoraSet::new(vec![(std::sync::Arc::new(adapter), scale)]);
        let toks = prompt(1, 19);
        let got = run_positions(&model, &toks, Some(set));
        let merged = GgufFile::from_bytes(merged(&f, &af, scale)).unwrap();
        let want = reference(&merged, arch, &toks);
        let base = reference(&f, arch, &toks);
        for (p, (g, w)) in got.iter().zip(&want).enumerate() {
            let e = rel_err(g, w);
            assert!(
                e < 2e-3,
                "{arch} alpha {alpha}: position {p} off the merged reference by {e}"
            );
            let moved = rel_err(w, &base[p]);
            assert!(
                moved > 0.05,
                "{arch}: the adapter barely moves position {p} ({moved})"
            );
        }
    }
}

/// One batch mixing rows of four adapters, two adapters at once, and none gives every
/// sequence exactly the logits it gets alone.
#[test]
fn mixed_adapter_batch_equals_each_alone() {
    let f = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::Q4_1, 3)).unwrap();
    let model = Model::from_gguf(&f).unwrap();
    let pool = ThreadPool::global();
    let adapters: Vec<_> = (0..4)
        .map(|i| std::sync::Arc::new(lora_of(&model, 100 + i, 4 + 2 * i as usize, 8.0).1))
        .collect();
    let set = |items: &[(usize, f32)]| {
        folio_model::LoraSet::new(
            items
                .iter()
                .map(|&(i, s)| (adapters[i].clone(), s))
                .collect(),
        )
    };
    let sets: Vec<Option<folio_model::LoraSet>> = vec![
        Some(set(&[(2, 1.0)])),
        None,
        Some(set(&[(0, 1.0)])),
        Some(set(&[(3, 0.5)])),
        Some(set(&[(1, 1.0), (2, 0.25)])),
        Some(set(&[(0, 1.0)])),
        None,
    ];
    let lens = [9usize, 1, 23, 4, 7, 2, 5];
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(10 + i as u64, n))
        .collect();
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .zip(&sets)
        .map(|(p, s)| {
            let mut kv = model.new_kv_cache(4, 8, KvFormat::F16);
            let mut b = ForwardBatch::new();
            b.push(p, 0, (0..8).collect(), p.len());
            b.seqs[0].lora = s.clone();
            model.forward(&b, &mut kv, pool).expect("forward")
        })
        .collect();
    let mut kv = model.new_kv_cache(4, 8 * lens.len(), KvFormat::F16);
    let mut b = ForwardBatch::new();
    for (i, (p, s)) in prompts.iter().zip(&sets).enumerate() {
        b.push(p, 0, (i as u32 * 8..(i as u32 + 1) * 8).collect(), p.len());
        b.seqs[i].lora = s.clone();
    }
    let together = model.forward(&b, &mut kv, pool).expect("forward");
    let mut at = 0;
    for (i, a) in alone.iter().enumerate() {
        assert_eq!(
            &together[at..at + a.len()],
            &a[..],
            "sequence {i} differs when batched"
        );
        at += a.len();
    }
    // The adapters matter: sequence 5 (adapter 0) alone without it is another result.
    let mut kv1 = model.new_kv_cache(4, 8, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&prompts[5], 0, (0..8).collect(), prompts[5].len());
    let plain = model.forward(&b, &mut kv1, pool).unwrap();
    assert!(rel_err(&plain, &alone[5]) > 0.05);
}

/// Bad adapter files are errors naming the tensor or key, the expected and the found value.
#[test]
fn bad_adapters_are_named_errors() {
    let f = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, 42)).unwrap();
    let model = Model::from_gguf(&f).unwrap();
    let cfg = &model.config;
    let load = |w: folio_gguf::GgufWriter, max_rank: usize| {
        let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
        folio_model::LoraAdapter::from_gguf(&f, cfg, max_rank, 1)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let good = || {
        folio_model::lora::random_adapter(cfg, &["attn_q", "ffn_down"], 8, 16.0, 0.05, 1).unwrap()
    };
    // A base model is not an adapter.
    let e = folio_model::LoraAdapter::from_gguf(&f, cfg, 64, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("general.type") && e.contains("adapter"), "{e}");
    // Rank above --max-lora-rank.
    let e = load(good(), 4);
    assert!(
        e.contains("blk.0.attn_q.weight.lora_a") && e.contains("rank 8, expected 1..=4"),
        "{e}"
    );
    // Another architecture.
    let mut w = good();
    w.add_metadata(
        "general.architecture",
        folio_gguf::Value::String("qwen2".into()),
    );
    let e = load(w, 64);
    assert!(
        e.contains("general.architecture") && e.contains("qwen2"),
        "{e}"
    );
    // A zero tensor of ggml dims `dims` named `name`.
    let zeros = |w: &mut folio_gguf::GgufWriter, name: &str, dims: [usize; 2]| {
        let n = dims[0] * dims[1];
        w.add_tensor_f32(name, &dims.map(|d| d as u64), GgmlType::F32, &vec![0.0; n])
            .unwrap();
    };
    // A shape that does not fit the base tensor (A built for ffn_down's input on attn_k).
    let mut w = good();
    zeros(&mut w, "blk.1.attn_k.weight.lora_a", [FFN, 8]);
    zeros(&mut w, "blk.1.attn_k.weight.lora_b", [8, KV_HEADS * HD]);
    let e = load(w, 64);
    assert!(
        e.contains("blk.1.attn_k.weight")
            && e.contains(&format!("[{FFN}, 8]"))
            && e.contains(&format!("expected [{D}, rank]")),
        "{e}"
    );
    // A target folio does not support, and a lone lora_a.
    let mut w = good();
    zeros(&mut w, "output.weight.lora_a", [D, 8]);
    zeros(&mut w, "output.weight.lora_b", [8, VOCAB]);
    let e = load(w, 64);
    assert!(
        e.contains("output.weight.lora_a") && e.contains("unsupported LoRA target"),
        "{e}"
    );
    let mut w = good();
    zeros(&mut w, "blk.1.attn_v.weight.lora_a", [D, 8]);
    let e = load(w, 64);
    assert!(
        e.contains("blk.1.attn_v.weight.lora_a") && e.contains("no matching"),
        "{e}"
    );
}
