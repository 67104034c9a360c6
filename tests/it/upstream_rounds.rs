//! A 2026-07-28 upstream that asks for input in `input_required` answers (SEP-2322): the demo
//! tool `ask_in_rounds`, the demo server a real child process the bridge talks to at 2026-07-28
//! (`protocol = "2026-07-28"`). The bridge answers each round the way it answers requests sent
//! during a call (the waiting caller, else the job's people; sampling and roots only from a
//! waiting caller that has them) and calls again with `inputResponses` and the `requestState`;
//! rounds, requests per round and the state's size are bounded.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, UpstreamProtocol};
use serde_json::{Value, json};

/// The demo tools as upstream `demo`, spoken to at 2026-07-28.
fn at_2026(c: &mut Config) {
    let mut upstream = demo_stdio_upstream("demo");
    upstream.protocol = UpstreamProtocol::V2026_07_28;
    c.upstreams = vec![upstream];
}

fn events_url(result: &rmcp::model::CallToolResult) -> String {
    result.meta.as_ref().expect("_meta")["mcp-progress-bridge/job"]["events_url"]
        .as_str()
        .expect("events_url")
        .to_string()
}

/// A waiting caller on a handshake revision that answers questions, samples and roots gets
/// every request of every round (as requests on its session), and the tool gets its answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_caller_answers_every_round_of_a_2026_upstream() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        at_2026(c);
    })
    .await;
    let caller = connect_answering_everything(
        &bridge.mcp_url(),
        "Ada",
        "hello from the model",
        &["file:///work"],
        false,
    )
    .await;
    let result = call(
        &caller,
        "demo__ask_in_rounds",
        json!({"rounds": 3, "per_round": 2, "sample": true, "roots": true}),
    )
    .await;
    assert_eq!(
        first_text(&result),
        "answers: Ada, Ada, Ada, Ada, Ada, Ada; the model said: hello from the model; roots: \
         file:///work"
    );
    let events = read_job_events(&events_url(&result)).await;
    assert_eq!(events.last().unwrap().event, "completed");
    // The caller answered: nothing waited on the job.
    assert!(!events.iter().any(|e| e.event == "input_required"));
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The same with a waiting caller at 2026-07-28 (rmcp's client, declaring elicitation,
/// sampling and roots): the bridge has a round system on both sides, and each request of the
/// upstream's rounds reaches the caller in one of its own `input_required` rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_caller_answers_every_round_of_a_2026_upstream() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        at_2026(c);
    })
    .await;
    let caller = connect_answering_everything(
        &bridge.mcp_url(),
        "Ada",
        "hello from the model",
        &["file:///work"],
        true,
    )
    .await;
    let result = call(
        &caller,
        "demo__ask_in_rounds",
        json!({"rounds": 2, "per_round": 2, "sample": true, "roots": true}),
    )
    .await;
    assert_eq!(
        first_text(&result),
        "answers: Ada, Ada, Ada, Ada; the model said: hello from the model; roots: file:///work"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// With nobody waiting, the questions go to the job (`input_required` event, `input_url`);
/// a question nobody answers is declined on timeout and the tool goes on; roots nobody gives
/// are none; a sample nobody gives ends the job `unsupported`, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_waiting_caller_the_job_asks_each_round() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.input_timeout_secs = 2;
        at_2026(c);
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__ask_in_rounds",
        json!({"rounds": 2, "roots": true}),
    )
    .await;
    let events = read_sse(&handle.events_url, None, |e| e.event == "input_required").await;
    let asked = events.last().unwrap();
    assert_eq!(
        asked.data["message"],
        "Round 1, question 1: what is your answer?"
    );
    let (status, body) = post_answer(
        handle.input_url(),
        json!({"action": "accept", "content": {"answer": "Grace"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Round 2's question: nobody answers it.
    let events = read_job_events(&handle.events_url).await;
    let asked: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "input_required")
        .map(|e| &e.data["message"])
        .collect();
    assert_eq!(
        asked,
        [
            "Round 1, question 1: what is your answer?",
            "Round 2, question 1: what is your answer?"
        ]
    );
    let by: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "input_answered")
        .map(|e| &e.data["by"])
        .collect();
    assert_eq!(by, ["POST /jobs/{id}/input", "timeout"], "{events:?}");
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed", "{last:?}");
    assert_eq!(
        last.data["result"]["content"][0]["text"],
        "answers: Grace, (decline); roots: none"
    );

    // The round's question is not waited for: without the sample the tool cannot go on.
    let handle = running_job(&client, "demo__ask_in_rounds", json!({"sample": true})).await;
    let last = read_job_events(&handle.events_url).await.pop().unwrap();
    assert_eq!(last.event, "failed");
    assert_eq!(last.data["reason"], "unsupported");
    let message = last.data["message"].as_str().unwrap();
    assert!(
        message.contains("needs a sample") && message.contains("sampling is not available"),
        "{message}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Hostile upstreams: one that asks forever ends its job failed once it passes
/// `limits.max_input_rounds`; one that asks too much in one round, or sends too large a
/// `requestState`, likewise at once. Each names its limit and counts in
/// `bridge_limit_hits_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_asks_forever_or_too_much_fails_its_job_naming_the_limit() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.limits.max_input_rounds = 3;
        c.limits.max_input_requests_per_round = 4;
        c.limits.max_request_state_bytes = 4096;
        at_2026(c);
    })
    .await;
    let caller = connect_answering_everything(&bridge.mcp_url(), "Ada", "hi", &[], false).await;
    let cases = [
        (json!({"forever": true}), "max_input_rounds", "4 times"),
        (
            json!({"per_round": 5}),
            "max_input_requests_per_round",
            "5 inputs",
        ),
        (
            json!({"state_padding": 8192}),
            "max_request_state_bytes",
            "requestState of",
        ),
    ];
    for (arguments, limit, says) in cases {
        let result = call(&caller, "demo__ask_in_rounds", arguments).await;
        assert_eq!(result.is_error, Some(true), "{limit}: {result:?}");
        let last = read_job_events(&events_url(&result)).await.pop().unwrap();
        assert_eq!(last.event, "failed", "{limit}");
        assert_eq!(last.data["reason"], "upstream_error", "{limit}");
        let message = last.data["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("limits.{limit}")) && message.contains(says),
            "{limit}: {message}"
        );
        let metrics = metrics_text(&bridge.base).await;
        assert!(
            metrics.contains(&format!("bridge_limit_hits_total{{limit=\"{limit}\"}} 1")),
            "{limit}"
        );
    }
    // Within the bounds the same tool ends well.
    let result = call(&caller, "demo__ask_in_rounds", json!({"rounds": 3})).await;
    assert_eq!(first_text(&result), "answers: Ada, Ada, Ada");
    bridge.shutdown(Duration::from_secs(1)).await;
}
