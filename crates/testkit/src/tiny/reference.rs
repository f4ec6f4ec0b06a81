//! The plain, obviously-correct f32 forward pass the `reference_*` tests check the model
//! against, the tiny shape they share, and `check`/`check_file`, which run a model chunk by
//! chunk against it.

use super::{
    build, prompt as prompt_in, rel_err, Shape, BASE, EPS, GEMMA2_ATTN_SOFTCAP, GEMMA_BASE_WINDOW,
    GEMMA_PATTERN, GEMMA_SOFTCAP, GEMMA_WINDOW,
};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

pub const D: usize = 256;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HD: usize = 64;
pub const FFN: usize = 512;
pub const VOCAB: usize = 300;
pub const LAYERS: usize = 2;
pub const CTX: usize = 128;
pub fn prompt(seed: u64, n: usize) -> Vec<u32> {
    prompt_in(seed, n, VOCAB)
}

pub const SHAPE: Shape = Shape {
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

pub fn rmsnorm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * b).collect()
}

/// y[r] = Σ_c W[r][c] x[c]; W stored row-major [rows][cols] as GGUF dims [cols, rows].
pub fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
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
pub fn rope(
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
pub fn swiglu(gate: &[f32], up: &[f32], down: &[f32], h: &[f32], ff: usize) -> Vec<f32> {
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
pub fn geglu(gate: &[f32], up: &[f32], down: &[f32], h: &[f32], ff: usize) -> Vec<f32> {
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
pub fn moe_ffn(
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
pub fn reference(f: &GgufFile, arch: &str, tokens: &[u32]) -> Vec<Vec<f32>> {
    reference_routed(f, arch, tokens, None).0
}

/// Each position's experts, `[layer][pos]`, and each one's routing margin (see
/// [`moe_ffn`]).
pub struct Routing {
    pub experts: Vec<Vec<Vec<usize>>>,
    pub margins: Vec<Vec<f32>>,
}

/// [`reference`], and for MoE models the routing it chose; `forced` (`[layer][pos]`) makes
/// it run those experts instead.
pub fn reference_routed(
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
/// the logits' RMS after two layers: at most 0.07 with one activation scale per 32 values.
/// The 256-value types take one scale per 256 (llama.cpp's Q8_K), a larger quantum where a
/// superblock holds one outlier, and the tiny random models amplify it chaotically: phi3
/// Q4_K measured 0.082 with the scale rounded to f16 and 0.110 with ggml's exact f32 scale
/// (the codes identical), the other 256-value cases at most 0.08. A wrong scale, norm or
/// rope is off by the order of the RMS itself.
pub fn tolerance(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 2e-3,
        _ if ty.block_size() == Some(256) => 0.15,
        _ => 0.1,
    }
}

pub fn check(arch: &str, ty: GgmlType) {
    check_file(arch, ty, build(&SHAPE, arch, ty, 42));
}

pub fn check_file(arch: &str, ty: GgmlType, tiny: Vec<u8>) {
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
