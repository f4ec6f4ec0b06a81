//! `--api-key`: a bearer token required on the API routes, and `--allowed-origins` CORS.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowHeaders, AllowMethods, AllowOrigin, CorsLayer};

/// Whether `path` needs the key: every /v1 route, /tokenize, /detokenize and the adapter
/// list (`/lora-adapters`, llama-server's; it names the adapters' files); /metrics only
/// with `api_key_protects_metrics`. /health never (load balancers probe it); nor the chat
/// page (`/`, `/index.html`, `/app.js`: it holds no data, its own API calls carry the key).
pub fn protected(path: &str, metrics_too: bool) -> bool {
    path == "/v1"
        || path.starts_with("/v1/")
        || path == "/tokenize"
        || path == "/detokenize"
        || path == "/lora-adapters"
        || path == "/models"
        || path.starts_with("/models/")
        || path.starts_with("/lora-adapters/")
        // Ollama's API generates and pulls as /v1 does.
        || path.starts_with("/api/")
        || (metrics_too && path == "/metrics")
}

/// Equal bytes, in time that depends only on the lengths (a wrong key's prefix does not
/// answer faster than a wrong first byte).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Middleware: 401 unless `Authorization: Bearer <key>` or `x-api-key: <key>` (what the
/// `anthropic` SDKs send); the body in OpenAI's error shape, or Anthropic's on
/// /v1/messages.
pub async fn require_key(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let opts = &st.0.opts;
    let Some(key) = opts.api_key.as_deref() else {
        return next.run(req).await;
    };
    if !protected(req.uri().path(), opts.api_key_protects_metrics) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        })
        .map(|(_, token)| token.trim())
        .or_else(|| {
            req.headers()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        });
    let message = match given {
        Some(token) if same(token.as_bytes(), key.as_bytes()) => return next.run(req).await,
        Some(_) => "invalid API key",
        None => {
            "missing API key: send the header `Authorization: Bearer <key>` or `x-api-key: <key>`"
        }
    };
    let e = ApiError::from(crate::error::Error::Unauthorized(message));
    let mut r = match req.uri().path().starts_with("/v1/messages") {
        true => crate::anthropic::error::response(e),
        false => e.into_response(),
    };
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// The CORS layer for `origins` (`*` = any origin), or why an origin is not a valid header.
/// Preflights (OPTIONS) are answered by the layer itself, before the key is checked, as
/// browsers send them without credentials.
pub fn cors(origins: &[String]) -> Result<CorsLayer, crate::InvalidOption> {
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim()).map_err(|_| {
                    crate::InvalidOption(format!("--allowed-origins: not a valid origin: {o:?}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(list)
    };
    // NOTE: headers are mirrored rather than `*`: a wildcard does not cover `Authorization`.
    Ok(CorsLayer::new()
        .allow_origin(allow)
        .allow_methods(AllowMethods::mirror_request())
        .allow_headers(AllowHeaders::mirror_request())
        .max_age(std::time::Duration::from_secs(600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_paths() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
        assert!(protected("/v1/chat/completions", false));
        assert!(protected("/v1/embeddings", false));
        assert!(protected("/tokenize", false));
        assert!(protected("/lora-adapters", false));
        assert!(!protected("/health", true));
        assert!(!protected("/metrics", false));
        assert!(protected("/metrics", true));
        assert!(!protected("/v1x", false));
        for page in ["/", "/index.html", "/app.js"] {
            assert!(!protected(page, true), "{page}");
        }
    }

    #[test]
    fn bad_origin_is_an_error() {
        assert!(cors(&["http://a.example".into()]).is_ok());
        assert!(cors(&["*".into()]).is_ok());
        assert!(cors(&["bad\norigin".into()])
            .unwrap_err()
            .0
            .contains("--allowed-origins"));
    }
}
