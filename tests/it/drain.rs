//! The drain on SIGTERM/SIGINT, on the bridge as a process with the demo tools as its stdio
//! child: at once not ready and no new call (a retryable tool error); running jobs, their SSE
//! readers, `wait_for_job`, answers and cancels go on; the process exits when its last job has
//! ended, not at the end of `jobs.drain_secs`; past it, or on a second signal, the jobs left
//! are cancelled with a `cancelled` event that says why, and a waiting sync caller gets the
//! job's handle saying so.

use std::time::{Duration, Instant};

use mcp_progress_bridge::model::meta::RETRY_META_KEY;
use serde_json::{Value, json};

use crate::common::*;

/// The value of an unlabelled series in a metrics text (`None`: not there).
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Wait until `/readyz` answers 503, and return its body.
async fn not_ready(base: &str) -> Value {
    let url = format!("{base}/readyz");
    eventually("/readyz answers 503", || async {
        let (status, body) = get_json(&url).await;
        (status == 503).then_some(body)
    })
    .await
}

/// Read a job's whole stream on a task of its own.
fn reader(handle: &JobHandle) -> tokio::task::JoinHandle<Vec<SseEvent>> {
    let url = handle.events_url.clone();
    tokio::spawn(async move { read_job_events(&url).await })
}

