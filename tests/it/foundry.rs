//! The Foundry examples against a real bridge. `simulate.py`: the official Python MCP SDK plays
//! the agent platform (no progress token, the job handle back in the tool's text, then
//! `wait_for_job`) while the application follows `events_url` (venv of `BRIDGE_TEST_PYTHON`).
//! `agent_framework_agent.py`: the Microsoft Agent Framework's Foundry client, unchanged, against
//! tests/agents/foundry_platform.py, a stand-in for Foundry's Responses endpoint that calls the
//! bridge as a hosted MCP tool the way the platform does (venv of `BRIDGE_TEST_PYTHON_AGENTS`).

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Secret};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_foundry_simulation_shows_every_step_and_the_agent_gets_the_result() {
    let Some(python) = python_with_mcp() else {
        return skip_or_fail(
            "Foundry simulation",
            "no Python with the `mcp` package (BRIDGE_TEST_PYTHON or .venv)",
        );
    };
    // As in config/bridge.toml: slow_count always answers with a job handle.
    let bridge = start_bridge(|c| {
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Async,
        )];
    })
    .await;
    let mut command = Command::new(&python);
    command
        .current_dir(repo_root().join("examples/foundry"))
        .args([
            "simulate.py",
            "--bridge",
            &bridge.base,
            "--tool",
            "demo__slow_count",
            "--args",
            r#"{"to": 6, "delay_ms": 150}"#,
            "--correlation-id",
            "turn-simulated",
        ]);
    let output = run_to_end(command, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let steps: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once("[progress] "))
        .map(|(_, rest)| rest.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(
        steps,
        ["1/6", "2/6", "3/6", "4/6", "5/6", "6/6"],
        "the user saw every step: {stdout}"
    );
    assert!(stdout.contains("mcp_call output item has job"), "{stdout}");
    assert!(
        stdout.contains("wait_for_job returned: counted to 6"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the user saw the job end: completed"),
        "{stdout}"
    );

    // The job was tagged with the correlation header the platform sent.
    let job_id = stdout
        .split("has job ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .expect("job id in the output");
    let (_, snapshot) = get_json(&job_status_url(&bridge.base, job_id)).await;
    assert_eq!(snapshot["correlation_id"], "turn-simulated");
    assert_eq!(snapshot["status"], "completed");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The Agent Framework version of the Foundry agent: its `FoundryChatClient` and the bridge as a
/// hosted MCP tool (`get_mcp_tool`: headers, allowed_tools, approvals for all but the job tools),
/// streamed. The platform stand-in asks approval for the slow tool, calls it with the bearer
/// token and no progress token, and the model follows the handle to `wait_for_job`; the
/// application picks the handle out of the framework's `mcp_server_tool_result` and shows every
/// step from `events_url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_framework_foundry_agent_shows_every_step_and_ends_with_the_result() {
    let Some(python) = python_in_venv(
        "BRIDGE_TEST_PYTHON_AGENTS",
        ".venv-agents",
        &["agent_framework_foundry", "aiohttp"],
    ) else {
        return;
    };
    const TOKEN: &str = "foundry-test-token";
    let bridge = start_bridge(|c| {
        c.auth.mcp_tokens = vec![Secret::literal(TOKEN).into()];
    })
    .await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let platform_log = scratch.path().join("platform.log");
    let port = free_port();
    let _platform = Command::new(&python)
        .current_dir(repo_root().join("tests/agents"))
        .args(["foundry_platform.py", "--port", &port.to_string()])
        .stdout(std::fs::File::create(&platform_log).expect("log file"))
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start foundry_platform.py");
    eventually("the platform stand-in listening", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;

    let mut command = Command::new(&python);
    command
        .current_dir(repo_root().join("examples/foundry"))
        .env(
            "FOUNDRY_PROJECT_ENDPOINT",
            format!("http://127.0.0.1:{port}/api/projects/test"),
        )
        .env("FOUNDRY_STATIC_TOKEN", "not-an-azure-token")
        .env("FOUNDRY_MODEL", "scripted")
        .args([
            "agent_framework_agent.py",
            "--yes",
            "--bridge",
            &bridge.base,
            "--token",
            TOKEN,
        ]);
    let output = run_to_end(command, Duration::from_secs(180)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let platform = std::fs::read_to_string(&platform_log).unwrap_or_default();
    let both = format!("{stdout}\n--- platform ---\n{platform}");
    assert_eq!(output.status.code(), Some(0), "{both}");
    assert!(
        stdout.contains("[approval] demo__slow_count: approved"),
        "{both}"
    );
    assert!(stdout.contains("] following http://"), "{both}");
    let steps = stdout.lines().filter(|l| l.contains("[progress] ")).count();
    assert_eq!(steps, 40, "the user saw every step: {both}");
    assert!(stdout.contains("[completed]"), "{both}");
    assert!(stdout.contains("The tool says: counted to 40."), "{both}");

    // What the framework told the platform, and what the platform did with it.
    let tools = platform
        .lines()
        .find_map(|l| l.strip_prefix("TOOLS "))
        .expect("the platform got an mcp tool");
    let tool: serde_json::Value = serde_json::from_str(tools).expect("tool JSON");
    assert_eq!(tool["server_url"], format!("{}/mcp", bridge.base), "{both}");
    assert_eq!(
        tool["headers"]["Authorization"],
        format!("Bearer {TOKEN}"),
        "{both}"
    );
    assert_eq!(
        tool["require_approval"]["never"]["tool_names"],
        serde_json::json!(["get_job_status", "wait_for_job", "cancel_job"]),
        "{both}"
    );
    assert!(!platform.contains("PLATFORM ERROR"), "{both}");
    let waits = platform
        .lines()
        .filter(|l| l.starts_with("CALL wait_for_job"))
        .count();
    assert!(
        waits >= 1,
        "the model followed the handle to wait_for_job: {both}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}
