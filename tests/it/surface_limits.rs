//! Bounds on the MCP surface beyond tools: what an upstream controls (list sizes, resource read
//! sizes) and what a client controls (subscriptions per session, per listen request), each
//! hit with the hostile case, answered with an error that names its `[limits]` key, and counted
//! in `bridge_limit_hits_total`. And how answers are framed on 2026-07-28: plain JSON when
//! nothing streams before the answer, SSE when progress does.

use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use mcp_progress_bridge::config::{CallMode, Config, UpstreamConfig};
#[allow(deprecated)]
use rmcp::model::{ReadResourceRequestParams, SubscribeRequestParams, UnsubscribeRequestParams};
use serde_json::{Value, json};

fn fixture(python: &str) -> UpstreamConfig {
    let server = repo_root().join("tests/fixtures/python_surface_server.py");
    UpstreamConfig::stdio("fixture", python, &[&server.display().to_string()])
}

/// A bridge with npm's server-everything as its only upstream, after `configure`; `None` once
/// the test is skipped for want of it.
async fn start_with_everything(configure: impl FnOnce(&mut Config)) -> Option<TestBridge> {
    let entry = server_everything();
    if !prerequisite(entry.is_some(), "node and tests/interop/node_modules") {
        return None;
    }
    let everything = UpstreamConfig::stdio(
        "everything",
        "node",
        &[&entry.unwrap().display().to_string(), "stdio"],
    );
    Some(
        start_bridge(|c| {
            c.upstreams = vec![everything];
            configure(c);
        })
        .await,
    )
}

