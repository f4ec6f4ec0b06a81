//! Mixture-of-experts forward (qwen2moe, qwen3moe, Mixtral) against the plain f32
//! reference, batched MoE equal to each sequence alone with each expert read once per
//! step, and bad MoE metadata as errors naming it.

use folio_testkit::tiny as common;

use common::reference::{prompt, reference_routed, tolerance, Routing, LAYERS, SHAPE, VOCAB};
use common::{build_moe_with, rel_err, MoeShape};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

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

/// GPT-OSS's layout of types: MXFP4 expert stacks (3-D tensors), Q8_0 elsewhere.
#[test]
fn mxfp4_experts_match_reference() {
    let ty_of = |name: &str| {
        if name.contains("_exps") {
            GgmlType::MXFP4
        } else {
            GgmlType::Q8_0
        }
    };
    check_moe("qwen3moe", &QWEN3MOE, &ty_of, GgmlType::MXFP4);
    check_moe("llama", &MIXTRAL, &ty_of, GgmlType::MXFP4);
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
