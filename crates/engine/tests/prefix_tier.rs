//! The prefix cache and the second (disk) tier never change outputs: greedy outputs are
//! identical with the prefix cache on and off, at block sizes 1, 16 and 32, for a request
//! whose prefix was evicted and fetched back from disk, and after a restart that reloads
//! the disk tier.

mod common;
use common::*;
use folio_core::kv::EvictionPolicy;
use folio_engine::EngineConfig;
use std::sync::atomic::Ordering::Relaxed;

fn text(seed: usize, words: usize) -> String {
    let w = [
        "alpha", "river", "stone", "cloud", "seven", "green", "table", "north", "quiet", "lamp",
    ];
    (0..words)
        .map(|i| {
            format!(
                "{}{}",
                w[(i * 7 + seed * 3) % w.len()],
                (i * 31 + seed * 17) % 97
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn prefix_cache_and_block_sizes_keep_outputs() {
    let shared = format!("System: {}\n", text(1, 120));
    let suffixes = ["Question one?", "Another question here.", "Third."];
    let run = |cfg: EngineConfig| -> Vec<Vec<u32>> {
        let h = engine(cfg);
        let mut outs = Vec::new();
        // Twice, so the second round hits the cache.
        for _ in 0..2 {
            for s in suffixes {
                let p = h.tokenizer.encode(&format!("{shared}{s}"), true).unwrap();
                outs.push(collect(h.submit(greedy(&p, 12)).unwrap()).ids);
            }
        }
        let hits = h.metrics.prefix_hits_tokens.load(Relaxed);
        h.shutdown();
        if outs.is_empty() || hits == u64::MAX {
            unreachable!();
        }
        outs
    };
    let off = run(EngineConfig {
        prefix_cache: false,
        ..EngineConfig::default()
    });
    for bs in [1usize, 16, 32] {
        let on = run(EngineConfig {
            prefix_cache: true,
            block_size: bs,
            ..EngineConfig::default()
        });
        assert_eq!(
            on, off,
            "block size {bs}: outputs differ with the prefix cache on"
        );
    }
}

#[test]
fn evicted_prefix_comes_back_from_disk_and_survives_restart() {
    let dir = std::env::temp_dir().join(format!("folio-tier-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = tier_cfg(&dir);
    let h = engine(cfg.clone());
    let a = h
        .tokenizer
        .encode(&format!("{}\nSummarize.", text(2, 200)), true)
        .unwrap();
    assert!(
        a.len() > 400,
        "prompt A should span many blocks: {}",
        a.len()
    );
    let first = collect(h.submit(greedy(&a, 8)).unwrap());
    for seed in [3, 4] {
        let other = h
            .tokenizer
            .encode(&format!("{}\nSummarize.", text(seed, 250)), true)
            .unwrap();
        let o = collect(h.submit(greedy(&other, 4)).unwrap());
        assert_eq!(
            o.ids.len(),
            4,
            "prompt of {} tokens: {:?}",
            other.len(),
            o.reason
        );
    }
    assert!(
        h.metrics.tier_spills.load(Relaxed) > 0,
        "A's blocks should have been spilled"
    );
    let again = collect(h.submit(greedy(&a, 8)).unwrap());
    assert_eq!(
        again.ids, first.ids,
        "output after fetching the prefix back from disk differs"
    );
    assert!(
        h.metrics.tier_fetches.load(Relaxed) > 0,
        "A's prefix should come back from disk"
    );
    assert!(
        again.usage.cached_tokens >= 16 * 20,
        "cached tokens {}",
        again.usage.cached_tokens
    );
    h.shutdown();
    std::thread::sleep(std::time::Duration::from_millis(200));

    // A new engine on the same directory: the prefix is served from disk at once.
    let h = engine(cfg);
    let after = collect(h.submit(greedy(&a, 8)).unwrap());
    assert_eq!(after.ids, first.ids, "output after a restart differs");
    assert!(
        h.metrics.tier_fetches.load(Relaxed) > 0,
        "the restarted engine should fetch from disk"
    );
    assert!(
        after.usage.cached_tokens >= 16 * 20,
        "cached tokens after restart {}",
        after.usage.cached_tokens
    );
    h.shutdown();
    std::thread::sleep(std::time::Duration::from_millis(200));

    // The same directory under llama.cpp's numerics: blocks the `fast` engine spilled hold
    // different KV bits, so none may be reused.
    let path = folio_fetch::test_model().expect("the default model");
    let f = folio_gguf::GgufFile::open(&path).expect("open model");
    let mut model = folio_model::Model::from_gguf(&f).expect("load model");
    model.set_sums(folio_kernels::matmul::Sums::Ggml);
    let tok = std::sync::Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer"));
    let h = folio_engine::spawn_engine(model, tok, &path, tier_cfg(&dir)).expect("engine");
    let llama = collect(h.submit(greedy(&a, 8)).unwrap());
    assert_eq!(
        (
            llama.usage.cached_tokens,
            h.metrics.tier_fetches.load(Relaxed)
        ),
        (0, 0),
        "a llama-numerics engine reused blocks spilled under fast numerics"
    );
    h.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// An engine on the model file at `path` (a copy of the default model).
fn engine_at(path: &std::path::Path, cfg: EngineConfig) -> folio_engine::EngineHandle {
    let f = folio_gguf::GgufFile::open(path).expect("open model");
    let model = folio_model::Model::from_gguf(&f).expect("load model");
    let tok = std::sync::Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer"));
    folio_engine::spawn_engine(model, tok, path, cfg).expect("engine")
}

/// Spills prompt `a`'s blocks to the tier by running it, then two long prompts that evict
/// it from memory.
fn spill_prompt(h: &folio_engine::EngineHandle, a: &[u32]) -> Vec<u32> {
    let first = collect(h.submit(greedy(a, 8)).unwrap()).ids;
    for seed in [3, 4] {
        let other = h
            .tokenizer
            .encode(&format!("{}\nSummarize.", text(seed, 250)), true)
            .unwrap();
        collect(h.submit(greedy(&other, 4)).unwrap());
    }
    assert!(h.metrics.tier_spills.load(Relaxed) > 0, "nothing spilled");
    first
}

/// The model file is replaced at the same path by one with other weights (one tensor
/// zeroed), the same size and the same modification time: the disk tier is keyed by the
/// contents, so none of the old model's blocks is reused, and the output is the new
/// model's own. Before, 208 blocks of the old model were served and outputs were wrong.
#[test]
fn a_model_replaced_at_the_same_path_never_reuses_tier_blocks() {
    let root = std::env::temp_dir().join(format!("folio-tier-swap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let model = root.join("model.gguf");
    let original = folio_fetch::test_model().expect("the default model");
    std::fs::copy(&original, &model).unwrap();
    let mtime = std::fs::metadata(&model).unwrap().modified().unwrap();
    let dir = root.join("kv");
    std::fs::create_dir_all(&dir).unwrap();
    // The user's own file in the tier directory survives every start.
    std::fs::write(dir.join("important.tmp"), b"keep me").unwrap();

    let h = engine_at(&model, tier_cfg(&dir));
    let a = h
        .tokenizer
        .encode(&format!("{}\nSummarize.", text(2, 200)), true)
        .unwrap();
    spill_prompt(&h, &a);
    h.shutdown();
    std::thread::sleep(std::time::Duration::from_millis(200));

    // Control: the same file again reuses the blocks (so the check below can fail).
    let h = engine_at(&model, tier_cfg(&dir));
    let same = collect(h.submit(greedy(&a, 8)).unwrap());
    assert!(
        h.metrics.tier_fetches.load(Relaxed) > 0 && same.usage.cached_tokens > 0,
        "the unchanged model should reuse its blocks"
    );
    h.shutdown();
    std::thread::sleep(std::time::Duration::from_millis(200));

    // Replace the file: a middle tensor zeroed, written aside and renamed over the path
    // (as a deployment does), size and mtime as before.
    let mut bytes = std::fs::read(&model).unwrap();
    {
        let f = folio_gguf::GgufFile::from_bytes(bytes.clone()).unwrap();
        let t = &f.tensors()[f.tensors().len() / 2];
        let at = t.offset as usize;
        bytes[at..at + t.n_bytes].fill(0);
    }
    let aside = root.join("model.gguf.new");
    std::fs::write(&aside, &bytes).unwrap();
    std::fs::rename(&aside, &model).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&model)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&model).unwrap().modified().unwrap(),
        mtime
    );

    let h = engine_at(&model, tier_cfg(&dir));
    let swapped = collect(h.submit(greedy(&a, 8)).unwrap());
    assert_eq!(
        (
            swapped.usage.cached_tokens,
            h.metrics.tier_fetches.load(Relaxed)
        ),
        (0, 0),
        "the replaced model reused the old model's KV blocks"
    );
    h.shutdown();
    let fresh = engine_at(
        &model,
        EngineConfig {
            prefix_cache: false,
            ..EngineConfig::default()
        },
    );
    let reference = collect(fresh.submit(greedy(&a, 8)).unwrap());
    fresh.shutdown();
    assert_eq!(
        swapped.ids, reference.ids,
        "the replaced model's output is not its own"
    );
    assert_eq!(
        std::fs::read(dir.join("important.tmp")).unwrap(),
        b"keep me",
        "the tier deleted a user's file"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A disk tier in `dir` under 60 blocks of 16 tokens: far less than the three long
/// prompts of the tier test.
fn tier_cfg(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        kv_cache_bytes: 23_040 * 16 * 60,
        eviction: EvictionPolicy::Lru,
        kv_disk_dir: Some(dir.to_path_buf()),
        ..EngineConfig::default()
    }
}
