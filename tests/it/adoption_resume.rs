//! A plain call outlives the replica that runs it when its upstream's SSE events carry ids:
//! two bridge processes on one Redis, the Python SDK server with an event store
//! (tests/interop/resumable_http_server.py) as upstream, and the owner killed (`kill -9`) or
//! drained (SIGTERM) in the middle of a 60-step job. The other replica resumes the call's
//! stream (`GET` + `Last-Event-ID` on the same upstream session): every step once and in
//! order on one `seq` line, and the result a direct call gives. An upstream that forgot the
//! session answers the resuming `GET` with 404: the job fails `owner_lost` at once.

use crate::common::*;
use serde_json::{Value, json};

/// The lease the replicas hold (seconds): short, so a lost owner is noticed in a few seconds.
const LEASE_SECS: u64 = 2;
/// The tool's steps, and the time between them (9 s in all): long enough for the owner to be
/// lost and the job adopted while it runs.
const STEPS: u64 = 60;
const STEP_MS: u64 = 150;

fn arguments(topic: &str) -> Value {
    json!({"topic": topic, "steps": STEPS, "step_ms": STEP_MS})
}

/// The tool's own answer for `arguments`, from a direct call (no bridge between).
fn direct_call(url: &str, arguments: Value) -> tokio::task::JoinHandle<String> {
    let url = url.to_string();
    tokio::spawn(async move {
        let client = connect_url(&url).await;
        let result = client
            .call_tool(call_params("counted", arguments))
            .await
            .expect("a direct call");
        first_text(&result)
    })
}

/// Every step once, in order, each with its own message, then the result.
fn assert_every_step_once(events: &[SseEvent], expected: &str) {
    let progress = progress_values(events);
    let steps: Vec<f64> = (1..=STEPS).map(|p| p as f64).collect();
    assert_eq!(progress, steps, "every step once, in order: {events:#?}");
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(done.data["result"]["content"][0]["text"], expected);
}

