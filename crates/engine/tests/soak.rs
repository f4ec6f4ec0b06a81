//! Soak: 2,000 short requests with random cancellations and random max_tokens through a KV
//! pool small enough to force preemption. Every request ends (finished, cancelled or
//! rejected with a reason), no block leaks, no panic; then deadline admission control
//! rejects early, with a reason, a request that cannot finish in time.

mod common;
use common::*;
use folio_engine::{EngineConfig, Event, FinishReason, GenerateRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

#[test]
fn two_thousand_requests_end_without_leaks() {
    // 48 blocks of 4 tokens for up to 64 running requests that each grow by several
    // blocks: preemption is certain.
    let h = engine(EngineConfig {
        block_size: 4,
        kv_cache_bytes: 23_040 * 4 * 48,
        prefix_cache: false,
        ..EngineConfig::default()
    });
    let mut rng = StdRng::seed_from_u64(2024);
    let n = 2000;
    let words = ["cat", "sun", "tree", "blue", "nine", "road", "fish", "wind"];
    let mut streams = Vec::new();
    let mut cancelled_early = 0;
    for i in 0..n {
        let len = rng.gen_range(1..12);
        let text: Vec<&str> = (0..len)
            .map(|_| words[rng.gen_range(0..words.len())])
            .collect();
        let p = h.tokenizer.encode(&text.join(" "), true).unwrap();
        let mut r = GenerateRequest::new(p, rng.gen_range(1..10));
        r.ignore_eos = rng.gen_bool(0.5);
        let s = h.submit(r).expect("valid request");
        // ~15% are cancelled: half at once (dropped stream), half by abort() later.
        match rng.gen_range(0..100) {
            0..=7 => {
                drop(s);
                cancelled_early += 1;
            }
            8..=14 => {
                h.abort(s.id);
                streams.push((i, s));
            }
            _ => streams.push((i, s)),
        }
    }
    let (mut finished, mut cancelled, mut rejected) = (0, 0, 0);
    for (i, mut s) in streams {
        let mut ended = false;
        while let Some(ev) = s.next_blocking() {
            if let Event::Finished { reason, .. } = ev {
                match reason {
                    FinishReason::Stop | FinishReason::Length => finished += 1,
                    FinishReason::Aborted => cancelled += 1,
                    FinishReason::Rejected(why) => {
                        assert!(!why.to_string().is_empty());
                        rejected += 1
                    }
                    FinishReason::Error(e) => panic!("request {i} failed: {e}"),
                    FinishReason::ShuttingDown => panic!("request {i} cut by a shutdown"),
                }
                ended = true;
                break;
            }
        }
        assert!(ended, "request {i} never finished");
    }
    assert_eq!(finished + cancelled + rejected + cancelled_early, n);
    assert!(finished > 1000, "most requests should finish: {finished}");
    assert!(
        cancelled > 50,
        "aborted requests report Aborted: {cancelled}"
    );
    let t = Instant::now();
    while (h.metrics.num_running.load(Relaxed) > 0 || h.metrics.num_waiting.load(Relaxed) > 0)
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        h.metrics.preemptions.load(Relaxed) > 0,
        "the small pool should force preemption"
    );
    assert_eq!(h.metrics.num_running.load(Relaxed), 0);
    assert_eq!(h.metrics.num_waiting.load(Relaxed), 0);
    assert_eq!(h.metrics.kv_blocks_used.load(Relaxed), 0, "blocks leaked");
    h.shutdown();
}

#[test]
fn deadline_admission_rejects_with_a_reason() {
    let h = engine(EngineConfig::default());
    let p = h
        .tokenizer
        .encode("Count slowly from one to one thousand.", true)
        .unwrap();
    // Warm the engine so it has measured prefill and decode rates.
    for _ in 0..3 {
        collect(h.submit(greedy(&p, 16)).unwrap());
    }
    let mut r = greedy(&p, 4000);
    r.ignore_eos = true;
    r.deadline = Some(Instant::now() + Duration::from_millis(50));
    let o = collect(h.submit(r).unwrap());
    match o.reason {
        FinishReason::Rejected(why) => assert!(why.to_string().contains("deadline"), "{why}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(h.metrics.rejected.load(Relaxed), 1);
    // A feasible deadline is admitted.
    let mut r = greedy(&p, 4);
    r.deadline = Some(Instant::now() + Duration::from_secs(30));
    assert_eq!(collect(h.submit(r).unwrap()).ids.len(), 4);
    h.shutdown();
}
