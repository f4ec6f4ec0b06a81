//! `folio run` and `folio ps` on the built binary: a prompt's answer is `folio generate
//! --chat`'s greedy text; the chat in a terminal (driven through a pseudo-terminal by
//! scripts/pty_chat.py) answers turn after turn with the conversation so far, in-process
//! and through a running server alike; Ctrl-C stops an answer and drops that turn,
//! `/clear` forgets, `/bye` and Ctrl-D exit 0; `ps` lists the server's loaded model.

use folio_testkit::child::Serve;
use folio_testkit::http as common;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_folio");
const MODEL: &str = "smollm2-135m";
const Q1: &str = "What is the capital of France?";
const Q2: &str = "And of Italy?";
const LONG: &str = "Count from 1 to 100, one number per line.";

/// Whether the catalogue's default model is in the cache (else the test is skipped).
fn have_model() -> bool {
    let e = folio_fetch::catalog::default_entry();
    if folio_fetch::state(e) == folio_fetch::State::Missing {
        eprintln!("SKIPPED: {MODEL} is not in the model cache (`folio pull {MODEL}`)");
        return false;
    }
    true
}

/// A loopback port nothing listens on (bound by the OS, then released): `run` then
/// finds no server and runs the model in-process.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port().to_string()
}

fn folio(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run folio")
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

/// `folio run MODEL PROMPT` in-process, 64 tokens at most.
fn run_once(prompt: &str) -> String {
    let port = closed_port();
    stdout_ok(&folio(&[
        "run",
        MODEL,
        prompt,
        "--max-tokens",
        "64",
        "--port",
        &port,
    ]))
}

#[test]
fn a_prompt_prints_the_same_greedy_answer_as_generate() {
    if !have_model() {
        return;
    }
    let run = run_once(Q1);
    let generate = stdout_ok(&folio(&[
        "generate",
        "--model",
        MODEL,
        "--chat",
        "--prompt",
        Q1,
        "--max-tokens",
        "64",
    ]));
    assert_eq!(run, generate);
    assert!(run.len() > 2 && run.ends_with('\n'), "{run:?}");
}

fn serve() -> Serve {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--port", "0", "--model", MODEL]);
    folio_testkit::child::serve(cmd)
}

/// Runs `folio run MODEL --max-tokens 64 --port PORT` in a pseudo-terminal through `steps`.
fn chat(port: &str, steps: Value) -> (Vec<String>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pty_chat.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(steps.to_string())
        .args([BIN, "run", MODEL, "--max-tokens", "64", "--port", port])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pty_chat.py failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["exit"], 0, "{v}");
    let outputs = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    (outputs, v["start"].as_str().unwrap().to_string())
}

/// Sum of every `vllm:request_success_total` sample.
fn requests_done(addr: SocketAddr) -> f64 {
    common::get(addr, "/metrics")
        .text()
        .lines()
        .filter(|l| l.starts_with("vllm:request_success_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn the_terminal_chat_keeps_history_stops_on_ctrl_c_and_matches_the_server() {
    if !have_model() {
        return;
    }
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no python3 to drive the pseudo-terminal");
        return;
    }
    let alone = run_once(Q1);
    let q2_alone = run_once(Q2);
    let local = closed_port();

    // In-process: two turns around a stopped one, Ctrl-C at the prompt, a typo, /clear.
    let (a, start) = chat(
        &local,
        json!([
            {"send": Q1},
            {"send": LONG, "stop": true},
            {"ctrl_c": true},
            {"send": "/what"},
            {"send": Q2},
            {"send": "/clear"},
            {"send": Q1},
            {"send": "/bye"},
        ]),
    );
    assert_eq!(start, "");
    // An answer, then a blank line before the next prompt.
    assert_eq!(a[0], format!("{alone}\n"));
    // The terminal echoes ^C when the key is pressed, which may fall among the last
    // pieces of text written before the answer stopped.
    assert!(a[1].contains("^C") && a[1].ends_with('\n'), "{:?}", a[1]);
    let stopped = a[1].replacen("^C", "", 1);
    let stopped = stopped.strip_suffix('\n').unwrap();
    assert_eq!(a[2], "^C\nUse Ctrl + d or /bye to exit.\n");
    assert_eq!(a[3], "Unknown command '/what'. Type /? for help\n");
    assert_eq!(a[5], "Cleared session context\n");
    assert_eq!(
        a[6], a[0],
        "after /clear the first question is answered afresh"
    );
    assert_eq!(a[7], "");

    // The stopped turn left no trace: Q2 after Q1 alone, ended by Ctrl-D.
    let (c, _) = chat(&local, json!([{"send": Q1}, {"send": Q2}, {"eof": true}]));
    assert_eq!(c[0], a[0]);
    assert_eq!(c[1], a[4]);
    assert_eq!(c[2], "\n");
    // The second answer saw the first turn.
    assert_ne!(a[4], format!("{q2_alone}\n"));

    // Through a running server: the same answers; the long one in full, which the stopped
    // one is a strict beginning of.
    let server = serve();
    let port = server.addr.port().to_string();
    let before = requests_done(server.addr);
    let (b, start) = chat(
        &port,
        json!([{"send": Q1}, {"send": LONG}, {"send": "/bye"}]),
    );
    assert_eq!(start, "", "no note about running in-process");
    assert_eq!(requests_done(server.addr) - before, 2.0);
    assert_eq!(b[0], a[0]);
    let full = b[1].strip_suffix("\n\n").unwrap();
    assert!(
        !stopped.is_empty() && stopped.len() < full.len() && full.starts_with(stopped),
        "stopped {stopped:?} is not a strict beginning of {full:?}"
    );

    // `folio ps` lists the server's model, loaded.
    let max_model_len = common::get(server.addr, "/v1/models").json()["data"][0]["max_model_len"]
        .as_u64()
        .unwrap();
    let ps = stdout_ok(&folio(&["ps", "--port", &port]));
    let name = "SmolLM2-135M-Instruct.Q4_1";
    assert_eq!(
        ps,
        format!(
            "NAME{}  STATUS  CONTEXT\n{name}  loaded  {max_model_len}\n",
            " ".repeat(name.len() - 4)
        )
    );
}

#[test]
fn ps_without_a_server_says_so() {
    let port = closed_port();
    let out = folio(&["ps", "--port", &port]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "no folio server answers at http://127.0.0.1:{port}; start one with `folio serve`, or pass the --host and --port it listens on"
        )),
        "{err}"
    );
}
