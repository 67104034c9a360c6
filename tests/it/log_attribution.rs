//! No tool output on another user's job. MCP log messages name no request, so a line an
//! upstream logs after call A has answered, while user B's call is the only one in flight,
//! used to land on B's job. By default a job now shows only what provably belongs to its
//! call; `logs = "attribute_when_single"` is the documented opt-in for upstreams that log
//! only during their calls.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, LogAttribution};
use serde_json::json;

fn dropped_unattributed(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("bridge_log_dropped_total{reason=\"unattributed\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A answers, then logs "after the answer" 300 ms later, while B (a second, slower call with
/// no logs of its own) is the only call in flight. Returns B's events and the bridge.
async fn late_log_during_another_call(logs: LogAttribution) -> (Vec<SseEvent>, TestBridge) {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams[0].logs = logs;
    })
    .await;
    let client = connect(&bridge).await;
    let a = running_job(
        &client,
        "demo__log_and_count",
        json!({"to": 1, "delay_ms": 0, "late_log_ms": 300}),
    )
    .await;
    let a_events = read_job_events(&a.events_url).await;
    assert_eq!(a_events.last().map(|e| e.event.as_str()), Some("completed"));
    let b = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 10, "delay_ms": 100}),
    )
    .await;
    let b_events = read_job_events(&b.events_url).await;
    assert_eq!(b_events.last().map(|e| e.event.as_str()), Some("completed"));
    (b_events, bridge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_late_log_line_lands_on_no_other_job() {
    let (b_events, bridge) = late_log_during_another_call(LogAttribution::None).await;
    let logs: Vec<_> = b_events.iter().filter(|e| e.event == "log").collect();
    assert!(logs.is_empty(), "A's output on B's job: {logs:?}");
    // Both of A's lines came (its step and the late one) and were shown on no job.
    let base = bridge.base.clone();
    eventually("A's two lines are counted", || async {
        dropped_unattributed(&metrics_text(&base).await) >= 2
    })
    .await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The opt-in does what its documentation warns of: the late line is pinned on B. Kept as a
/// test so the warning stays true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_opt_in_a_late_log_line_is_pinned_on_the_only_call_as_documented() {
    let (b_events, bridge) =
        late_log_during_another_call(LogAttribution::AttributeWhenSingle).await;
    let logs: Vec<_> = b_events.iter().filter(|e| e.event == "log").collect();
    assert_eq!(logs.len(), 1, "{b_events:?}");
    assert_eq!(logs[0]["data"], "after the answer");
    bridge.shutdown(Duration::from_secs(1)).await;
}
