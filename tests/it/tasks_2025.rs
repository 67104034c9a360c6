//! MCP 2025-11-25 tasks at the bridge's front door (`front::tasks_2025`): the TypeScript SDK
//! 1.x client (tests/interop/ts_tasks_client.mjs, `client.experimental.tasks`) lists the tools
//! with `execution.taskSupport`, runs a demo tool and server-everything's task-only tool as
//! tasks and plainly, cancels, lists, and tries another principal's tasks and hostile
//! requests. A 2026-07-28 request and an older handshake see none of the 2025-11-25 fields.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::{Value, json};

const TOKEN_A: &str = "token-of-a-0123456789abcdef";
const TOKEN_B: &str = "token-of-b-0123456789abcdef";
const PAGE_SIZE: usize = 2;
const RETENTION_SECS: u64 = 600;

async fn start(everything: &std::path::Path) -> TestBridge {
    start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.jobs.task_poll_interval_ms = 200;
        c.jobs.retention_secs = RETENTION_SECS;
        c.jobs.task_list_page_size = PAGE_SIZE;
        c.upstreams = vec![
            demo_stdio_upstream("demo"),
            UpstreamConfig::stdio(
                "everything",
                "node",
                &[&everything.display().to_string(), "stdio"],
            ),
        ];
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_tools_as_2025_11_25_tasks_through_the_bridge() {
    let Some(everything) = server_everything() else {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    };
    let bridge = start(&everything).await;
    let script = repo_root().join("tests/interop/ts_tasks_client.mjs");
    // The ttl a task reports: the time it has run plus the retention; a minute of margin.
    let max_ttl = (RETENTION_SECS + 60) * 1000;
    let mut command = tokio::process::Command::new("node");
    command.arg(script).args([
        bridge.mcp_url(),
        TOKEN_A.to_string(),
        TOKEN_B.to_string(),
        PAGE_SIZE.to_string(),
        max_ttl.to_string(),
    ]);
    let output = run_to_end(command, Duration::from_secs(180)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{stdout}"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A question a task's tool asks goes to the client waiting on its `tasks/result`
/// (tests/interop/ts_tasks_questions.mjs): answered there, answered unfit (declined, the job
/// says why), never answered (declined by `jobs.input_timeout_secs`, the client's request
/// cancelled), and raced by a person on `input_url` (the first answer wins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_question_is_asked_on_tasks_result() {
    if server_everything().is_none() {
        prerequisite(
            false,
            "node and tests/interop/node_modules (npm ci --prefix tests/interop)",
        );
        return;
    }
    const INPUT_TIMEOUT_SECS: u64 = 3;
    const MAX_STATUS_NOTIFICATIONS: usize = 3;
    let bridge = start_bridge(|c| {
        c.jobs.task_poll_interval_ms = 200;
        c.jobs.input_timeout_secs = INPUT_TIMEOUT_SECS;
        c.jobs.max_task_status_notifications = MAX_STATUS_NOTIFICATIONS;
    })
    .await;
    let script = repo_root().join("tests/interop/ts_tasks_questions.mjs");
    let mut command = tokio::process::Command::new("node");
    command.arg(script).args([
        bridge.mcp_url(),
        // No MCP tokens: /metrics is open too.
        String::new(),
        (INPUT_TIMEOUT_SECS * 1000).to_string(),
        MAX_STATUS_NOTIFICATIONS.to_string(),
    ]);
    let output = run_to_end(command, Duration::from_secs(180)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metrics = metrics_text(&bridge.base).await;
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"max_task_status_notifications\"} 1"),
        "the flood hit the bound once: {metrics}"
    );
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"input_timeout_secs\"} 1"),
        "the question nobody answered timed out: {metrics}"
    );
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A 2026-07-28 request, raw: no session, its revision and capabilities in `_meta`.
fn modern(id: u64, method: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }}})
    .to_string()
}

