//! Shared by the integration tests: start folio on the real model on an ephemeral port,
//! and a tiny blocking HTTP/1.1 client (no extra dependencies; `Connection: close`).

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// A running server and its engine.
pub struct Server {
    pub addr: SocketAddr,
    pub engine: folio_engine::EngineHandle,
    /// Fires the server's shutdown future.
    pub stop: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Signals when `serve_listener` returned.
    pub stopped: std::sync::Mutex<std::sync::mpsc::Receiver<Result<(), folio_server::ServeError>>>,
}

/// Loads the real model, or prints why the test is skipped.
pub fn engine() -> Option<folio_engine::EngineHandle> {
    let path = match folio_fetch::test_model() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: no test model ({e:#})");
            return None;
        }
    };
    let f = folio_gguf::GgufFile::open(&path).expect("model file opens");
    let model = folio_model::Model::from_gguf(&f).expect("model loads");
    let tok = Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer loads"));
    Some(
        folio_engine::spawn_engine(model, tok, &path, folio_engine::EngineConfig::default())
            .expect("engine starts"),
    )
}

/// One server on the real model shared by the tests of a test binary (`None`: skipped,
/// the reason printed).
pub fn shared() -> Option<&'static Server> {
    static S: std::sync::OnceLock<Option<Server>> = std::sync::OnceLock::new();
    S.get_or_init(|| engine().map(|e| start(e, folio_server::ServerOptions::default())))
        .as_ref()
}

/// POSTs `body` to `path`, asserts 200 and returns the JSON answer.
pub fn post_ok(addr: SocketAddr, path: &str, body: &Value) -> Value {
    let r = post(addr, path, body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Starts a server for `engine` on 127.0.0.1:0 on its own runtime thread.
pub fn start(engine: folio_engine::EngineHandle, opts: folio_server::ServerOptions) -> Server {
    start_on(engine, opts, "127.0.0.1:0")
}

/// Starts a server listening on `bind` (e.g. `0.0.0.0:0`); `Server::addr` is where to
/// connect (loopback for an unspecified address).
pub fn start_on(
    engine: folio_engine::EngineHandle,
    opts: folio_server::ServerOptions,
    bind: &'static str,
) -> Server {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let handle = engine.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
            addr_tx
                .send(listener.local_addr().expect("addr"))
                .expect("send addr");
            let r = folio_server::serve_listener(handle, opts, listener, async move {
                // Only an explicit stop shuts down (and with it the shared engine); dropping
                // the `Server` does not.
                if stop_rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
            .await;
            let _ = done_tx.send(r);
        });
    });
    let mut addr: SocketAddr = addr_rx.recv().expect("server thread reports its address");
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Server {
        addr,
        engine,
        stop: std::sync::Mutex::new(Some(stop_tx)),
        stopped: std::sync::Mutex::new(done_rx),
    }
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON payloads of an SSE body, and whether it ended with `data: [DONE]`.
    pub fn sse(&self) -> (Vec<Value>, bool) {
        let text = self.text();
        let mut out = Vec::new();
        let mut done = false;
        for frame in text.split("\n\n").filter(|f| !f.is_empty()) {
            assert!(!done, "frame after [DONE]: {frame:?}");
            if frame.starts_with(':') {
                continue;
            }
            let data = frame
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not an SSE data frame: {frame:?}"));
            if data == "[DONE]" {
                done = true;
            } else {
                out.push(
                    serde_json::from_str(data)
                        .unwrap_or_else(|e| panic!("bad chunk {data:?}: {e}")),
                );
            }
        }
        (out, done)
    }
}

impl Resp {
    /// The named events of an SSE body (`event: NAME` + `data: {json}` frames, as the
    /// Responses API sends), comments skipped.
    pub fn events(&self) -> Vec<(String, Value)> {
        let text = self.text();
        let mut out = Vec::new();
        for frame in text.split("\n\n").filter(|f| !f.is_empty()) {
            if frame.starts_with(':') {
                continue;
            }
            let (name, data) = frame
                .strip_prefix("event: ")
                .and_then(|f| f.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not a named SSE event: {frame:?}"));
            let v =
                serde_json::from_str(data).unwrap_or_else(|e| panic!("bad event {data:?}: {e}"));
            out.push((name.to_string(), v));
        }
        out
    }
}

/// Raw request bytes for `method path` with `body`.
pub fn raw_request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// Sends one request and reads the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    // The server may answer (413) before reading a large body: write from another thread
    // while this one reads, and ignore write errors.
    let mut w = s.try_clone().expect("clone socket");
    let req = raw_request(method, path, body);
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&req);
    });
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    parse_response(&buf)
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(addr, "POST", path, body.to_string().as_bytes())
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, b"")
}

/// Parses a complete HTTP/1.1 response (plain or chunked body).
pub fn parse_response(buf: &[u8]) -> Resp {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let raw = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16)
            .expect("chunk size");
        if size == 0 || raw.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
}

/// The value of an unlabelled or labelled sample line `name… value` in /metrics text.
pub fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(name_and_labels)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

