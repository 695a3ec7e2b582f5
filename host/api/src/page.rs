//! The status page at `/`: a static HTML shell, one hand-written script module and one
//! style sheet, all built into the binary. The page holds no data of its own: its script
//! reads the REST API (`/api/v1/…`, the event stream) with the caller's token, so the
//! page itself is served without one, and every data request keeps the API's rules.
//!
//! The answers carry a strict `Content-Security-Policy`: scripts and styles from vigil's
//! own origin only (no inline script or style), connections to vigil only, no framing.
//! The script renders every value from the API as text, never as markup.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page's shell.
const INDEX: &str = include_str!("../assets/index.html");
/// The page's only script, an ES module.
const SCRIPT: &str = include_str!("../assets/app.js");
/// The page's only style sheet.
const STYLE: &str = include_str!("../assets/app.css");

/// The policy every answer of the page carries: nothing inline, nothing from elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";

/// The paths the page is served at.
const PATHS: [&str; 3] = ["/", "/assets/app.js", "/assets/app.css"];

/// Whether `method` and `path` ask for a part of the page, which holds no data and so needs
/// no token even when reads do.
pub(crate) fn is_page(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD) && PATHS.contains(&path)
}

/// The page's routes (outside `/openapi.json`: they are not part of the API).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

/// One part of the page, with the headers that keep it from being misused.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        // A new vigil serves a new page: revalidate rather than run a stale script.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_loads_only_its_own_files() {
        assert!(INDEX.contains(r#"<script type="module" src="/assets/app.js"></script>"#));
        assert!(INDEX.contains(r#"<link rel="stylesheet" href="/assets/app.css">"#));
        // No inline script or style: the policy would refuse them.
        assert_eq!(INDEX.matches("<script").count(), 1);
        assert!(!INDEX.contains("<style") && !INDEX.contains("style="));
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"));
    }

    #[test]
    fn the_script_never_writes_markup() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(sink), "app.js uses {sink}");
        }
        // The token is sent as a header, never in a URL.
        assert!(SCRIPT.contains("Authorization"));
        assert!(!SCRIPT.contains("localStorage"));
    }

    #[test]
    fn page_paths() {
        assert!(is_page(&Method::GET, "/"));
        assert!(is_page(&Method::HEAD, "/assets/app.js"));
        assert!(!is_page(&Method::POST, "/"));
        assert!(!is_page(&Method::GET, "/api/v1/clusters"));
        assert!(!is_page(&Method::GET, "/assets/other.js"));
    }
}
