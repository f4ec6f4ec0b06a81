//! The transport's limits on what a request's head and body may do, over real HTTP: the
//! body timeout frees the connection slot a stalled body held, `Content-Length` above the
//! limit is refused before the body, and RFC 9112's 400s for a duplicate `Host` and for an
//! absolute-form target that disagrees with it.

use folio_testkit::http as common;

use common::{assert_error, send_raw, Resp};
use folio_server::ServerOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn engine() -> Option<folio_engine::EngineHandle> {
    static E: OnceLock<Option<folio_engine::EngineHandle>> = OnceLock::new();
    E.get_or_init(common::engine).clone()
}

/// Sends `head` (and nothing more) and reads until the server closes, within `wait`.
fn head_only(addr: SocketAddr, head: &str, wait: Duration) -> (Resp, Duration) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(wait)).unwrap();
    let t = Instant::now();
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    (common::parse_response(&buf), t.elapsed())
}

#[test]
fn a_stalled_body_is_cut_after_the_body_timeout_and_its_slot_freed() {
    let Some(e) = engine() else { return };
    let opts = ServerOptions {
        max_connections: 2,
        body_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    };
    let srv = common::start(e, opts);
    let addr = srv.addr;
    // Two clients send headers and one byte of a 100-byte body, then nothing: every slot.
    let stalled: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(
                b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = common::get(addr, "/health");
    assert_eq!(r.status, 503, "at the cap: {}", r.text());
    // Each stalled request is answered 408 and its connection closed.
    let t = Instant::now();
    for mut s in stalled {
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let r = common::parse_response(&buf);
        assert_error(&r, 408, "body_timeout", &["1 s", "--body-timeout-s"]);
        assert_eq!(r.header("connection"), Some("close"));
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "cut after {:?}",
        t.elapsed()
    );
    // The slots are free again.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(common::get(addr, "/health").status, 200);
}

#[test]
fn content_length_over_the_limit_is_refused_before_the_body_arrives() {
    let Some(e) = engine() else { return };
    let opts = ServerOptions {
        max_body_bytes: 1000,
        ..ServerOptions::default()
    };
    let srv = common::start(e, opts);
    let (r, took) = head_only(
        srv.addr,
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\n\r\n",
        Duration::from_secs(20),
    );
    assert_error(
        &r,
        413,
        "body_too_large",
        &["5000000", "1000 bytes", "--max-request-bytes"],
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    // At the limit it is read as usual.
    let body = format!(
        "{{\"prompt\": \"Hi\", \"max_tokens\": 1{}}}",
        " ".repeat(500)
    );
    let r = send_raw(
        srv.addr,
        &common::raw_request_with("POST", "/v1/completions", &[], body.as_bytes(), true),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn duplicate_host_and_absolute_form_targets_are_400() {
    let Some(e) = engine() else { return };
    let srv = common::start(e, ServerOptions::default());
    let body = r#"{"prompt": "Hi", "max_tokens": 1}"#;
    let send = |line: &str, hosts: &[&str]| {
        let mut req = format!("{line}\r\n");
        for h in hosts {
            req += &format!("Host: {h}\r\n");
        }
        req += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        send_raw(srv.addr, req.as_bytes())
    };
    let r = send(
        "POST /v1/completions HTTP/1.1",
        &["localhost", "evil.example"],
    );
    assert_error(&r, 400, "invalid_host", &["more than once", "evil.example"]);
    let r = send(
        "POST http://evil.example/v1/completions HTTP/1.1",
        &["localhost"],
    );
    assert_error(&r, 400, "invalid_host", &["absolute-form", "evil.example"]);
    // Without a Host the target's authority is what the DNS-rebinding check sees.
    let r = send("POST http://evil.example/v1/completions HTTP/1.1", &[]);
    assert_error(&r, 403, "host_not_allowed", &["evil.example"]);
    // One Host, origin-form, or an absolute-form target that agrees with it: served.
    assert_eq!(
        send("POST /v1/completions HTTP/1.1", &["localhost"]).status,
        200
    );
    let agree = format!("POST http://{}/v1/completions HTTP/1.1", srv.addr);
    assert_eq!(send(&agree, &[&srv.addr.to_string()]).status, 200);
}
