//! Task status over `subscriptions/listen` at 2026-07-28 (Tasks extension): a raw HTTP client
//! speaking JSON-RPC lists task IDs in the listen filter's `taskIds`; the bridge acknowledges
//! those of the caller's own tasks (at most `limits.max_listen_task_ids`) and pushes
//! `notifications/tasks`, each a whole task, as their status changes. Tasks come from rmcp's
//! 2026-07-28 client calling the real demo tool server through the bridge.

use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use mcp_progress_bridge::config::{CallMode, McpToken, Secret};
use rmcp::model::{CallToolResponse, UpdateTaskParams};
use serde_json::{Value, json};

pub(crate) const TOKEN_A: &str = "token-of-a-0123456789abcdef";
pub(crate) const TOKEN_B: &str = "token-of-b-0123456789abcdef";

async fn start(max_listen_task_ids: usize) -> TestBridge {
    start_bridge(|c| {
        c.jobs.mode = CallMode::Auto;
        c.jobs.sync_budget_ms = 200;
        c.limits.max_listen_task_ids = max_listen_task_ids;
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await
}

/// A slow demo call of `token`'s that comes back as a task: its ID.
pub(crate) async fn slow_task(bridge: &TestBridge, token: &str, to: u32) -> String {
    let client = connect_2026(&bridge.mcp_url(), Some(token), true).await;
    let answer = within(
        "tools/call",
        client.call_tool_once(call_params(
            "demo__slow_count",
            json!({"to": to, "delay_ms": 300}),
        )),
    )
    .await
    .expect("tools/call");
    match answer {
        CallToolResponse::Task(task) => task.task.task_id,
        other => panic!("not a task: {other:?}"),
    }
}

/// POST `subscriptions/listen` as `token` with this filter; the open response.
pub(crate) async fn listen(
    bridge: &TestBridge,
    token: &str,
    notifications: Value,
) -> reqwest::Response {
    let body = json!({
        "jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen",
        "params": {
            "notifications": notifications,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}}
                },
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            },
        },
    });
    let response = within(
        "POST subscriptions/listen",
        reqwest::Client::new()
            .post(bridge.mcp_url())
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string())
            .send(),
    )
    .await
    .expect("POST subscriptions/listen");
    assert_eq!(response.status(), 200);
    response
}

/// The JSON-RPC messages of an SSE stream, until `done` says enough (or the wait's bound).
async fn messages_until(
    response: reqwest::Response,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let mut stream = response.bytes_stream();
    let mut pending = String::new();
    let mut seen = Vec::new();
    within("listen notifications", async {
        while let Some(chunk) = stream.next().await {
            pending.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n")) {
                    seen.push(message);
                }
            }
            if done(&seen) {
                return;
            }
        }
        panic!("the listen stream ended early: {seen:?}");
    })
    .await;
    seen
}

fn task_notifications(seen: &[Value]) -> Vec<&Value> {
    seen.iter()
        .filter(|m| m["method"] == "notifications/tasks")
        .collect()
}

/// The caller's own task is acknowledged and followed to its end (whole tasks, the result in
/// the last); another principal's task and an unknown ID are not acknowledged, and nothing is
/// sent about them; a list past `limits.max_listen_task_ids` is cut there and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tasks_of_the_caller_are_pushed_until_they_end() {
    let bridge = start(3).await;
    let mine = slow_task(&bridge, TOKEN_A, 4).await;
    let theirs = slow_task(&bridge, TOKEN_B, 4).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let response = listen(
        &bridge,
        TOKEN_A,
        json!({"taskIds": [theirs, mine, unknown, mine, "past-the-limit"]}),
    )
    .await;
    let seen = messages_until(response, |seen| {
        task_notifications(seen)
            .iter()
            .any(|n| n["params"]["status"] == "completed")
    })
    .await;

    let ack = &seen[0];
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{seen:?}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([mine]),
        "{ack}"
    );
    let subscription = &ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"];
    assert_eq!(subscription, &json!(9), "{ack}");

    let pushed = task_notifications(&seen);
    assert!(
        pushed
            .iter()
            .all(|n| n["params"]["taskId"] == mine.as_str()),
        "{pushed:?}"
    );
    assert!(
        pushed.iter().all(
            |n| n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == *subscription
        ),
        "{pushed:?}"
    );
    let statuses: Vec<&str> = pushed
        .iter()
        .map(|n| n["params"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["working", "completed"], "{pushed:?}");
    let last = pushed.last().unwrap();
    assert_eq!(
        last["params"]["result"]["content"][0]["text"], "counted to 4",
        "the whole task, result included: {last}"
    );
    // (/metrics wants an admin credential here: read the registry itself.)
    let metrics = bridge.running().metrics.render();
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"max_listen_task_ids\"} 1"),
        "the cut list is counted"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Token B listing only token A's task gets an acknowledgment with no task in it, and no
