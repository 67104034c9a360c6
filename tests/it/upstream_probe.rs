//! `[[upstreams]] protocol = "auto"`: the bridge probes with `server/discover` and falls back to
//! `initialize` on the same connection when the upstream does not speak 2026-07-28. Each test
//! runs a real upstream under `auto` and checks the revision `/upstreams` reports, and that a
//! call works at it: the demo server (rmcp, speaks both: 2026-07-28), npm's server-everything
//! (TypeScript SDK: -32601 method not found, then `initialize`), a Python SDK 1.x server
//! (-32602, then `initialize`) and a Python SDK 2.x server (speaks 2026-07-28, which is why
//! `auto` is not the default: docs/configuration.md).

use std::{path::Path, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, UpstreamConfig, UpstreamProtocol};
use serde_json::{Value, json};

/// A bridge (calls in sync mode) whose only upstream is `upstream` under `protocol = "auto"`,
/// and what `/upstreams` says of it.
async fn start_auto(mut upstream: UpstreamConfig) -> (TestBridge, Value) {
    upstream.protocol = UpstreamProtocol::Auto;
    let bridge = start_bridge(|c: &mut Config| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![upstream];
    })
    .await;
    let reported = reported(&bridge).await;
    (bridge, reported)
}

/// What `/upstreams` says of the only upstream.
async fn reported(bridge: &TestBridge) -> Value {
    let (status, body) = get_json(&format!("{}/upstreams", bridge.base)).await;
    assert_eq!(status, 200, "{body}");
    body["upstreams"][0].clone()
}

/// The Python server `tests/fixtures/<script>`, run by `python`, as stdio upstream `name`.
fn python_fixture(name: &str, python: &Path, script: &str) -> UpstreamConfig {
    let server = repo_root().join("tests/fixtures").join(script);
    UpstreamConfig::stdio(
        name,
        &python.display().to_string(),
        &[&server.display().to_string()],
    )
}

/// The demo server speaks 2026-07-28: the probe picks it, and `ask_in_rounds` (which asks in
/// `input_required` rounds and refuses any lower revision) gets its answers from the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_picks_2026_07_28_for_an_upstream_that_speaks_it() {
    let (bridge, upstream) = start_auto(demo_stdio_upstream("demo")).await;
    assert_eq!(upstream["protocol"], "2026-07-28", "{upstream}");
    let caller = connect_answering_everything(&bridge.mcp_url(), "Ada", "-", &[], false).await;
    let result = call(
        &caller,
        "demo__ask_in_rounds",
        json!({"rounds": 2, "per_round": 1}),
    )
    .await;
    let text = first_text(&result);
    assert!(text.starts_with("answers: Ada, Ada"), "{text}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// server-everything (TypeScript SDK) answers `server/discover` with -32601: the bridge does
/// `initialize` on the same stdio child, and calls work as under `handshake`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_initialize_for_server_everything() {
    let Some(entry) = server_everything() else {
        prerequisite(false, "node and tests/interop/node_modules");
        return;
    };
    let everything = UpstreamConfig::stdio(
        "everything",
        "node",
        &[&entry.display().to_string(), "stdio"],
    );
    let (bridge, upstream) = start_auto(everything).await;
    assert_eq!(upstream["protocol"], "2025-11-25", "{upstream}");
    assert_eq!(upstream["restarts"], 0, "one child, not two: {upstream}");
    let client = connect(&bridge).await;
    let result = call(&client, "everything__echo", json!({"message": "probe"})).await;
    assert_eq!(first_text(&result), "Echo: probe");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A Python SDK 1.x server answers `server/discover` with -32602 invalid params: any JSON-RPC
/// error means "not 2026-07-28", and `initialize` follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_initialize_for_a_python_sdk_1_server() {
    let Some(python) = python_with_mcp1() else {
        prerequisite(
            false,
            "a venv with the MCP Python SDK 1.x (BRIDGE_TEST_PYTHON_MCP1)",
        );
        return;
    };
    let (bridge, upstream) = start_auto(python_fixture("py1", &python, "mcp1_server.py")).await;
    let protocol = upstream["protocol"].as_str().unwrap_or_default();
    assert!(
        !protocol.is_empty() && protocol != "2026-07-28",
        "{upstream}"
    );
    let client = connect(&bridge).await;
    let result = call(&client, "py1__shout", json!({"text": "probe"})).await;
    assert_eq!(first_text(&result), "PROBE");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The Python SDK 2.x answers `server/discover`: under `auto` it is a 2026-07-28 upstream
/// (which is why `auto` is opt-in), and tools work there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_moves_a_python_sdk_2_server_to_2026_07_28() {
    let Some(python) = python_with_mcp() else {
        prerequisite(false, "a venv with the MCP Python SDK (BRIDGE_TEST_PYTHON)");
        return;
    };
    let fixture = python_fixture("py2", &python, "python_surface_server.py");
    let (bridge, upstream) = start_auto(fixture).await;
    assert_eq!(upstream["protocol"], "2026-07-28", "{upstream}");
    let client = connect(&bridge).await;
    let result = call(&client, "py2__shout", json!({"text": "probe"})).await;
    assert_eq!(first_text(&result), "PROBE");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Under the default (`handshake`) the demo server runs at a handshake revision: the revision
/// reported is the one negotiated, not the config word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_reports_the_negotiated_revision() {
    let bridge = start_bridge(|_| {}).await;
    let upstream = reported(&bridge).await;
    let protocol = upstream["protocol"].as_str().unwrap_or_default();
    assert!(
        protocol.starts_with("20") && protocol != "2026-07-28",
        "{upstream}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}
