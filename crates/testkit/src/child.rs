//! `folio serve` run as a child process (for what only a process shows: its RSS in
//! /proc/PID/status, its flags as parsed by the binary), killed when the test ends.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `folio serve`; dropping it (also on a failed assertion) kills it.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
    /// The line `folio: serving NAME at http://ADDR/v1 (…)` it printed at start.
    pub line: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Spawns `cmd` (the folio binary with `serve` and its flags, `--port 0`), reads the
/// address from its serving line and waits until `/health` answers 200 (at most 60 s).
pub fn serve(mut cmd: Command) -> Serve {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("folio serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("folio: serving"));
    let Some(line) = line else {
        let _ = child.kill();
        panic!("folio serve printed no serving line");
    };
    // The rest of its output is read (and dropped) so that the pipe never fills.
    std::thread::spawn(move || lines.for_each(drop));
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split("/v1").next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let serve = Serve { child, addr, line };
    let start = Instant::now();
    while crate::http::get(addr, "/health").status != 200 {
        assert!(start.elapsed() < Duration::from_secs(60), "not healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    serve
}

/// A `/proc/PID/status` size field (`VmRSS`, `VmHWM`, …) in bytes.
pub fn status_bytes(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {text}"));
    let kb: u64 = line
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("a number of kB");
    kb * 1024
}
