//! Memory a server spends on clients that do not keep up, over real HTTP: streams whose
//! clients stop reading are cut once `--stream-buffer-bytes` of their output waits (their
//! KV blocks back in the pool while the clients are still connected), RSS stays under the
//! README's bound, and a token-id prompt far past the context is refused without the
//! parse's memory blowing past the prompt-memory bound.

use folio_testkit::http as common;

use folio_server::ServerOptions;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// This process's resident set (the server runs in it), in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Samples [`rss`] every millisecond until dropped; `peak()` is the largest seen.
struct PeakRss {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl PeakRss {
    fn start() -> PeakRss {
        let peak = Arc::new(AtomicU64::new(rss()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        PeakRss { peak, stop }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

const MB: u64 = 1 << 20;

/// The tests measure this process's RSS: one at a time.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static L: std::sync::Mutex<()> = std::sync::Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn slow_readers_are_cut_and_their_kv_and_memory_returned() {
    let _alone = alone();
    let kv_bytes: usize = 96 << 20;
    let cfg = folio_engine::EngineConfig {
        kv_cache_bytes: kv_bytes,
        ..Default::default()
    };
    let Some(e) = common::engine_with(cfg, None) else {
        return;
    };
    let buffer = 16 << 10;
    let srv = common::start(
        e,
        ServerOptions {
            stream_buffer_bytes: buffer,
            idle_timeout: Duration::from_secs(30),
            ..ServerOptions::default()
        },
    );
    let addr = srv.addr;
    let body = json!({"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": true,
        "logprobs": 20, "stream": true})
    .to_string();
    // Warm up, then measure idle.
    common::post_ok(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 4}),
    );
    let idle = rss();
    let peak = PeakRss::start();
    let streams = 20;
    let clients: Vec<TcpStream> = (0..streams)
        .map(|_| {
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            // A small receive window: the client's kernel soaks up little of the stream.
            sock.set_recv_buffer_size(4096).unwrap();
            sock.connect(&addr.into()).unwrap();
            let mut s: TcpStream = sock.into();
            s.write_all(&common::raw_request_with(
                "POST",
                "/v1/completions",
                &[],
                body.as_bytes(),
                false,
            ))
            .unwrap();
            s
        })
        .collect();
    // Nobody reads. Before, every stream ran on to max_tokens (minutes here), holding its
    // KV blocks; now each is cut once its output waiting passes the buffer.
    let t = Instant::now();
    let metrics = || common::get(addr, "/metrics").text();
    let (mut cut, mut used) = (0.0, f64::NAN);
    while t.elapsed() < Duration::from_secs(50) {
        let m = metrics();
        cut = common::metric(&m, "folio_requests_finished_total{reason=\"slow_reader\"}")
            .unwrap_or(0.0);
        used = common::metric(&m, "folio_kv_blocks_used").unwrap_or(f64::NAN);
        if cut >= streams as f64 && used == 0.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(cut, streams as f64, "streams cut after {:?}", t.elapsed());
    assert_eq!(used, 0.0, "KV blocks still held by unread streams");
    // The README's bound: idle + the KV pool + per stream its buffer and the frames in
    // flight to the socket (under 1 MB) + 64 MB of allocator slack.
    let bound = idle + kv_bytes as u64 + streams as u64 * (buffer as u64 + MB) + 64 * MB;
    assert!(
        peak.peak() <= bound,
        "peak RSS {} MB over the bound {} MB (idle {} MB)",
        peak.peak() / MB,
        bound / MB,
        idle / MB
    );
    // A client that reads now gets what was held, the cut, and the end of the stream.
    let mut clients = clients;
    for s in clients.iter_mut().take(3) {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        while !String::from_utf8_lossy(&buf).contains("data: [DONE]") {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf);
        assert!(
            text.contains("\"finish_reason\":\"slow_reader\""),
            "no slow_reader finish in {} bytes",
            buf.len()
        );
        assert!(text.contains("data: [DONE]"));
    }
    drop(clients);
    std::thread::sleep(Duration::from_millis(500));
    let m = metrics();
    assert_eq!(common::metric(&m, "folio_kv_blocks_used"), Some(0.0));
    assert_eq!(common::metric(&m, "folio_requests_running"), Some(0.0));
    assert!(
        rss() <= bound,
        "RSS {} MB after the clients left",
        rss() / MB
    );
    // The server still serves.
    common::post_ok(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
}

#[test]
fn a_huge_token_id_prompt_is_refused_within_the_prompt_memory_bound() {
    let _alone = alone();
    let Some(e) = common::engine_with(folio_engine::EngineConfig::default(), None) else {
        return;
    };
    let srv = common::start(e, ServerOptions::default());
    // 31.5 MB of `1,`: ~15.7 million token ids, under the 32 MiB body limit.
    let n = 15_700_000;
    let mut body = String::with_capacity(2 * n + 64);
    body.push_str("{\"max_tokens\": 1, \"prompt\": [");
    for i in 0..n {
        body.push_str(if i + 1 < n { "1," } else { "1" });
    }
    body.push_str("]}");
    let raw = common::raw_request_with("POST", "/v1/completions", &[], body.as_bytes(), true);
    drop(body);
    let idle = rss();
    let peak = PeakRss::start();
    let r = common::send_raw(srv.addr, &raw);
    let peak = peak.peak();
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.json()["error"].clone();
    assert_eq!(e["param"], "prompt", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("more than 49152 items"), "{msg}");
    // The README's bound: idle + 2 × the body in flight + cores × 130 × 81 × max_model_len
    // + 64 MB. The test's own copy of the request is already in `idle`. Before, the parse
    // alone took ~1.2 GB.
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let bound = idle + 2 * raw.len() as u64 + cores * 130 * 81 * 8192 + 64 * MB;
    assert!(
        peak <= bound,
        "peak RSS {} MB over the bound {} MB (idle {} MB)",
        peak / MB,
        bound / MB,
        idle / MB
    );
    // A token prompt that fits is still served.
    let ok = common::post_ok(
        srv.addr,
        "/v1/completions",
        &json!({"prompt": vec![1; 100], "max_tokens": 1}),
    );
    assert_eq!(ok["usage"]["prompt_tokens"], 100);
}
