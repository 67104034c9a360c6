//! The job lifecycle under faults: every cancel entry point reaches the one upstream that runs
//! the call, timeouts, a crashing upstream, heartbeats, retention, the job cap and a slow
//! reader. (That memory stays flat over many jobs is `memory_soak.rs`, alone in its process.) The demo tool server is a real child process; its `cancellations`
//! tool lists the cancels it saw, which is how these tests know a cancel reached it.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use rmcp::{
    model::{ClientRequest, Request},
    service::PeerRequestOptions,
};
use serde_json::json;

/// The demo upstream, with `cancellations` always answered directly (so its result comes back
/// whatever the job mode).
fn demo(name: &str) -> UpstreamConfig {
    with_tool_mode(demo_stdio_upstream(name), "cancellations", CallMode::Sync)
}

fn tool_limits(
    mut upstream: UpstreamConfig,
    tool: &str,
    timeout: Option<u64>,
    idle: Option<u64>,
) -> UpstreamConfig {
    let entry = upstream.tools.entry(tool.into()).or_default();
    entry.timeout_secs = timeout;
    entry.idle_timeout_secs = idle;
    upstream
}

/// The ID of the first job started under correlation `cid`, once it has reported progress.
async fn first_job_of(bridge: &TestBridge, cid: &str) -> String {
    let url = bridge.correlation_events_url(cid);
    let events = read_sse(&url, None, |e| e.event == "progress").await;
    events
        .iter()
        .find(|e| e.event == "job_started")
        .expect("job_started")["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_job_reaches_only_the_upstream_that_runs_the_call() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![demo("demo"), demo("other")];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 20}),
    )
    .await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;

    let answer = call_json(&client, "cancel_job", json!({"job_id": handle.job_id})).await;
    assert_eq!(answer["status"], "cancelled", "{answer}");
    assert_eq!(answer["cancelled"], true);
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(events.last().unwrap().event, "cancelled");
    assert_eq!(
        events.last().unwrap()["reason"],
        "cancelled by the agent (cancel_job)"
    );

    let seen = cancels_seen(&client, "demo", 1).await;
    assert_eq!(seen[0]["tool"], "slow_count");
    let other = call_json(&client, "other__cancellations", json!({})).await;
    assert_eq!(
        other["cancelled"],
        json!([]),
        "the other upstream got no cancel"
    );

    let again = call_json(&client, "cancel_job", json!({"job_id": handle.job_id})).await;
    assert_eq!(
        again["cancelled"], false,
        "an ended job is not cancelled twice: {again}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_own_cancel_of_a_sync_call_reaches_the_upstream() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![demo("demo")];
    })
    .await;
    let client = connect_correlated(&bridge, "sync-cancel").await;
    let params = call_params("demo__slow_count", json!({"to": 1000, "delay_ms": 20}));
    let request = client
        .send_request_with_option(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let job_id = first_job_of(&bridge, "sync-cancel").await;
    request
        .cancel(Some("user pressed stop".into()))
        .await
        .unwrap();

    let events = read_job_events(&job_events_url(&bridge.base, &job_id)).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled");
    assert_eq!(last["reason"], "the MCP client cancelled its request");
    assert_eq!(
        cancels_seen(&client, "demo", 1).await[0]["tool"],
        "slow_count"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_2026_07_28_post_stream_cancels_the_call() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![demo("demo")];
    })
    .await;
    // A stateless 2026-07-28 request: no session, protocol and client info in `_meta`.
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "demo__slow_count", "arguments": {"to": 1000, "delay_ms": 20},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    // Over a plain socket, so that "closing the stream" really closes it (an HTTP client
    // library may keep the connection after the response is dropped).
    use tokio::io::AsyncWriteExt;
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: demo__slow_count\r\nX-Correlation-Id: closed-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(bridge.running().addr)
        .await
        .unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    // (rmcp sends the response headers with the first message, so there is nothing to read
    // yet: the job's appearance on the correlation stream says the call is running.)
    let job_id = first_job_of(&bridge, "closed-stream").await;
    drop(socket);

    let events = read_job_events(&job_events_url(&bridge.base, &job_id)).await;
    assert_eq!(
        events.last().unwrap().event,
        "cancelled",
        "{:?}",
        events.last()
    );
    let client = connect(&bridge).await;
    assert_eq!(
        cancels_seen(&client, "demo", 1).await[0]["tool"],
        "slow_count"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_progress_after_the_cancel_are_ignored() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![demo("demo")];
    })
    .await;
    let client = connect(&bridge).await;
    // ignore_cancel goes on reporting progress each second and answers anyway.
    let handle = running_job(&client, "demo__ignore_cancel", json!({"seconds": 3})).await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    let (status, _) = post_json(&handle.cancel_url).await;
    assert_eq!(status, 202);
    let ended = read_job_events(&handle.events_url).await;
    assert_eq!(ended.last().unwrap().event, "cancelled");
    let seq = ended.last().unwrap().seq();

    // Wait until the upstream has sent progress the bridge had to drop, then its late answer.
    eventually("late progress arrives and is dropped", || async {
        let metrics = metrics_text(&bridge.base).await;
        let series = "bridge_progress_dropped_total{reason=\"unknown_token\"}";
        series_value(&metrics, series).is_some_and(|n| n > 0.0)
    })
    .await;
    let (_, snapshot) = get_json(&handle.status_url).await;
    assert_eq!(snapshot["status"], "cancelled");
    assert_eq!(
        snapshot["seq"].as_u64(),
        Some(seq),
        "nothing was added after the cancel"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_fails_the_job_at_once_and_the_upstream_comes_back() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![demo("demo")];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__crash", json!({"after_ms": 300})).await;
    let events = read_job_events(&handle.events_url).await;
    let progress = events
        .iter()
        .find(|e| e.event == "progress")
        .expect("the one progress before the crash");
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "failed");
    assert_eq!(failed["reason"], "upstream_lost");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("demo") && message.contains("exit status: 3"),
        "{message}"
    );
    let crash_to_failed = failed["ts"].as_u64().unwrap() - progress["ts"].as_u64().unwrap();
    assert!(
        crash_to_failed < 300 + 1000,
        "failed within a second of the crash: {crash_to_failed} ms"
    );

    let upstream = bridge.running().upstreams.get("demo").unwrap().clone();
    eventually("the upstream restarts", || async {
        upstream.status().restarts >= 1 && upstream.ready(Duration::from_millis(100)).await
    })
    .await;
    let status = call(&client, "demo__cancellations", json!({})).await;
    assert_eq!(
        status.is_error,
        Some(false),
        "the restarted upstream answers"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_and_idle_timeouts_fail_the_job_and_cancel_upstream() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        let upstream = tool_limits(demo("demo"), "hang", Some(1), None);
        let upstream = tool_limits(upstream, "slow_count_no_total", None, Some(1));
        c.upstreams = vec![tool_limits(upstream, "slow_count", None, Some(1))];
    })
    .await;
    let client = connect(&bridge).await;
    let hang = running_job(&client, "demo__hang", json!({})).await;
    let events = read_job_events(&hang.events_url).await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.event.as_str(), last["reason"].as_str()),
        ("failed", Some("timeout"))
    );
    assert!(last["message"].as_str().unwrap().contains("timeout_secs"));

    // Idle: a call that reports progress more often than the limit finishes...
    let steady = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 6, "delay_ms": 300}),
    )
    .await;
    let events = read_job_events(&steady.events_url).await;
    assert_eq!(
        events.last().unwrap().event,
        "completed",
        "progress keeps an idle limit at bay"
    );
    // ...one that goes quiet longer than the limit does not.
    let quiet = running_job(
        &client,
        "demo__slow_count_no_total",
        json!({"to": 2, "delay_ms": 3000}),
    )
    .await;
    let events = read_job_events(&quiet.events_url).await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.event.as_str(), last["reason"].as_str()),
        ("failed", Some("timeout"))
    );
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("idle_timeout_secs")
    );

    let seen = cancels_seen(&client, "demo", 2).await;
    let tools: Vec<&str> = seen.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert!(
        tools.contains(&"hang") && tools.contains(&"slow_count_no_total"),
        "{tools:?}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_job_sends_heartbeats() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.heartbeat_secs = 1;
        c.upstreams = vec![demo("demo")];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__hang", json!({})).await;
    let mut beats = 0;
    let events = read_sse(&handle.events_url, None, |e| {
        beats += usize::from(e.event == "heartbeat");
        beats == 2
    })
    .await;
    let beats: Vec<&SseEvent> = events.iter().filter(|e| e.event == "heartbeat").collect();
    assert!(
        beats[1]["elapsed_ms"].as_u64().unwrap() >= 2000,
        "{:?}",
        beats[1].data
    );
    assert!(beats[1]["since_progress_ms"].as_u64().unwrap() >= 2000);
    assert_eq!(
        beats[1].id, "0",
        "a heartbeat does not move the reader's position"
    );
    call(&client, "cancel_job", json!({"job_id": handle.job_id})).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_expire_after_retention() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.retention_secs = 1;
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__echo", json!({"text": "x"})).await;
    read_job_events(&handle.events_url).await;
    assert_eq!(get_json(&handle.status_url).await.0, 200);
    eventually("the job expires", || async {
        get_json(&handle.status_url).await.0 == 404
    })
    .await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_jobs_turns_extra_calls_away_with_a_clear_error() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.max_jobs = 1;
    })
    .await;
    let client = connect(&bridge).await;
    let first = running_job(&client, "demo__hang", json!({})).await;
    let refused = call(&client, "demo__echo", json!({"text": "x"})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        first_text(&refused).contains("max_jobs"),
        "{}",
        first_text(&refused)
    );
    call(&client, "cancel_job", json!({"job_id": first.job_id})).await;
    let ok = call(&client, "demo__echo", json!({"text": "x"})).await;
    assert_eq!(
        ok.is_error,
        Some(false),
        "a place is free again: {}",
        first_text(&ok)
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_hold_up_the_job_or_a_fast_reader() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1, "delay_ms": 1000}),
    )
    .await;
    let path = handle.events_url.trim_start_matches(&bridge.base);
    // A reader that opens the stream and then does not read.
    let mut slow = tokio::net::TcpStream::connect(bridge.running().addr)
        .await
        .unwrap();
    slow.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();

    let burst = running_job(&client, "demo__instant_progress", json!({"steps": 10000})).await;
    let path = burst.events_url.trim_start_matches(&bridge.base);
    let mut stalled = tokio::net::TcpStream::connect(bridge.running().addr)
        .await
        .unwrap();
    stalled
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();

    // The fast reader sees the job through to its end, in order, while the other one stalls.
    let events = read_job_events(&burst.events_url).await;
    assert_eq!(events.last().unwrap().event, "completed");
    // Every stored event, in order, with no gap (or a reset, had it fallen behind history).
    // A burst this large may be conflated in the bridge before it is stored (the documented
    // flood policy), but the newest value always arrives.
    let seqs: Vec<u64> = events[1..].iter().map(SseEvent::seq).collect();
    let reset = events.iter().any(|e| e.event == "reset");
    assert!(
        reset || seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive ids: {seqs:?}"
    );
    let progress = progress_values(&events);
    assert!(progress.windows(2).all(|w| w[1] > w[0]), "in order");
    assert_eq!(progress.last(), Some(&10000.0), "the newest value arrives");

    // The stalled reader, read at last, still ends properly.
    let mut text = Vec::new();
    within("the stalled reader's stream ends", async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = stalled.read(&mut buf).await.unwrap();
            text.extend_from_slice(&buf[..n]);
            if n == 0 || String::from_utf8_lossy(&text).contains("event: completed") {
                break;
            }
        }
    })
    .await;
    drop(slow);
    bridge.shutdown(Duration::from_secs(1)).await;
}
