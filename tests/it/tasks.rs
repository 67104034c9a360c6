//! The MCP Tasks extension (SEP-2663) at the bridge's front door: rmcp's own client at
//! 2026-07-28 lists the extension, calls the real demo tool server through the bridge, and
//! polls, cancels and reads tasks that are the bridge's jobs.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use rmcp::{
    ServiceError,
    model::{
        CallToolResponse, CallToolResult, CancelTaskParams, DetailedTask, ErrorCode, GetTaskParams,
        ResultType, TaskPayload, TaskStatus,
    },
};
use serde_json::{Value, json};

const TOKEN_A: &str = "token-of-a-0123456789abcdef";
const TOKEN_B: &str = "token-of-b-0123456789abcdef";
const MODE: &str = "mcp-progress-bridge/mode";

/// The demo tools behind two static tokens, calls in `auto` mode with a short budget (so a
/// slow call goes on running as a task), `cancellations` always sync.
async fn start() -> TestBridge {
    start_bridge(|c| {
        c.jobs.mode = CallMode::Auto;
        c.jobs.sync_budget_ms = 200;
        c.jobs.task_poll_interval_ms = 250;
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "cancellations",
            CallMode::Sync,
        )];
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await
}

async fn tasks_client(bridge: &TestBridge, token: &str) -> McpClient {
    connect_2026(&bridge.mcp_url(), Some(token), true).await
}

/// Poll `tasks/get` until the task has ended.
async fn ended(client: &McpClient, task_id: &str) -> DetailedTask {
    eventually("the task ends", || async {
        let got = client
            .get_task(GetTaskParams::new(task_id))
            .await
            .expect("tasks/get");
        assert_eq!(got.result_type, ResultType::COMPLETE);
        got.task.status().is_terminal().then_some(got.task)
    })
    .await
}

fn completed_result(task: &DetailedTask) -> CallToolResult {
    match &task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(Value::Object(result.clone())).expect("a CallToolResult")
        }
        other => panic!("not completed: {other:?}"),
    }
}

/// A result without the `_meta` that names its job (a different job for each call).
fn without_job(mut result: CallToolResult) -> CallToolResult {
    result.meta = None;
    result
}

/// `params` with the call mode picked for this call in `_meta`.
fn with_mode(
    mut params: rmcp::model::CallToolRequestParams,
    mode: &str,
) -> rmcp::model::CallToolRequestParams {
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.insert(MODE.into(), json!(mode));
    params.meta = Some(meta);
    params
}

