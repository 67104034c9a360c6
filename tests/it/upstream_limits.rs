//! What an upstream sends is bounded: an answer over `limits.max_result_bytes` ends its job
//! `failed` with `result_too_large` (it used to be dropped by rmcp's reader, leaving the job
//! running for ever with its slot held), on a stdio child and on Streamable HTTP alike, and the
//! upstream goes on serving other calls on the same connection.

use std::time::Instant;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::{Value, json};

/// The limit the tests set (1 MiB, not the 16 MiB default: the same paths, a sixteenth of the
/// bytes through a debug build).
const LIMIT: usize = 1024 * 1024;

fn limit_hits(metrics: &str, limit: &str) -> u64 {
    let line = format!("bridge_limit_hits_total{{limit=\"{limit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn upstream_status(bridge: &TestBridge) -> Value {
    let (status, body) = get_json(&format!("{}/upstreams", bridge.base)).await;
    assert_eq!(status, 200, "{body}");
    body["upstreams"][0].clone()
}

/// Ask `echo` for `bytes` of text (async mode: a job), and return the job's terminal event.
async fn oversized_job(client: &McpClient, bytes: usize) -> SseEvent {
    let started = Instant::now();
    let job = running_job(client, "demo__echo", json!({"text": "x", "repeat": bytes})).await;
    let events = read_job_events(&job.events_url).await;
    let last = events.last().cloned().expect("the job's events");
    eprintln!("{bytes} bytes: the job ended after {:?}", started.elapsed());
    last
}

/// The whole case on one upstream: answers just over the limit (under rmcp's own bound on
/// an SSE event, so the bridge's check decides) and well over it (past rmcp's bound), a sync
/// caller's answer, then `in_flight` back to 0 and the same connection still answering.
async fn an_answer_too_large_fails_its_job_and_the_upstream_serves_on(upstream: UpstreamConfig) {
    let upstream = with_tool_mode(upstream, "echo", CallMode::Async);
    let bridge = start_bridge(|c| {
        c.upstreams = vec![upstream];
        c.limits.max_result_bytes = LIMIT;
    })
    .await;
    let client = connect(&bridge).await;

    for bytes in [LIMIT + 1000, 3 * LIMIT] {
        let terminal = oversized_job(&client, bytes).await;
        assert_eq!(terminal.event, "failed", "{:?}", terminal.data);
        assert_eq!(
            terminal["reason"], "result_too_large",
            "{:?}",
            terminal.data
        );
        let message = terminal["message"].as_str().unwrap_or_default();
        assert!(message.contains("limits.max_result_bytes"), "{message}");
        assert!(message.contains(&LIMIT.to_string()), "{message}");
    }

    let status = eventually("the calls are no longer in flight", || async {
        let status = upstream_status(&bridge).await;
        (status["in_flight"] == 0).then_some(status)
    })
    .await;
    assert_eq!(status["restarts"], 0, "the connection was kept: {status}");
    assert_eq!(status["state"], "ready", "{status}");

    // Just under the limit still passes, on the same connection.
    let fits = running_job(
        &client,
        "demo__echo",
        json!({"text": "y", "repeat": LIMIT - 4096}),
    )
    .await;
    let events = read_job_events(&fits.events_url).await;
    let terminal = events.last().expect("the job's events");
    assert_eq!(terminal.event, "completed", "{}", terminal.event);
    assert_eq!(
        terminal["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(LIMIT - 4096)
    );
    let after = call_json(&client, "demo__echo", json!({"text": "after"})).await;
    let terminal = read_job_events(after["events_url"].as_str().expect("a job handle")).await;
    assert_eq!(terminal.last().map(|e| e.event.as_str()), Some("completed"));

    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_result_bytes"), 2, "{metrics}");
    bridge.shutdown(std::time::Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_answer_too_large_fails_its_job_and_the_child_serves_on() {
    an_answer_too_large_fails_its_job_and_the_upstream_serves_on(demo_stdio_upstream("demo")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_answer_too_large_fails_its_job_and_the_session_serves_on() {
    let demo = start_http_demo().await;
    an_answer_too_large_fails_its_job_and_the_upstream_serves_on(http_upstream("demo", &demo.url))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_caller_gets_a_tool_error_naming_the_limit() {
    let upstream = with_tool_mode(demo_stdio_upstream("demo"), "echo", CallMode::Sync);
    let bridge = start_bridge(|c| {
        c.upstreams = vec![upstream];
        c.limits.max_result_bytes = 64 * 1024;
    })
    .await;
    let client = connect(&bridge).await;
    let answer = call(
        &client,
        "demo__echo",
        json!({"text": "z", "repeat": 100_000}),
    )
    .await;
    assert_eq!(answer.is_error, Some(true), "{answer:?}");
    let text = first_text(&answer);
    assert!(
        text.contains("limits.max_result_bytes (65536 bytes)"),
        "{text}"
    );
    let small = call(&client, "demo__echo", json!({"text": "small"})).await;
    assert_eq!(first_text(&small), "small");
    bridge.shutdown(std::time::Duration::from_secs(2)).await;
}
