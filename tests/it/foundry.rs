//! The Foundry example's simulation (`examples/foundry/simulate.py`) against a real bridge: the
//! official Python MCP SDK plays the agent platform (no progress token, the job handle back in
//! the tool's text, then `wait_for_job`) while the application follows `events_url`. Needs the
//! venv Python from `BRIDGE_TEST_PYTHON` (made by .ci/run from tests/interop/requirements.txt).

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
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