fn rpc_code(error: ServiceError) -> ErrorCode {
    match error {
        ServiceError::McpError(e) => e.code,
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_becomes_a_task_that_completes_with_what_a_sync_call_returns() {
    let bridge = start().await;
    let client = tasks_client(&bridge, TOKEN_A).await;
    let info = client.peer_info().expect("server info");
    assert!(
        info.capabilities.supports_tasks(),
        "the bridge advertises the extension"
    );
    let arguments = json!({"to": 5, "delay_ms": 100});
    let created = task_of(&client, "demo__slow_count", arguments.clone()).await;
    assert_eq!(created.result_type, ResultType::TASK);
    let task_id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    assert_eq!(created.task.poll_interval_ms, Some(250));
    assert!(
        created.task.ttl_ms.unwrap() >= 3_600_000,
        "ttl covers retention"
    );
    assert!(task_id.len() == 32 && task_id.chars().all(|c| c.is_ascii_hexdigit()));
    // The job's SSE channel shows the progress of the same call.
    let job = &created.meta.as_ref().expect("_meta")["mcp-progress-bridge/job"];
    assert_eq!(job["job_id"], task_id.as_str());
    let events = read_job_events(job["events_url"].as_str().unwrap()).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0, 5.0]);

    let task = ended(&client, &task_id).await;
    assert_eq!(task.status(), TaskStatus::Completed);
    assert_eq!(task.task.status_message.as_deref(), Some("step 5 of 5"));
    let from_task = completed_result(&task);
    let sync = with_mode(call_params("demo__slow_count", arguments), "sync");
    let direct = within("a sync call", client.call_tool(sync)).await.unwrap();
    assert_eq!(without_job(from_task.clone()), without_job(direct));
    assert_eq!(
        from_task.meta.unwrap()["mcp-progress-bridge/job"]["job_id"],
        task_id.as_str()
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_reaches_the_upstream_and_the_task_ends_cancelled() {
    let bridge = start().await;
    let client = tasks_client(&bridge, TOKEN_A).await;
    let created = task_of(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let task_id = created.task.task_id;
    within(
        "tasks/cancel",
        client.cancel_task(CancelTaskParams::new(task_id.clone())),
    )
    .await
    .expect("tasks/cancel is acknowledged");
    let task = ended(&client, &task_id).await;
    assert_eq!(task.status(), TaskStatus::Cancelled);
    assert!(
        task.task
            .status_message
            .as_deref()
            .unwrap()
            .contains("tasks/cancel")
    );
    let cancels = cancels_seen(&client, "demo", 1).await;
    assert_eq!(cancels[0]["tool"], "slow_count");
    // A task that has ended stays as it ended.
    client
        .cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .expect("a second cancel is acknowledged too");
    assert_eq!(
        ended(&client, &task_id).await.status(),
        TaskStatus::Cancelled
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_completed_and_an_upstream_rpc_error_is_failed() {
    let bridge = start().await;
    let client = tasks_client(&bridge, TOKEN_A).await;
    let params = with_mode(
        call_params("demo__fail_after", json!({"steps": 2, "delay_ms": 10})),
        "async",
    );
    let created = match client.call_tool_once(params).await.unwrap() {
        CallToolResponse::Task(task) => task,
        other => panic!("not a task: {other:?}"),
    };
    let task = ended(&client, &created.task.task_id).await;
    assert_eq!(task.status(), TaskStatus::Completed, "isError is completed");
    let result = completed_result(&task);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(first_text(&result), "failed after 2 steps as asked");

    // The tool server answers with a JSON-RPC error: the sync call gets that error.
    let params = with_mode(
        call_params("demo__fail_rpc", json!({"steps": 2, "delay_ms": 10})),
        "async",
    );
    let created = match client.call_tool_once(params).await.unwrap() {
        CallToolResponse::Task(task) => task,
        other => panic!("not a task: {other:?}"),
    };
    let task = ended(&client, &created.task.task_id).await;
    match &task.payload {
        TaskPayload::Failed { error } => {
            assert_eq!(error["code"], ErrorCode::INTERNAL_ERROR.0);
            assert_eq!(error["message"], "failed with a protocol error as asked");
        }
        other => panic!("not failed: {other:?}"),
    }
    let sync = with_mode(
        call_params("demo__fail_rpc", json!({"steps": 2, "delay_ms": 10})),
        "sync",
    );
    let direct = client.call_tool(sync).await.unwrap_err();
    assert_eq!(
        rpc_code(direct),
        ErrorCode::INTERNAL_ERROR,
        "the same error"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_token_a_is_not_found_for_token_b() {
    let bridge = start().await;
    let a = tasks_client(&bridge, TOKEN_A).await;
    let b = tasks_client(&bridge, TOKEN_B).await;
    let created = task_of(&a, "demo__slow_count", json!({"to": 1000, "delay_ms": 50})).await;
    let task_id = created.task.task_id;
    let not_found = b.get_task(GetTaskParams::new(task_id.clone())).await;
    assert_eq!(rpc_code(not_found.unwrap_err()), ErrorCode::INVALID_PARAMS);
    let unknown = b
        .get_task(GetTaskParams::new("0123456789abcdef0123456789abcdef"))
        .await;
    assert_eq!(rpc_code(unknown.unwrap_err()), ErrorCode::INVALID_PARAMS);
    let not_cancelled = b.cancel_task(CancelTaskParams::new(task_id.clone())).await;
    assert_eq!(
        rpc_code(not_cancelled.unwrap_err()),
        ErrorCode::INVALID_PARAMS
    );
    let still = a
        .get_task(GetTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    assert_eq!(
        still.task.status(),
        TaskStatus::Working,
        "B's cancel did nothing"
    );
    a.cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    assert_eq!(ended(&a, &task_id).await.status(), TaskStatus::Cancelled);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_gets_the_job_handle_as_before() {
    let bridge = start().await;
    let client = connect_2026(&bridge.mcp_url(), Some(TOKEN_A), false).await;
    let answer = within(
        "tools/call",
        client.call_tool_once(call_params(
            "demo__slow_count",
            json!({"to": 1000, "delay_ms": 50}),
        )),
    )
    .await
    .unwrap();
    let CallToolResponse::Complete(result) = answer else {
        panic!("not a plain result: {answer:?}");
    };
    let handle = JobHandle::from_value(structured(&result));
    assert_eq!(handle.status, "running");
    // tasks/* need the extension: rmcp answers "missing required client capability".
    let refused = client
        .get_task(GetTaskParams::new(handle.job_id.clone()))
        .await;
    assert_eq!(rpc_code(refused.unwrap_err()).0, -32021);
    post_json(&handle.cancel_url).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}