/// `notifications/tasks` while A's task runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_task_is_not_acknowledged() {
    let bridge = start(32).await;
    let theirs = slow_task(&bridge, TOKEN_A, 2).await;
    let response = listen(&bridge, TOKEN_B, json!({"taskIds": [theirs]})).await;
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    // Read for longer than the task takes (2 steps of 300 ms).
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(
        text.contains("notifications/subscriptions/acknowledged"),
        "{text}"
    );
    assert!(text.contains("\"taskIds\":[]"), "{text}");
    assert!(!text.contains("notifications/tasks\""), "{text}");
    assert!(!text.contains(&theirs), "{text}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A task that asks is pushed as `input_required` with its question; answered with
/// `tasks/update`, it goes back to `working` (when the push sees it) and ends `completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_and_its_answer_are_pushed() {
    let bridge = start(32).await;
    let client = connect_2026(&bridge.mcp_url(), Some(TOKEN_A), true).await;
    let answer = within(
        "tools/call",
        client.call_tool_once({
            let mut params = call_params("demo__ask", json!({"question": "Color?"}));
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.insert("mcp-progress-bridge/mode".into(), json!("async"));
            params.meta = Some(meta);
            params
        }),
    )
    .await
    .expect("tools/call");
    let CallToolResponse::Task(created) = answer else {
        panic!("not a task: {answer:?}");
    };
    let task_id = created.task.task_id;
    let response = listen(&bridge, TOKEN_A, json!({"taskIds": [task_id]})).await;
    let mut stream = Box::pin(response.bytes_stream());
    let mut pending = String::new();
    let mut pushed: Vec<Value> = Vec::new();
    // Read pushes until `stop` holds for the last one.
    async fn more(
        stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
        pending: &mut String,
        pushed: &mut Vec<Value>,
        stop: impl Fn(&Value) -> bool,
    ) {
        within("a push", async {
            loop {
                while let Some(end) = pending.find("\n\n") {
                    let event: String = pending.drain(..end + 2).collect();
                    let data: Vec<&str> = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n"))
                        && message["method"] == "notifications/tasks"
                    {
                        let done = stop(&message);
                        pushed.push(message);
                        if done {
                            return;
                        }
                    }
                }
                let chunk = stream.next().await.expect("the stream goes on").unwrap();
                pending.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
    }
    more(&mut stream, &mut pending, &mut pushed, |m| {
        m["params"]["status"] == "input_required"
    })
    .await;
    let asking = pushed.last().unwrap();
    let requests = asking["params"]["inputRequests"]
        .as_object()
        .expect("the question is in the push");
    let (key, request) = requests.iter().next().unwrap();
    assert!(request.to_string().contains("Color?"), "{asking}");
    client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            [(
                key.clone(),
                json!({"action": "accept", "content": {"answer": "blue"}}),
            )]
            .into_iter()
            .collect(),
        ))
        .await
        .expect("tasks/update");
    more(&mut stream, &mut pending, &mut pushed, |m| {
        m["params"]["status"] == "completed"
    })
    .await;
    let last = pushed.last().unwrap();
    assert_eq!(
        last["params"]["result"]["content"][0]["text"],
        "you said: blue"
    );
    let statuses: Vec<&str> = pushed
        .iter()
        .map(|n| n["params"]["status"].as_str().unwrap())
        .collect();
    // `working` first only if the push saw the job before it asked; at the end always
    // `completed` after `input_required`.
    let asked_at = statuses
        .iter()
        .position(|s| *s == "input_required")
        .unwrap();
    assert_eq!(statuses.last(), Some(&"completed"), "{statuses:?}");
    assert!(
        statuses[..asked_at].iter().all(|s| *s == "working"),
        "{statuses:?}"
    );
    for pair in statuses.windows(2) {
        assert_ne!(pair[0], pair[1], "one push per change: {statuses:?}");
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The acknowledgment of a listen request, and its stream (kept open while the caller holds
/// it: the request lasts as long).
pub(crate) async fn acknowledged(
    response: reqwest::Response,
) -> (
    Value,
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>,
) {
    let mut stream = Box::pin(response.bytes_stream());
    let mut pending = String::new();
    let ack = within("the acknowledgment", async {
        loop {
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n"))
                    && message["method"] == "notifications/subscriptions/acknowledged"
                {
                    return message;
                }
            }
            let chunk = stream.next().await.expect("the stream goes on").unwrap();
            pending.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    (ack, stream)
}

/// Every followed task holds a subscription to its job's channel, as an SSE reader does, so
/// the tasks all listen requests of a replica follow are bounded (`limits.max_followed_tasks`)
/// as readers are: past it a task is not acknowledged (its client polls `tasks/get`) and the
/// hit is counted; a task that ends gives its place back. Before the bound, any
/// number of listen requests (up to the connections) each followed 32 tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_all_listens_follow_are_bounded_and_given_back() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Auto;
        c.jobs.sync_budget_ms = 200;
        c.limits.max_followed_tasks = 2;
        c.limits.max_followed_tasks_per_principal = Some(3);
        c.auth.mcp_tokens = vec![McpToken::named("a", Secret::literal(TOKEN_A))];
    })
    .await;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(slow_task(&bridge, TOKEN_A, 100).await);
    }
    let (first, held) =
        acknowledged(listen(&bridge, TOKEN_A, json!({"taskIds": [tasks[0], tasks[1]]})).await)
            .await;
    assert_eq!(
        first["params"]["notifications"]["taskIds"],
        json!([tasks[0], tasks[1]]),
        "{first}"
    );
    let (second, _) =
        acknowledged(listen(&bridge, TOKEN_A, json!({"taskIds": [tasks[2]]})).await).await;
    assert_eq!(
        second["params"]["notifications"]["taskIds"],
        json!([]),
        "no place left: {second}"
    );
    let metrics = bridge.running().metrics.render();
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"max_followed_tasks\"} 1"),
        "the refusal is counted"
    );
    // The first listen's tasks end: their places come back (its request still open).
    let client = connect_2026(&bridge.mcp_url(), Some(TOKEN_A), true).await;
    for task in &tasks[..2] {
        within(
            "tasks/cancel",
            client.cancel_task(rmcp::model::CancelTaskParams::new(task.clone())),
        )
        .await
        .expect("tasks/cancel");
    }
    eventually("the ended tasks' places come back", || async {
        let (ack, _) =
            acknowledged(listen(&bridge, TOKEN_A, json!({"taskIds": [tasks[2]]})).await).await;
        ack["params"]["notifications"]["taskIds"] == json!([tasks[2]])
    })
    .await;
    drop(held);
    bridge.shutdown(Duration::from_secs(1)).await;
}
