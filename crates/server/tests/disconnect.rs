//! Cancellation and shutdown, on a server of their own (they read engine-wide gauges that
//! other tests would disturb).

use folio_testkit::http as common;

use common::{get, metric, open_stream, post};
use serde_json::json;
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Polls /metrics until `cond` holds (or gives up after `limit`), returning the last page.
fn wait_metrics(
    addr: std::net::SocketAddr,
    limit: Duration,
    cond: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let text = get(addr, "/metrics").text();
        if cond(&text) || start.elapsed() > limit {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn disconnect_frees_blocks_and_shutdown_is_graceful() {
    let Some(engine) = common::engine() else {
        return;
    };
    let opts = folio_server::ServerOptions {
        shutdown_grace: Duration::from_millis(500),
        ..Default::default()
    };
    let s = common::start(engine.clone(), opts);
    let other = common::start(engine.clone(), Default::default());
    let idle = |t: &str| {
        metric(t, "folio_requests_running") == Some(0.0)
            && metric(t, "folio_kv_blocks_used") == Some(0.0)
    };
    assert!(
        idle(&wait_metrics(s.addr, Duration::from_secs(30), idle)),
        "engine not idle at start"
    );

    // 1. A client that disconnects mid-stream: its request stops and its blocks are freed.
    let body = json!({"prompt": "Tell me a long story.", "max_tokens": 2000, "ignore_eos": true, "temperature": 0, "stream": true});
    let (sock, head) = open_stream(s.addr, &body, 3);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let busy = get(s.addr, "/metrics").text();
    assert_eq!(metric(&busy, "folio_requests_running"), Some(1.0), "{busy}");
    assert!(metric(&busy, "folio_kv_blocks_used").unwrap() >= 1.0);
    drop(sock);
    let after = wait_metrics(s.addr, Duration::from_secs(60), idle);
    assert_eq!(
        metric(&after, "folio_requests_running"),
        Some(0.0),
        "{after}"
    );
    assert_eq!(metric(&after, "folio_kv_blocks_used"), Some(0.0), "{after}");
    // The disconnect counts as an abort in both metric families.
    assert_eq!(
        metric(&after, "folio_requests_finished_total{reason=\"abort\"}"),
        Some(1.0),
        "{after}"
    );
    assert!(
        after.contains("finished_reason=\"abort\"} 1"),
        "vllm:request_success_total abort: {after}"
    );
    let generated = metric(&after, "folio_generation_tokens_total").unwrap();
    assert!(
        generated < 2000.0,
        "request ran to completion ({generated} tokens) despite the disconnect"
    );
    assert_eq!(get(s.addr, "/health").status, 200);

    // 2. Graceful shutdown: an in-flight stream is cancelled after the grace period and
    //    still ends properly; the server stops; the engine refuses new work (503).
    let (mut sock, mut seen) = open_stream(s.addr, &body, 2);
    s.stop.lock().unwrap().take().unwrap().send(()).unwrap();
    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest);
    seen.push_str(&String::from_utf8_lossy(&rest));
    assert!(
        seen.contains("data: [DONE]"),
        "stream did not end cleanly: {seen}"
    );
    assert!(seen.contains("\"finish_reason\":\"abort\""), "{seen}");
    let result = s
        .stopped
        .lock()
        .unwrap()
        .recv_timeout(Duration::from_secs(60))
        .expect("serve_listener returns");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        TcpStream::connect(s.addr).is_err(),
        "listener still open after shutdown"
    );
    let start = Instant::now();
    let r = loop {
        let r = post(
            other.addr,
            "/v1/completions",
            &json!({"prompt": "Hi", "max_tokens": 1}),
        );
        if r.status == 503 || start.elapsed() > Duration::from_secs(30) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "shutting_down");
}
