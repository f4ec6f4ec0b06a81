//! Opening a path that is not a regular file fails at once: a FIFO with no writer would
//! otherwise block the opening thread forever, and a directory is no model.

#![cfg(unix)]

use std::time::{Duration, Instant};

#[test]
fn a_fifo_or_a_directory_is_refused_without_blocking() {
    let dir = std::env::temp_dir().join(format!("folio-gguf-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("adapter.gguf");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.map(|s| s.success()).unwrap_or(false) {
        eprintln!("skipped: mkfifo unavailable");
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let f = fifo.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = folio_gguf::GgufFile::open(&f).map(|_| ());
        let _ = tx.send((r.map_err(|e| e.to_string()), t0.elapsed()));
    });
    let (r, took) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("opening a FIFO blocked");
    let e = r.unwrap_err();
    assert!(e.contains("not a regular file"), "{e}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let Err(e) = folio_gguf::GgufFile::open(&dir) else {
        panic!("a directory opened as a GGUF");
    };
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
