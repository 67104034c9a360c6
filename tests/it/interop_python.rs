//! Interop with a client nobody here wrote: the official MCP Python SDK (PyPI `mcp` 2.x) drives
//! the bridge through `/mcp`, over the protocol revisions it negotiates itself. The checks are
//! in tests/interop/python_client.py; `.ci/run` installs the SDK into `.venv`.

use std::time::Duration;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_drives_the_bridge() {
    let Some(python) = python_with_mcp_or_skip() else {
        return;
    };
    let bridge = start_bridge(|c| c.jobs.sync_budget_ms = 2000).await;
    run_python_client(&python, "python_client.py", &bridge.mcp_url()).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}
