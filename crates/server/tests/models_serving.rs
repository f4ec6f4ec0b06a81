//! Many models behind one server (`models::Registry`), over real HTTP: each model answers
//! with its own greedy text, `--models-max` unloads the least recently used idle model and
//! never one serving a request, a request for a loading model waits for the one load, a
//! missing model is a 404 naming it, keep-alive 0 unloads, and an unloaded model's lines
//! leave /metrics.

mod models_support;

use folio_testkit::http::{self, assert_error, get, post, post_ok};
use models_support::*;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tests load real models: one at a time keeps memory and timing sane.
static SERIAL: Mutex<()> = Mutex::new(());

const PROMPTS: [&str; 2] = ["The capital of France is", "Once upon a time"];

#[test]
fn interleaved_requests_get_each_models_own_text() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((smol, gemma)) = cached() else {
        return;
    };
    let (_dir, tiny) = tiny_file("interleaved");
    let models = [("smol", &smol), ("gemma", &gemma), ("tiny", &tiny)];
    // What each model says alone, on a single-model server.
    let mut want = Vec::new();
    for (name, path) in models {
        let s = http::start(engine(path, name), folio_server::ServerOptions::default());
        want.push(PROMPTS.map(|p| greedy(s.addr, None, p)));
        s.stop.lock().unwrap().take().unwrap().send(()).unwrap();
        let _ = s.stopped.lock().unwrap().recv();
    }
    let reg = folio_server::models::Registry::new(
        sources(&models),
        Some("smol".into()),
        loader(Arc::new(AtomicUsize::new(0)), Duration::ZERO),
        policy(0, None),
    );
    let (addr, _stop) = serve(reg);
    for name in ["smol", "gemma", "tiny"] {
        assert_eq!(status(addr, name), "unloaded");
    }
    // All three at once, each prompt twice, interleaved.
    let handles: Vec<_> = (0..2)
        .flat_map(|_| {
            models.iter().enumerate().flat_map(move |(k, (name, _))| {
                PROMPTS.iter().enumerate().map(move |(j, p)| {
                    let name = name.to_string();
                    let p = p.to_string();
                    std::thread::spawn(move || (k, j, greedy(addr, Some(&name), &p)))
                })
            })
        })
        .collect();
    for h in handles {
        let (k, j, text) = h.join().unwrap();
        assert_eq!(text, want[k][j], "model {} prompt {j}", models[k].0);
    }
    // No `model`: the default (the first given).
    assert_eq!(greedy(addr, None, PROMPTS[0]), want[0][0]);
    for name in ["smol", "gemma", "tiny"] {
        assert_eq!(status(addr, name), "loaded");
    }
    // A model nobody serves: 404 naming it (and what is served).
    let r = post(
        addr,
        "/v1/completions",
        &json!({"model": "nope", "prompt": "x", "max_tokens": 1}),
    );
    assert_error(
        &r,
        404,
        "model_not_found",
        &["`nope`", "`smol`", "`gemma`", "`tiny`"],
    );
    let r = post(addr, "/models/load", &json!({"model": "nope"}));
    assert_error(&r, 404, "model_not_found", &["`nope`"]);
    // /models is /v1/models (llama-server router mode).
    assert_eq!(get(addr, "/models").json(), get(addr, "/v1/models").json());
    // Per-model /metrics families, labelled; one header per family.
    let m = get(addr, "/metrics").text();
    for name in ["smol", "gemma", "tiny"] {
        let line = format!("folio_kv_blocks_total{{model_name=\"{name}\"}} ");
        assert!(m.contains(&line), "{line} not in /metrics");
    }
    assert_eq!(m.matches("# TYPE folio_kv_blocks_total gauge").count(), 1);
    assert_eq!(
        m.matches("# TYPE folio_http_rejected_total counter")
            .count(),
        1
    );
    assert!(m.contains("folio_http_rejected_total{status=\"429\"} 0\n"));
}

