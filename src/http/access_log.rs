//! The request log, and the rule that keeps secrets out of every log.
//!
//! Job URLs carry capability tokens in their query string and `/mcp` requests carry bearer
//! tokens in a header, so the request log writes the method, the path without its query, the
//! status and the time taken, and never a header. rmcp logs whole MCP messages at debug and
//! trace level, and the bridge's answers hold job handles with tokens: [`secret_caps`] caps
//! those targets whatever `RUST_LOG` asks for.

use std::time::Instant;

use axum::{extract::Request, middleware::Next, response::Response};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;

/// Log targets that would print MCP messages (and so job tokens) below these levels.
const CAPS: &[(&str, LevelFilter)] = &[
    ("rmcp::service", LevelFilter::INFO),
    (
        "rmcp::transport::streamable_http_server",
        LevelFilter::DEBUG,
    ),
    (
        "rmcp::transport::streamable_http_server::tower",
        LevelFilter::INFO,
    ),
];

/// A filter that passes everything except the secret-bearing targets below their caps. Use it
/// *together* with the level filter (`RUST_LOG` or the default), an event passing only when
/// both let it: `RUST_LOG=trace` cannot lift a cap, and a cap never lifts what `RUST_LOG` (or
/// the default `rmcp=warn`) keeps quiet. (Added as directives of an `EnvFilter` instead, the
/// caps would set those targets' levels, and switch rmcp's start-up info back on.)
pub fn secret_caps() -> Targets {
    CAPS.iter().fold(
        Targets::new().with_default(LevelFilter::TRACE),
        |caps, &(target, level)| caps.with_target(target, level),
    )
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
