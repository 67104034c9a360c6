//! The jobs page at `/` and the JavaScript client at `/client.js`: static files compiled into
//! the binary (no CDN, nothing fetched at run time), so `cargo run` is all a user needs. The
//! page calls tools through `/mcp` like any other MCP client, so it is held to the same auth.

use axum::{
    Router,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};

/// One embedded file.
struct Asset {
    body: &'static str,
    content_type: &'static str,
}

const INDEX: Asset = Asset {
    body: include_str!("../../web/index.html"),
    content_type: "text/html; charset=utf-8",
};
const PAGE_JS: Asset = Asset {
    body: include_str!("../../web/jobs-page.js"),
    content_type: "text/javascript; charset=utf-8",
};
const PAGE_CSS: Asset = Asset {
    body: include_str!("../../web/jobs-page.css"),
    content_type: "text/css; charset=utf-8",
};
const CLIENT_JS: Asset = Asset {
    body: include_str!("../../packages/client/dist/index.js"),
    content_type: "text/javascript; charset=utf-8",
};

/// The page loads only its own files; its EventSources may follow `events_url`s on another
/// origin (a bridge behind a proxy), so `connect-src` is open.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src *; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { serve(&INDEX) }))
        .route("/jobs-page.js", get(|| async { serve(&PAGE_JS) }))
        .route("/jobs-page.css", get(|| async { serve(&PAGE_CSS) }))
        .route(
            "/client.js",
            get(|| async {
                let mut response = serve(&CLIENT_JS);
                // Application frontends on other origins may import the module.
                response.headers_mut().insert(
                    header::ACCESS_CONTROL_ALLOW_ORIGIN,
                    HeaderValue::from_static("*"),
                );
                response
            }),
        )
}

fn serve(asset: &Asset) -> Response {
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    // Small files: always revalidate, so a new bridge version never runs an old page script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}
