//! The bridge in front of a real third-party MCP server: the reference
//! `@modelcontextprotocol/server-everything` (TypeScript SDK) from npm, over stdio and over
//! Streamable HTTP. `.ci/run` installs it into tests/interop/node_modules.

use std::{path::PathBuf, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::json;

fn everything_entry() -> Option<PathBuf> {
    let entry = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (node && entry.exists()).then_some(entry)
}

fn everything_stdio(entry: &std::path::Path) -> UpstreamConfig {
    UpstreamConfig::stdio(
        "everything",
        "node",
        &[&entry.display().to_string(), "stdio"],
    )
}

const LONG_RUNNING: &str = "everything__trigger-long-running-operation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_reports_progress_through_the_bridge() {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![everything_stdio(&entry)];
    })
    .await;
    let client = connect(&bridge).await;
    let tools = within("list tools", client.list_all_tools()).await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == LONG_RUNNING),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );

    let handle = running_job(&client, LONG_RUNNING, json!({"duration": 1, "steps": 5})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed");
    assert!(
        done.data["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Long running operation completed")
    );

    let waited = call(&client, "wait_for_job", json!({"job_id": handle.job_id})).await;
    assert!(first_text(&waited).contains("Steps: 5"));
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http_works_in_sync_mode() {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let mut command = tokio::process::Command::new("node");
    command.arg(&entry).arg("streamableHttp").env("PORT", "0");
    let (mut server, url) = http_child(command, "server-everything").await;
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![http_upstream("everything", &url)];
    })
    .await;
    let client = connect(&bridge).await;
    let echo = call(&client, "everything__echo", json!({"message": "hello"})).await;
    assert!(first_text(&echo).contains("hello"), "{}", first_text(&echo));
    let result = call(&client, LONG_RUNNING, json!({"duration": 0.5, "steps": 3})).await;
    assert!(first_text(&result).contains("Steps: 3"));
    let seen = caller_progress(&client, 3).await;
    assert_eq!(
        seen,
        vec![1.0, 2.0, 3.0],
        "progress relayed on the caller's own token"
    );
    // A tool the upstream runs only as a task works here too (its tools/list came on SSE).
    let report = call(&client, RESEARCH, json!({"topic": "over http"})).await;
    assert!(
        first_text(&report).contains("# Research Report: over http"),
        "{report:?}"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
    let _ = server.kill().await;
}

const RESEARCH: &str = "everything__simulate-research-query";

