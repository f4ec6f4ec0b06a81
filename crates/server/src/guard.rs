//! What a web page on another site can make a browser send to folio: two checks that
//! keep such requests from being executed.
//!
//! - **Host allow-list** (DNS rebinding): a page on `evil.example` re-points its own name
//!   at 127.0.0.1; the browser then treats folio as same-origin with the page, and every
//!   request carries `Host: evil.example`. Requests whose Host names a host folio does not
//!   know get a 403. As in Jupyter (`allow_remote_access`), the check is on when folio
//!   listens on a loopback address: `localhost` and IP literals are
//!   allowed (a rebinding attack needs a DNS name under the attacker's control, so a Host
//!   that is an IP address cannot be one), plus `--allowed-hosts`. Listening on any other
//!   address means serving under names folio cannot know (a LAN name, a Kubernetes
//!   Service, a load balancer's Host), so the check is off there unless `--allowed-hosts`
//!   lists the names; `*` turns it off everywhere. A request without Host (not a
//!   browser's) passes.
//! - **JSON-only POSTs** (cross-site request forgery with a "simple request"): a browser
//!   sends a cross-site POST without a CORS preflight when its Content-Type is
//!   `text/plain`, `application/x-www-form-urlencoded` or `multipart/form-data`, or when
//!   it has none (a `fetch` whose body is a Blob or ArrayBuffer without a type). A JSON
//!   body sent that way would run a generation or load an adapter. So every POST route
//!   requires `Content-Type: application/json` (parameters such as `charset` allowed),
//!   else 415; a missing header is refused too, for the reason above. The official
//!   `openai` Python client (checked with `scripts/openai_client_check.py`) and Node
//!   client, litellm's OpenAI-compatible providers (built on that client) and every client
//!   in this repository send `application/json`; `curl -d` sends
//!   `application/x-www-form-urlencoded` and needs
//!   `-H 'Content-Type: application/json'` (as vLLM's examples have it).
//!   `--allow-any-content-type` turns the check off.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// Which Host header values are accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPolicy {
    /// `None`: any. Else the names allowed besides `localhost` and IP literals: lowercase,
    /// without a trailing dot; `.example.com` also allows every subdomain; an entry with a
    /// port matches only that port.
    names: Option<Vec<String>>,
    /// For the 403 message.
    bound: IpAddr,
}

impl HostPolicy {
    /// The policy for a server listening on `bound` with `--allowed-hosts listed`.
    pub fn new(bound: IpAddr, listed: &[String]) -> HostPolicy {
        let names: Vec<String> = listed
            .iter()
            .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        let on = !names.iter().any(|h| h == "*") && (bound.is_loopback() || !names.is_empty());
        HostPolicy {
            names: on.then_some(names),
            bound,
        }
    }

    /// Whether the check is on.
    pub fn enabled(&self) -> bool {
        self.names.is_some()
    }

    /// Whether a request with `Host: host` is accepted.
    pub fn allows(&self, host: &str) -> bool {
        let Some(names) = &self.names else {
            return true;
        };
        let host = host.trim().to_ascii_lowercase();
        let name = host_name(&host);
        let name = name.trim_end_matches('.');
        if name == "localhost" || is_ip_literal(name) {
            return true;
        }
        names.iter().any(|allowed| {
            if allowed.contains(':') && !allowed.starts_with('[') {
                *allowed == host
            } else if let Some(domain) = allowed.strip_prefix('.') {
                name == domain || name.ends_with(allowed.as_str())
            } else {
                name == allowed
            }
        })
    }

    fn refusal(&self, host: &str) -> ApiError {
        crate::error::Error::HostNotAllowed {
            host: host.into(),
            bound: self.bound.to_string(),
        }
        .into()
    }
}

/// The name part of a Host value: without the port, an IPv6 literal with its brackets.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `127.0.0.1`, `[::1]`, … (IPv6 only in brackets, as in a URL).
fn is_ip_literal(name: &str) -> bool {
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => name.parse::<std::net::Ipv4Addr>().is_ok(),
    }
}

/// Middleware: 403 for a Host the policy does not allow.
pub async fn check_host(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let policy = &st.0.hosts;
    if policy.enabled() {
        let host = match req.headers().get(header::HOST) {
            Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            None => req.uri().authority().map(|a| a.to_string()),
        };
        if let Some(host) = host.filter(|h| !policy.allows(h)) {
            tracing::debug!(%host, "request refused: Host not allowed");
            return policy.refusal(&host).into_response();
        }
    }
    next.run(req).await
}

/// Whether a Content-Type value is JSON (`application/json`, any parameters).
pub fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Route middleware: 415 for a POST whose Content-Type is not JSON, unless
/// `--allow-any-content-type`.
pub async fn require_json(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || st.0.opts.allow_any_content_type {
        return next.run(req).await;
    }
    let got = match req.headers().get(header::CONTENT_TYPE) {
        Some(v) => {
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            if is_json(&v) {
                return next.run(req).await;
            }
            format!("{v:?}")
        }
        None => "none".to_string(),
    };
    ApiError::from(crate::error::Error::NotJson(got)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bound: &str, listed: &[&str]) -> HostPolicy {
        let listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
        HostPolicy::new(bound.parse().unwrap(), &listed)
    }

    #[test]
    fn loopback_allows_local_names_and_ip_literals_only() {
        let p = policy("127.0.0.1", &[]);
        assert!(p.enabled());
        for ok in [
            "localhost",
            "localhost:8000",
            "LOCALHOST:1",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:8000",
            "[::1]",
            "[::1]:8000",
            "10.1.2.3:80",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8000",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "::1",
            "[evil]",
            "",
        ] {
            assert!(!p.allows(bad), "{bad}");
        }
    }

    #[test]
    fn listed_names_subdomains_ports_and_star() {
        let p = policy(
            "::1",
            &["Folio.Example.com", ".corp.example", "api.example:8443"],
        );
        assert!(p.allows("folio.example.com:9000"));
        assert!(p.allows("FOLIO.EXAMPLE.COM."));
        assert!(p.allows("a.b.corp.example"));
        assert!(p.allows("corp.example"));
        assert!(!p.allows("evilcorp.example"));
        assert!(p.allows("api.example:8443"));
        assert!(!p.allows("api.example:8000"));
        assert!(!p.allows("api.example"));
        assert!(!policy("127.0.0.1", &["a.example", "*"]).enabled());
        assert!(policy("127.0.0.1", &["*"]).allows("anything.example"));
    }

    #[test]
    fn other_addresses_check_only_when_names_are_listed() {
        assert!(!policy("0.0.0.0", &[]).enabled());
        assert!(policy("0.0.0.0", &[]).allows("folio.svc.cluster.local"));
        let p = policy("0.0.0.0", &["folio.example.com"]);
        assert!(p.enabled());
        assert!(p.allows("folio.example.com:8000"));
        assert!(p.allows("192.168.1.5:8000"));
        assert!(!p.allows("evil.example"));
    }

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("application/jsonx"));
        assert!(!is_json(""));
    }
}
