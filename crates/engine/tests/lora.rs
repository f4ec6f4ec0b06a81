//! LoRA adapters in the engine on the default model: a batch mixing four adapters and
//! base-only requests gives every request exactly its tokens alone; the prefix cache never
//! serves a block across adapters; the registry's slots, eviction and unload.

mod common;

use common::{collect, engine, greedy, prompts, Outcome};
use folio_engine::{EngineConfig, EngineHandle, GenerateRequest};
use folio_testkit::temp::TempDir;
use std::path::PathBuf;

/// Writes `n` random rank-8 adapters for the engine's model (fixed seeds).
/// The files go with the returned guard.
fn adapter_files(h: &EngineHandle, n: usize, tag: &str) -> (TempDir, Vec<PathBuf>) {
    let f = folio_gguf::GgufFile::open(&folio_fetch::test_model().unwrap()).unwrap();
    let cfg = folio_model::ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(cfg.vocab_size, h.info.vocab_size);
    let dir = TempDir::new("folio-lora", tag).unwrap();
    let files = folio_model::lora::write_random_adapters(&cfg, dir.path(), n, 0.3, 1000).unwrap();
    (dir, files)
}

fn with_lora(h: &EngineHandle, prompt: &[u32], names: &[(&str, f32)], n: usize) -> GenerateRequest {
    let mut r = greedy(prompt, n);
    if !names.is_empty() {
        let names: Vec<(String, f32)> = names.iter().map(|(s, x)| (s.to_string(), *x)).collect();
        r.lora = Some(h.lora_set(&names).expect("adapters are loaded"));
    }
    r
}

#[test]
fn mixed_adapter_batch_equals_each_alone() {
    let h = engine(EngineConfig::default());
    let (_dir, files) = adapter_files(&h, 4, "mix");
    for (i, p) in files.iter().enumerate() {
        h.lora.lock().unwrap().load(&format!("a{i}"), p).unwrap();
    }
    // Short prompts: a long repetitive one puts a small model in copy mode, where no
    // adapter changes the greedy tokens.
    let ps: Vec<Vec<u32>> = [
        "Tell me about prime numbers in a few words.",
        "Write a haiku about the sea.",
        "What is the capital of France?",
        "List three colors.",
        "Explain Rust traits briefly.",
        "Why is the sky blue?",
        "Name a famous painter.",
        "How do rivers form?",
    ]
    .iter()
    .map(|t| h.tokenizer.encode(t, true).unwrap())
    .collect();
    let sets: Vec<Vec<(&str, f32)>> = vec![
        vec![("a0", 1.0)],
        vec![],
        vec![("a1", 1.0)],
        vec![("a2", 1.0)],
        vec![],
        vec![("a3", 1.0)],
        vec![("a0", 1.0)],
        vec![("a1", 0.5), ("a2", 0.5)],
    ];
    let alone: Vec<Outcome> = ps
        .iter()
        .zip(&sets)
        .map(|(p, s)| collect(h.submit(with_lora(&h, p, s, 24)).unwrap()))
        .collect();
    let streams: Vec<_> = ps
        .iter()
        .zip(&sets)
        .map(|(p, s)| h.submit(with_lora(&h, p, s, 24)).unwrap())
        .collect();
    let together: Vec<Outcome> = streams.into_iter().map(collect).collect();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.ids.len(), 24);
        assert_eq!(
            a.ids, t.ids,
            "request {i} ({:?}) differs when batched",
            sets[i]
        );
    }
    // Under memory pressure (preempted and recomputed) and with self-drafts (the target's
    // first layers under each request's adapters), every request still gets its tokens.
    let small = engine(EngineConfig {
        kv_cache_bytes: 23_040 * 16 * 10,
        spec: folio_engine::SpecMethod::SelfDraft,
        spec_tokens: Some(2),
        ..EngineConfig::default()
    });
    let (_dir, files) = adapter_files(&small, 4, "mix-small");
    for (i, p) in files.iter().enumerate() {
        small
            .lora
            .lock()
            .unwrap()
            .load(&format!("a{i}"), p)
            .unwrap();
    }
    let streams: Vec<_> = ps
        .iter()
        .zip(&sets)
        .map(|(p, s)| small.submit(with_lora(&small, p, s, 24)).unwrap())
        .collect();
    let squeezed: Vec<Outcome> = streams.into_iter().map(collect).collect();
    let preempted = small
        .metrics
        .preemptions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(preempted > 0, "the small pool should have preempted");
    for (i, (a, t)) in alone.iter().zip(&squeezed).enumerate() {
        assert_eq!(
            a.ids, t.ids,
            "request {i} ({:?}) differs under preemption and self-drafts",
            sets[i]
        );
    }
    // The adapters change the output: the same prompts under the base model differ.
    let base: Vec<Outcome> = [0, 2, 3, 5]
        .iter()
        .map(|&i| collect(h.submit(greedy(&ps[i], 24)).unwrap()))
        .collect();
    for (b, &i) in base.iter().zip(&[0usize, 2, 3, 5]) {
        assert_ne!(
            b.ids, alone[i].ids,
            "adapter {:?} did not change request {i}",
            sets[i]
        );
    }
}

