//! What an SSE reader that does not read can hold (`limits.max_sse_buffer_bytes`): readers
//! that never read a byte of a job with a 10 MiB result and many progress events are dropped
//! and counted, while readers that read get every event and the result, whole, however far
//! past the bound the result is. Memory itself is measured in the bench harness (soak), not
//! here.

use std::{net::SocketAddr, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::CallMode;

const RESULT_BYTES: usize = 10 * 1024 * 1024;
const STEPS: u64 = 2000;
const STALLED: usize = 60;

fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Every event once, in order: the snapshot first, each progress step, then the result whole.
fn assert_whole(events: &[SseEvent], who: &str) {
    assert_eq!(events[0].event, "status", "{who}");
    assert_consecutive(events);
    // Every event stored (ids consecutive, above); the runner may coalesce progress when the
    // store is the slower side (Redis), so the steps only rise, up to the last.
    let steps = progress_values(events);
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "{who}: progress rises"
    );
    assert_eq!(steps.last(), Some(&(STEPS as f64)), "{who}: the last step");
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed", "{who}");
    let text = last.data["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text.len(), RESULT_BYTES, "{who}: the whole result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_never_read_are_dropped_and_readers_that_read_get_everything() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.history = 5000;
        // A stalled reader is dropped after two to three quiet keep-alive intervals: long
        // enough that the live reader below, starved on a loaded machine while it decodes the
        // 10 MiB result, is not taken for one (at 2 s it was, once, at load 14).
        c.server.keep_alive_secs = 5;
        c.limits.max_sse_buffer_bytes = 1024 * 1024;
    })
    .await;
    let addr: SocketAddr = bridge.base.trim_start_matches("http://").parse().unwrap();
    let client = connect(&bridge).await;
    let job = large_result_job(&client, STEPS, 1500, RESULT_BYTES).await;
    let path = job.events_path(&bridge.base);
    // Readers that never read a byte, with a small receive buffer, so the kernel takes little
    // of what the bridge sends.
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(raw_sse_reader(addr, path, Some(4096)).await);
    }
    let live = read_sse_request_within(
        Duration::from_secs(60),
        reqwest::Client::new().get(&job.events_url),
        SseEvent::is_terminal,
    )
    .await;
    assert_whole(&live, "a live reader");

    // Each stalled reader holds the 10 MiB `completed` (or more than the bound of events) and
    // takes nothing: dropped after two to three keep-alive intervals, while its socket is
    // still open.
    let dropped = "bridge_sse_readers_dropped_total{reason=\"buffer\"}";
    eventually_within(
        Duration::from_secs(60),
        "every reader that never reads dropped",
        || async {
            let metrics = metrics_text(&bridge.base).await;
            counter(&metrics, dropped) >= STALLED as u64
                && counter(&metrics, "bridge_sse_subscribers ") == 0
        },
    )
    .await;
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(counter(&metrics, dropped), STALLED as u64, "only those");

    // A fresh reader of the ended job gets the snapshot (with the result) and the result
    // again: twice the result, ten times the bound, held back and sent in turn.
    let after = read_sse_request_within(
        Duration::from_secs(60),
        reqwest::Client::new().get(&job.events_url),
        SseEvent::is_terminal,
    )
    .await;
    assert_whole(&after, "a reader after the end");
    let ids = |events: &[SseEvent]| events.iter().skip(1).map(SseEvent::seq).collect::<Vec<_>>();
    assert!(
        ids(&after) == ids(&live),
        "the same events as the live reader"
    );
    assert_eq!(after[0].data["status"], "completed");
    // One dropped reader comes back with its position and is caught up from history.
    let at = live[live.len() / 2].seq();
    let resumed = read_sse(&job.events_url, Some(at), SseEvent::is_terminal).await;
    assert_eq!(resumed.first().unwrap().seq(), at + 1);
    assert_consecutive(&resumed);
    assert_eq!(resumed.last().unwrap().event, "completed");
    drop(stalled);
}
