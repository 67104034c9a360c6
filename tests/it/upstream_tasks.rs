//! An upstream's own tasks (`execution.taskSupport: "required"`, run by the bridge as a task
//! upstream, docs/tasks.md) are hostile input like the rest: the `[upstream_tasks]` bounds hold
//! against a real process (tests/fixtures/hostile_task_upstream.py, raw JSON-RPC on stdio) that
//! floods status notifications, sends a megabyte `statusMessage`, suggests a `pollInterval` of
//! 0 or 10^12, and keeps a task `working` for ever. Each job ends with a truthful terminal event
//! and each bound counts in `bridge_limit_hits_total`.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::{Value, json};

fn series(metrics: &str, name_and_labels: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0)
}

fn hits(metrics: &str, limit: &str) -> u64 {
    series(
        metrics,
        &format!("bridge_limit_hits_total{{limit=\"{limit}\"}} "),
    )
}

fn hostile_upstream(python: &str) -> UpstreamConfig {
    let mut upstream = demo_stdio_upstream("hostile");
    upstream.command = Some(python.into());
    upstream.args = vec![
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hostile_task_upstream.py"
        )
        .into(),
    ];
    upstream.mode = Some(CallMode::Async);
    // The job timeout that bounds a task that never ends (shorter than 5 polls at 300 ms).
    upstream
        .tools
        .entry("stuck".into())
        .or_default()
        .timeout_secs = Some(1);
    with_tool_mode(upstream, "cancels", CallMode::Sync)
}

async fn job(client: &McpClient, tool: &str, arguments: Value) -> Vec<SseEvent> {
    let handle = running_job(client, tool, arguments).await;
    read_job_events(&handle.events_url).await
}

