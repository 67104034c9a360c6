//! Hostile clients and tools against the input paths of issue 14: answers in bulk, strings
//! sent back in errors, questions too large to show anyone, and a waiting caller that never
//! answers. Each case runs against the real bridge and the demo tool server (a real child
//! process); each bound names its `[jobs]` key and counts in `bridge_limit_hits_total`.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use rmcp::model::{
    CallToolResponse, GetTaskParams, InputResponses, TaskPayload, TaskStatus, UpdateTaskParams,
};
use serde_json::{Value, json};

fn limit_hits(metrics: &str, limit: &str) -> u64 {
    let line = format!("bridge_limit_hits_total{{limit=\"{limit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `n` answers to questions nobody asked, and `answer` for `key`.
fn flood(n: usize, key: &str, answer: Value) -> InputResponses {
    let mut responses: InputResponses = (0..n)
        .map(|i| (format!("a{i:05}"), json!({"action": "decline"})))
        .collect();
    responses.insert(key.to_string(), answer);
    responses
}

/// A 2026-07-28 retry carrying thousands of answers is refused whole, before any is read
/// (before the fix every key was looked up, and with several replicas relayed, one after the
/// other, and the good answer among them was taken). The question still waits: the same retry
/// with only its answer completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_thousands_of_input_responses_is_refused_before_any_is_taken() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let client = connect_2026_answering(&bridge.mcp_url(), None, "unused").await;
    let params = || call_params("demo__ask", json!({"question": "Which kernel?"}));
    let first = within("tools/call", client.call_tool_once(params()))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("not input_required: {first:?}");
    };
    let state = asked.request_state.clone().expect("requestState");
    let key = asked
        .input_requests
        .clone()
        .expect("inputRequests")
        .into_keys()
        .next()
        .unwrap();
    let good = json!({"action": "accept", "content": {"answer": "Linus"}});
    let refused = within(
        "a retry with 5001 answers",
        client.call_tool_once(
            params()
                .with_request_state(state.clone())
                .with_input_responses(flood(5000, &key, good.clone())),
        ),
    )
    .await;
    let error = format!("{:?}", refused.expect_err("5001 answers are refused"));
    assert!(
        error.contains("jobs.max_input_responses") && error.contains("5001"),
        "{error}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_input_responses"), 1);
    let done = within(
        "the retry with its one answer",
        client.call_tool_once(
            params()
                .with_request_state(state)
                .with_input_responses([(key, good)].into_iter().collect()),
        ),
    )
    .await
    .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "you said: Linus");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// `tasks/update` is bounded the same way: refused whole, the task still asks, and the
/// answer alone is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_update_with_thousands_of_answers_is_refused_before_any_is_taken() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect_2026(&bridge.mcp_url(), None, true).await;
    let created = task_of(&client, "demo__ask", json!({"question": "Color?"})).await;
    let task_id = created.task.task_id;
    let get = || async {
        client
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap()
    };
    let key = eventually("the task asks", || async {
        match get().await.task.payload {
            TaskPayload::InputRequired { input_requests } => input_requests.into_keys().next(),
            _ => None,
        }
    })
    .await;
    let good = json!({"action": "accept", "content": {"answer": "blue"}});
    let refused = client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            flood(5000, &key, good.clone()),
        ))
        .await;
    let error = format!("{:?}", refused.expect_err("5001 answers are refused"));
    assert!(error.contains("jobs.max_input_responses"), "{error}");
    assert_eq!(
        get().await.task.status(),
        TaskStatus::InputRequired,
        "nothing was taken"
    );
    client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            [(key, good)].into_iter().collect(),
        ))
        .await
        .expect("tasks/update with the one answer");
    let task = eventually("the task ends", || async {
        let got = get().await;
        got.task.status().is_terminal().then_some(got.task)
    })
    .await;
    let TaskPayload::Completed { result } = task.payload else {
        panic!("not completed: {:?}", task.task);
    };
    assert_eq!(result["content"][0]["text"], "you said: blue");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// What a client sends that an error quotes back (a task ID, a `requestState`, an
