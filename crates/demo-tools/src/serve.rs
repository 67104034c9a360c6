//! The two ways to run the demo server: stdio and Streamable HTTP.

use std::sync::Arc;

use rmcp::{
    ServiceExt,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use super::DemoTools;

/// Why the stdio demo server stopped early.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("the MCP handshake on stdin/stdout failed: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    #[error("the stdio session ended abnormally: {0}")]
    Session(#[from] tokio::task::JoinError),
}

/// Serves [`DemoTools`] on stdin/stdout until stdin closes (the client is
/// gone), then returns. This is `mcp-progress-bridge demo-tools` (`asking`:
/// `--asking`, see [`DemoTools::with_asking`]).
///
/// Stdout carries the protocol, so the caller must send logs elsewhere: a
/// `tracing_subscriber::fmt()` subscriber writes to stdout unless told
/// `.with_writer(std::io::stderr)`, and one stray line breaks the client.
pub async fn serve_stdio(asking: bool) -> Result<(), StdioError> {
    // `stdio_pipes`, not `stdio`: when stdin is a pipe (it is, under a client)
    // it reads on the reactor instead of a blocking thread that could keep the
    // runtime from shutting down.
    let tools = if asking {
        DemoTools::new().with_asking()
    } else {
        DemoTools::new()
    };
    let server = tools
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| StdioError::Initialize(Box::new(e)))?;
    let reason = server.waiting().await?;
    tracing::info!(?reason, "demo tools: stdio session ended");
    Ok(())
}

/// An axum router serving [`DemoTools`] over MCP Streamable HTTP at `/mcp`.
///
/// Sessions are kept in memory (`LocalSessionManager`); every session serves a
/// clone of one `DemoTools`, so `cancellations` sees cancels from all of them.
/// Only loopback `Host` headers are accepted (rmcp's default), which is what
/// tests and a local demo need. Cancelling `ct` ends every session.
///
/// Do not call the `crash` tool on this server: it exits the process it runs
/// in, which here is the caller's (a test's) process. Use it over stdio.
pub fn http_router(ct: CancellationToken) -> axum::Router {
    let tools = DemoTools::new();
    // rmcp only derives child tokens from it: it never cancels the caller's.
    let config = StreamableHttpServerConfig::default().with_cancellation_token(ct);
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().nest_service("/mcp", service)
}