#[test]
fn models_max_unloads_the_lru_idle_model_never_a_busy_one() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((smol, gemma)) = cached() else {
        return;
    };
    let (_dir, tiny) = tiny_file("max");
    let loads = Arc::new(AtomicUsize::new(0));
    let reg = folio_server::models::Registry::new(
        sources(&[("smol", &smol), ("gemma", &gemma), ("tiny", &tiny)]),
        None,
        loader(loads.clone(), Duration::ZERO),
        policy(2, None),
    );
    let (addr, _stop) = serve(reg);
    // smol serves a long stream from here on: it is the least recently used, but busy.
    let (mut sock, _) = http::open_stream(
        addr,
        &json!({"model": "smol", "prompt": "Count:", "max_tokens": 1000, "ignore_eos": true, "stream": true}),
        1,
    );
    greedy(addr, Some("gemma"), PROMPTS[0]);
    assert_eq!(
        (status(addr, "smol"), status(addr, "gemma")),
        ("loaded".into(), "loaded".into())
    );
    // A third model: gemma (idle) goes, smol (streaming) stays.
    greedy(addr, Some("tiny"), PROMPTS[0]);
    wait_status(addr, "gemma", "unloaded");
    assert_eq!(status(addr, "smol"), "loaded");
    assert_eq!(status(addr, "tiny"), "loaded");
    // smol's stream was still running all along (it is older than gemma's last use, so
    // only being busy kept it).
    let m = get(addr, "/metrics").text();
    assert!(
        m.contains("folio_requests_running{model_name=\"smol\"} 1.0"),
        "{m}"
    );
    // The stream ends whole.
    let mut rest = String::new();
    use std::io::Read;
    sock.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("data: [DONE]"), "{rest}");
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    // gemma again: tiny is now the least recently used (smol was in use until its
    // stream ended, after tiny's request).
    greedy(addr, Some("gemma"), PROMPTS[0]);
    wait_status(addr, "tiny", "unloaded");
    assert_eq!(status(addr, "smol"), "loaded");
    assert_eq!(loads.load(Ordering::SeqCst), 4);
}

#[test]
fn a_request_for_a_loading_model_waits_for_the_one_load() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, tiny) = tiny_file("loading");
    let loads = Arc::new(AtomicUsize::new(0));
    let reg = folio_server::models::Registry::new(
        sources(&[("tiny", &tiny)]),
        None,
        loader(loads.clone(), Duration::from_millis(1500)),
        policy(0, None),
    );
    let (addr, _stop) = serve(reg);
    let first = std::thread::spawn(move || greedy(addr, Some("tiny"), "ab"));
    wait_status(addr, "tiny", "loading");
    let second = std::thread::spawn(move || greedy(addr, None, "ab"));
    let (a, b) = (first.join().unwrap(), second.join().unwrap());
    assert_eq!(a, b);
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(status(addr, "tiny"), "loaded");
}

#[test]
fn keep_alive_zero_unloads_and_the_models_metrics_go() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, tiny) = tiny_file("keepalive");
    let (_dir_b, other) = tiny_file("keepalive-b");
    let reg = folio_server::models::Registry::new(
        sources(&[("tiny", &tiny), ("other", &other)]),
        None,
        loader(Arc::new(AtomicUsize::new(0)), Duration::ZERO),
        policy(0, Some(Duration::ZERO)),
    );
    let (addr, _stop) = serve(reg.clone());
    // Several models and no `model`: the field is required.
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1}),
    );
    assert_error(
        &r,
        400,
        "invalid_parameter",
        &["model", "`tiny`", "`other`"],
    );
    greedy(addr, Some("tiny"), "ab");
    wait_status(addr, "tiny", "unloaded");
    let m = get(addr, "/metrics").text();
    assert!(!m.contains("model_name=\"tiny\""), "{m}");
    assert!(!m.contains("folio_kv_blocks_total"), "{m}");
    // Ollama's per-request keep_alive: this model stays now.
    reg.keep_alive("other", Duration::from_secs(60));
    assert_eq!(
        post_ok(addr, "/models/load", &json!({"model": "other"})),
        json!({"success": true})
    );
    assert_eq!(status(addr, "other"), "loaded");
    let m = get(addr, "/metrics").text();
    assert!(
        m.contains("folio_kv_blocks_total{model_name=\"other\"} "),
        "{m}"
    );
    assert_eq!(
        post_ok(addr, "/models/unload", &json!({"model": "other"})),
        json!({"success": true})
    );
    wait_status(addr, "other", "unloaded");
    assert!(!get(addr, "/metrics")
        .text()
        .contains("model_name=\"other\""));
}
