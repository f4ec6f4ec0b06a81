//! The serving surface over real HTTP: API key, CORS, model names, unimplemented OpenAI
//! routes, body and queue limits, chat templates, and the transport (TCP_NODELAY,
//! connection cap, header and idle timeouts, keep-alives while queued).

use folio_testkit::http as common;

use common::{get, post, request, request_with, Conn, Resp, Server};
use folio_server::ServerOptions;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One engine for the whole binary; each test starts its own server(s) on it.
fn engine() -> Option<folio_engine::EngineHandle> {
    static E: OnceLock<Option<folio_engine::EngineHandle>> = OnceLock::new();
    E.get_or_init(common::engine).clone()
}

fn serve(opts: ServerOptions) -> Option<Server> {
    engine().map(|e| common::start(e, opts))
}

fn error_of(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = v["error"].clone();
    assert!(
        e["message"].is_string() && e["type"].is_string() && e["code"].is_string(),
        "not an OpenAI error body: {v}"
    );
    e
}

const KEY: &str = "sk-folio-test";

#[test]
fn api_key_is_required_on_the_api_routes() {
    let Some(s) = serve(ServerOptions {
        api_key: Some(KEY.into()),
        ..Default::default()
    }) else {
        return;
    };
    let a = s.addr;
    let bearer = format!("Bearer {KEY}");
    let good = [("Authorization", bearer.as_str())];
    let body = json!({"prompt": "Hi", "max_tokens": 1}).to_string();
    for (method, path, b) in [
        ("GET", "/v1/models", ""),
        ("POST", "/v1/completions", body.as_str()),
        ("POST", "/tokenize", r#"{"prompt": "Hi"}"#),
        ("POST", "/v1/embeddings", "{}"),
    ] {
        let e = error_of(&request_with(a, method, path, &[], b.as_bytes()), 401);
        assert_eq!(e["code"], "invalid_api_key", "{path}: {e}");
        assert!(e["message"].as_str().unwrap().contains("missing API key"));
        let wrong = request_with(
            a,
            method,
            path,
            &[("Authorization", "Bearer sk-folio-tesT")],
            b.as_bytes(),
        );
        let e = error_of(&wrong, 401);
        assert!(e["message"].as_str().unwrap().contains("invalid API key"));
        assert_eq!(wrong.header("www-authenticate"), Some("Bearer"));
    }
    assert_eq!(request_with(a, "GET", "/v1/models", &good, b"").status, 200);
    let r = request_with(a, "POST", "/v1/completions", &good, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    // The scheme is case-insensitive, as RFC 7235 says.
    let lower = format!("bearer {KEY}");
    assert_eq!(
        request_with(a, "GET", "/v1/models", &[("authorization", &lower)], b"").status,
        200
    );
    // Health and metrics stay open by default...
    assert_eq!(get(a, "/health").status, 200);
    assert_eq!(get(a, "/metrics").status, 200);
    // ... and /metrics needs the key with api_key_protects_metrics.
    let Some(m) = serve(ServerOptions {
        api_key: Some(KEY.into()),
        api_key_protects_metrics: true,
        ..Default::default()
    }) else {
        return;
    };
    error_of(&get(m.addr, "/metrics"), 401);
    assert_eq!(
        request_with(m.addr, "GET", "/metrics", &good, b"").status,
        200
    );
    assert_eq!(get(m.addr, "/health").status, 200);
}

#[test]
fn cors_preflight_and_allowed_origins() {
    let Some(s) = serve(ServerOptions {
        allowed_origins: vec!["http://app.example".into(), "http://b.example".into()],
        api_key: Some(KEY.into()),
        ..Default::default()
    }) else {
        return;
    };
    let preflight = |addr, origin: &str| {
        request_with(
            addr,
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization,content-type",
                ),
            ],
            b"",
        )
    };
    // Answered without the key (browsers send preflights without credentials).
    let r = preflight(s.addr, "http://app.example");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let allowed = r.header("access-control-allow-headers").unwrap_or("");
    assert!(
        allowed.to_ascii_lowercase().contains("authorization"),
        "{r:?}"
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap_or("")
        .contains("POST"));
    assert_eq!(
        preflight(s.addr, "http://b.example").header("access-control-allow-origin"),
        Some("http://b.example")
    );
    assert_eq!(
        preflight(s.addr, "http://evil.example").header("access-control-allow-origin"),
        None
    );
    // A real request from an allowed origin gets the header too.
    let bearer = format!("Bearer {KEY}");
    let r = request_with(
        s.addr,
        "GET",
        "/v1/models",
        &[("Origin", "http://app.example"), ("Authorization", &bearer)],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    // Off by default.
    let Some(off) = serve(ServerOptions::default()) else {
        return;
    };
    assert_eq!(
        preflight(off.addr, "http://app.example").header("access-control-allow-origin"),
        None
    );
}

#[test]
fn unknown_openai_routes_are_501_and_other_paths_404() {
    let Some(s) = serve(ServerOptions::default()) else {
        return;
    };
    for (method, path) in [
        ("POST", "/v1/responses/resp_0123/cancel"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/v1/images/generations"),
        ("GET", "/v1/files"),
        ("GET", "/v1/files/file-abc/content"),
        ("POST", "/v1/batches"),
        ("POST", "/v1/moderations"),
        ("POST", "/v1/fine_tuning/jobs"),
    ] {
        let e = error_of(&request(s.addr, method, path, b"{}"), 501);
        assert!(e["message"].as_str().unwrap().contains(path), "{path}: {e}");
        assert_eq!(e["code"], "not_implemented");
    }
    error_of(&get(s.addr, "/v1/nope"), 404);
    error_of(&get(s.addr, "/embeddings"), 404);
}

#[test]
fn body_over_the_limit_is_413_naming_it() {
    assert_eq!(ServerOptions::default().max_body_bytes, 32 << 20);
    let Some(s) = serve(ServerOptions {
        max_body_bytes: 1024,
        ..Default::default()
    }) else {
        return;
    };
    let big = json!({"prompt": "x".repeat(2000), "max_tokens": 1}).to_string();
    let e = error_of(
        &request(s.addr, "POST", "/v1/completions", big.as_bytes()),
        413,
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("larger than the limit of 1024 bytes"),
        "{e}"
    );
    // Under the limit is fine.
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 1}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn over_the_queue_limit_is_429_with_retry_after() {
    let Some(s) = serve(ServerOptions {
        max_queued: 2,
        ..Default::default()
    }) else {
        return;
    };
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "n": 3, "max_tokens": 1}),
    );
    let e = error_of(&r, 429);
    assert_eq!(e["type"], "rate_limit_error");
    assert!(e["message"].as_str().unwrap().contains("queued"), "{e}");
    let after: u64 = r
        .header("retry-after")
        .expect("429 without Retry-After")
        .parse()
        .unwrap();
    assert!(after >= 1);
    let ok = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "n": 2, "max_tokens": 1}),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
}