/// Loads the real model with `cfg`, its chat template replaced by `template` if given.
pub fn engine_with(
    cfg: folio_engine::EngineConfig,
    template: Option<&str>,
) -> Option<folio_engine::EngineHandle> {
    let path = folio_fetch::test_model().ok()?;
    let f = folio_gguf::GgufFile::open(&path).expect("model file opens");
    let model = folio_model::Model::from_gguf(&f).expect("model loads");
    let mut tok = folio_tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer loads");
    if let Some(t) = template {
        tok.set_chat_template(t).expect("template compiles");
    }
    Some(folio_engine::spawn_engine(model, Arc::new(tok), &path, cfg).expect("engine starts"))
}

/// Request bytes with extra headers; `close` adds `Connection: close`.
pub fn raw_request_with(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        req.push_str("Connection: close\r\n");
    }
    req.push_str("\r\n");
    let mut req = req.into_bytes();
    req.extend_from_slice(body);
    req
}

/// Sends `raw` (a whole request, every header as given) on a fresh connection and reads
/// the response.
pub fn send_raw(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    s.write_all(raw).expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

/// One request with extra headers on a fresh connection (closed after it).
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    s.write_all(&raw_request_with(method, path, headers, body, true))
        .expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

/// A keep-alive HTTP/1.1 connection: several requests, one after the other.
pub struct Conn {
    pub sock: TcpStream,
    buf: Vec<u8>,
    /// Bytes of each `read` call of the last response (how the server's writes arrived).
    pub reads: Vec<usize>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        Conn {
            sock,
            buf: Vec::new(),
            reads: Vec::new(),
        }
    }

    /// Sends a request and reads its whole response (Content-Length or chunked).
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> std::io::Result<Resp> {
        self.sock
            .write_all(&raw_request_with(method, path, &[], body, false))?;
        self.reads.clear();
        loop {
            if let Some(n) = complete_response(&self.buf) {
                let resp = parse_response(&self.buf[..n]);
                self.buf.drain(..n);
                return Ok(resp);
            }
            let mut chunk = [0u8; 65536];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed after {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
            self.reads.push(n);
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn get(&mut self, path: &str) -> std::io::Result<Resp> {
        self.request("GET", path, b"")
    }
}

/// The length of the first complete response in `buf`, if it is all there.
fn complete_response(buf: &[u8]) -> Option<usize> {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..split]).to_ascii_lowercase();
    if let Some(len) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return (buf.len() >= split + len).then_some(split + len);
    }
    if !head.contains("transfer-encoding: chunked") {
        return Some(split);
    }
    let mut at = split;
    loop {
        let eol = buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(String::from_utf8_lossy(&buf[at..at + eol]).trim(), 16)
            .expect("chunk size");
        let end = at + eol + 2 + size + 2;
        if buf.len() < end {
            return None;
        }
        if size == 0 {
            return Some(end);
        }
        at = end;
    }
}

/// Opens a streaming request and reads until `frames` SSE data frames have arrived.
pub fn open_stream(
    addr: std::net::SocketAddr,
    body: &serde_json::Value,
    frames: usize,
) -> (std::net::TcpStream, String) {
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    sock.write_all(&raw_request(
        "POST",
        "/v1/completions",
        body.to_string().as_bytes(),
    ))
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&seen).matches("data: {").count() < frames {
        let n = sock.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    (sock, String::from_utf8_lossy(&seen).into_owned())
}

/// `/metrics` once no request runs and no KV block is held, or after `limit`.
pub fn wait_idle(addr: SocketAddr, limit: Duration) -> String {
    let start = std::time::Instant::now();
    loop {
        let text = get(addr, "/metrics").text();
        let idle = metric(&text, "folio_requests_running") == Some(0.0)
            && metric(&text, "folio_kv_blocks_used") == Some(0.0);
        if idle || start.elapsed() > limit {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts an OpenAI-shaped error: the status, `error.code`, and each of `contains` in its message.
pub fn assert_error(r: &Resp, status: u16, code: &str, contains: &[&str]) {
    assert_eq!(r.status, status, "{}", r.text());
    let e = r.json()["error"].clone();
    assert_eq!(e["code"], code, "{e}");
    let msg = e["message"].as_str().unwrap();
    for c in contains {
        assert!(msg.contains(c), "{c:?} not in {msg:?}");
    }
}

/// The text of a Responses API `response` object: its `message` items' text parts, joined.
pub fn responses_output_text(r: &Value) -> String {
    r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The names of a streamed Responses answer's events, after checking that each event's
/// `type` is its name and that `sequence_number` counts from 0.
pub fn responses_event_names(r: &Resp) -> Vec<String> {
    let evs = r.events();
    for (i, (name, v)) in evs.iter().enumerate() {
        assert_eq!(v["type"], name.as_str());
        assert_eq!(v["sequence_number"], i as u64, "{name}");
    }
    evs.into_iter().map(|(n, _)| n).collect()
}