/// A reader that was on the owner comes back on `survivor` after `first` and reads to the end:
/// one line, every step once, and the result `expected`.
async fn reader_rides_through(
    survivor: &BridgeProcess,
    job_id: &str,
    first: Vec<SseEvent>,
    expected: &str,
) {
    let all = reader_comes_back(survivor, job_id, first).await;
    assert_every_step_once(&all, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumable_stream_job_whose_owner_is_killed_completes_on_the_other_replica() {
    let Some(url) = test_redis("adoption_resume::kill").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume-kill");
    let Some((_server, upstream)) = resumable_http_server(&[]).await else {
        return;
    };
    let direct = direct_call(&upstream, arguments("resumed"));
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "py", &upstream).await;

    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(&on_a, "py__counted", arguments("resumed")).await;
    let job_id = handle.job_id.clone();
    let first = read_sse(&handle.events_url, Some(0), |e| {
        e.event == "progress" && e.data["progress"] == 5.0
    })
    .await;
    let before = eventually("the job is resumable", || async {
        let s = job_snapshot(&b, &job_id).await;
        (s["durability"] == "upstream_stream").then_some(s)
    })
    .await;
    assert_eq!(before["status"], "running", "{before}");
    let (_, upstreams) = get_json(&format!("{}/upstreams", a.base())).await;
    assert_eq!(upstreams["upstreams"][0]["durable"], "auto", "{upstreams}");
    assert_eq!(
        upstreams["upstreams"][0]["resumable_streams"], true,
        "{upstreams}"
    );

    let waiter = waiting_caller(&b, &job_id).await;
    a.kill();

    let direct = direct.await.unwrap();
    assert_eq!(direct, "counted: resumed");
    reader_rides_through(&b, &job_id, first, &direct).await;
    assert_eq!(waiter.await.unwrap(), direct);
    let after = job_snapshot(&b, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(after["owner"], before["owner"], "adopted: {after}");
    assert!(
        b.log().contains("resuming its upstream call stream"),
        "{}",
        b.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_owner_hands_its_resumable_stream_job_over_and_exits() {
    let Some(url) = test_redis("adoption_resume::handover").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume-handover");
    let Some((_server, upstream)) = resumable_http_server(&[]).await else {
        return;
    };
    let direct = direct_call(&upstream, arguments("handed"));
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "py", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(&on_a, "py__counted", arguments("handed")).await;
    let job_id = handle.job_id.clone();
    let events_url = handle.events_url.clone();
    let reader =
        tokio::spawn(async move { read_sse(&events_url, Some(0), SseEvent::is_terminal).await });
    let before = eventually("the job is resumable and past its third step", || async {
        let s = job_snapshot(&b, &job_id).await;
        (s["durability"] == "upstream_stream" && s["progress"].as_f64() >= Some(3.0)).then_some(s)
    })
    .await;
    let waiter = waiting_caller(&b, &job_id).await;

    a.terminate();
    let exit = within("the draining owner exits", a.wait()).await.unwrap();
    assert!(exit.success(), "{exit:?}: {}", a.log_tail());
    assert!(a.log().contains("handed over"), "{}", a.log_tail());
    assert!(
        a.log().contains("upstream session left open"),
        "{}",
        a.log_tail()
    );
    let at_exit = job_snapshot(&b, &job_id).await;
    assert_eq!(
        at_exit["status"], "running",
        "outlived its owner: {at_exit}"
    );

    let first = reader.await.unwrap();
    let direct = direct.await.unwrap();
    reader_rides_through(&b, &job_id, first, &direct).await;
    assert_eq!(waiter.await.unwrap(), direct);
    let after = job_snapshot(&b, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(after["owner"], before["owner"], "handed over: {after}");
    assert!(
        b.log()
            .contains("adopted a job its draining owner handed over"),
        "{}",
        b.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_whose_session_the_upstream_forgot_fails_owner_lost_at_once() {
    let Some(url) = test_redis("adoption_resume::forgot").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume-forgot");
    let Some((mut server, upstream)) = resumable_http_server(&[]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "py", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(&on_a, "py__counted", arguments("forgotten")).await;
    let job_id = handle.job_id.clone();
    eventually("the job is resumable", || async {
        job_snapshot(&b, &job_id).await["durability"] == "upstream_stream"
    })
    .await;
    // The owner dies, and the upstream restarts on the same port without the session.
    a.kill();
    server.kill().await.unwrap();
    let port: u16 = upstream
        .trim_end_matches("/mcp")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let _again = resumable_http_server_on(port).await;
    let end = read_sse(
        &job_events_url(&b.base(), &job_id),
        Some(0),
        SseEvent::is_terminal,
    )
    .await;
    let failed = end.last().unwrap();
    assert_eq!(failed.event, "failed", "{end:#?}");
    assert_eq!(failed.data["reason"], "owner_lost", "{failed:?}");
    let message = failed.data["message"].as_str().unwrap();
    assert!(message.contains("HTTP 404"), "{message}");
}

/// The upstream asks a question on the resumed stream (after the owner was lost): the adopter
/// puts it on the job's input desk, the answer given there (through the surviving replica) goes
/// back to the upstream on its session, and the tool ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_on_a_resumed_stream_is_answered_through_the_job() {
    let Some(url) = test_redis("adoption_resume::question").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume-question");
    let Some((_server, upstream)) = resumable_http_server(&[]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "py", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "relay", "steps": 30, "step_ms": 150});
    let handle = running_job(&on_a, "py__asking", arguments).await;
    let job_id = handle.job_id.clone();
    eventually("the job is resumable and under way", || async {
        let s = job_snapshot(&b, &job_id).await;
        (s["durability"] == "upstream_stream" && s["progress"].as_f64() >= Some(2.0)).then_some(())
    })
    .await;
    a.kill();

    let asked = eventually("the adopter asks the job's question", || async {
        let s = job_snapshot(&b, &job_id).await;
        (s["status"] == "input_required").then_some(s)
    })
    .await;
    assert_eq!(
        asked["input_requests"][0]["message"], "Who goes on with relay?",
        "{asked}"
    );
    let input_url = handle.input_url().replace(&a.base(), &b.base());
    let (status, body) = post_answer(
        &input_url,
        json!({"action": "accept", "content": {"name": "Grace"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let events = read_sse(
        &job_events_url(&b.base(), &job_id),
        Some(0),
        SseEvent::is_terminal,
    )
    .await;
    assert_consecutive(&events);
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(
        done.data["result"]["content"][0]["text"],
        "asked: relay: Grace"
    );
}

/// The owner is killed while the tool logs a line before each step: the adopter resumes the
/// stream exactly after the last event the job has (the upstream event id is written with
/// each event, in the same script), so no log line and no step comes twice, and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_repeats_no_log_line_and_no_step() {
    let Some(url) = test_redis("adoption_resume::exactly_once").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume-once");
    let Some((_server, upstream)) = resumable_http_server(&[]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let config = format!(
        "[jobs]\nmode = \"async\"\n[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n{store}\n\
         [[upstreams]]\nname = \"py\"\ntransport = \"http\"\nurl = \"{upstream}\"\n\
         logs = \"attribute_when_single\"\n"
    );
    let (mut a, b) = tokio::join!(spawn_bridge(&config, &[]), spawn_bridge(&config, &[]));
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "once", "steps": STEPS, "step_ms": 100, "log": true});
    let handle = running_job(&on_a, "py__counted", arguments).await;
    let job_id = handle.job_id.clone();
    let first = read_sse(&handle.events_url, Some(0), |e| {
        e.event == "progress" && e.data["progress"] == 15.0
    })
    .await;
    a.kill();

    let last_seen = first.last().unwrap().seq();
    let rest = read_sse(
        &job_events_url(&b.base(), &job_id),
        Some(last_seen),
        SseEvent::is_terminal,
    )
    .await;
    let all: Vec<SseEvent> = first.into_iter().chain(rest).collect();
    assert_consecutive(&all);
    let lines: Vec<String> = all
        .iter()
        .filter(|e| e.event == "log")
        .map(|e| e.data["data"].as_str().unwrap_or_default().to_string())
        .collect();
    let expected: Vec<String> = (1..=STEPS).map(|n| format!("line {n}")).collect();
    assert_eq!(lines, expected, "every log line once, in order");
    assert_every_step_once(&all, "counted: once");
    assert!(
        b.log().contains("resuming its upstream call stream"),
        "adopted by B: {}",
        b.log_tail()
    );
}