#[test]
fn models_by_id_and_the_model_field() {
    let Some(s) = serve(ServerOptions::default()) else {
        return;
    };
    let info = &s.engine.info;
    let name = info.model_name.as_str();
    let r = get(s.addr, &format!("/v1/models/{name}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let card = r.json();
    assert_eq!(card["id"], name);
    assert_eq!(card["object"], "model");
    assert!(!card.to_string().contains(&info.model_path), "{card}");
    let e = error_of(&get(s.addr, "/v1/models/gpt-4o"), 404);
    assert!(e["message"].as_str().unwrap().contains("gpt-4o"), "{e}");
    assert_eq!(e["code"], "model_not_found");
    // `model` must be the served name, or absent.
    let e = error_of(
        &post(
            s.addr,
            "/v1/completions",
            &json!({"model": "gpt-4o", "prompt": "Hi", "max_tokens": 1}),
        ),
        404,
    );
    assert_eq!(
        (e["code"].clone(), e["param"].clone()),
        (json!("model_not_found"), json!("model"))
    );
    for model in [json!(name), Value::Null] {
        let r = post(
            s.addr,
            "/v1/completions",
            &json!({"model": model, "prompt": "Hi", "max_tokens": 1}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["model"], name);
    }
}

const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if flavor %}[flavor={{ flavor }}]{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

#[test]
fn served_name_template_file_and_chat_template_kwargs() {
    // A second engine: its own served name (with a slash, as Hugging Face ids have) and
    // a chat template that replaces the model's.
    let cfg = folio_engine::EngineConfig {
        served_name: Some("folio-test/custom".into()),
        kv_cache_bytes: 64 << 20,
        ..Default::default()
    };
    let Some(e) = common::engine_with(cfg, Some(TEMPLATE)) else {
        return;
    };
    let s = common::start(e, ServerOptions::default());
    let m = get(s.addr, "/v1/models").json();
    assert_eq!(m["data"][0]["id"], "folio-test/custom");
    assert_eq!(get(s.addr, "/v1/models/folio-test/custom").status, 200);
    let text = |body: Value| {
        let t = post(s.addr, "/tokenize", &body);
        assert_eq!(t.status, 200, "{}", t.text());
        let d = post(
            s.addr,
            "/detokenize",
            &json!({"tokens": t.json()["tokens"]}),
        );
        d.json()["prompt"].as_str().unwrap().to_string()
    };
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let plain = text(json!({"messages": msgs}));
    assert!(
        plain.contains("<|im_start|>user\nHi<|im_end|>") && !plain.contains("[flavor="),
        "{plain:?}"
    );
    let with = text(json!({"messages": msgs, "chat_template_kwargs": {"flavor": "mint"}}));
    assert!(
        with.contains("[flavor=mint]<|im_start|>assistant"),
        "{with:?}"
    );
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"model": "folio-test/custom", "messages": msgs, "max_tokens": 2,
                "chat_template_kwargs": {"flavor": "mint"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "folio-test/custom");
    let e = error_of(
        &post(
            s.addr,
            "/v1/chat/completions",
            &json!({"messages": msgs, "chat_template_kwargs": "mint"}),
        ),
        400,
    );
    assert_eq!(e["param"], "chat_template_kwargs");
}

/// The sockets of this process whose peer is `peer` (the server's end of a connection).
#[cfg(target_os = "linux")]
fn server_side_nodelay(peer: std::net::SocketAddr) -> Option<bool> {
    use std::os::fd::BorrowedFd;
    for entry in std::fs::read_dir("/proc/self/fd").ok()? {
        let Ok(fd) = entry.ok()?.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: the fd stays open while borrowed: the server holds its connections
        // open and this only reads socket options.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let Ok(p) = sock.peer_addr() else { continue };
        if p.as_socket() == Some(peer) {
            return sock.tcp_nodelay().ok();
        }
    }
    None
}

#[cfg(target_os = "linux")]
#[test]
fn accepted_sockets_have_tcp_nodelay_and_streams_arrive_in_pieces() {
    let Some(s) = serve(ServerOptions::default()) else {
        return;
    };
    let mut c = Conn::open(s.addr);
    assert_eq!(c.get("/health").unwrap().status, 200);
    let me = c.sock.local_addr().unwrap();
    assert_eq!(
        server_side_nodelay(me),
        Some(true),
        "the server's socket for {me} has Nagle's algorithm on"
    );
    // A stream on the reused keep-alive connection: its frames come as they are made.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                      "ignore_eos": true, "stream": true})
    .to_string();
    let r = c
        .request("POST", "/v1/completions", body.as_bytes())
        .unwrap();
    let (chunks, done) = r.sse();
    assert!(done && chunks.len() >= 24, "{}", r.text());
    assert!(c.reads.len() > 1, "the whole stream came in one read");
}

#[test]
fn slow_header_client_is_cut_at_the_header_timeout() {
    let Some(s) = serve(ServerOptions {
        header_timeout: Duration::from_millis(800),
        ..Default::default()
    }) else {
        return;
    };
    let mut sock = TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let mut w = sock.try_clone().unwrap();
    let start = Instant::now();
    // One byte every 100 ms: the head would take ~5 s.
    let writer = std::thread::spawn(move || {
        for b in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1234567890\r\n\r\n" {
            if w.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let mut got = Vec::new();
    let r = sock.read_to_end(&mut got);
    let took = start.elapsed();
    assert!(
        r.is_ok() || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "connection not closed: {r:?} after {took:?}"
    );
    assert!(
        got.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(4),
        "cut after {took:?}"
    );
    let _ = writer.join();
    // A prompt client on a new connection is served.
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn idle_keep_alive_connection_is_closed_and_a_busy_one_is_not() {
    let Some(s) = serve(ServerOptions {
        idle_timeout: Duration::from_millis(600),
        header_timeout: Duration::from_millis(600),
        ..Default::default()
    }) else {
        return;
    };
    let mut c = Conn::open(s.addr);
    assert_eq!(c.get("/health").unwrap().status, 200);
    // Used again within the timeout: still open.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.get("/health").unwrap().status, 200);
    // A response that takes longer than both timeouts is not cut.
    let body = json!({"prompt": "Tell me a story.", "max_tokens": 300, "ignore_eos": true,
                      "temperature": 0, "stream": true})
    .to_string();
    let r = c
        .request("POST", "/v1/completions", body.as_bytes())
        .unwrap();
    assert!(r.sse().1, "stream cut short: {}", r.text());
    let idle_from = Instant::now();
    let mut buf = [0u8; 64];
    let r = c.sock.read(&mut buf);
    let took = idle_from.elapsed();
    assert!(
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "idle connection not closed: {r:?} after {took:?}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
}

#[test]
fn connections_past_the_cap_are_refused_and_health_still_answers() {
    let Some(s) = serve(ServerOptions {
        max_connections: 2,
        ..Default::default()
    }) else {
        return;
    };
    let mut c1 = Conn::open(s.addr);
    let mut c2 = Conn::open(s.addr);
    assert_eq!(c1.get("/health").unwrap().status, 200);
    assert_eq!(c2.get("/health").unwrap().status, 200);
    // The third: a 503 (or a closed socket), never served.
    let mut c3 = Conn::open(s.addr);
    match c3.get("/health") {
        Ok(r) => {
            let e = error_of(&r, 503);
            assert_eq!(e["code"], "too_many_connections");
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
            ),
            "{e}"
        ),
    }
    // The open ones still answer.
    assert_eq!(c1.get("/health").unwrap().status, 200);
    // Closing one makes room for a new connection.
    drop(c2);
    let start = Instant::now();
    loop {
        let mut c = Conn::open(s.addr);
        match c.get("/health") {
            Ok(r) if r.status == 200 => break,
            other => assert!(
                start.elapsed() < Duration::from_secs(10),
                "no room after a close: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn queued_stream_gets_headers_and_keep_alives_before_its_first_token() {
    let Some(s) = serve(ServerOptions {
        keep_alive: Duration::from_millis(30),
        admission_wait: Duration::from_millis(10),
        ..Default::default()
    }) else {
        return;
    };
    // A long, fresh prompt (no prefix-cache hit): its prefill takes far longer than the
    // keep-alive interval, and no token comes before it is done.
    let nonce = format!("{:?}", Instant::now());
    let prompt = format!(
        "{nonce} {}",
        "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(40)
    );
    let body = json!({"prompt": prompt, "max_tokens": 2, "stream": true}).to_string();
    let mut sock = TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    sock.write_all(&common::raw_request(
        "POST",
        "/v1/completions",
        body.as_bytes(),
    ))
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    let before = &text[..text.find("data: ").unwrap()];
    assert!(before.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        before.contains(": keep-alive\n\n"),
        "no keep-alive before the first token: {text}"
    );
    let mut rest = Vec::new();
    let _ = sock.read_to_end(&mut rest);
    seen.extend_from_slice(&rest);
    let r = common::parse_response(&seen);
    assert!(r.sse().1, "{}", r.text());
}
