//! `wait_for_job` blocks no longer than its caller can wait: a bound declared per client name
//! (`jobs.wait_for_job_secs_by_client`, matched on the `clientInfo.name` of `initialize`)
//! applies to the sessions of that client and to no other.

use std::time::{Duration, Instant};

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use serde_json::json;

/// What every wait below asks for: far longer than either declared bound.
const ASKED_SECS: u64 = 30;

/// Two clients of one principal, named differently, each wait for the same running job: each
/// is answered at its own name's bound, says so in its instructions, and a client with no
/// declared bound waits what it asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_different_names_get_their_own_bound() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.wait_for_job_secs_by_client = [
            ("short-agent".to_string(), 2),
            ("long-agent".to_string(), 5),
        ]
        .into();
    })
    .await;
    let starter = connect(&bridge).await;
    // Runs two minutes: no wait below sees it end.
    let handle = running_job(
        &starter,
        "demo__slow_count",
        json!({"to": 120, "delay_ms": 1000}),
    )
    .await;
    let short = connect_named(&bridge.mcp_url(), "short-agent").await;
    let long = connect_named(&bridge.mcp_url(), "long-agent").await;
    let unnamed = connect_named(&bridge.mcp_url(), "another-agent").await;
    let wait = |client, secs| {
        let job_id = handle.job_id.clone();
        async move {
            let started = Instant::now();
            let answer = call_json(
                client,
                "wait_for_job",
                json!({"job_id": job_id, "timeout_seconds": secs}),
            )
            .await;
            (answer, started.elapsed())
        }
    };
    let ((short_answer, short_took), (long_answer, long_took), (unnamed_answer, unnamed_took)) = tokio::join!(
        wait(&short, ASKED_SECS),
        wait(&long, ASKED_SECS),
        wait(&unnamed, 3),
    );
    for (name, answer, bound, took) in [
        ("short-agent", &short_answer, 2, short_took),
        ("long-agent", &long_answer, 5, long_took),
        ("another-agent", &unnamed_answer, 3, unnamed_took),
    ] {
        println!("{name}: answered after {took:?}");
        assert_eq!(answer["status"], "running", "{name}: {answer}");
        let instructions = answer["instructions"].as_str().unwrap_or_default();
        assert!(
            instructions.contains(&format!("each call waits up to {bound} s")),
            "{name} is told its own bound ({bound} s): {answer}"
        );
        // It blocked for its bound (a wait answers when its time is up, not before), and
        // not for what it asked.
        assert!(
            took >= Duration::from_secs(bound) - Duration::from_millis(100),
            "{name} answered after {took:?}, before its bound of {bound} s"
        );
        assert!(
            took < Duration::from_secs(ASKED_SECS),
            "{name} waited what it asked ({took:?}), not its bound of {bound} s"
        );
    }
    // The bounds are the clients', not the order they answered in.
    assert!(short_took < long_took, "{short_took:?} vs {long_took:?}");
    starter.cancel().await.ok();
}
