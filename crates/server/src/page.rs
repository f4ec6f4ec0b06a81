//! The chat page at `/`: one HTML file and one script, built into the binary, so a person
//! who starts `folio serve` can chat from a browser without curl or a separate UI.
//!
//! The page is public (it holds no data; `auth::protected` does not list its paths); the
//! API calls it makes carry the key the person types in. The Host guard still applies: a
//! rebinding page must not be able to load it under its own name. The script is a separate
//! file so the Content-Security-Policy can forbid inline scripts: text the model writes is
//! put into the page as text nodes, and even markup that slipped through could not run.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

/// The page's own files only; inline `style` attributes allowed, inline scripts not.
pub const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self'";

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");

/// `GET /` and `/index.html`.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /app.js`.
pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `no-cache`: the browser revalidates, so a page from an upgraded server is never mixed
/// with an old script. `nosniff` and `DENY`: a file is only what its type says, and no
/// other site can frame the page (clickjacking the Send button).
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ];
    (headers, body).into_response()
}
