//! Questions a tool asks during a call (`elicitation/create`), answered by a person: the demo
//! tool `ask` (a real child process) asks through the bridge; the answer comes from the
//! waiting MCP caller, `POST /jobs/{id}/input`, or `tasks/update`, or nobody (declined).

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use rmcp::model::{CallToolResponse, InputRequest, TaskPayload, TaskStatus, UpdateTaskParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_the_jobs_input_url_once() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__ask", json!({"question": "Your name?"})).await;
    let events = read_sse(&handle.events_url, None, |e| e.event == "input_required").await;
    let asked = events.last().unwrap();
    assert_eq!(asked.data["message"], "Your name?");
    assert_eq!(
        asked.data["requested_schema"]["properties"]["answer"]["type"],
        "string"
    );
    let key = asked.data["key"].as_str().unwrap().to_string();
    let (_, snapshot) = get_json(&handle.status_url).await;
    assert_eq!(snapshot["status"], "input_required");
    assert_eq!(snapshot["input_requests"][0]["key"], key.as_str());

    let url = handle.input_url();
    // The read token does not open the input URL.
    let with_read_token = url.replace(token_of(url), handle.read_token());
    let (status, _) = post_answer(&with_read_token, json!({"action": "decline"})).await;
    assert_eq!(status, 404);
    let (status, body) =
        post_answer(url, json!({"action": "accept", "content": {"answer": 5}})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content.answer")
    );
    assert_eq!(body["error"]["field"], "content.answer", "{body}");
    let (status, body) = post_answer(
        url,
        json!({"action": "accept", "content": {"answer": "Ada"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = post_answer(
        url,
        json!({"action": "accept", "content": {"answer": "Eve"}}),
    )
    .await;
    assert_eq!(status, 409, "a second answer");

    let events = read_job_events(&handle.events_url).await;
    let answered = events.iter().find(|e| e.event == "input_answered").unwrap();
    assert_eq!(answered.data["action"], "accept");
    assert_eq!(answered.data["key"], key.as_str());
    assert!(
        answered.data.get("content").is_none(),
        "the answer stays with the tool"
    );
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed");
    assert_eq!(last.data["result"]["content"][0]["text"], "you said: Ada");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answers_is_declined_and_the_job_goes_on() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.input_timeout_secs = 1;
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "demo__ask", json!({})).await;
    let events = read_job_events(&handle.events_url).await;
    let answered = events.iter().find(|e| e.event == "input_answered").unwrap();
    assert_eq!(answered.data["action"], "decline");
    assert_eq!(answered.data["by"], "timeout");
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed");
    assert_eq!(
        last.data["result"]["content"][0]["text"],
        "no answer: declined"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"input_timeout_secs\"} 1"),
        "{metrics}"
    );
    // Too large an answer is refused before it is read.
    let handle = running_job(&client, "demo__ask", json!({})).await;
    read_sse(&handle.events_url, None, |e| e.event == "input_required").await;
    let big = "x".repeat(70_000);
    let (status, _) = post_answer(
        handle.input_url(),
        json!({"action": "accept", "content": {"answer": big}}),
    )
    .await;
    assert_eq!(status, 413);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_caller_that_takes_elicitation_answers_itself() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let client = connect_answering(&bridge.mcp_url(), "Grace").await;
    let result = call(&client, "demo__ask", json!({})).await;
    assert_eq!(first_text(&result), "you said: Grace");
    // A caller that does not take elicitation: the question goes to the job, and with nobody
    // there it is declined after the timeout (here the default caller, an async job).
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_shows_the_question_and_tasks_update_answers_it() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect_2026(&bridge.mcp_url(), None, true).await;
    let created = task_of(&client, "demo__ask", json!({"question": "Color?"})).await;
    let task_id = created.task.task_id;
    let requests = task_input_requests(&client, &task_id).await;
    let (key, request) = requests.into_iter().next().unwrap();
    let InputRequest::Elicitation(request) = request else {
        panic!("not an elicitation: {request:?}");
    };
    assert!(
        serde_json::to_string(&request.params)
            .unwrap()
            .contains("Color?")
    );
    let bad = [(
        key.clone(),
        json!({"action": "accept", "content": {"nope": 1}}),
    )];
    let refused = client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            bad.into_iter().collect(),
        ))
        .await;
    assert!(refused.is_err(), "an answer that does not fit is refused");
    let good = [(
        key,
        json!({"action": "accept", "content": {"answer": "blue"}}),
    )];
    client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            good.into_iter().collect(),
        ))
        .await
        .expect("tasks/update");
    let task = ended_task(&client, &task_id).await;
    assert_eq!(task.status(), TaskStatus::Completed);
    let TaskPayload::Completed { result } = task.payload else {
        unreachable!()
    };
    assert_eq!(result["content"][0]["text"], "you said: blue");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The official Python SDK answers the question itself, at the revision it negotiates