/// The 2025-11-25 fields are for sessions at 2025-11-25 alone: a 2026-07-28 client (the
/// extension is per call) and a 2025-06-18 session (no tasks at all) get none of them, and
/// their `tasks/*` requests are what they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_revisions_see_no_2025_11_25_task_fields() {
    let bridge = start_bridge(|_| {}).await;
    let http = reqwest::Client::new();
    let post = |body: String, method: &'static str| {
        http.post(bridge.mcp_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(body)
    };
    for (method, id) in [("server/discover", 1), ("tools/list", 2)] {
        let body = within(method, post(modern(id, method), method).send())
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(body.contains("\"result\""), "{body}");
        assert!(!body.contains("taskSupport"), "{method}: {body}");
        let message: Value = serde_json::from_str(&body).unwrap();
        if method == "server/discover" {
            let caps = &message["result"]["capabilities"];
            assert!(caps.get("tasks").is_none(), "{body}");
            assert!(
                caps["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
                "{body}"
            );
        }
    }
    // 2026-07-28 `tasks/get` is the extension's, not renamed: an unknown task is -32602 from
    // the extension's path.
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {
        "taskId": "0".repeat(32),
        "_meta": serde_json::from_str::<Value>(&modern(0, "x")).unwrap()["params"]["_meta"],
    }});
    let task_id = "0".repeat(32);
    let request = post(get.to_string(), "tasks/get").header("mcp-name", task_id.as_str());
    let body = within("tasks/get", request.send())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(message["error"]["code"], -32602, "{body}");

    // A 2025-06-18 session: no `tasks` capability, no `execution`, and `tasks/list` unknown.
    let mut raw = RawMcp::new(&bridge.mcp_url(), None);
    let init = raw.initialize_only().await;
    let result = &init.message.expect("initialize answered")["result"];
    assert!(result["capabilities"].get("tasks").is_none(), "{result}");
    raw.post(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        &[],
    )
    .await;
    let tools = raw
        .post(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#, &[])
        .await;
    assert!(tools.body.contains("demo__slow_count"), "{}", tools.body);
    assert!(!tools.body.contains("taskSupport"), "{}", tools.body);
    let list = raw
        .post(r#"{"jsonrpc":"2.0","id":3,"method":"tasks/list"}"#, &[])
        .await;
    assert_eq!(list.rpc_error_code(), Some(-32601), "{}", list.body);
    // The bridge's own names for renamed requests, sent by a client: unknown methods.
    let own = raw
        .post(
            r#"{"jsonrpc":"2.0","id":4,"method":"mcp-progress-bridge/2025-11-25/tasks/list"}"#,
            &[],
        )
        .await;
    assert_eq!(own.rpc_error_code(), Some(-32601), "{}", own.body);
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A 2025-11-25 session whose client declared the Tasks extension (raw: no SDK makes such a
/// session) gets its tasks in the extension's shape throughout: `tools/call` answers an
/// extension task, and `tasks/get` the extension's task (`ttlMs`, `pollIntervalMs`) with the
/// tool's result once completed, `tasks/cancel` the extension's empty acknowledgment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_session_that_declared_the_extension_gets_one_task_shape() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let http = reqwest::Client::new();
    let post = |body: Value, session: Option<&str>| {
        let mut request = http
            .post(bridge.mcp_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        async move {
            let response = within("POST", request.send()).await.expect("POST");
            let session = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = within("body", response.text()).await.unwrap_or_default();
            let message = body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .chain(std::iter::once(body.as_str()))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id").is_some());
            (session, message.unwrap_or(Value::Null))
        }
    };
    let (session, init) = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        None,
    )
    .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let session = session.expect("a session");
    let s = Some(session.as_str());
    post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        s,
    )
    .await;
    let (_, created) = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "demo__echo", "arguments": {"text": "one shape"}}}),
        s,
    )
    .await;
    let created = &created["result"];
    assert_eq!(created["resultType"], "task", "{created}");
    let task_id = created["taskId"].as_str().expect("a task").to_string();
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
        "params": {"taskId": task_id}});
    let task = eventually("the task completes", || async {
        let (_, answer) = post(get.clone(), s).await;
        let task = answer["result"].clone();
        assert!(task.is_object(), "{answer}");
        (task["status"] != "working").then_some(task)
    })
    .await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["resultType"], "complete", "{task}");
    assert!(
        task.get("ttlMs").is_some() && task.get("ttl").is_none(),
        "{task}"
    );
    assert!(task.get("pollInterval").is_none(), "{task}");
    assert_eq!(
        task["result"]["content"][0]["text"], "one shape",
        "the result on tasks/get: {task}"
    );
    let cancel = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/cancel",
        "params": {"taskId": task_id}});
    let (_, ack) = post(cancel, s).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    bridge.shutdown(Duration::from_secs(2)).await;
}