fn messages(events: &[SseEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.event == "progress")
        .filter_map(|e| e.data["message"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_upstream_task_is_bounded_and_its_job_ends_truthfully() {
    let Some(python) = python() else { return };
    let bridge = start_bridge(|c| {
        c.upstreams = vec![hostile_upstream(&python)];
        c.upstream_tasks.max_poll_ms = 300;
        c.upstream_tasks.max_polls = 5;
        c.upstream_tasks.max_status_message_bytes = 256;
    })
    .await;
    let client = connect(&bridge).await;

    // A flood of status notifications, most for tasks that do not exist: the job completes
    // with the task's result, shows only its own task's stages, and the queues dropped what
    // they could not hold.
    let events = job(&client, "hostile__task", json!({"case": "flood"})).await;
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(done.data["result"]["content"][0]["text"], "flood done");
    let seen = messages(&events);
    assert!(
        seen.iter()
            .all(|m| m == "early" || m.starts_with("flood ") || m == "flood over"),
        "only the task's own stages: {seen:?}"
    );
    assert!(seen.len() <= 6, "one step per new message: {seen:?}");
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        hits(&metrics, "upstream_tasks.max_queued_statuses") >= 2000 - 16,
        "the statuses of unknown tasks beyond 16 were dropped: {metrics}"
    );

    // A megabyte status message, and a failure with another: both cut to the bound.
    let events = job(&client, "hostile__task", json!({"case": "huge"})).await;
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "failed", "{events:#?}");
    assert_eq!(failed.data["reason"], "upstream_error", "{:?}", failed.data);
    let message = failed.data["message"].as_str().unwrap();
    assert!(
        message.len() < 512 && message.ends_with("xxx…"),
        "the failure message is cut: {} bytes",
        message.len()
    );
    let stage = &messages(&events)[0];
    assert!(stage.len() <= 256 + '…'.len_utf8(), "{} bytes", stage.len());
    assert!(stage.starts_with("éé") && stage.ends_with('…'));
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(
        hits(&metrics, "upstream_tasks.max_status_message_bytes"),
        2,
        "{metrics}"
    );

    // pollInterval 0 is raised to the floor; 10^12 lowered to max_poll_ms (300 ms here: the
    // job would otherwise wait for ever).
    let events = job(&client, "hostile__task", json!({"case": "poll_zero"})).await;
    assert_eq!(
        events.last().unwrap().data["result"]["content"][0]["text"],
        "polled 4 times",
        "{events:#?}"
    );
    let events = job(&client, "hostile__task", json!({"case": "poll_huge"})).await;
    assert_eq!(
        events.last().unwrap().data["result"]["content"][0]["text"],
        "polled 3 times",
        "{events:#?}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        hits(&metrics, "upstream_tasks.min_poll_ms") >= 1,
        "{metrics}"
    );
    assert!(
        hits(&metrics, "upstream_tasks.max_poll_ms") >= 1,
        "{metrics}"
    );

    // A task that never ends, polled every 100 ms: past max_polls (5) the bridge cancels it
    // upstream and the job fails `timeout`, naming the key.
    let events = job(
        &client,
        "hostile__task",
        json!({"case": "never", "poll": 100}),
    )
    .await;
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "failed", "{events:#?}");
    assert_eq!(failed.data["reason"], "timeout");
    let message = failed.data["message"].as_str().unwrap();
    assert!(message.contains("upstream_tasks.max_polls"), "{message}");
    assert!(message.contains("still working after 5 polls"), "{message}");

    // The same, suggesting 1 s between polls (300 ms here, max_poll_ms), under a 1 s job
    // timeout: the timeout ends it before its fifth poll, and the upstream task is cancelled
    // too.
    let events = job(&client, "hostile__stuck", json!({"case": "never"})).await;
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "failed", "{events:#?}");
    assert_eq!(failed.data["reason"], "timeout", "{:?}", failed.data);
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(
        hits(&metrics, "upstream_tasks.max_polls"),
        1,
        "{:?} {metrics}",
        failed.data
    );
    eventually("both tasks cancelled upstream", || async {
        let answer = call(&client, "hostile__cancels", json!({})).await;
        let text = answer.content[0].as_text().map(|t| t.text.clone());
        let count: u64 = text.and_then(|t| t.parse().ok()).unwrap_or(0);
        (count >= 2).then_some(())
    })
    .await;

    // The connection served on: nothing left in flight, never restarted.
    let status = eventually("nothing in flight", || async {
        let (_, body) = get_json(&format!("{}/upstreams", bridge.base)).await;
        (body["upstreams"][0]["in_flight"] == 0).then_some(body)
    })
    .await;
    assert_eq!(status["upstreams"][0]["restarts"], 0, "{status}");
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A Streamable HTTP upstream that answers `tools/list` with a plain JSON body (not an SSE
/// stream): its tool's `taskSupport: "required"` is seen (the bridge reads that body itself),
/// so the tool runs as an upstream task instead of failing with "requires task augmentation".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tool_of_a_json_body_http_upstream_runs_as_a_task() {
    let Some((_server, url, _)) = task_http_server(&["--json"]).await else {
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![http_upstream("ts", &url)];
    })
    .await;
    let client = connect(&bridge).await;
    let events = job(&client, "ts__staged", json!({"topic": "json"})).await;
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(done.data["result"]["content"][0]["text"], "done: json");
    let seen = messages(&events);
    assert!(
        seen.iter().all(|m| m.starts_with("stage ")) && seen.contains(&"stage 3/3".to_string()),
        "the task's stages on the job's channel: {seen:?}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        series(
            &metrics,
            r#"bridge_upstream_task_requests_total{method="tasks/result",outcome="ok"} "#
        ) >= 1,
        "{metrics}"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A call that outlives its upstream connection: the Streamable HTTP server keeps its tasks
/// (not bound to the MCP session), the connection is cut mid-task (the server ends every
/// session and answers 503 for 3 s, long enough for the health check to fail and the
/// supervisor to reconnect), and the job goes on polling the same task on the new connection:
/// it completes with the task's result, its later stages on its SSE channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_task_outlives_its_http_connection() {
    let Some((_server, url, port)) = task_http_server(&[]).await else {
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        let mut upstream = http_upstream("ts", &url);
        upstream.health_check_secs = 1;
        c.upstreams = vec![upstream];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "ts__staged",
        json!({"topic": "cut", "steps": 8, "step_ms": 500}),
    )
    .await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    let (status, _) = post_json(&format!("http://127.0.0.1:{port}/admin/outage?ms=3000")).await;
    assert_eq!(status, 200);

    let events = read_job_events(&handle.events_url).await;
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(done.data["result"]["content"][0]["text"], "done: cut");
    let seen = messages(&events);
    assert!(
        seen.contains(&"stage 8/8".to_string()),
        "the stages after the cut reach the job's channel: {seen:?}"
    );
    let (_, upstreams) = get_json(&format!("{}/upstreams", bridge.base)).await;
    assert!(
        upstreams["upstreams"][0]["restarts"].as_u64() >= Some(1),
        "the supervisor reconnected: {upstreams}"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
}
