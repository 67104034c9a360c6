//! The TypeScript SDK task server (tests/interop/task_http_server.mjs) as a child process.

use super::*;

/// The TypeScript SDK server of tests/interop/task_http_server.mjs on a free port, given
/// `flags` (`--json`: plain JSON bodies, no SSE; `--session-tasks`: each task known only to
/// the session that made it); its MCP URL and port. `None` (the test skips) without node.
pub async fn task_http_server(flags: &[&str]) -> Option<(tokio::process::Child, String, u16)> {
    let root = repo_root();
    let script = root.join("tests/interop/task_http_server.mjs");
    let present = node().is_some()
        && root
            .join("tests/interop/node_modules/@modelcontextprotocol/sdk")
            .exists();
    if !prerequisite(
        present,
        "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
    ) {
        return None;
    }
    let port = free_port();
    let mut command = tokio::process::Command::new("node");
    command.arg(&script).arg(port.to_string()).args(flags);
    let server = command
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start task_http_server.mjs");
    eventually("task_http_server listening", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    Some((server, format!("http://127.0.0.1:{port}/mcp"), port))
}
