//! The bridge in front of a real third-party MCP server: the reference
//! `@modelcontextprotocol/server-everything` (TypeScript SDK) from npm, over stdio and over
//! Streamable HTTP. `.ci/run` installs it into tests/interop/node_modules.

#[allow(dead_code)]
mod common;

use std::{path::PathBuf, time::Duration};

use common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::json;

fn everything_entry() -> Option<PathBuf> {
    let entry = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (node && entry.exists()).then_some(entry)
}

fn everything_stdio(entry: &std::path::Path) -> UpstreamConfig {
    UpstreamConfig::stdio(
        "everything",
        "node",
        &[&entry.display().to_string(), "stdio"],
    )
}

const LONG_RUNNING: &str = "everything__trigger-long-running-operation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_reports_progress_through_the_bridge() {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![everything_stdio(&entry)];
    })
    .await;
    let client = connect(&bridge).await;
    let tools = within("list tools", client.list_all_tools()).await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == LONG_RUNNING),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );

    let handle = running_job(&client, LONG_RUNNING, json!({"duration": 1, "steps": 5})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed");
    assert!(
        done.data["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Long running operation completed")
    );

    let waited = call(&client, "wait_for_job", json!({"job_id": handle.job_id})).await;
    assert!(first_text(&waited).contains("Steps: 5"));
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http_works_in_sync_mode() {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let port = free_port();
    let mut server = tokio::process::Command::new("node")
        .arg(&entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .kill_on_drop(true)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start server-everything");
    let url = format!("http://127.0.0.1:{port}/mcp");
    eventually("server-everything listening", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![http_upstream("everything", &url)];
    })
    .await;
    let client = connect(&bridge).await;
    let echo = call(&client, "everything__echo", json!({"message": "hello"})).await;
    assert!(first_text(&echo).contains("hello"), "{}", first_text(&echo));
    let result = call(&client, LONG_RUNNING, json!({"duration": 0.5, "steps": 3})).await;
    assert!(first_text(&result).contains("Steps: 3"));
    let seen = caller_progress(&client, 3).await;
    assert_eq!(
        seen,
        vec![1.0, 2.0, 3.0],
        "progress relayed on the caller's own token"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
    let _ = server.kill().await;
}
