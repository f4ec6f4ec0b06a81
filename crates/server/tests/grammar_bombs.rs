//! Grammars and schemas built to hurt the server: rule and `$ref` chains deep enough to
//! overflow a compile thread's stack, objects with thousands of properties, floods of
//! expensive compiles, and clients that leave while theirs runs. Each gets an answer (a
//! compiled constraint, or a 400/503 naming the limit), the server keeps serving, a
//! concurrent stream stays smooth and memory stays bounded. Skips without the model.

use folio_testkit::http as common;

use common::{post, Server};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Compiles at once in this test's server (fixed, whatever the cores), and waiting.
const SLOTS: usize = 1;
const QUEUE: usize = 4;
/// The wait and the compile together.
const BUDGET: Duration = Duration::from_secs(10);

/// How much the process may grow while ten expensive compiles are submitted at once: one
/// compile at a time (~60 MB for a 4,900-property schema, ~200 MB at the limits), the ten
/// bodies and matchers, and allocator slack.
const RSS_GROWTH_BOUND_MB: f64 = 600.0;

fn server() -> Option<&'static Server> {
    static S: std::sync::OnceLock<Option<Server>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        common::engine().map(|e| {
            let opts = folio_server::ServerOptions {
                grammar_compiles: SLOTS,
                grammar_compile_queue: QUEUE,
                grammar_compile_budget: BUDGET,
                ..Default::default()
            };
            common::start(e, opts)
        })
    })
    .as_ref()
}

/// The tests measure CPU, memory and latency of the one process: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` chained rules after `start` (n + 2 definitions).
fn lark_chain(n: usize) -> String {
    let mut g = String::from("start: r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i}: \"a\" r{}\n", i + 1));
    }
    g + &format!("r{n}: \"b\"\n")
}

fn gbnf_chain(n: usize) -> String {
    let mut g = String::from("root ::= r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i} ::= \"a\" r{}\n", i + 1));
    }
    g + &format!("r{n} ::= \"b\"\n")
}

/// `n` definitions each referring to the next (n + 1 `$ref`s).
fn defs_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"x": {"$ref": format!("#/$defs/d{}", i + 1)}},
                   "required": ["x"]}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn object_of(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect();
    json!({"type": "object", "properties": props})
}

