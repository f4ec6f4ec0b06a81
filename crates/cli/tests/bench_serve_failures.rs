//! `folio bench serve` against a base URL where nothing listens: every request fails, so
//! the command exits non-zero, says how many failed and why, and writes no result file
//! (before, it exited 0 with a result file of 48 failed requests).

use std::process::Command;

/// A loopback port nothing listens on (bound by the OS, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn bench(port: u16, json: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bench", "serve", "--base-url"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--model", "m", "--num-requests", "6", "--no-progress"])
        .arg("--json")
        .arg(json)
        .args(extra)
        .output()
        .expect("run folio")
}

#[test]
fn all_requests_failing_exits_non_zero_naming_the_failures() {
    let port = closed_port();
    let dir = std::env::temp_dir().join(format!("folio-bench-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("result.json");

    let out = bench(port, &json, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "exit 0 though every request failed: {stderr}"
    );
    assert!(
        stderr.contains("6 of 6 requests failed") && stderr.contains("--allow-failures"),
        "{stderr}"
    );
    assert!(
        stderr.to_lowercase().contains("refused") || stderr.contains("connect"),
        "the first errors are quoted: {stderr}"
    );
    assert!(!json.exists(), "no result file for a failed run");

    // With --allow-failures the run is kept as before.
    let out = bench(port, &json, &["--allow-failures"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
