//! Interop with a client nobody here wrote: the official MCP Python SDK (PyPI `mcp` 2.x) drives
//! the bridge through `/mcp`, over the protocol revisions it negotiates itself. The checks are
//! in tests/interop/python_client.py; `.ci/run` installs the SDK into `.venv`.

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_drives_the_bridge() {
    let python = python_with_mcp();
    if !prerequisite(
        python.is_some(),
        "a Python with the `mcp` package (BRIDGE_TEST_PYTHON or .venv)",
    ) {
        return;
    }
    let bridge = start_bridge(|c| c.jobs.sync_budget_ms = 2000).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_client.py"
    );
    let output = within(
        "the Python client",
        tokio::process::Command::new(python.unwrap())
            .arg(script)
            .arg(bridge.mcp_url())
            .output(),
    )
    .await
    .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "the Python SDK client failed:\n{stdout}\n{stderr}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}