/// (tests/interop/python_elicit.py): on the handshake revisions the bridge sends it
/// `elicitation/create`, at 2026-07-28 it answers the call with `input_required` and takes the
/// answer from the retried call. A session without the callback is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_a_question_as_the_waiting_caller() {
    let Some(python) = python_with_mcp_or_skip() else {
        return;
    };
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.jobs.input_timeout_secs = 1;
    })
    .await;
    run_python_client(&python, "python_elicit.py", &bridge.mcp_url()).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// At 2026-07-28 the waiting caller gets the question in an `input_required` answer and
/// retries the call with the answer and the `requestState` it was given: the same job goes on
/// (no second upstream call). The state is bound to the caller: another principal's retry is
/// refused like an unknown one; an answer that does not fit is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_caller_answers_in_input_required_rounds() {
    const TOKEN_A: &str = "token-of-a-0123456789abcdef";
    const TOKEN_B: &str = "token-of-b-0123456789abcdef";
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await;
    let a = connect_2026_answering(&bridge.mcp_url(), Some(TOKEN_A), "Linus").await;
    let b = connect_2026_answering(&bridge.mcp_url(), Some(TOKEN_B), "Eve").await;
    let params = || call_params("demo__ask", json!({"question": "Which kernel?"}));
    let (state, requests) = input_required_round(&a, params()).await;
    let (key, InputRequest::Elicitation(request)) = requests.into_iter().next().unwrap() else {
        panic!("not an elicitation");
    };
    assert!(
        serde_json::to_string(&request.params)
            .unwrap()
            .contains("Which kernel?")
    );
    let retry = |answer: Value| retried(params(), &state, &key, answer);
    let good = json!({"action": "accept", "content": {"answer": "Linus"}});
    let refused = within("B's retry", b.call_tool_once(retry(good.clone()))).await;
    assert!(
        refused.is_err(),
        "another principal's retry is refused: {refused:?}"
    );
    let refused = within(
        "a retry that does not fit",
        a.call_tool_once(retry(json!({"action": "accept", "content": {"answer": 5}}))),
    )
    .await;
    let error = format!("{:?}", refused.expect_err("a mismatch is refused"));
    assert!(error.contains("content.answer"), "{error}");
    let done = within("the retry", a.call_tool_once(retry(good)))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "you said: Linus");
    // rmcp's own round driver gets there in one call.
    let result = within("call_tool", a.call_tool(params())).await.unwrap();
    assert_eq!(first_text(&result), "you said: Linus");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The job tool `answer_job_input` answers the job's question, for its owner only: another
/// principal gets "no job", as for the other job tools; a mismatch is a tool error naming
/// the field; a second answer is refused; `wait_for_job` then has the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_answers_with_the_answer_job_input_tool() {
    const TOKEN_A: &str = "token-of-a-0123456789abcdef";
    const TOKEN_B: &str = "token-of-b-0123456789abcdef";
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await;
    let a = connect_with_token(&bridge, TOKEN_A).await;
    let b = connect_with_token(&bridge, TOKEN_B).await;
    let handle = running_job(&a, "demo__ask", json!({"question": "Port?"})).await;
    read_sse(&handle.events_url, None, |e| e.event == "input_required").await;
    let waiting = structured(
        &call(
            &a,
            "wait_for_job",
            json!({"job_id": handle.job_id, "timeout_seconds": 0}),
        )
        .await,
    );
    assert_eq!(waiting["status"], "input_required");
    assert_eq!(waiting["input_requests"][0]["message"], "Port?");
    assert!(
        waiting["instructions"]
            .as_str()
            .unwrap()
            .contains("answer_job_input")
    );
    answer_job_input_once(&a, &b, &handle.job_id).await;
    let done = call(
        &a,
        "wait_for_job",
        json!({"job_id": handle.job_id, "timeout_seconds": 10}),
    )
    .await;
    assert_eq!(first_text(&done), "you said: 8080");
    // From the start of its history (the job has ended: a fresh stream is its snapshot).
    let events = read_sse(&handle.events_url, Some(0), SseEvent::is_terminal).await;
    let answered = events.iter().find(|e| e.event == "input_answered").unwrap();
    assert_eq!(answered.data["by"], "answer_job_input");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// An upstream's `sampling/createMessage` and `roots/list` during a call go to the waiting
