//! `deadline_ms` enforced while a request runs, on an engine of its own (it reads
//! engine-wide gauges and loads the engine on purpose).
//!
//! Admission control refuses a request whose estimate misses its deadline, so the test
//! makes the estimate wrong the way production does: the requests are admitted on an idle
//! engine, then a flood of long prompts arrives and every later step carries a full
//! prefill chunk. The flood runs until the deadline requests have ended, so the test does
//! not depend on how fast this machine is.

use folio_testkit::http as common;

use common::{get, metric, open_stream, post, wait_idle};
use serde_json::{json, Value};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generated tokens the deadline requests ask for (they must not get them all).
/// Enough that, alone, they run far longer than the few milliseconds the flood takes to
/// arrive after their first token.
const WANT: usize = 96;

#[test]
fn a_request_past_its_deadline_ends_with_finish_reason_deadline_and_frees_its_kv() {
    // Without an ITL target: every step under the flood then carries a full prefill
    // budget, so the slowdown does not depend on where the target sits on this machine.
    let cfg = folio_engine::EngineConfig {
        max_itl_ms: None,
        ..Default::default()
    };
    let Some(engine) = common::engine_with(cfg, None) else {
        return;
    };
    let s = common::start(engine, folio_server::ServerOptions::default());
    wait_idle(s.addr, Duration::from_secs(120));

    // A deadline that is not reached changes nothing.
    let v = common::post_ok(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 4, "ignore_eos": true, "deadline_ms": 600_000}),
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");

    // This machine's time per generated token alone (also warms the engine's step fit).
    let start = Instant::now();
    common::post_ok(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Write a long story about a lighthouse keeper and the sea.",
                "max_tokens": WANT, "ignore_eos": true, "temperature": 0}),
    );
    let per_token = start.elapsed() / WANT as u32;
    // Three times what the request needs alone: admission lets it in.
    // Whole milliseconds, as `deadline_ms` carries it (a sub-millisecond remainder would
    // put the server's cutoff before this test's bound).
    let deadline = (per_token * 3 * WANT as u32).max(Duration::from_millis(1500));
    let deadline = Duration::from_millis(deadline.as_millis() as u64);
    let body = json!({"prompt": "Tell me a long story.", "max_tokens": WANT, "ignore_eos": true,
                      "temperature": 0, "deadline_ms": deadline.as_millis() as u64});

    // 1. One non-streaming request, admitted ...
    let addr = s.addr;
    let plain = {
        let body = body.clone();
        std::thread::spawn(move || post(addr, "/v1/completions", &body))
    };
    let t = Instant::now();
    while metric(&get(s.addr, "/metrics").text(), "folio_requests_running") != Some(1.0) {
        assert!(
            t.elapsed() < deadline,
            "the non-streaming request did not start"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // 2. ... and one streaming, running (its first token is out).
    let started = Instant::now();
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    stream_body["stream_options"] = json!({"include_usage": true});
    let (mut sock, head) = open_stream(s.addr, &stream_body, 1);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // 3. The flood: distinct 256-token prompts (no prefix-cache hits), one token each,
    //    four in flight, until both deadline requests have ended.
    let done = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..4u32)
        .map(|k| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !done.load(Ordering::Relaxed) {
                    let ids: Vec<u32> = (0..256u32)
                        .map(|i| 100 + (i * 7919 + k * 104_729 + n * 15_485_863) % 40_000)
                        .collect();
                    let r = post(
                        addr,
                        "/v1/completions",
                        &json!({"prompt": ids, "max_tokens": 1}),
                    );
                    assert_eq!(r.status, 200, "{}", r.text());
                    n += 1;
                }
            })
        })
        .collect();

    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest);
    let took = started.elapsed();
    let plain = plain.join().expect("non-streaming client");
    done.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().expect("flood client");
    }

    eprintln!(
        "per token alone {per_token:?}, deadline {deadline:?}, streaming request took {took:?}"
    );
    let text = head + &String::from_utf8_lossy(&rest);
    let resp = common::parse_response(text.as_bytes());
    let (chunks, ended) = resp.sse();
    assert!(ended, "{text}");
    let reasons: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["finish_reason"].as_str())
        .collect();
    assert_eq!(reasons, vec!["deadline"], "{text}");
    let usage: &Value = &chunks.last().unwrap()["usage"];
    let generated = usage["completion_tokens"].as_u64().unwrap() as usize;
    assert!((1..WANT).contains(&generated), "{usage}");
    assert!(
        took >= deadline,
        "ended after {took:?}, before its deadline {deadline:?}"
    );
    assert!(
        took < deadline + Duration::from_secs(15),
        "ended {took:?} after its start, long after its deadline {deadline:?}"
    );

    assert_eq!(plain.status, 200, "{}", plain.text());
    let v = plain.json();
    assert_eq!(v["choices"][0]["finish_reason"], "deadline", "{v}");
    assert!(
        (v["usage"]["completion_tokens"].as_u64().unwrap() as usize) < WANT,
        "{v}"
    );

    // Their KV is freed, and /metrics counts them.
    let after = wait_idle(s.addr, Duration::from_secs(120));
    assert_eq!(metric(&after, "folio_kv_blocks_used"), Some(0.0), "{after}");
    assert_eq!(
        metric(&after, "folio_requests_running"),
        Some(0.0),
        "{after}"
    );
    assert_eq!(
        metric(&after, "folio_requests_finished_total{reason=\"deadline\"}"),
        Some(2.0),
        "{after}"
    );
}