async fn subscribers(base: &str, n: usize) {
    eventually("the readers subscribe", || async {
        metric(&metrics_text(base).await, "bridge_sse_subscribers") == Some(n as f64)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_running_at_sigterm_completes_in_the_drain_and_the_bridge_exits_after_its_last_job() {
    let config = format!(
        "[jobs]\nmode = \"async\"\ndrain_secs = 600\n{}",
        demo_upstream_toml("{}")
    );
    let mut bridge = spawn_bridge(&config, &[]).await;
    let base = bridge.base();
    let client = connect_url(&bridge.mcp_url()).await;
    // Waits for an answer to its question: it holds the drain open until the test answers.
    // Asked first and alone: a stdio upstream's question names no call, so the bridge can
    // tell whose it is only while that call is the only one in flight.
    let asking = running_job(&client, "demo__ask", json!({"question": "Last one?"})).await;
    eventually("the question is asked", || async {
        get_json(&asking.status_url).await.1["status"] == "input_required"
    })
    .await;
    // Counts on through the signal; its reader must see every step.
    let counting = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 8, "delay_ms": 400}),
    )
    .await;
    // Cancelled through its cancel URL during the drain.
    let hanging = running_job(&client, "demo__hang", json!({})).await;
    let counting_reader = reader(&counting);
    let hanging_reader = reader(&hanging);
    subscribers(&base, 2).await;
    let metrics = metrics_text(&base).await;
    assert_eq!(metric(&metrics, "bridge_draining"), Some(0.0), "{metrics}");
    assert_eq!(get_json(&counting.status_url).await.1["status"], "running");

    bridge.terminate();
    let readyz = not_ready(&base).await;
    assert_eq!(readyz["reason"], "draining", "{readyz}");
    assert_eq!(readyz["ready"], false, "{readyz}");

    // A new call is refused, saying to call again, with what a client needs to do it itself.
    let refused = call(&client, "demo__echo", json!({"text": "late"})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let text = first_text(&refused);
    assert!(
        text.contains("draining") && text.contains("call the tool again"),
        "{text}"
    );
    let retry = &refused.meta.as_ref().expect("_meta")[RETRY_META_KEY];
    assert_eq!(retry["reason"], "draining", "{refused:?}");
    assert!(retry["retry_after_ms"].as_u64().unwrap() > 0, "{refused:?}");
    let metrics = metrics_text(&base).await;
    assert_eq!(metric(&metrics, "bridge_draining"), Some(1.0), "{metrics}");
    assert_eq!(
        metric(&metrics, "bridge_calls_refused_draining_total"),
        Some(1.0),
        "{metrics}"
    );

    // The job tools, the job's reader and its cancel URL go on working.
    let waited = call(
        &client,
        "wait_for_job",
        json!({"job_id": counting.job_id, "timeout_seconds": 20}),
    )
    .await;
    assert_eq!(first_text(&waited), "counted to 8", "{waited:?}");
    let events = within("the counting job's reader", counting_reader)
        .await
        .unwrap();
    assert_eq!(
        progress_values(&events),
        (1..=8).map(f64::from).collect::<Vec<_>>(),
        "{events:?}"
    );
    assert_consecutive(&events);
    assert_eq!(events.last().unwrap().event, "completed", "{events:?}");
    let (status, _) = post_json(&hanging.cancel_url).await;
    assert_eq!(status, 202, "a cancel during the drain is taken");
    let events = within("the hanging job's reader", hanging_reader)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled", "{events:?}");
    assert!(
        last["reason"].as_str().unwrap().contains("POST"),
        "{events:?}"
    );

    // The question holds the drain open; answered, its job ends, and the bridge exits.
    assert!(bridge.exited().is_none(), "a job still runs: no exit yet");
    let answered = Instant::now();
    let (status, body) = post_answer(
        asking.input_url(),
        json!({"action": "accept", "content": {"answer": "yes"}}),
    )
    .await;
    assert_eq!(status, 200, "an answer during the drain is taken: {body}");
    let exit = within("the bridge exits after its last job", bridge.wait())
        .await
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
    assert!(
        answered.elapsed() < Duration::from_secs(15),
        "exited {:?} after its last job, not at the end of the drain",
        answered.elapsed()
    );
    let log = bridge.log();
    assert!(log.contains("drained: every job ended"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_drain_the_jobs_left_are_cancelled_saying_why_and_a_sync_caller_gets_the_handle() {
    const DRAIN: Duration = Duration::from_secs(2);
    let config = format!(
        "[jobs]\nmode = \"sync\"\ndrain_secs = {}\n{}",
        DRAIN.as_secs(),
        demo_upstream_toml("{ slow_count = { mode = \"async\" } }")
    );
    let mut bridge = spawn_bridge(&config, &[]).await;
    let base = bridge.base();
    let client = connect_url(&bridge.mcp_url()).await;
    let counting = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 200}),
    )
    .await;
    let counting_reader = reader(&counting);
    subscribers(&base, 1).await;
    // A sync caller waiting on a job that never ends by itself.
    let mut raw = RawMcp::new(&bridge.mcp_url(), None);
    assert_eq!(raw.initialize().await.status, 200);
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "demo__hang", "arguments": {}}});
    let caller = tokio::spawn(async move { raw.post(request.to_string(), &[]).await });
    eventually("both jobs run", || async {
        metric(&metrics_text(&base).await, "bridge_jobs_running") == Some(2.0)
    })
    .await;

    let signalled = Instant::now();
    bridge.terminate();
    let events = within("the counting job's reader", counting_reader)
        .await
        .unwrap();
    let cancelled_after = signalled.elapsed();
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled", "{events:?}");
    let reason = last["reason"].as_str().unwrap();
    assert!(
        reason.contains("shutting down") && reason.contains("jobs.drain_secs"),
        "{reason}"
    );
    assert!(
        cancelled_after >= DRAIN,
        "cancelled {cancelled_after:?} after the signal, before the drain's end"
    );
    assert!(
        !progress_values(&events).is_empty(),
        "it counted during the drain"
    );
    assert_consecutive(&events);

    let answer = within("the sync caller's answer", caller).await.unwrap();
    let result = answer
        .message
        .as_ref()
        .and_then(|m| m.get("result"))
        .unwrap_or_else(|| panic!("a result: {}", answer.body));
    assert_eq!(result["isError"], true, "{result}");
    let handle = &result["structuredContent"];
    assert_eq!(handle["status"], "cancelled", "{result}");
    assert!(handle["job_id"].is_string() && handle["events_url"].is_string());
    assert!(
        handle["instructions"]
            .as_str()
            .unwrap()
            .contains("call the tool again"),
        "{result}"
    );
    let exit = within("the bridge exits", bridge.wait()).await.unwrap();
    assert!(exit.success(), "exit status {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_cuts_the_drain_short() {
    let config = format!(
        "[jobs]\nmode = \"async\"\ndrain_secs = 600\n{}",
        demo_upstream_toml("{}")
    );
    let mut bridge = spawn_bridge(&config, &[]).await;
    let base = bridge.base();
    let client = connect_url(&bridge.mcp_url()).await;
    let hanging = running_job(&client, "demo__hang", json!({})).await;
    let hanging_reader = reader(&hanging);
    subscribers(&base, 1).await;
    bridge.terminate();
    // The first signal has been taken (two signals close together may arrive as one).
    not_ready(&base).await;
    assert!(bridge.exited().is_none(), "a job runs: the bridge drains");
    let cut = Instant::now();
    bridge.signal(libc::SIGINT);
    let events = within("the hanging job's reader", hanging_reader)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled", "{events:?}");
    let reason = last["reason"].as_str().unwrap();
    assert!(
        reason.contains("shutting down") && reason.contains("second"),
        "{reason}"
    );
    let exit = within("the bridge exits", bridge.wait()).await.unwrap();
    assert!(exit.success(), "exit status {exit}");
    assert!(
        cut.elapsed() < Duration::from_secs(15),
        "stopped {:?} after the second signal",
        cut.elapsed()
    );
}
