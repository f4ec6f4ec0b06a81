//! Unloading a model gives its memory back: the process's RSS after loading SmolLM2 and
//! Gemma 3 270M and unloading them is within a few tens of MB of before (alone in its
//! test binary: nothing else allocates meanwhile).

mod models_support;

use folio_testkit::http::post_ok;
use models_support::*;
use serde_json::json;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn unloading_returns_the_memory() {
    let Some((smol, gemma)) = cached() else {
        return;
    };
    let reg = folio_server::models::Registry::new(
        sources(&[("smol", &smol), ("gemma", &gemma)]),
        None,
        loader(Arc::new(AtomicUsize::new(0)), Duration::ZERO),
        policy(0, None),
    );
    let (addr, _stop) = serve(reg);
    // The server itself (runtime, first connections) before the baseline.
    assert_eq!(status(addr, "smol"), "unloaded");
    let before = rss();
    for m in ["smol", "gemma"] {
        post_ok(addr, "/models/load", &json!({"model": m}));
        greedy(addr, Some(m), "The capital of France is");
    }
    let loaded = rss();
    for m in ["smol", "gemma"] {
        post_ok(addr, "/models/unload", &json!({"model": m}));
        wait_status(addr, m, "unloaded");
    }
    // The unload thread joins the engine and trims the heap after the status changes.
    let start = std::time::Instant::now();
    let mut after = rss();
    while after > before + (40 << 20) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        after = rss();
    }
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "RSS: before {:.1} MB, two models loaded {:.1} MB, after unloading {:.1} MB",
        mb(before),
        mb(loaded),
        mb(after)
    );
    assert!(
        loaded > before + (200 << 20),
        "loading two models took little memory"
    );
    assert!(
        after <= before + (40 << 20),
        "after unloading: {:.1} MB, before loading {:.1} MB",
        mb(after),
        mb(before)
    );
}
