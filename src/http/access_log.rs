//! The request log, and the rule that keeps secrets out of every log.
//!
//! Job URLs carry capability tokens in their query string and `/mcp` requests carry bearer
//! tokens in a header, so the request log writes the method, the path without its query, the
//! status and the time taken, and never a header. rmcp logs whole MCP messages at debug and
//! trace level, and the bridge's answers hold job handles with tokens: [`secret_safe`] caps
//! those targets whatever `RUST_LOG` asks for.

use std::time::Instant;

use axum::{extract::Request, middleware::Next, response::Response};
use tracing_subscriber::EnvFilter;

/// Log targets that would print MCP messages (and so job tokens) below these levels.
const CAPS: &[&str] = &[
    "rmcp::service=info",
    "rmcp::transport::streamable_http_server=debug",
    "rmcp::transport::streamable_http_server::tower=info",
];

/// `filter` with the secret-bearing targets capped. More specific directives win in an
/// `EnvFilter`, so `RUST_LOG=trace` or `RUST_LOG=rmcp=trace` cannot lift the caps.
pub fn secret_safe(mut filter: EnvFilter) -> EnvFilter {
    for cap in CAPS {
        if let Ok(directive) = cap.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// One debug line per request: method, path (a query is shown only as `?…`), status, time.
pub async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = if request.uri().query().is_some() {
        "?…"
    } else {
        ""
    };
    let response = next.run(request).await;
    tracing::debug!(
        target: "mcp_progress_bridge::http::request",
        %method,
        path = %format_args!("{path}{query}"),
        status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}
