//! `GET /console`: the developer console (CONVENTIONS "Developer loop"). A hand-written page,
//! stylesheet and script built into the binary (no build step, no external resource). It needs
//! no key to load; it signs in with an API key kept only in the tab's session storage and
//! talks to the public v1 API with it. Strict headers: a Content-Security-Policy without
//! inline script or style, no framing, no referrer, no sniffing.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::state::AppState;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// Everything the console may load or call: this server, nothing else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str, cache: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// The console's page.
#[utoipa::path(get, path = "/console", tag = "operations", responses((status = 200, description = "The developer console (HTML; signs in with an API key in the browser).", content_type = "text/html")))]
pub async fn page() -> Response {
    asset(INDEX, "text/html; charset=utf-8", "no-store")
}

async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8", "no-cache")
}

async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8", "no-cache")
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/app.js", get(script))
        .route("/console/app.css", get(style))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(page))]
pub struct ConsoleApi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        assert!(INDEX.contains("src=\"/console/app.js\""));
        assert!(INDEX.contains("href=\"/console/app.css\""));
        // No inline script or style, nothing from elsewhere.
        assert!(
            !INDEX.contains("<script>") && !INDEX.contains("<style") && !INDEX.contains("style=\"")
        );
        for text in [INDEX, STYLE] {
            assert!(!text.contains("http://") && !text.contains("https://"));
        }
        // The script calls this server only (relative paths; the URLs in it are placeholders).
        assert!(SCRIPT.contains("const API = \"/api/v1/integrations\""));
        assert!(!SCRIPT.contains("fetch(\"http") && !SCRIPT.contains("import("));
        // The key is kept in session storage and sent as a header, never put in a URL.
        assert!(SCRIPT.contains("sessionStorage"));
        assert!(!SCRIPT.contains("localStorage"));
        assert!(!SCRIPT.contains("innerHTML"));
    }
}
