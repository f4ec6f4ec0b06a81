//! The chat page at `/`: served without the API key on a keyed server, with its
//! Content-Security-Policy, while the API it calls still needs the key and a foreign Host
//! still gets nothing. (The page in a real browser: `scripts/chat_page_check.py`.)

use folio_testkit::http as common;

use common::{assert_error, request_with, send_raw, Resp};
use folio_server::ServerOptions;

const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self'";
const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const KEY: &str = "page-test-key";

fn keyed() -> Option<common::Server> {
    let e = common::engine()?;
    Some(common::start(
        e,
        ServerOptions {
            api_key: Some(KEY.into()),
            ..ServerOptions::default()
        },
    ))
}

fn get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    request_with(addr, "GET", path, headers, b"")
}

fn assert_asset(r: &Resp, content_type: &str, body: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(content_type));
    assert_eq!(r.header("content-security-policy"), Some(CSP));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(r.text(), body);
}

#[test]
fn page_is_public_on_a_keyed_server_and_the_api_is_not() {
    let Some(s) = keyed() else { return };
    for path in ["/", "/index.html"] {
        assert_asset(&get(s.addr, path, &[]), "text/html; charset=utf-8", INDEX);
    }
    assert_asset(
        &get(s.addr, "/app.js", &[]),
        "text/javascript; charset=utf-8",
        APP_JS,
    );
    // A wrong key does not matter to the page either.
    assert_eq!(
        get(s.addr, "/", &[("Authorization", "Bearer wrong")]).status,
        200
    );

    // What the page calls still needs the key.
    let r = get(s.addr, "/v1/models", &[]);
    assert_error(&r, 401, "invalid_api_key", &["missing API key"]);
    let auth = format!("Bearer {KEY}");
    let r = get(s.addr, "/v1/models", &[("Authorization", &auth)]);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request_with(
        s.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        br#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}"#,
    );
    assert_eq!(r.status, 401, "{}", r.text());
    for path in ["/tokenize", "/lora-adapters"] {
        let method = if path == "/tokenize" { "POST" } else { "GET" };
        assert_eq!(
            request_with(s.addr, method, path, &[], b"{}").status,
            401,
            "{path}"
        );
    }
}

#[test]
fn page_obeys_the_host_guard_and_only_get() {
    let Some(s) = keyed() else { return };
    let r = send_raw(
        s.addr,
        b"GET / HTTP/1.1\r\nHost: evil.example:8080\r\nConnection: close\r\n\r\n",
    );
    assert_error(&r, 403, "host_not_allowed", &["evil.example:8080"]);
    let r = send_raw(
        s.addr,
        b"GET /app.js HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = request_with(s.addr, "POST", "/", &[], b"{}");
    assert_eq!(r.status, 405, "{}", r.text());
}

/// No CDN, no external asset: every URL in the page and its script is relative to the
/// server (so the page also works behind a proxy that serves it under a path prefix).
#[test]
fn assets_name_no_other_origin() {
    for (name, text) in [("index.html", INDEX), ("app.js", APP_JS)] {
        assert!(!text.contains("://"), "{name} names another origin");
        assert!(!text.contains("src=\"/"), "{name} has a root-absolute src");
    }
    assert!(INDEX.contains("<script src=\"app.js\"></script>"));
    assert!(
        !INDEX.contains("<script>"),
        "no inline script (the CSP refuses it)"
    );
    assert!(
        !APP_JS.contains("innerHTML"),
        "model text goes in as text nodes"
    );
    for call in ["fetch(\"v1/models\"", "fetch(\"v1/chat/completions\""] {
        assert!(APP_JS.contains(call), "{call}");
    }
}