/// caller that declared sampling and roots; without one, sampling is refused with an error that
/// says why and the roots are none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_roots_go_to_a_waiting_caller_that_declared_them() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let able = connect_sampling(&bridge.mcp_url(), "hello from the model", &["file:///work"]).await;
    let result = call(&able, "demo__sample", json!({"prompt": "Greet"})).await;
    assert_eq!(first_text(&result), "the model said: hello from the model");
    let result = call(&able, "demo__roots", json!({})).await;
    assert_eq!(first_text(&result), "roots: file:///work");

    let plain = connect(&bridge).await;
    let result = call(&plain, "demo__sample", json!({})).await;
    assert!(
        first_text(&result).contains("sampling is not available"),
        "{}",
        first_text(&result)
    );
    let result = call(&plain, "demo__roots", json!({})).await;
    assert_eq!(first_text(&result), "roots: none");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// At 2026-07-28 an upstream's `sampling/createMessage` and `roots/list` go to the waiting
/// caller that declared them, in its `input_required` round (rmcp's `call_tool` answers them
/// with its ordinary callbacks and retries), and its answers go back to the tool. A 2026-07-28
/// caller that declared neither gets the sample refused and no roots, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_caller_answers_sampling_and_roots_in_input_required_rounds() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let url = bridge.mcp_url();
    let able = connect_2026_sampling(&url, None, "hello from the model", &["file:///work"]).await;
    let result = call(&able, "demo__sample", json!({"prompt": "Greet"})).await;
    assert_eq!(first_text(&result), "the model said: hello from the model");
    let result = call(&able, "demo__roots", json!({})).await;
    assert_eq!(first_text(&result), "roots: file:///work");

    let plain = connect_2026(&url, None, false).await;
    let result = call(&plain, "demo__sample", json!({})).await;
    assert!(
        first_text(&result).contains("sampling is not available"),
        "{}",
        first_text(&result)
    );
    let result = call(&plain, "demo__roots", json!({})).await;
    assert_eq!(first_text(&result), "roots: none");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The round by hand: the sample is in `inputRequests`; an answer that is not a
