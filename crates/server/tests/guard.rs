//! What another site's page can make a browser send, over real HTTP: the Host allow-list
//! (DNS rebinding) and JSON-only POSTs (cross-site "simple requests").

use folio_testkit::http as common;

use common::{assert_error, send_raw, Resp};
use folio_server::ServerOptions;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::OnceLock;

fn engine() -> Option<folio_engine::EngineHandle> {
    static E: OnceLock<Option<folio_engine::EngineHandle>> = OnceLock::new();
    E.get_or_init(common::engine).clone()
}

/// A request with exactly these headers (`None`: no such header at all).
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    host: Option<&str>,
    content_type: Option<&str>,
    body: &str,
) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if let Some(h) = host {
        req += &format!("Host: {h}\r\n");
    }
    if let Some(c) = content_type {
        req += &format!("Content-Type: {c}\r\n");
    }
    req += &format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    send_raw(addr, req.as_bytes())
}

fn completion() -> String {
    json!({"prompt": "Hi", "max_tokens": 1}).to_string()
}

/// A GET under `host`.
fn status_under(addr: SocketAddr, host: &str) -> u16 {
    send(addr, "GET", "/v1/models", Some(host), None, "").status
}

#[test]
fn on_loopback_only_local_hosts_ip_literals_and_listed_names_are_served() {
    let Some(e) = engine() else { return };
    let s = common::start(e.clone(), ServerOptions::default());
    for ok in [
        "localhost",
        "localhost:8000",
        "LocalHost:1",
        "127.0.0.1",
        "127.0.0.1:8000",
        "[::1]:8000",
        "[::1]",
        "192.168.1.20:8000",
    ] {
        assert_eq!(status_under(s.addr, ok), 200, "Host: {ok}");
    }
    // A rebinding page's name: refused on every route, generation included.
    for bad in [
        "evil.example",
        "evil.example:8000",
        "localhost.evil.example",
    ] {
        let r = send(s.addr, "GET", "/v1/models", Some(bad), None, "");
        assert_error(
            &r,
            403,
            "host_not_allowed",
            &["Host header", bad, "--allowed-hosts"],
        );
        assert_eq!(r.json()["error"]["type"], "permission_error");
        let r = send(
            s.addr,
            "POST",
            "/v1/completions",
            Some(bad),
            Some("application/json"),
            &completion(),
        );
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(
            send(s.addr, "GET", "/health", Some(bad), None, "").status,
            403
        );
    }
    // No Host at all is not a browser: served.
    assert_eq!(send(s.addr, "GET", "/health", None, None, "").status, 200);

    // Listed names (a subdomain rule, a port rule) join the local ones.
    let listed = common::start(
        e.clone(),
        ServerOptions {
            allowed_hosts: vec!["folio.example.com".into(), ".corp.example".into()],
            ..Default::default()
        },
    );
    for (host, want) in [
        ("folio.example.com:8000", 200),
        ("gpu1.corp.example", 200),
        ("localhost:1", 200),
        ("evil.example", 403),
        ("folio.example.com.evil.example", 403),
    ] {
        assert_eq!(status_under(listed.addr, host), want, "Host: {host}");
    }
    // `*` turns the check off.
    let any = common::start(
        e,
        ServerOptions {
            allowed_hosts: vec!["*".into()],
            ..Default::default()
        },
    );
    assert_eq!(status_under(any.addr, "evil.example"), 200);
}

#[test]
fn on_another_address_the_host_check_is_on_only_with_listed_names() {
    let Some(e) = engine() else { return };
    // 0.0.0.0: served under names folio cannot know (LAN names, Services): no check.
    let open = common::start_on(e.clone(), ServerOptions::default(), "0.0.0.0:0");
    assert_eq!(
        status_under(open.addr, "folio.default.svc.cluster.local"),
        200
    );
    assert_eq!(status_under(open.addr, "evil.example"), 200);
    // With names listed, they (and local names and IP addresses) only.
    let listed = common::start_on(
        e,
        ServerOptions {
            allowed_hosts: vec!["folio.example.com".into()],
            ..Default::default()
        },
        "0.0.0.0:0",
    );
    assert_eq!(status_under(listed.addr, "folio.example.com"), 200);
    assert_eq!(status_under(listed.addr, "10.0.0.7:8000"), 200);
    assert_eq!(status_under(listed.addr, "evil.example"), 403);
}

#[test]
fn posts_must_be_json_unless_allowed() {
    let Some(e) = engine() else { return };
    let s = common::start(e.clone(), ServerOptions::default());
    let host = Some("localhost");
    // What a cross-site form or fetch can send without a preflight, a JSON body inside.
    for (ct, shown) in [
        (Some("text/plain"), "\"text/plain\""),
        (
            Some("text/plain;charset=UTF-8"),
            "\"text/plain;charset=UTF-8\"",
        ),
        // curl -d
        (
            Some("application/x-www-form-urlencoded"),
            "\"application/x-www-form-urlencoded\"",
        ),
        (
            Some("multipart/form-data; boundary=x"),
            "\"multipart/form-data; boundary=x\"",
        ),
        // fetch() with a Blob or ArrayBuffer body and no type
        (None, "got none"),
    ] {
        for path in ["/v1/completions", "/v1/chat/completions", "/tokenize"] {
            let r = send(s.addr, "POST", path, host, ct, &completion());
            assert_error(
                &r,
                415,
                "unsupported_media_type",
                &["Content-Type header", "application/json", shown],
            );
        }
    }
    // Not executed: nothing reached the engine.
    let m = common::get(s.addr, "/metrics").text();
    assert_eq!(
        common::metric(&m, "folio_requests_finished_total{reason=\"length\"}"),
        Some(0.0),
        "{m}"
    );
    // JSON, with parameters and in any case, runs.
    for ct in ["application/json", "Application/JSON; charset=utf-8"] {
        let r = send(
            s.addr,
            "POST",
            "/v1/completions",
            host,
            Some(ct),
            &completion(),
        );
        assert_eq!(r.status, 200, "{ct}: {}", r.text());
    }
    // GETs need no Content-Type; unknown paths stay 404.
    assert_eq!(
        send(s.addr, "GET", "/v1/models", host, None, "").status,
        200
    );
    let r = send(s.addr, "POST", "/v1/nope", host, Some("text/plain"), "{}");
    assert_eq!(r.status, 404, "{}", r.text());

    // --allow-any-content-type executes them as JSON.
    let any = common::start(
        e,
        ServerOptions {
            allow_any_content_type: true,
            ..Default::default()
        },
    );
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let r = send(any.addr, "POST", "/v1/completions", host, ct, &completion());
        assert_eq!(r.status, 200, "{ct:?}: {}", r.text());
    }
}