fn limit_hits(metrics: &str, limit: &str) -> u64 {
    let line = format!("bridge_limit_hits_total{{limit=\"{limit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_over_the_read_limit_is_refused_naming_the_key() {
    let python = python_with_mcp();
    if !prerequisite(python.is_some(), "a Python with the `mcp` package") {
        return;
    }
    let python = python.unwrap().display().to_string();
    let bridge = start_bridge(|c| {
        c.upstreams = vec![fixture(&python)];
        c.limits.max_resource_read_bytes = 64 * 1024;
    })
    .await;
    let client = connect(&bridge).await;
    let small = client
        .read_resource(ReadResourceRequestParams::new("fixture://greeting"))
        .await
        .expect("a small resource reads");
    assert_eq!(small.contents.len(), 1);
    let error = client
        .read_resource(ReadResourceRequestParams::new("fixture://big"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("limits.max_resource_read_bytes") && error.contains("524288 bytes"),
        "{error}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_resource_read_bytes"), 1);
    client.cancel().await.ok();
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn a_session_follows_at_most_max_resource_subscriptions() {
    let Some(bridge) = start_with_everything(|c| c.limits.max_resource_subscriptions = 1).await
    else {
        return;
    };
    let client = connect(&bridge).await;
    let a = "demo://resource/static/document/architecture.md";
    let b = "demo://resource/static/document/extension.md";
    client
        .subscribe(SubscribeRequestParams::new(a))
        .await
        .expect("the first subscription");
    client
        .subscribe(SubscribeRequestParams::new(a))
        .await
        .expect("the same URI again is no new subscription");
    let error = client
        .subscribe(SubscribeRequestParams::new(b))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("limits.max_resource_subscriptions") && error.contains("unsubscribe"),
        "{error}"
    );
    client
        .unsubscribe(UnsubscribeRequestParams::new(a))
        .await
        .expect("unsubscribe");
    client
        .subscribe(SubscribeRequestParams::new(b))
        .await
        .expect("room again after unsubscribing");
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_resource_subscriptions"), 1);
    client.cancel().await.ok();
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// rmcp runs each message of a session on a task of its own, so a request sent right after
/// `notifications/initialized` may be handled before it (and a client may send requests before
/// it at all, which rmcp serves). The request that comes first makes the session's state:
/// before the fix `resources/subscribe` and `logging/setLevel` failed with "needs an MCP
/// session" when they won that race. Sending them before `initialized` makes them win it
/// every time. The state they made stays once `initialized` is handled: the subscription
/// still counts against `limits.max_resource_subscriptions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_overtake_notifications_initialized_find_the_sessions_state() {
    let Some(bridge) = start_with_everything(|c| c.limits.max_resource_subscriptions = 1).await
    else {
        return;
    };
    let mut raw = RawMcp::new(&bridge.mcp_url(), None);
    let init = raw.initialize_only().await;
    assert_eq!(init.status, 200, "{}", init.body);
    let a = "demo://resource/static/document/architecture.md";
    let b = "demo://resource/static/document/extension.md";
    let request = |id: u64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let subscribed = raw
        .post(request(2, "resources/subscribe", json!({"uri": a})), &[])
        .await;
    assert!(
        subscribed
            .message
            .as_ref()
            .is_some_and(|m| m.get("result").is_some()),
        "resources/subscribe before initialized: {}",
        subscribed.body
    );
    let level = raw
        .post(
            request(3, "logging/setLevel", json!({"level": "debug"})),
            &[],
        )
        .await;
    assert!(
        level
            .message
            .as_ref()
            .is_some_and(|m| m.get("result").is_some()),
        "logging/setLevel before initialized: {}",
        level.body
    );
    let done = raw
        .post(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            &[],
        )
        .await;
    assert_eq!(done.status, 202, "{}", done.body);
    // After initialized the first subscription still counts. (Whether the handshake's handler
    // ran before this request cannot be seen from here; if it did, and replaced the state as
    // the old code's did, the first subscription would be forgotten and this one taken.)
    let refused = raw
        .post(request(4, "resources/subscribe", json!({"uri": b})), &[])
        .await;
    let error = refused
        .message
        .as_ref()
        .and_then(|m| m["error"]["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("limits.max_resource_subscriptions"),
        "the first subscription still counts: {}",
        refused.body
    );
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_list_longer_than_the_limit_is_cut_and_counted() {
    let Some(bridge) = start_with_everything(|c| c.limits.max_upstream_list_items = 2).await else {
        return;
    };
    let client = connect(&bridge).await;
    let tools = client.list_all_tools().await.unwrap();
    // Upstream tools are namespaced (`<upstream>__<tool>`); the bridge's own job tools are not.
    let upstream_tools: Vec<_> = tools.iter().filter(|t| t.name.contains("__")).collect();
    assert_eq!(
        upstream_tools.len(),
        2,
        "two of everything's tools: {:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    assert!(
        tools.iter().any(|t| t.name == "get_job_status"),
        "the job tools are listed besides"
    );
    assert_eq!(client.list_all_resources().await.unwrap().len(), 2);
    assert_eq!(client.list_all_prompts().await.unwrap().len(), 2);
    let metrics = metrics_text(&bridge.base).await;
    // tools, resources, prompts (templates: server-everything lists exactly 2).
    assert!(
        limit_hits(&metrics, "max_upstream_list_items") >= 3,
        "{metrics}"
    );
    client.cancel().await.ok();
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// A 2026-07-28 request, raw: no session, its revision and capabilities in `_meta`.
fn modern(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "progressToken": format!("p{id}"),
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// POST a 2026-07-28 request with the standard headers that revision requires (SEP-2243):
/// `Mcp-Method`, and `Mcp-Name` for a tool call.
fn post_modern(bridge: &TestBridge, body: String) -> reqwest::RequestBuilder {
    let message: Value = serde_json::from_str(&body).unwrap();
    let mut request = reqwest::Client::new()
        .post(bridge.mcp_url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", message["method"].as_str().unwrap());
    if let Some(name) = message["params"]["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    request.body(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_plain_json_unless_progress_streams_first() {
    let bridge = start_bridge(|c| {
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Sync,
        )];
    })
    .await;
    let quick = within(
        "POST tools/call",
        post_modern(
            &bridge,
            modern(
                1,
                "tools/call",
                json!({"name": "demo__echo", "arguments": {"text": "hi"}}),
            ),
        )
        .send(),
    )
    .await
    .unwrap();
    let content_type = quick.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = quick.json().await.unwrap();
    assert_eq!(
        content_type, "application/json",
        "nothing streamed first: {body}"
    );
    assert_eq!(body["result"]["content"][0]["text"], "hi");

    let slow = within(
        "POST tools/call",
        post_modern(
            &bridge,
            modern(
                2,
                "tools/call",
                json!({"name": "demo__slow_count", "arguments": {"to": 3, "delay_ms": 20}}),
            ),
        )
        .send(),
    )
    .await
    .unwrap();
    let content_type = slow.headers()["content-type"].to_str().unwrap().to_string();
    let text = within("the SSE answer", slow.text()).await.unwrap();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let progress = text.matches("notifications/progress").count();
    assert_eq!(progress, 3, "progress streams before the answer: {text}");
    assert!(text.contains("counted to 3"), "{text}");
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_request_follows_at_most_max_resource_subscriptions() {
    let Some(bridge) = start_with_everything(|c| c.limits.max_resource_subscriptions = 2).await
    else {
        return;
    };
    let uris: Vec<String> = (0..50)
        .map(|i| format!("demo://resource/dynamic/text/{i}"))
        .collect();
    let body = modern(
        7,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": uris}}),
    );
    let response = within(
        "POST subscriptions/listen",
        post_modern(&bridge, body).send(),
    )
    .await
    .unwrap();
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    let ack = within("the acknowledgment", async {
        while let Some(chunk) = stream.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if let Some(line) = seen
                .lines()
                .find(|l| l.contains("notifications/subscriptions/acknowledged"))
            {
                let data = line.trim_start_matches("data:").trim();
                return serde_json::from_str::<Value>(data).unwrap();
            }
        }
        panic!("the stream ended before the acknowledgment: {seen}");
    })
    .await;
    let accepted = &ack["params"]["notifications"];
    assert_eq!(accepted["toolsListChanged"], true, "{ack}");
    assert_eq!(
        accepted["resourceSubscriptions"],
        json!(uris[..2]),
        "at most the limit is accepted: {ack}"
    );
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(limit_hits(&metrics, "max_resource_subscriptions"), 1);
    drop(stream);
    bridge.shutdown(Duration::from_secs(2)).await;
}
