//! `hf:` names against a local server that speaks the Hub's endpoints (the file tree,
//! `HEAD`/`GET resolve/main/FILE` with `ETag`, `X-Repo-Commit` and ranges), the cache in
//! the `huggingface_hub` layout, and (where Python's `huggingface_hub` is installed) a cache
//! shared with it both ways.

use folio_fetch::hub::{self, select};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The environment (HF_HOME, HF_ENDPOINT, …) is the process's: one test at a time.
static ENV: Mutex<()> = Mutex::new(());

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Default)]
struct Hub {
    repo: String,
    files: Vec<(String, Vec<u8>)>,
    /// Files whose first GET is cut after half the bytes.
    cut: Mutex<HashSet<String>>,
    /// Answer every request with this status.
    status: Option<u16>,
    /// `METHOD path [range]` of each request.
    log: Mutex<Vec<String>>,
}

fn etag(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn serve(hub: Hub) -> (String, Arc<Hub>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hub = Arc::new(hub);
    let h = hub.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let h = h.clone();
            std::thread::spawn(move || {
                let _ = answer(&h, conn);
            });
        }
    });
    (base, hub)
}

fn answer(hub: &Hub, mut conn: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    hub.log.lock().unwrap().push(match &range {
        Some(r) => format!("{method} {path} {r}"),
        None => format!("{method} {path}"),
    });
    let head = |status: &str, headers: &[(String, String)], len: usize| {
        let mut s = format!("HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {len}\r\n");
        for (k, v) in headers {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        s.push_str("\r\n");
        s
    };
    if let Some(code) = hub.status {
        let body = "{\"error\":\"Access to model is restricted\"}";
        conn.write_all(head(&format!("{code} Refused"), &[], body.len()).as_bytes())?;
        return conn.write_all(body.as_bytes());
    }
    let tree = format!("/api/models/{}/tree/main", hub.repo);
    let resolve = format!("/{}/resolve/main/", hub.repo);
    if path.starts_with(&tree) {
        let items: Vec<String> = hub
            .files
            .iter()
            .map(|(n, b)| {
                format!(
                    "{{\"type\":\"file\",\"path\":\"{n}\",\"size\":{},\"oid\":\"x\"}}",
                    b.len()
                )
            })
            .collect();
        let body = format!("[{}]", items.join(","));
        conn.write_all(head("200 OK", &[], body.len()).as_bytes())?;
        return conn.write_all(body.as_bytes());
    }
    let Some((_, bytes)) = path
        .strip_prefix(&resolve)
        .and_then(|f| hub.files.iter().find(|(n, _)| n == f))
    else {
        conn.write_all(head("404 Not Found", &[], 0).as_bytes())?;
        return Ok(());
    };
    let file = path.strip_prefix(&resolve).unwrap().to_string();
    let mut headers = vec![
        ("ETag".to_string(), format!("\"{}\"", etag(bytes))),
        ("X-Repo-Commit".to_string(), COMMIT.to_string()),
        ("Accept-Ranges".to_string(), "bytes".to_string()),
    ];
    if method == "HEAD" {
        conn.write_all(head("200 OK", &headers, bytes.len()).as_bytes())?;
        return Ok(());
    }
    let from: usize = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let body = &bytes[from..];
    let status = if from > 0 {
        headers.push((
            "Content-Range".to_string(),
            format!("bytes {from}-{}/{}", bytes.len() - 1, bytes.len()),
        ));
        "206 Partial Content"
    } else {
        "200 OK"
    };
    conn.write_all(head(status, &headers, body.len()).as_bytes())?;
    if hub.cut.lock().unwrap().remove(&file) {
        conn.write_all(&body[..body.len() / 2])?;
        conn.flush()?;
        return conn.shutdown(std::net::Shutdown::Both);
    }
    conn.write_all(body)
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("folio-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Points the Hub environment at `base` and `home`.
fn env(base: &str, home: &Path) {
    std::env::set_var("HF_ENDPOINT", base);
    std::env::set_var("HF_HOME", home);
    std::env::remove_var("HF_HUB_CACHE");
    std::env::remove_var("HF_TOKEN");
    std::env::remove_var("HF_HUB_OFFLINE");
}

/// An endpoint nothing listens on.
fn gone() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    base
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn quant_selection_exact_and_closest() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let files = names(&[
        "README.md",
        "model-Q8_0.gguf",
        "model-Q4_K_S.gguf",
        "model-Q5_K_M.gguf",
        "model.q4_k_m.gguf",
        "mmproj-model-f16.gguf",
        "big/model-Q2_K-00001-of-00002.gguf",
        "big/model-Q2_K-00002-of-00002.gguf",
    ]);
    let c = select::candidates(&files);
    let pick = |q: &str| select::select(&c, q).unwrap().files.clone();
    assert_eq!(
        pick("Q4_K_M"),
        vec!["model.q4_k_m.gguf"],
        "case-insensitive"
    );
    assert_eq!(pick("q8_0"), vec!["model-Q8_0.gguf"]);
    assert_eq!(
        pick("Q4_K"),
        vec!["model.q4_k_m.gguf"],
        "Q4_K is not a token of Q4_K_S: closest by list"
    );
    assert_eq!(
        pick("Q5_K_S"),
        vec!["model-Q5_K_M.gguf"],
        "nearest in the preference list"
    );
    assert_eq!(
        pick("Q2_K"),
        vec![
            "big/model-Q2_K-00001-of-00002.gguf",
            "big/model-Q2_K-00002-of-00002.gguf"
        ]
    );
    // Without the default quant, the most preferred present.
    let c = select::candidates(&names(&["a-Q8_0.gguf", "a-Q4_0.gguf", "a-F16.gguf"]));
    assert_eq!(
        select::select(&c, "Q4_K_M").unwrap().files,
        vec!["a-Q4_0.gguf"]
    );
    // A split with a part missing is not a candidate.
    let c = select::candidates(&names(&["x-00001-of-00002.gguf"]));
    assert!(c.is_empty());
    assert!(hub::parse("hf:org").is_err());
    assert_eq!(
        hub::parse("hf:org/repo:Q8_0").unwrap(),
        hub::HubName {
            repo: "org/repo".into(),
            quant: Some("Q8_0".into())
        }
    );

    // End to end: the exact quant, then the closest with a note.
    let _g = lock();
    let home = scratch("select");
    let (base, hub) = serve(Hub {
        repo: "org/sel-GGUF".into(),
        files: vec![
            ("m-Q8_0.gguf".into(), bytes(1, 1000)),
            ("m-Q4_K_M.gguf".into(), bytes(2, 1000)),
        ],
        ..Default::default()
    });
    env(&base, &home);
    let p = hub::model_file("hf:org/sel-GGUF").unwrap();
    assert!(p.ends_with("m-Q4_K_M.gguf"), "{}", p.display());
    assert_eq!(std::fs::read(&p).unwrap(), bytes(2, 1000));
    let p = folio_fetch::resolve_model(Some(Path::new("hf:org/sel-GGUF:q8_0"))).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), bytes(1, 1000));
    let p = hub::model_file("hf:org/sel-GGUF:Q6_K").unwrap();
    assert!(
        p.ends_with("m-Q8_0.gguf"),
        "closest to Q6_K: {}",
        p.display()
    );
    drop(hub);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn resume_after_a_cut_connection_and_cache_layout_then_no_network() {
    let _g = lock();
    let home = scratch("resume");
    let data = bytes(7, 300_000);
    let file = "sub/r-Q4_K_M.gguf";
    let (base, hub) = serve(Hub {
        repo: "org/res-GGUF".into(),
        files: vec![(file.into(), data.clone())],
        cut: Mutex::new([file.to_string()].into()),
        ..Default::default()
    });
    env(&base, &home);
    let p = folio_fetch::pull("hf:org/res-GGUF").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    let log = hub.log.lock().unwrap().clone();
    let gets: Vec<&String> = log.iter().filter(|l| l.starts_with("GET /org")).collect();
    assert_eq!(gets.len(), 2, "{log:?}");
    assert_eq!(
        gets[1],
        &format!("GET /org/res-GGUF/resolve/main/{file} bytes=150000-"),
        "{log:?}"
    );

    // The huggingface_hub layout.
    let repo = home.join("hub").join("models--org--res-GGUF");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        COMMIT
    );
    let tag = etag(&data);
    let blob = repo.join("blobs").join(&tag);
    assert_eq!(std::fs::read(&blob).unwrap(), data);
    assert!(!repo
        .join("blobs")
        .join(format!("{tag}.incomplete"))
        .exists());
    let snap = repo.join("snapshots").join(COMMIT).join(file);
    assert_eq!(p, snap);
    assert_eq!(
        std::fs::read_link(&snap).unwrap(),
        PathBuf::from(format!("../../../blobs/{tag}"))
    );

    // The server gone: the cached file, no request.
    std::env::set_var("HF_ENDPOINT", gone());
    assert_eq!(hub::model_file("hf:org/res-GGUF").unwrap(), snap);
    assert_eq!(
        hub::model_file("hf:org/res-GGUF:Q8_0").unwrap(),
        snap,
        "closest cached"
    );
    std::env::set_var("HF_HUB_OFFLINE", "1");
    assert_eq!(hub::model_file("hf:org/res-GGUF:q4_k_m").unwrap(), snap);
    let e = hub::model_file("hf:org/other-GGUF")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "HF_HUB_OFFLINE is set, and no GGUF of org/other-GGUF is in the Hugging Face cache"
        ),
        "{e}"
    );
    std::env::remove_var("HF_HUB_OFFLINE");
    let e = hub::model_file("hf:org/other-GGUF")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be reached"), "{e}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn split_files_are_all_downloaded_and_refused_for_loading() {
    let _g = lock();
    let home = scratch("split");
    let parts: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|i| {
            (
                format!("s-Q4_K_M-0000{i}-of-00003.gguf"),
                bytes(i as u8, 5000),
            )
        })
        .collect();
    let (base, hub) = serve(Hub {
        repo: "org/split-GGUF".into(),
        files: parts.clone(),
        ..Default::default()
    });
    env(&base, &home);
    let e = hub::model_file("hf:org/split-GGUF")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("split GGUF in 3 parts (s-Q4_K_M-00001-of-00003.gguf, s-Q4_K_M-00002-of-00003.gguf, s-Q4_K_M-00003-of-00003.gguf)"),
        "{e}"
    );
    assert!(
        !hub.log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("/resolve/")),
        "refused before any download"
    );
    let got = hub::fetch("hf:org/split-GGUF").unwrap();
    assert_eq!(got.len(), 3);
    for (p, (name, data)) in got.iter().zip(&parts) {
        assert!(p.ends_with(name));
        assert_eq!(&std::fs::read(p).unwrap(), data);
    }
    // Cached: refused again without a request.
    std::env::set_var("HF_ENDPOINT", gone());
    let e = hub::model_file("hf:org/split-GGUF")
        .unwrap_err()
        .to_string();
    assert!(e.contains("split GGUF in 3 parts"), "{e}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn gated_repository_401_names_hf_token() {
    let _g = lock();
    let home = scratch("gated");
    let (base, _hub) = serve(Hub {
        repo: "org/gated-GGUF".into(),
        status: Some(401),
        ..Default::default()
    });
    env(&base, &home);
    let e = hub::model_file("hf:org/gated-GGUF")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("hf:org/gated-GGUF: "), "{e}");
    assert!(e.contains("gated or private"), "{e}");
    assert!(
        e.contains("set HF_TOKEN") && e.contains("(HF_TOKEN is not set)"),
        "{e}"
    );
    let e = folio_fetch::pull("hf:org/gated-GGUF")
        .unwrap_err()
        .to_string();
    assert!(e.contains("HF_TOKEN"), "{e}");
    let _ = std::fs::remove_dir_all(&home);
}