#[test]
fn prefix_cache_never_crosses_adapters() {
    let h = engine(EngineConfig::default());
    let (_dir, files) = adapter_files(&h, 2, "prefix");
    h.lora.lock().unwrap().load("a", &files[0]).unwrap();
    h.lora.lock().unwrap().load("b", &files[1]).unwrap();
    let p = &prompts(&h, 8)[3]; // the longest: many full blocks
    assert!(p.len() > 64);
    let run = |names: &[(&str, f32)]| collect(h.submit(with_lora(&h, p, names, 12)).unwrap());
    let base = run(&[]);
    assert_eq!(base.usage.cached_tokens, 0);
    let a = run(&[("a", 1.0)]);
    assert_eq!(
        a.usage.cached_tokens, 0,
        "adapter a reused the base model's blocks"
    );
    let b = run(&[("b", 1.0)]);
    assert_eq!(
        b.usage.cached_tokens, 0,
        "adapter b reused adapter a's blocks"
    );
    let half = run(&[("a", 0.5)]);
    assert_eq!(
        half.usage.cached_tokens, 0,
        "scale 0.5 reused scale 1.0's blocks"
    );
    // Each one again: its own blocks come back, and the tokens are the same.
    let full = p.len() / 16 * 16;
    for (names, first) in [
        (&[][..], &base),
        (&[("a", 1.0)][..], &a),
        (&[("b", 1.0)][..], &b),
    ] {
        let again = run(names);
        assert!(
            again.usage.cached_tokens >= full - 16,
            "{names:?}: {}",
            again.usage.cached_tokens
        );
        assert_eq!(
            again.ids, first.ids,
            "{names:?}: cached prefix changed the output"
        );
    }
}

#[test]
fn registry_slots_evict_idle_and_unload_waits_for_users() {
    let h = engine(EngineConfig {
        max_loras: 2,
        ..EngineConfig::default()
    });
    let (_dir, files) = adapter_files(&h, 3, "slots");
    let p = prompts(&h, 1).remove(0);
    {
        let mut reg = h.lora.lock().unwrap();
        reg.load("x", &files[0]).unwrap();
        reg.load("y", &files[1]).unwrap();
        assert_eq!(reg.slots_used(), 2);
    }
    let want_x = collect(h.submit(with_lora(&h, &p, &[("x", 1.0)], 16)).unwrap());
    // A third adapter evicts the least recently used idle one (y: x just ran).
    h.lora.lock().unwrap().load("z", &files[2]).unwrap();
    let list = h.lora.lock().unwrap().list();
    let resident: Vec<(&str, bool)> = list.iter().map(|l| (l.name.as_str(), l.resident)).collect();
    assert_eq!(resident, vec![("x", true), ("y", false), ("z", true)]);
    // y is reloaded from its file on use (evicting x now), and gives the same tokens as
    // before its eviction would have.
    let y1 = collect(h.submit(with_lora(&h, &p, &[("y", 1.0)], 16)).unwrap());
    assert!(h
        .lora
        .lock()
        .unwrap()
        .list()
        .iter()
        .any(|l| l.name == "y" && l.resident));
    // Hold z and y in running requests: every slot is in use, so x cannot come back.
    let sz = h.submit(with_lora(&h, &p, &[("z", 1.0)], 64)).unwrap();
    let sy = h.submit(with_lora(&h, &p, &[("y", 1.0)], 64)).unwrap();
    let busy = h.lora_set(&[("x".into(), 1.0)]).unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert!(
        busy.to_string()
            .contains("all 2 adapter slots (--max-loras)"),
        "{busy}"
    );
    // Unloading y while a request uses it: the name goes at once, the request finishes
    // with y's weights (same tokens as y alone), and the slot frees after it.
    assert_eq!(h.lora.lock().unwrap().unload("y").unwrap(), 1);
    assert!(h.lora_set(&[("y".into(), 1.0)]).is_err());
    let oy = collect(sy);
    assert_eq!(
        &oy.ids[..16],
        &y1.ids[..],
        "unload changed a running request's output"
    );
    collect(sz);
    let mut reg = h.lora.lock().unwrap();
    assert_eq!(
        reg.slots_used(),
        1,
        "only z is resident once y's request ended"
    );
    drop(reg);
    // x comes back now, with its tokens unchanged.
    let x2 = collect(h.submit(with_lora(&h, &p, &[("x", 1.0)], 16)).unwrap());
    assert_eq!(x2.ids, want_x.ids);
    // Unknown names are errors naming the adapter.
    let e = h.lora_set(&[("nope".into(), 1.0)]).unwrap_err().to_string();
    assert_eq!(e, "LoRA adapter 'nope' is not loaded");
}