fn completion(fields: Value) -> Value {
    let mut body = json!({"prompt": "The answer:", "max_tokens": 2, "temperature": 0});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// A plain request still gets its completion.
fn assert_serving(s: &Server) {
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 4, "guided_choice": ["yes", "no"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A 400 or 503 says which limit it hit.
fn assert_names_a_limit(status: u16, body: &Value, what: &str) {
    let m = body["error"]["message"].as_str().unwrap_or("");
    assert!(
        (status == 400 || status == 503) && (m.contains("limit") || m.contains("budget")),
        "{what}: {status} {body}"
    );
}

fn vm_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

/// CPU seconds this process has used (user + system).
fn cpu_s() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) in clock ticks, 100 a second on Linux.
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

#[test]
fn chains_and_wide_objects_are_answered_and_the_server_keeps_serving() {
    let Some(s) = server() else { return };
    let _g = serial();
    let cases = [
        (
            "700-rule Lark chain",
            json!({"guided_grammar": lark_chain(700)}),
        ),
        ("700-rule GBNF chain", json!({"grammar": gbnf_chain(700)})),
        (
            "300-deep $defs chain",
            json!({"guided_json": defs_chain(300)}),
        ),
        (
            "8,000-property object",
            json!({"guided_json": object_of(8000)}),
        ),
        (
            "the allowed sizes: 600 rules",
            json!({"guided_grammar": lark_chain(600)}),
        ),
        ("200 $defs", json!({"json_schema": defs_chain(200)})),
        ("4,000 properties", json!({"guided_json": object_of(4000)})),
    ];
    for (what, fields) in cases {
        let t = Instant::now();
        let r = post(s.addr, "/v1/completions", &completion(fields));
        eprintln!("{what}: {} in {:.2} s", r.status, t.elapsed().as_secs_f64());
        if r.status != 200 {
            assert_names_a_limit(r.status, &r.json(), what);
        }
        assert_serving(s);
    }
    // What the documented limits allow compiles; a little more is a 400 naming the limit.
    for (what, fields, named) in [
        (
            "10,001 rules",
            json!({"guided_grammar": lark_chain(9_999)}),
            "grammar rules",
        ),
        (
            "a 2 MiB GBNF",
            json!({"grammar": format!("root ::= \"{}\"", "x".repeat(2 << 20))}),
            "grammar bytes",
        ),
        (
            "1,001 $refs",
            json!({"guided_json": defs_chain(1000)}),
            "$refs",
        ),
        (
            "5,001 properties",
            json!({"guided_json": object_of(5001)}),
            "schema properties",
        ),
    ] {
        let t = Instant::now();
        let r = post(s.addr, "/v1/completions", &completion(fields));
        assert_eq!(r.status, 400, "{what}: {}", r.text());
        let m = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(m.contains(named) && m.contains("limit"), "{what}: {m}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{what}: refused slowly"
        );
    }
    for (what, fields) in [
        ("10,000 rules", json!({"guided_grammar": lark_chain(9_998)})),
        ("1,000 $refs", json!({"guided_json": defs_chain(999)})),
    ] {
        let r = post(s.addr, "/v1/completions", &completion(fields));
        assert_eq!(r.status, 200, "{what}: {}", r.text());
    }
    assert_serving(s);
}

/// Reads SSE frames from `sock` until `stop`, returning the longest gap between frames.
fn worst_gap(mut sock: std::net::TcpStream, stop: &std::sync::atomic::AtomicBool) -> Duration {
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let mut last = Instant::now();
    let mut worst = Duration::ZERO;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let n = sock.read(&mut buf).expect("the stream keeps coming");
        assert!(n > 0, "the stream ended while the compiles ran");
        if String::from_utf8_lossy(&buf[..n]).contains("data: ") {
            worst = worst.max(last.elapsed());
            last = Instant::now();
        }
    }
    worst
}

#[test]
fn ten_expensive_compiles_at_once_leave_a_stream_smooth_and_memory_bounded() {
    let Some(s) = server() else { return };
    let _g = serial();
    // Warm: the token environment is built on the first compile.
    assert_serving(s);
    let rss0 = vm_rss_mb();
    let (sock, _) = common::open_stream(
        s.addr,
        &json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true,
                "stream": true, "temperature": 0}),
        2,
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let peak = Mutex::new(rss0);
    std::thread::scope(|sc| {
        let reader = sc.spawn(|| worst_gap(sock, &stop));
        let sampler = sc.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut p = peak.lock().unwrap();
                *p = p.max(vm_rss_mb());
                drop(p);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // Each ~1.3 s of one core and ~60 MB to compile, just under the property limit.
        let t0 = Instant::now();
        let answers: Vec<_> = (0..10)
            .map(|i| {
                let body = completion(json!({"guided_json": object_of(4900 + i)}));
                sc.spawn(move || {
                    let r = post(s.addr, "/v1/completions", &body);
                    (r.status, r.json(), t0.elapsed())
                })
            })
            .collect();
        let answers: Vec<_> = answers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let gap = reader.join().unwrap();
        sampler.join().unwrap();
        let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
        for (i, (status, body, took)) in answers.iter().enumerate() {
            *by_status.entry(*status).or_default() += 1;
            if *status != 200 {
                assert_names_a_limit(*status, body, &format!("compile {i}"));
            }
            // The budget bounds the wait and the compile; generation takes two tokens.
            assert!(
                *took < BUDGET + Duration::from_secs(5),
                "compile {i} answered after {took:?}"
            );
        }
        let peak = *peak.lock().unwrap();
        eprintln!(
            "answers {by_status:?}; worst inter-token gap {:.0} ms; RSS {rss0:.0} MB → peak {peak:.0} MB",
            gap.as_secs_f64() * 1e3
        );
        assert!(
            by_status.get(&200).copied().unwrap_or(0) >= 1,
            "some compile ran"
        );
        assert!(
            by_status.get(&503).copied().unwrap_or(0) >= 1,
            "the queue of {QUEUE} overflowed: {by_status:?}"
        );
        assert!(
            gap < Duration::from_secs(1),
            "worst inter-token gap {gap:?}"
        );
        assert!(
            peak - rss0 < RSS_GROWTH_BOUND_MB,
            "RSS grew from {rss0:.0} MB to {peak:.0} MB"
        );
    });
    assert_serving(s);
}

#[test]
fn compiles_of_departed_clients_stop_using_the_cpu() {
    let Some(s) = server() else { return };
    let _g = serial();
    assert_serving(s);
    // One compile runs, the others wait for the slot; then every client leaves.
    let socks: Vec<_> = (0..1 + QUEUE)
        .map(|i| {
            let body = completion(json!({"guided_json": object_of(4900 + i)})).to_string();
            let mut sock = std::net::TcpStream::connect(s.addr).unwrap();
            sock.write_all(&common::raw_request(
                "POST",
                "/v1/completions",
                body.as_bytes(),
            ))
            .unwrap();
            sock
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(socks);
    // The running compile ends (~1.3 CPU s); the waiting ones never start. Had they run,
    // they would spend ~5 CPU s more, one after another. Counting CPU seconds until the
    // process goes quiet, rather than the CPU used in a fixed wall-clock window, keeps the
    // bar independent of how much of the host this test gets: on a contended host the
    // running compile takes longer in wall time but not in CPU time.
    let c0 = cpu_s();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut last, mut quiet) = (c0, 0);
    while quiet < 2 {
        std::thread::sleep(Duration::from_millis(500));
        let now = cpu_s();
        // Quiet: at most 3 clock ticks (30 ms) of CPU in half a second.
        quiet = if now - last <= 0.03 { quiet + 1 } else { 0 };
        last = now;
        assert!(
            Instant::now() < deadline,
            "still busy 60 s after the clients left: {:.2} CPU s",
            now - c0
        );
    }
    let used = last - c0;
    assert!(
        used < 3.0,
        "{used:.2} CPU s used after the clients left, before the process went quiet"
    );
    assert_serving(s);
}
