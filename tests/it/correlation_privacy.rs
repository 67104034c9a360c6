//! A correlation stream opened with a credential reveals nothing of other principals' activity
//! under the same correlation ID: its ids are the caller's own (not the channel's positions,
//! which count everyone's events), and a Last-Event-ID it never sent is refused without
//! naming the channel's newest position. Resuming from one of its own ids still works.

use crate::common::*;
use serde_json::json;

const ALICE: &str = "alice-correlation-token-0123456789";
const BOB: &str = "bob-correlation-token-0123456789ab";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_reader_of_a_correlation_learns_nothing_of_other_callers() {
    let config = format!(
        "[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\nmcp_tokens = [\
         {{ name = \"alice\", token = \"{ALICE}\" }}, {{ name = \"bob\", token = \"{BOB}\" }}]\n\
         [jobs]\nmode = \"sync\"\nmin_progress_interval_ms = 0\n{}",
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[]).await;
    let http = bridge.http().clone();
    let url = format!("{}/correlations/turn-1/events", bridge.base());
    let capability = format!(
        "{url}?token={}",
        job_tokens().correlation(&"turn-1".parse().unwrap())
    );

    // Alice works under turn-1: a start, progress and the end in the channel.
    let alice = connect_with(&bridge.mcp_url(), Some(ALICE), Some("turn-1")).await;
    call(&alice, "demo__slow_count", json!({"to": 3, "delay_ms": 0})).await;

    // Everyone's position, as the capability reader (who sees every job) is shown it.
    let all = read_sse_request(http.get(&capability), |e| e.event == "completed").await;
    let head = all.last().unwrap().seq();
    assert!(head >= 5, "alice's events are in the channel: {all:?}");

    // A Last-Event-ID bob was never sent is refused without the channel's position.
    let ahead = http
        .get(&url)
        .bearer_auth(BOB)
        .header("Last-Event-ID", "1000000")
        .send()
        .await
        .unwrap();
    assert_eq!(ahead.status(), 400);
    let said = ahead.text().await.unwrap();
    assert!(
        !said.contains("newest") && !said.contains(&head.to_string()),
        "the refusal names the channel's position: {said}"
    );

    // Bob's own job under turn-1: his ids are not the channel's positions, and he resumes
    // from one of them exactly where he left.
    let bob = connect_with(&bridge.mcp_url(), Some(BOB), Some("turn-1")).await;
    call(&bob, "demo__slow_count", json!({"to": 2, "delay_ms": 0})).await;
    let mine = read_sse_request(http.get(&url).bearer_auth(BOB), |e| e.event == "completed").await;
    let mut ended = 0;
    let everyone = read_sse_request(http.get(&capability), |e| {
        ended += usize::from(e.event == "completed");
        ended == 2
    })
    .await;
    let kinds = |events: &[SseEvent]| events.iter().map(|e| e.event.clone()).collect::<Vec<_>>();
    assert_eq!(
        kinds(&mine),
        ["job_started", "progress", "progress", "completed"],
        "bob sees his own job only"
    );
    let channel_ids: Vec<u64> = everyone[everyone.len() - 4..]
        .iter()
        .map(|e| e.seq())
        .collect();
    let bob_ids: Vec<u64> = mine.iter().map(|e| e.seq()).collect();
    assert_eq!(channel_ids, (head + 1..=head + 4).collect::<Vec<_>>());
    for (bob_id, channel_id) in bob_ids.iter().zip(&channel_ids) {
        assert_ne!(bob_id, channel_id, "bob is shown the channel's positions");
    }
    let resumed = read_sse_request(
        http.get(&url)
            .bearer_auth(BOB)
            .header("Last-Event-ID", mine[0].id.as_str()),
        |e| e.event == "completed",
    )
    .await;
    assert_eq!(kinds(&resumed), ["progress", "progress", "completed"]);
    assert_eq!(
        resumed.iter().map(|e| e.seq()).collect::<Vec<_>>(),
        bob_ids[1..]
    );
    bridge.stop().await;
}
