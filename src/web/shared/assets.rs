//! What the pages are served with: the stylesheet and the small live-update
//! script, embedded in the binary (`/static/app.css`, `/static/live.js`,
//! their URLs versioned by content), and the headers every HTML page gets,
//! the Content-Security-Policy among them (no inline script, no inline
//! style: nothing in the pages needs a hash or a nonce).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::web::text::fnv1a;

const CSS: &str = include_str!("../../../static/app.css");
const JS: &str = include_str!("../../../static/live.js");
const CSS_VERSION: u64 = fnv1a(CSS.as_bytes());
const JS_VERSION: u64 = fnv1a(JS.as_bytes());

const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The stylesheet's URL, with its content's hash.
pub(super) fn css_href() -> String {
    format!("/static/app.css?v={CSS_VERSION:016x}")
}

/// The script's URL, with its content's hash.
pub(super) fn js_href() -> String {
    format!("/static/live.js?v={JS_VERSION:016x}")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // URLs carry the content's hash (`?v=`): a new build is a new URL.
            (header::CACHE_CONTROL, "public, max-age=86400"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

pub(in crate::web) async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

pub(in crate::web) async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

/// An HTML page: not cached, under the Content-Security-Policy.
pub(super) fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_versioned_by_content() {
        assert_ne!(CSS_VERSION, JS_VERSION);
        assert!(CSS.contains("prefers-color-scheme"));
        assert!(JS.contains("EventSource"));
    }
}
