//! `folio serve` with several models, spawned as a child (its RSS read from
//! /proc/PID/status): `--model NAME=PATH` names models, the first one answers requests
//! without `model`, `--keep-alive 0` unloads a model when its request ends, and the
//! process's RSS then returns to within a few tens of MB of before it loaded.

#![cfg(target_os = "linux")]

use folio_testkit::http as common;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The spawned server, killed when the test ends (also on a failed assertion).
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args([
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
        .arg(format!("again={}", model.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("folio serve starts");
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout");
    let _serve = Serve(child);
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("folio: serving"))
        .expect("the serving line");
    std::thread::spawn(move || lines.for_each(drop));
    assert!(line.ends_with("loaded on first use: smol, again"), "{line}");
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split("/v1").next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let start = Instant::now();
    while common::get(addr, "/health").status != 200 {
        assert!(start.elapsed() < Duration::from_secs(60), "not healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
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
