//! Checks on a request's head made before it is routed, where RFC 9112 asks for a 400,
//! or where waiting for the body would only waste the connection.
//!
//! - **More than one `Host` line, or a `Host` that is not a valid authority**: 400
//!   (RFC 9112 §3.2). The `http` crate keeps every line and `HeaderMap::get` returns the
//!   first, so `Host: localhost` followed by `Host: evil.example` passed the DNS-rebinding
//!   check with the first while a proxy or a later reader could act on the second.
//! - **An absolute-form target** (`POST http://evil.example/v1/completions`): RFC 9112
//!   §3.2.2 has the target's authority replace `Host`, but the Host check reads the header.
//!   A target whose authority differs from `Host` is refused (400), one that agrees with it
//!   (or comes without a `Host`) is checked as that authority, so the check sees what the
//!   request names either way.
//! - **`Content-Length` above `--max-request-bytes`**: 413 at once, without reading the
//!   body (the body limit alone refused it only after the whole body had arrived).
//!
//! Each refusal closes the connection: its body (if any) is not read, so the stream cannot
//! be trusted to be at the next request.

use crate::error::ApiError;
use axum::http::{header, HeaderMap, Method, Uri};

/// What is wrong with a request's head, if anything.
pub fn check(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    max_body: usize,
) -> Result<(), ApiError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if let Some(second) = hosts.next() {
        return Err(ApiError::bad_request(
            format!(
                "Host header: sent more than once ({:?}, then {:?}); a request must carry exactly one (RFC 9112 §3.2)",
                String::from_utf8_lossy(host.map_or(&[][..], |h| h.as_bytes())),
                String::from_utf8_lossy(second.as_bytes()),
            ),
            "invalid_host",
        ));
    }
    let host = match host {
        None => None,
        Some(v) => match v.to_str().ok().filter(|h| valid_host(h)) {
            Some(h) => Some(h),
            None => {
                return Err(ApiError::bad_request(
                    format!(
                        "Host header: {:?} is not a host[:port] (RFC 9112 §3.2)",
                        String::from_utf8_lossy(v.as_bytes())
                    ),
                    "invalid_host",
                ))
            }
        },
    };
    if let (Some(target), false) = (uri.authority(), method == Method::CONNECT) {
        if let Some(h) = host.filter(|h| !h.eq_ignore_ascii_case(target.as_str())) {
            return Err(ApiError::bad_request(
                format!(
                    "request target: the absolute-form target names {:?} but the Host header {h:?}; folio is not a proxy, send the path alone (origin-form) with a matching Host",
                    target.as_str()
                ),
                "invalid_host",
            ));
        }
    }
    if let Some(v) = headers.get(header::CONTENT_LENGTH) {
        // An unparsable value is hyper's to refuse; it never gets here.
        if let Some(n) = v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            if n > max_body as u64 {
                return Err(crate::error::Error::BodyTooLarge(format!(
                        "request body: Content-Length {n} is larger than the limit of {max_body} bytes (--max-request-bytes)"
                    )).into());
            }
        }
    }
    Ok(())
}

/// `host[:port]` (an IPv6 literal in brackets), or empty (allowed when the target has no
/// authority); no user info, path or whitespace.
fn valid_host(h: &str) -> bool {
    h.is_empty() || (!h.contains('@') && h.parse::<axum::http::uri::Authority>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    fn head(hosts: &[&str], len: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in hosts {
            h.append(header::HOST, HeaderValue::from_str(v).unwrap());
        }
        if let Some(l) = len {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn one_valid_host() {
        let p = uri("/v1/completions");
        assert!(check(&Method::POST, &p, &head(&["localhost:8000"], None), 10).is_ok());
        assert!(check(&Method::POST, &p, &head(&["[::1]:8000"], None), 10).is_ok());
        assert!(check(&Method::POST, &p, &head(&[], None), 10).is_ok());
        let e = check(
            &Method::POST,
            &p,
            &head(&["localhost", "evil.example"], None),
            10,
        )
        .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("\"evil.example\""), "{}", e.message);
        for bad in ["a b", "user@localhost", "localhost/x"] {
            let e = check(&Method::POST, &p, &head(&[bad], None), 10).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn absolute_form_must_agree_with_host() {
        let t = uri("http://evil.example/v1/completions");
        let e = check(&Method::POST, &t, &head(&["127.0.0.1:8000"], None), 10).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("evil.example"), "{}", e.message);
        let t = uri("http://LocalHost:8000/v1/completions");
        assert!(check(&Method::POST, &t, &head(&["localhost:8000"], None), 10).is_ok());
    }

    #[test]
    fn content_length_over_the_limit() {
        let p = uri("/v1/completions");
        let e = check(&Method::POST, &p, &head(&[], Some("101")), 100).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            e.message.contains("101") && e.message.contains("100"),
            "{}",
            e.message
        );
        assert!(check(&Method::POST, &p, &head(&[], Some("100")), 100).is_ok());
    }
}