/// The value of one series in the Prometheus text, 0 when absent.
fn series(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Issue 14 item 2: server-everything's `simulate-research-query` declares
/// `execution.taskSupport: "required"` and refuses a plain `tools/call` ("requires task
/// augmentation"). Through the bridge it works for a client that knows nothing of tasks: the
/// bridge runs it as an upstream task, each stage (`statusMessage`) is a progress step on the
/// job's SSE channel, and cancelling the job cancels the upstream task (`tasks/cancel`, which
/// server-everything answers with an error for a task that is unknown or already over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_requires_a_task_upstream_works_through_the_bridge() {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![everything_stdio(&entry)];
    })
    .await;
    let client = connect(&bridge).await;
    let tools = within("list tools", client.list_all_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == RESEARCH));

    let handle = running_job(&client, RESEARCH, json!({"topic": "tasks"})).await;
    let events = read_job_events(&handle.events_url).await;
    let stages: Vec<&str> = events
        .iter()
        .filter(|e| e.event == "progress")
        .filter_map(|e| e.data["message"].as_str())
        .collect();
    assert_eq!(
        stages,
        [
            "Gathering sources...",
            "Analyzing content...",
            "Synthesizing findings...",
            "Generating report..."
        ],
        "{events:#?}"
    );
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0]);
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    let text = done.data["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("# Research Report: tasks"), "{text}");

    // Cancelled after its first stage: the job ends cancelled and the upstream task is
    // cancelled with it.
    let handle = running_job(&client, RESEARCH, json!({"topic": "cancel me"})).await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    assert_eq!(post_json(&handle.cancel_url).await.0, 202);
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(events.last().unwrap().event, "cancelled");
    let cancelled = eventually("the upstream task cancelled", || async {
        let metrics = metrics_text(&bridge.base).await;
        let ok = series(
            &metrics,
            r#"bridge_upstream_task_requests_total{method="tasks/cancel",outcome="ok"}"#,
        );
        (ok >= 1.0).then_some(metrics)
    })
    .await;
    assert_eq!(
        series(
            &cancelled,
            r#"bridge_upstream_task_requests_total{method="tasks/cancel",outcome="error"}"#
        ),
        0.0
    );

    // An ambiguous query: the upstream task goes `input_required` and asks (through the
    // `tasks/result` stream) which interpretation is meant; the question reaches the job's
    // channel and a person's answer at its input URL reaches the upstream task.
    let handle = running_job(
        &client,
        RESEARCH,
        json!({"topic": "python", "ambiguous": true}),
    )
    .await;
    let events = read_sse(&handle.events_url, None, |e| e.event == "input_required").await;
    let asked = events.last().unwrap();
    assert!(
        asked.data["message"]
            .as_str()
            .unwrap()
            .contains("multiple interpretations"),
        "{asked:?}"
    );
    let input_url = handle.raw["input_url"].as_str().unwrap();
    let answered = within(
        "POST the answer",
        reqwest::Client::new()
            .post(input_url)
            .json(&json!({"action": "accept", "content": {"interpretation": "snake"}}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(answered.status(), 200, "{:?}", answered.text().await);
    let events = read_job_events(&handle.events_url).await;
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    let text = done.data["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("# Research Report: python (snake)"), "{text}");
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// server-everything over Streamable HTTP and two bridge replicas on Redis in front of it (the
/// upstream `everything`, a 2 s lease); `None` when node or Redis is missing.
async fn everything_behind_two_replicas(test: &str) -> Option<Everything> {
    let Some(entry) = everything_entry() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return None;
    };
    let redis = test_redis(test).await?;
    let prefix = RedisPrefix::new(&redis, "everything-replicas");
    let mut command = tokio::process::Command::new("node");
    command.arg(&entry).arg("streamableHttp").env("PORT", "0");
    let (server, url) = http_child(command, "server-everything").await;
    let store = redis_store_toml(&redis, &prefix, 2);
    let (a, b) = two_replicas(&store, "everything", &url).await;
    Some(Everything {
        server,
        url,
        _prefix: prefix,
        a,
        b,
    })
}

/// server-everything (its MCP URL) and two replicas in front of it.
struct Everything {
    server: tokio::process::Child,
    url: String,
    _prefix: RedisPrefix,
    a: BridgeProcess,
    b: BridgeProcess,
}

/// Jobs outlive their replica in front of a real third-party upstream: server-everything over
/// Streamable HTTP keeps an event store (its SSE events carry ids) and binds each task to its
/// session. Two bridge replicas on Redis; the owner is killed (`kill -9`) while a
/// `trigger-long-running-operation` job (a plain call whose stream can be resumed) and a
/// `simulate-research-query` job (an upstream task) run. The other replica resumes the call's
/// stream with `Last-Event-ID` and follows the task on its session; each job ends `completed`,
/// its readers see one line. A reader that was on the killed owner comes back on the survivor
/// with `Last-Event-ID` and has all 60 steps once, in order; `wait_for_job` on the survivor
/// answers what a direct call of the tool answers. (The research query's stages are fixed by
/// server-everything: five, not 60.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_jobs_outlive_a_killed_replica() {
    let Some(Everything {
        mut server,
        url,
        _prefix,
        mut a,
        b,
    }) = everything_behind_two_replicas("interop_everything::outlive").await
    else {
        return;
    };
    let steps = 60;
    let long_arguments = json!({"duration": 15, "steps": steps});
    let direct = {
        let arguments = long_arguments.clone();
        tokio::spawn(async move {
            let client = connect_url(&url).await;
            let tool = LONG_RUNNING.trim_start_matches("everything__");
            let result = client.call_tool(call_params(tool, arguments)).await;
            first_text(&result.expect("a direct call"))
        })
    };
    let on_a = connect_url(&a.mcp_url()).await;
    let long = running_job(&on_a, LONG_RUNNING, long_arguments).await;
    let task = running_job(&on_a, RESEARCH, json!({"topic": "outliving"})).await;
    // A reader on the owner, until the third step.
    let first = read_sse(&long.events_url, Some(0), |e| {
        e.event == "progress" && e.data["progress"].as_f64() >= Some(3.0)
    })
    .await;
    let status = |id: String| {
        let base = b.base();
        async move { get_json(&job_status_url(&base, &id)).await.1 }
    };
    let owner = eventually("both jobs are re-attachable and under way", || async {
        let (l, t) = (
            status(long.job_id.clone()).await,
            status(task.job_id.clone()).await,
        );
        (l["durability"] == "upstream_stream"
            && l["progress"].as_f64() >= Some(2.0)
            && t["durability"] == "upstream_task"
            && t["status"] == "running")
            .then(|| l["owner"].clone())
    })
    .await;
    a.kill();
    let waiter = waiting_caller(&b, &long.job_id).await;

    // The reader comes back on the survivor after the last event it had.
    let events = reader_comes_back(&b, &long.job_id, first).await;
    let expected: Vec<f64> = (1..=steps).map(f64::from).collect();
    assert_eq!(
        progress_values(&events),
        expected,
        "every step once: {events:#?}"
    );
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert!(
        done.data["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Long running operation completed"),
        "{done:?}"
    );
    let direct = direct.await.expect("the direct call");
    assert!(direct.contains("Steps: 60"), "{direct}");
    assert_eq!(done.data["result"]["content"][0]["text"], direct.as_str());
    assert_eq!(
        waiter.await.expect("wait_for_job"),
        direct,
        "wait_for_job on the survivor"
    );

    let events = read_sse(
        &job_events_url(&b.base(), &task.job_id),
        Some(0),
        SseEvent::is_terminal,
    )
    .await;
    assert_consecutive(&events);
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert!(
        done.data["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("# Research Report: outliving"),
        "{done:?}"
    );
    for (id, how) in [
        (&long.job_id, "upstream_stream"),
        (&task.job_id, "upstream_task"),
    ] {
        let after = status(id.clone()).await;
        assert_ne!(after["owner"], owner, "adopted ({how}): {after}");
    }
    let _ = server.kill().await;
}

/// server-everything's `simulate-research-query` with `ambiguous` goes `input_required` at its
/// third stage and sends its question on the `tasks/result` stream (the 2025-11-25 way). Its
/// owner is killed before that: the replica that adopts the task calls `tasks/result` on the
/// task's session, puts the question on the job's input desk, and sends the answer given
/// there (through the surviving replica) back on the session; the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_task_that_asks_for_input_is_answered_through_the_job() {
    let Some(Everything {
        mut server,
        _prefix,
        mut a,
        b,
        ..
    }) = everything_behind_two_replicas("interop_everything::adopted_question").await
    else {
        return;
    };
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "python", "ambiguous": true});
    let task = running_job(&on_a, RESEARCH, arguments).await;
    let job_id = task.job_id.clone();
    let snapshot = |id: String| {
        let base = b.base();
        async move { get_json(&job_status_url(&base, &id)).await.1 }
    };
    eventually("the job is re-attachable", || async {
        (snapshot(job_id.clone()).await["durability"] == "upstream_task").then_some(())
    })
    .await;
    a.kill();

    let asked = eventually("the adopter asks the task's question", || async {
        let s = snapshot(job_id.clone()).await;
        (s["status"] == "input_required").then_some(s)
    })
    .await;
    let message = asked["input_requests"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("multiple interpretations"), "{asked}");
    let input_url = task.input_url().replace(&a.base(), &b.base());
    let (status, body) = post_answer(&input_url, json!({"action": "decline"})).await;
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
    let report = done.data["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(report.contains("User declined"), "{report}");
    let _ = server.kill().await;
}
