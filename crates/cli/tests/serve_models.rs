//! `folio serve` with several models, spawned as a child (its RSS read from
//! /proc/PID/status): `--model NAME=PATH` names models, the first one answers requests
//! without `model`, `--keep-alive 0` unloads a model when its request ends, and the
//! process's RSS then returns to within a few tens of MB of before it loaded.

#![cfg(target_os = "linux")]

use folio_testkit::http as common;
use serde_json::json;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

fn rss(pid: u32) -> u64 {
    folio_testkit::child::status_bytes(pid, "VmRSS")
}

fn status(addr: SocketAddr, model: &str) -> String {
    let list = common::get(addr, "/v1/models").json();
    let card = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == model)
        .cloned()
        .unwrap_or_else(|| panic!("{model} not in {list}"));
    card["status"]["value"].as_str().unwrap().to_string()
}

#[test]
fn named_models_load_on_use_and_unload_after_keep_alive_zero() {
    let model = match folio_fetch::test_model() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: no test model ({e:#})");
            return;
        }
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_folio"));
    cmd.args([
        "serve",
        "--port",
        "0",
        "--kv-cache-bytes",
        "64m",
        "--keep-alive",
        "0",
    ])
    .arg("--model")
    .arg(format!("smol={}", model.display()))
    .arg("--model")
    .arg(format!("again={}", model.display()));
    let serve = folio_testkit::child::serve(cmd);
    let (pid, addr, line) = (serve.pid(), serve.addr, &serve.line);
    assert!(line.ends_with("loaded on first use: smol, again"), "{line}");
    assert_eq!(status(addr, "smol"), "unloaded");
    let before = rss(pid);
    // No `model`: the first --model.
    let r = common::post_ok(
        addr,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r["model"], "smol");
    let r = common::post_ok(
        addr,
        "/v1/completions",
        &json!({"model": "again", "prompt": "Hi", "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r["model"], "again");
    // keep-alive 0: both go as their requests end, and their memory with them.
    let start = Instant::now();
    let mut after = rss(pid);
    while (status(addr, "smol") != "unloaded"
        || status(addr, "again") != "unloaded"
        || after > before + (40 << 20))
        && start.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(100));
        after = rss(pid);
    }
    assert_eq!(status(addr, "smol"), "unloaded");
    assert_eq!(status(addr, "again"), "unloaded");
    assert!(
        after <= before + (40 << 20),
        "RSS {} MB after unloading, {} MB before loading",
        after >> 20,
        before >> 20
    );
    let m = common::get(addr, "/metrics").text();
    assert!(!m.contains("folio_kv_blocks_total"), "{m}");
}