/// `CreateMessageResult` is -32602 naming the field and leaves the sample waiting; another
/// principal's retry with an answer is refused as unknown (nothing reaches A's tool); A's good
/// answer reaches the tool; answering again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_callers_sample_answers_are_checked_and_bound_to_it() {
    const TOKEN_A: &str = "token-of-a-0123456789abcdef";
    const TOKEN_B: &str = "token-of-b-0123456789abcdef";
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await;
    let a = connect_2026_sampling(&bridge.mcp_url(), Some(TOKEN_A), "unused", &[]).await;
    let b = connect_2026_sampling(&bridge.mcp_url(), Some(TOKEN_B), "unused", &[]).await;
    let params = || call_params("demo__sample", json!({"prompt": "Which model?"}));
    let (state, requests) = input_required_round(&a, params()).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, InputRequest::CreateMessage(request)) = requests.into_iter().next().unwrap() else {
        panic!("not a sampling/createMessage");
    };
    assert!(
        serde_json::to_string(&request.params)
            .unwrap()
            .contains("Which model?")
    );
    let retry = |answer: Value| retried(params(), &state, &key, answer);
    let good = json!({"model": "model-of-a", "role": "assistant",
        "content": {"type": "text", "text": "from A"}});
    let refused = within("B's retry", b.call_tool_once(retry(good.clone()))).await;
    let error = format!("{:?}", refused.expect_err("B's retry is refused"));
    assert!(error.contains("names no call of yours"), "{error}");
    let refused = within(
        "a retry that is no CreateMessageResult",
        a.call_tool_once(retry(json!({"role": "assistant",
            "content": {"type": "text", "text": "no model"}}))),
    )
    .await;
    let error = format!("{:?}", refused.expect_err("a bad answer is refused"));
    assert!(
        error.contains("-32602")
            && error.contains("model")
            && error.contains("CreateMessageResult"),
        "{error}"
    );
    let done = within("the retry", a.call_tool_once(retry(good.clone())))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "the model said: from A");
    let again = within("a second answer", a.call_tool_once(retry(good))).await;
    let error = format!("{:?}", again.expect_err("a second answer is refused"));
    assert!(error.contains("nothing of this job waits"), "{error}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A caller that does not come back with its round's answer: after `jobs.input_timeout_secs`
/// the sample is refused (the tool says so), and an answer after that is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_the_2026_caller_leaves_unanswered_is_refused_after_the_timeout() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.jobs.input_timeout_secs = 1;
    })
    .await;
    let a = connect_2026_sampling(&bridge.mcp_url(), None, "unused", &[]).await;
    let params = || call_params("demo__sample", json!({"prompt": "Anyone?"}));
    let (state, requests) = input_required_round(&a, params()).await;
    let key = requests.into_keys().next().unwrap();
    let job_id = state
        .strip_prefix("mcp-progress-bridge/job:")
        .expect("the state names the job")
        .to_string();
    let status_url = job_status_url(&bridge.base, &job_id);
    let snapshot = eventually("the job ends without its sample", || async {
        let (_, snapshot) = get_json(&status_url).await;
        (snapshot["status"] == "completed").then_some(snapshot)
    })
    .await;
    let text = snapshot["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        text.starts_with("no sample:") && text.contains("sampling is not available"),
        "{text}"
    );
    let late = retried(
        params(),
        &state,
        &key,
        json!({"model": "m", "role": "assistant", "content": {"type": "text", "text": "late"}}),
    );
    let refused = within("a late answer", a.call_tool_once(late)).await;
    let error = format!("{:?}", refused.expect_err("a late answer is refused"));
    assert!(error.contains("nothing of this job waits"), "{error}");
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"input_timeout_secs\"}"),
        "{metrics}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The official Python SDK's `Client` at 2026-07-28 answers the tool's sample and roots with
/// its ordinary callbacks (tests/interop/python_sampling.py); without callbacks the sample is
/// refused and the roots are none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_sampling_and_roots_in_input_required_rounds() {
    let Some(python) = python_with_mcp_or_skip() else {
        return;
    };
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    run_python_client(&python, "python_sampling.py", &bridge.mcp_url()).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A question of a call cancelled here, which its upstream sends after the cancel (a server
/// that notices it late), never lands on another principal's job, even when that job's call
/// is the only one in flight on the connection: it is declined and counted. (It went to "the
/// only call in flight": bob's job showed alice's question, and bob could answer it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_calls_late_question_never_reaches_another_principals_job() {
    const ALICE: &str = "alice-asking-token-0123456789ab";
    const BOB: &str = "bob-asking-token-0123456789abcd";
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.auth.mcp_tokens = named_tokens(&[("alice", ALICE), ("bob", BOB)]);
    })
    .await;
    let alice = connect_with_token(&bridge, ALICE).await;
    let bob = connect_with_token(&bridge, BOB).await;
    let question = json!({"question": "alice's secret question", "deaf_ms": 2000});
    let asking = running_job(&alice, "demo__ask", question).await;
    call(&alice, "cancel_job", json!({"job_id": asking.job_id})).await;
    let ended = read_job_events(&asking.events_url).await;
    assert_eq!(ended.last().unwrap().event, "cancelled");
    let bobs = running_job(&bob, "demo__slow_count", json!({"to": 50, "delay_ms": 100})).await;
    let hit = "bridge_limit_hits_total{limit=\"ambiguous_input\"}";
    let snapshot = eventually("alice's late question arrives", || async {
        let (_, snapshot) = get_json(&bobs.status_url).await;
        let declined = bridge.running().metrics.render().contains(hit);
        (declined || snapshot["status"] == "input_required").then_some(snapshot)
    })
    .await;
    assert_ne!(snapshot["status"], "input_required", "{snapshot}");
    let (_, snapshot) = get_json(&bobs.status_url).await;
    assert!(
        !snapshot.to_string().contains("alice's secret"),
        "bob's job shows nothing of alice's: {snapshot}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}
