//! Bounded memory for prompt handling, against a spawned `folio serve` (so that its peak
//! RSS can be read from /proc/PID/status): 40 concurrent 3.8 MB prompts, completions and
//! chat, all get a 400 naming the limit, and the peak RSS stays under the bound the README
//! documents (before: 40 such prompts took the process from 2.5 to 12.4 GB).

#![cfg(target_os = "linux")]

use folio_testkit::http as common;

use serde_json::json;
use std::process::Command;
use std::sync::{Arc, Barrier};

use folio_testkit::child::status_bytes;

const MB: u64 = 1 << 20;
/// Prompt text per request.
const PROMPT_BYTES: usize = 3_800_000;
const CLIENTS: usize = 40;

#[test]
fn forty_concurrent_large_prompts_get_400s_and_rss_stays_bounded() {
    let model = match folio_fetch::test_model() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: no test model ({e:#})");
            return;
        }
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_folio"));
    cmd.args(["serve", "--port", "0", "--kv-cache-bytes", "64m", "--model"])
        .arg(&model);
    let serve = folio_testkit::child::serve(cmd);
    let (pid, addr) = (serve.pid(), serve.addr);
    let max_model_len = common::get(addr, "/v1/models").json()["data"][0]["max_model_len"]
        .as_u64()
        .unwrap();

    let idle_rss = status_bytes(pid, "VmRSS");
    let startup_peak = status_bytes(pid, "VmHWM");

    // Half completions, half chat; ordinary English (~4.5 bytes per token).
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(PROMPT_BYTES / 45 + 1)
        [..PROMPT_BYTES]
        .to_string();
    let completion = Arc::new(
        json!({"prompt": text, "max_tokens": 1})
            .to_string()
            .into_bytes(),
    );
    let chat = Arc::new(
        json!({"messages": [{"role": "user", "content": text}], "max_tokens": 1})
            .to_string()
            .into_bytes(),
    );
    drop(text);
    let body_bytes = chat.len() as u64;
    let gate = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (path, body) = if i % 2 == 0 {
                ("/v1/completions", completion.clone())
            } else {
                ("/v1/chat/completions", chat.clone())
            };
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.wait();
                (path, common::request(addr, "POST", path, &body))
            })
        })
        .collect();
    for c in clients {
        let (path, r) = c.join().expect("client");
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        let e = r.json()["error"].clone();
        assert_eq!(e["code"], "context_length_exceeded", "{path}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains("bytes of text")
                && msg.contains(&format!(
                    "one request can use at most {max_model_len} tokens"
                )),
            "{path}: {msg}"
        );
    }
    let peak = status_bytes(pid, "VmHWM");
    assert_eq!(common::get(addr, "/health").status, 200);
    drop(serve);

    // The README's bound: idle RSS + twice the bodies in flight (a body is read, then
    // parsed or waits for its turn) + per core one tokenization of the most text that
    // can pass the length check (~130 bytes per byte, at most 81 bytes per token for this
    // model) + 64 MB of allocator slack.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let per_job = 130 * 81 * max_model_len;
    let bound = idle_rss + 2 * CLIENTS as u64 * body_bytes + cores * per_job + 64 * MB;
    eprintln!(
        "idle RSS {} MB, startup peak {} MB, peak {} MB, bound {} MB ({cores} cores)",
        idle_rss / MB,
        startup_peak / MB,
        peak / MB,
        bound / MB
    );
    assert!(
        peak <= startup_peak.max(bound),
        "peak RSS {} MB over the bound {} MB (idle {} MB)",
        peak / MB,
        bound / MB,
        idle_rss / MB
    );
}
