//! The request timeout and the drain after a shutdown signal, on an engine of their own
//! (they read engine-wide gauges, and the drain shuts the engine down).

use folio_testkit::http as common;

use common::{get, metric, open_stream, post, wait_idle};
use serde_json::json;
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn request_timeout_ends_requests_and_frees_kv_then_health_is_503_while_draining() {
    let Some(engine) = common::engine() else {
        return;
    };
    let s = common::start(
        engine.clone(),
        folio_server::ServerOptions {
            request_timeout: Some(Duration::from_millis(1500)),
            shutdown_grace: Duration::from_secs(3),
            ..Default::default()
        },
    );
    let idle = wait_idle(s.addr, Duration::from_secs(60));
    assert_eq!(metric(&idle, "folio_kv_blocks_used"), Some(0.0), "{idle}");

    // 1. Streaming: cut at the timeout with finish_reason "timeout", usage still sent.
    let long = json!({"prompt": "Tell me a long story.", "max_tokens": 4000, "ignore_eos": true,
                      "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let start = Instant::now();
    let r = post(s.addr, "/v1/completions", &long);
    let took = start.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let (chunks, done) = r.sse();
    assert!(done, "{}", r.text());
    let reasons: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["finish_reason"].as_str())
        .collect();
    assert_eq!(reasons, vec!["timeout"], "{}", r.text());
    let generated = chunks.last().unwrap()["usage"]["completion_tokens"]
        .as_u64()
        .unwrap();
    assert!(generated < 4000, "{generated}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // Its KV is freed.
    let after = wait_idle(s.addr, Duration::from_secs(60));
    assert_eq!(metric(&after, "folio_kv_blocks_used"), Some(0.0), "{after}");
    assert_eq!(
        metric(&after, "folio_requests_running"),
        Some(0.0),
        "{after}"
    );

    // 2. Non-streaming: the text so far, finish_reason "timeout".
    let mut body = long.clone();
    body["stream"] = json!(false);
    body.as_object_mut().unwrap().remove("stream_options");
    let r = post(s.addr, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "timeout", "{v}");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() < 4000);
    let after = wait_idle(s.addr, Duration::from_secs(60));
    assert_eq!(metric(&after, "folio_kv_blocks_used"), Some(0.0), "{after}");
    assert!(
        metric(&after, "folio_requests_finished_total{reason=\"timeout\"}").unwrap() >= 2.0,
        "{after}"
    );

    // 3. Drain: with a request in flight, /health answers 503 and new work 503 until
    //    it ends; then the server stops.
    // Runs until the request timeout ends it, well after the signal below.
    let (mut sock, seen) = open_stream(s.addr, &long, 1);
    let mut seen = seen.into_bytes();
    assert_eq!(get(s.addr, "/health").status, 200);
    s.stop.lock().unwrap().take().unwrap().send(()).unwrap();
    let start = Instant::now();
    let h = loop {
        let h = get(s.addr, "/health");
        if h.status == 503 || start.elapsed() > Duration::from_secs(5) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(h.status, 503, "{}", h.text());
    assert_eq!(h.json()["error"]["code"], "shutting_down");
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 1}),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    // The in-flight stream still ends properly.
    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest);
    seen.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("data: [DONE]"), "{text}");
    let result = s
        .stopped
        .lock()
        .unwrap()
        .recv_timeout(Duration::from_secs(60))
        .expect("serve_listener returns");
    assert!(result.is_ok(), "{result:?}");
    assert!(TcpStream::connect(s.addr).is_err(), "listener still open");
}
