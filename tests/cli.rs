//! The terminal commands against a real bridge: `call` and `watch` run as child processes (the
//! built binary), the bridge in this process with the demo tools as a real stdio child. With
//! stderr not a terminal, `watch` writes one `progress N/T …` line per step instead of a bar,
//! which is what these tests read.

#[allow(dead_code)]
mod common;

use std::{process::Stdio, time::Duration};

use common::*;
use mcp_progress_bridge::config::CallMode;
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};

const LIMIT: Duration = Duration::from_secs(60);

fn bin() -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("BRIDGE_URL").env_remove("BRIDGE_TOKEN");
    command
}

/// The `progress` values of the plain-text progress lines, in order.
fn progress_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("progress "))
        .map(|rest| rest.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

fn steps(n: u32, total: u32) -> Vec<String> {
    (1..=n).map(|i| format!("{i}/{total}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_runs_a_tool_watches_its_job_and_prints_the_result() {
    let bridge = start_bridge(|_| {}).await;
    let mut command = bin();
    command.args([
        "call",
        "demo__slow_count",
        "--args",
        r#"{"to": 5, "delay_ms": 40}"#,
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout.trim(), "counted to 5");
    assert!(stderr.contains("is running as job"), "{stderr}");
    assert_eq!(progress_lines(&stderr), steps(5, 5));

    // The configured mode (auto here) answers a quick call directly: printed all the same.
    let mut command = bin();
    command.args([
        "call",
        "demo__echo",
        "--args",
        r#"{"text": "hello"}"#,
        "--mode",
        "configured",
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "hello");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_how_the_job_ended() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    // failed: exit 1, with the reason.
    let mut command = bin();
    command.args([
        "call",
        "demo__fail_after",
        "--args",
        r#"{"steps": 2, "delay_ms": 10}"#,
        "--url",
        &bridge.mcp_url(),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("failed (tool_error): failed after 2 steps as asked"),
        "{stderr}"
    );

    // cancelled: exit 130. Watch a long job, cancel it once watch shows progress.
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let mut child = bin()
        .args(["watch", &handle.events_url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    within("watch shows progress", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("progress ") {
                return;
            }
        }
        panic!("watch ended before any progress");
    })
    .await;
    let (status, _) = post_json(&handle.cancel_url).await;
    assert_eq!(status, 202);
    let mut rest = Vec::new();
    let status = within("watch exits", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        child.wait().await.unwrap()
    })
    .await;
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.starts_with("cancelled: ")),
        "{rest:?}"
    );

    // A job that does not exist: exit 2 and a reason.
    let mut command = bin();
    command.args([
        "watch",
        &format!(
            "{}/jobs/0123456789abcdef0123456789abcdef/events",
            bridge.base
        ),
    ]);
    let output = run_to_end(command, LIMIT).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("unknown or expired"),
        "says why"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_a_dropped_connection_without_losing_or_repeating_a_step() {
    let (bridge, proxy) = start_bridge_behind_proxy(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 10, "delay_ms": 250}),
    )
    .await;
    assert!(
        handle.events_url.starts_with(&proxy.base),
        "through the proxy"
    );
    let mut child = bin()
        .args(["watch", &handle.events_url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = Vec::new();
    within("watch sees step 3", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let third = line.starts_with("progress 3/10");
            stderr.push(line);
            if third {
                return;
            }
        }
        panic!("watch ended early: {stderr:?}");
    })
    .await;
    assert!(proxy.drop_all() >= 1, "the watch's connection was cut");
    let status = within("watch exits", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            stderr.push(line);
        }
        child.wait().await.unwrap()
    })
    .await;
    let text = stderr.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert_eq!(progress_lines(&text), steps(10, 10), "{text}");
    assert!(text.contains("reconnecting"), "{text}");
    assert!(text.contains("reconnected; resuming after event"), "{text}");
    let mut stdout = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout)
        .await
        .unwrap();
    assert_eq!(stdout.trim(), "counted to 10");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_message_and_exit_2() {
    for (args, says) in [
        (vec!["watch", "not a url"], "is not a URL"),
        (
            vec![
                "call",
                "demo__echo",
                "--args",
                "[1]",
                "--url",
                "http://127.0.0.1:9/mcp",
            ],
            "must be a JSON object",
        ),
        (
            vec!["call", "demo__echo", "--url", "http://127.0.0.1:9/mcp"],
            "is the bridge running there?",
        ),
    ] {
        let mut command = bin();
        command.args(&args);
        let output = run_to_end(command, LIMIT).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
