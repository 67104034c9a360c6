//! Agent frameworks, for real: each framework's own agent loop drives the bridge through its
//! own MCP client at its defaults, with the scripted model of tests/agents/script.py in place of
//! an LLM (docs/agents.md). A slow tool answers with a job handle; the model follows the handle's
//! text to `wait_for_job` until the tool's result; the application sees progress on the
//! correlation channel; cancelling the agent's run during the call cancels the job. The venvs
//! and node modules are made by `.ci/run` from the pinned files in tests/agents/.

use std::{path::Path, time::Duration};

use crate::common::*;
use tokio::process::Command;

/// Runs `script` (in tests/agents/) with `program` against a fresh bridge (the demo tools, the
/// default `auto` mode) and returns its output once it said "all checks passed".
async fn run_agent(program: &Path, script: &str) -> String {
    let bridge = start_bridge(|_| {}).await;
    let (result, cancel) = ("agent-result", "agent-cancel");
    let mut command = Command::new(program);
    command
        .current_dir(repo_root().join("tests/agents"))
        .arg(script)
        .args(["--mcp", &bridge.mcp_url()])
        .args(["--result-cid", result])
        .args(["--result-events", &bridge.correlation_events_url(result)])
        .args(["--cancel-cid", cancel])
        .args(["--cancel-events", &bridge.correlation_events_url(cancel)]);
    // A generous limit for a loaded machine (the turn itself takes about 20 s), not a timing.
    let output = run_to_end(command, Duration::from_secs(240)).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    bridge.shutdown(Duration::from_secs(1)).await;
    stdout
}

/// The OpenAI Agents SDK reads each MCP answer with a 5 s timeout: the first `wait_for_job`
/// times out, the bridge learns the bound from it, and every later wait answers in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdk_gets_the_result_progress_and_cancel() {
    let Some(python) = python_in_venv("BRIDGE_TEST_PYTHON_AGENTS", ".venv-agents", &["agents"])
    else {
        return;
    };
    let stdout = run_agent(&python, "openai_agents.py").await;
    // The first wait times out (nothing is known of the client yet); the bridge learns the
    // bound from it, and the later waits say how long they wait.
    assert!(!stdout.contains("TIMEOUTS 0\n"), "{stdout}");
    assert!(stdout.contains("each call waits up to 4 s"), "{stdout}");
    assert!(stdout.contains("CANCEL cancelled\n"), "{stdout}");
}

/// LangChain's MCP adapters open a session per tool call and wait without a timeout: the
/// default 20 s wait is read whole. Progress also reaches the adapters' `on_progress` while the
/// call waits for its result. The MCP Python SDK 1.x they run on sends no cancel when the run
/// is cancelled: the job runs on (docs/agents.md says how the application cancels it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_gets_the_result_and_progress() {
    let Some(python) = python_in_venv(
        "BRIDGE_TEST_PYTHON_LANGCHAIN",
        ".venv-langchain",
        &["langchain", "langchain_mcp_adapters"],
    ) else {
        return;
    };
    let stdout = run_agent(&python, "langchain_agent.py").await;
    assert!(stdout.contains("TIMEOUTS 0\n"), "{stdout}");
    assert!(stdout.contains("CANCEL completed\n"), "{stdout}");
}

/// The Microsoft Agent Framework's `MCPStreamableHTTPTool` has no request timeout by default
/// and prefers `structuredContent` (the model reads `{"counted": 40}`); cancelling the run
/// cancels the job (the MCP Python SDK 2.x sends `notifications/cancelled`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_framework_gets_the_result_progress_and_cancel() {
    let Some(python) = python_in_venv(
        "BRIDGE_TEST_PYTHON_AGENTS",
        ".venv-agents",
        &["agent_framework"],
    ) else {
        return;
    };
    let stdout = run_agent(&python, "agent_framework_agent.py").await;
    assert!(stdout.contains("TIMEOUTS 0\n"), "{stdout}");
    assert!(stdout.contains("CANCEL cancelled\n"), "{stdout}");
}

/// The Vercel AI SDK's MCP client waits without a timeout by default; aborting the run does not
/// tell the bridge (no `notifications/cancelled`): the job runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vercel_ai_sdk_gets_the_result_and_progress() {
    let modules = repo_root().join("tests/agents/node_modules/@ai-sdk/mcp");
    if !prerequisite(
        node().is_some() && modules.exists(),
        "node and tests/agents/node_modules (npm ci --prefix tests/agents)",
    ) {
        return;
    }
    let stdout = run_agent(Path::new("node"), "vercel_ai.mjs").await;
    assert!(stdout.contains("TIMEOUTS 0\n"), "{stdout}");
    assert!(stdout.contains("CANCEL completed\n"), "{stdout}");
}