fn python_hub() -> Result<(), String> {
    match std::process::Command::new("python3")
        .args(["-c", "import huggingface_hub"])
        .output()
    {
        Err(e) => Err(format!("no python3 ({e})")),
        Ok(o) if !o.status.success() => Err(format!(
            "python3 has no huggingface_hub: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Ok(_) => Ok(()),
    }
}

#[test]
fn cache_shared_with_python_huggingface_hub() {
    if let Err(why) = python_hub() {
        eprintln!("skipped: {why}");
        return;
    }
    let _g = lock();
    let home = scratch("python");
    let a = bytes(3, 4000);
    let b = bytes(4, 4000);
    let (base, hub) = serve(Hub {
        repo: "org/py-GGUF".into(),
        files: vec![
            ("p-Q4_K_M.gguf".into(), a.clone()),
            ("p-Q8_0.gguf".into(), b.clone()),
        ],
        ..Default::default()
    });
    env(&base, &home);
    // Python downloads, folio finds it without a request.
    let py = |code: &str| {
        let o = std::process::Command::new("python3")
            .args(["-c", code])
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env("HF_HUB_DISABLE_XET", "1")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "python: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let got = py(&format!(
        "import huggingface_hub as h; print(h.hf_hub_download('org/py-GGUF', 'p-Q4_K_M.gguf', endpoint='{base}'))"
    ));
    hub.log.lock().unwrap().clear();
    let p = hub::model_file("hf:org/py-GGUF").unwrap();
    assert_eq!(p, PathBuf::from(&got));
    assert_eq!(std::fs::read(&p).unwrap(), a);
    assert!(
        hub.log.lock().unwrap().is_empty(),
        "{:?}",
        hub.log.lock().unwrap()
    );
    // folio downloads, Python finds it offline.
    let p = hub::model_file("hf:org/py-GGUF:Q8_0").unwrap();
    let got = py(
        "import huggingface_hub as h; print(h.hf_hub_download('org/py-GGUF', 'p-Q8_0.gguf', local_files_only=True))",
    );
    assert_eq!(PathBuf::from(got), p);
    let _ = std::fs::remove_dir_all(&home);
}
