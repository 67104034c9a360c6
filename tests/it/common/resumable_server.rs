//! The Python SDK server whose SSE events carry ids (tests/interop/resumable_http_server.py,
//! an event store behind `StreamableHTTPSessionManager`) as a child process.

use super::*;

/// tests/interop/resumable_http_server.py on a free port, given `flags` (`--no-store`: no
/// event store, so no ids); its MCP URL. `None` (the test skips) without the Python SDK.
pub async fn resumable_http_server(flags: &[&str]) -> Option<(tokio::process::Child, String)> {
    start_on(free_port(), flags).await
}

/// [`resumable_http_server`] on `port` (one that was used before: a restarted upstream).
pub async fn resumable_http_server_on(port: u16) -> Option<(tokio::process::Child, String)> {
    start_on(port, &[]).await
}

async fn start_on(port: u16, flags: &[&str]) -> Option<(tokio::process::Child, String)> {
    let python = python_with_mcp_or_skip()?;
    let server = tokio::process::Command::new(python)
        .arg(repo_root().join("tests/interop/resumable_http_server.py"))
        .arg(port.to_string())
        .args(flags)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start resumable_http_server.py");
    eventually("resumable_http_server listening", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    Some((server, format!("http://127.0.0.1:{port}/mcp")))
}