/// `inputResponses` key) is quoted cut short: a 200 KB string costs the client 200 KB to send
/// and the bridge a few hundred bytes to refuse (before the fix the whole string came back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_quote_little_of_a_huge_client_string() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect_2026(&bridge.mcp_url(), None, true).await;
    let long = "x".repeat(200_000);
    let short = |what: &str, error: String| {
        assert!(
            error.len() < 2000,
            "{what}: an error of {} bytes: {}…",
            error.len(),
            &error[..300]
        );
    };
    let error = client
        .get_task(GetTaskParams::new(long.clone()))
        .await
        .expect_err("no such task");
    let error = format!("{error:?}");
    assert!(error.contains("no task"), "{error}");
    short("tasks/get", error);

    let retry = call_params("demo__echo", json!({"text": "hi"}))
        .with_request_state(format!("mcp-progress-bridge/job:{long}"));
    let error = within("a retry", client.call_tool_once(retry))
        .await
        .expect_err("no such call");
    let error = format!("{error:?}");
    assert!(error.contains("names no call of yours"), "{error}");
    short("requestState", error);

    let answer = within(
        "tools/call",
        client.call_tool_once(call_params("demo__ask", json!({"question": "Color?"}))),
    )
    .await
    .unwrap();
    let CallToolResponse::Task(created) = answer else {
        panic!("not a task: {answer:?}");
    };
    let error = client
        .update_task(UpdateTaskParams::new(
            created.task.task_id,
            [(long.clone(), json!(5))].into_iter().collect(),
        ))
        .await
        .expect_err("not an answer");
    let error = format!("{error:?}");
    assert!(error.contains("not an elicitation result"), "{error}");
    short("an inputResponses key", error);
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A tool's question larger than `jobs.max_question_bytes` (here its text: the demo tool asks
/// whatever the caller passes it, as many tools quote their input) is declined at once and
/// shown to nobody: not to the waiting caller that takes questions, not on the job (no
/// `input_required`, which would put it in every reader's stream, the snapshot, the task and
/// the agent's `wait_for_job`). The job's channel says why. Before the fix the caller was sent
/// it, and without such a caller the job waited with it for `jobs.input_timeout_secs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_past_max_question_bytes_is_declined_and_shown_to_nobody() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let big = "?".repeat(100_000);

    let answering = connect_answering(&bridge.mcp_url(), "Ada").await;
    let result = call(&answering, "demo__ask", json!({"question": big})).await;
    assert_eq!(
        first_text(&result),
        "no answer: declined",
        "the waiting caller is not sent it"
    );

    let plain = connect(&bridge).await;
    let result = call(&plain, "demo__ask", json!({"question": big})).await;
    assert_eq!(first_text(&result), "no answer: declined");
    let meta = result.meta.clone().expect("_meta");
    let events_url = meta["mcp-progress-bridge/job"]["events_url"]
        .as_str()
        .expect("events_url")
        .to_string();
    let events = read_job_events(&events_url).await;
    assert!(
        events.iter().all(|e| e.event != "input_required"),
        "the job never asked: {:?}",
        events.iter().map(|e| &e.event).collect::<Vec<_>>()
    );
    let said = events
        .iter()
        .find(|e| e.event == "log")
        .map(|e| e.data["data"].to_string())
        .unwrap_or_default();
    assert!(
        said.contains("jobs.max_question_bytes") && said.contains("declined"),
        "the channel says why: {said}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_question_bytes"), 2);

    // A question within the bound still reaches the caller.
    let result = call(&answering, "demo__ask", json!({"question": "Name?"})).await;
    assert_eq!(first_text(&result), "you said: Ada");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A waiting caller that declared elicitation and never answers (its user walked away) holds
/// the question at most `jobs.input_timeout_secs`, as a person would: then it is declined and
/// the tool goes on. Before the fix the question, the tool and the caller's call waited for
/// ever (no job timeout by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_caller_that_never_answers_is_declined_after_the_input_timeout() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.jobs.input_timeout_secs = 1;
    })
    .await;
    let silent = connect_never_answering(&bridge.mcp_url()).await;
    let result = call(&silent, "demo__ask", json!({"question": "Anyone?"})).await;
    assert_eq!(first_text(&result), "no answer: declined");
    let meta = result.meta.clone().expect("_meta");
    let events_url = meta["mcp-progress-bridge/job"]["events_url"]
        .as_str()
        .expect("events_url")
        .to_string();
    let events = read_job_events(&events_url).await;
    let said = events
        .iter()
        .find(|e| e.event == "log")
        .map(|e| e.data["data"].to_string())
        .unwrap_or_default();
    assert!(said.contains("jobs.input_timeout_secs"), "{said}");
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "input_timeout_secs"), 1);
    bridge.shutdown(Duration::from_secs(1)).await;
}
