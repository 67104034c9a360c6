//! The demo tool server, driven by rmcp's own client: over Streamable HTTP
//! (the router served in this process on a free port) and over stdio (the
//! built binary as a child process).
//!
//! Every wait has a timeout; nothing sleeps to synchronise. Where the only way
//! to see that something happened is to ask the server (`cancellations`), the
//! test polls it under a timeout.

// MCP logging is deprecated by SEP-2577, and so are rmcp's logging types; the
// demo still sends log messages, so these tests still have to read them.
#![allow(deprecated)]

use std::{collections::BTreeSet, process::Stdio};

use crate::common::{BIN, HttpDemo, WAIT, eventually, start_http_demo};
use demo_tools::CancellationRecord;
use rmcp::{
    ClientHandler, Peer, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientRequest, LoggingLevel,
        LoggingMessageNotificationParam, ProgressNotificationParam, Request, ServerResult,
    },
    service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService},
    transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// A notification the client received.
#[derive(Debug)]
enum Seen {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// A client that forwards every progress and log notification to a channel.
///
/// rmcp handles each incoming notification in its own task, so under a
/// multi-threaded runtime they could reach the handler out of order. These
/// tests run on tokio's default single-threaded test runtime, where tasks run
/// in the order they were spawned.
struct Recorder {
    seen: mpsc::UnboundedSender<Seen>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.seen.send(Seen::Progress(params));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.seen.send(Seen::Log(params));
    }
}

type Client = RunningService<RoleClient, Recorder>;

fn recorder() -> (Recorder, mpsc::UnboundedReceiver<Seen>) {
    let (seen, rx) = mpsc::unbounded_channel();
    (Recorder { seen }, rx)
}

async fn connect_http(demo: &HttpDemo) -> (Client, mpsc::UnboundedReceiver<Seen>) {
    let (handler, rx) = recorder();
    mcp_progress_bridge::tls::use_ring();
    let transport = StreamableHttpClientTransport::from_uri(demo.url.as_str());
    let client = tokio::time::timeout(WAIT, handler.serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize over HTTP");
    (client, rx)
}

async fn connect_stdio() -> (Client, mpsc::UnboundedReceiver<Seen>) {
    let (handler, rx) = recorder();
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.arg("demo-tools");
    }))
    .expect("spawn the demo-tools child");
    let client = tokio::time::timeout(WAIT, handler.serve(child))
        .await
        .expect("initialize in time")
        .expect("initialize over stdio");
    (client, rx)
}

/// Sends `tools/call` and returns the pending call. rmcp's client puts its own
/// `_meta.progressToken` on every request; it is in the handle.
async fn start_call(peer: &Peer<RoleClient>, tool: &str, args: Value) -> RequestHandle<RoleClient> {
    let Value::Object(args) = args else {
        panic!("tool arguments must be a JSON object");
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
    peer.send_request_with_option(
        ClientRequest::CallToolRequest(Request::new(params)),
        PeerRequestOptions::no_options(),
    )
    .await
    .expect("send tools/call")
}

async fn finish(handle: RequestHandle<RoleClient>) -> CallToolResult {
    match tokio::time::timeout(WAIT, handle.await_response())
        .await
        .expect("tool result in time")
        .expect("tool result")
    {
        ServerResult::CallToolResult(result) => result,
        other => panic!("expected a CallToolResult, got {other:?}"),
    }
}

async fn call(peer: &Peer<RoleClient>, tool: &str, args: Value) -> CallToolResult {
    finish(start_call(peer, tool, args).await).await
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect()
}

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a notification in time")
        .expect("the client is still running")
}

async fn next_progress(rx: &mut mpsc::UnboundedReceiver<Seen>) -> ProgressNotificationParam {
    loop {
        if let Seen::Progress(progress) = next_seen(rx).await {
            return progress;
        }
    }
}

/// Asks `cancellations` until a record for `tool` appears, within [`WAIT`].
/// The record is written by the cancelled call's own task, which may run
/// after the server has already answered an earlier `cancellations` call.
async fn wait_for_cancel_record(peer: &Peer<RoleClient>, tool: &str) -> CancellationRecord {
    eventually("the cancel reached the demo server", || async {
        let result = call(peer, "cancellations", json!({})).await;
        let structured = result.structured_content.expect("structured content");
        let records: Vec<CancellationRecord> =
            serde_json::from_value(structured["cancelled"].clone()).expect("records");
        records.into_iter().find(|record| record.tool == tool)
    })
    .await
}

fn request_id_json(handle: &RequestHandle<RoleClient>) -> Value {
    serde_json::to_value(&handle.id).expect("request id as JSON")
}

#[tokio::test]
async fn lists_every_tool_with_description_and_schema() {
    let demo = start_http_demo().await;
    let (client, _rx) = connect_http(&demo).await;

    let info = client.peer_info().expect("server info after initialize");
    let name = info.server_info.as_ref().map(|server| server.name.as_str());
    assert_eq!(name, Some("mcp-progress-bridge-demo"));

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: BTreeSet<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    let expected: BTreeSet<&str> = [
        "slow_count",
        "instant_progress",
        "fail_after",
        "fail_rpc",
        "ask",
        "ask_in_rounds",
        "sample",
        "roots",
        "echo",
        "log_and_count",
        "ignore_cancel",
        "hang",
        "crash",
        "cancellations",
        "echo_meta",
        "slow_count_no_total",
        "bench_progress",
    ]
    .into();
    assert_eq!(names, expected);
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 20, "{} needs a description", tool.name);
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
    }
    let slow_count = tools
        .iter()
        .find(|tool| tool.name == "slow_count")
        .expect("slow_count listed");
    let to = &slow_count.input_schema["properties"]["to"];
    assert_eq!(to["minimum"], json!(1));
    assert_eq!(to["maximum"], json!(100_000));
    assert_eq!(to["default"], json!(10));
}

#[tokio::test]
async fn slow_count_reports_progress_in_order_then_counts() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let handle = start_call(&client, "slow_count", json!({"to": 4, "delay_ms": 10})).await;
    let token = handle.progress_token.clone();
    let result = finish(handle).await;

    assert_eq!(result.is_error, Some(false));
    assert_eq!(text_of(&result), "counted to 4");
    assert_eq!(result.structured_content, Some(json!({"counted": 4})));
    for step in 1..=4 {
        let progress = next_progress(&mut rx).await;
        assert_eq!(progress.progress_token, token);
        assert_eq!(progress.progress, f64::from(step));
        assert_eq!(progress.total, Some(4.0));
        assert_eq!(progress.message, Some(format!("step {step} of 4")));
    }
}

#[tokio::test]
async fn slow_count_no_total_reports_indeterminate_progress() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let result = call(
        &client,
        "slow_count_no_total",
        json!({"to": 3, "delay_ms": 0}),
    )
    .await;

    assert_eq!(text_of(&result), "counted to 3");
    for step in 1..=3 {
        let progress = next_progress(&mut rx).await;
        assert_eq!(progress.progress, f64::from(step));
        assert_eq!(progress.total, None);
    }
}

#[tokio::test]
async fn instant_progress_loses_nothing() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let result = call(&client, "instant_progress", json!({"steps": 50})).await;

    assert_eq!(text_of(&result), "sent 50 progress notifications");
    let mut steps = Vec::new();
    for _ in 0..50 {
        let progress = next_progress(&mut rx).await;
        assert_eq!(progress.total, Some(50.0));
        steps.push(progress.progress);
    }
    let expected: Vec<f64> = (1..=50).map(f64::from).collect();
    assert_eq!(steps, expected);
}

#[tokio::test]
async fn log_and_count_sends_a_log_message_per_step() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let result = call(&client, "log_and_count", json!({"to": 3, "delay_ms": 0})).await;
    assert_eq!(text_of(&result), "counted to 3");

    // Logs and progress may travel on different HTTP streams, so only the
    // order within each kind is checked.
    let (mut logs, mut progress) = (Vec::new(), Vec::new());
    while logs.len() < 3 || progress.len() < 3 {
        match next_seen(&mut rx).await {
            Seen::Log(log) => logs.push(log),
            Seen::Progress(p) => progress.push(p.progress),
        }
    }
    for (step, log) in (1..=3).zip(&logs) {
        assert_eq!(log.level, LoggingLevel::Info);
        assert_eq!(log.logger.as_deref(), Some("demo"));
        assert_eq!(log.data, json!(format!("working on step {step}")));
    }
    assert_eq!(progress, vec![1.0, 2.0, 3.0]);
}

#[tokio::test]
async fn fail_after_ends_with_a_tool_error() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let result = call(&client, "fail_after", json!({"steps": 2, "delay_ms": 0})).await;

    assert_eq!(result.is_error, Some(true));
    assert_eq!(text_of(&result), "failed after 2 steps as asked");
    assert_eq!(next_progress(&mut rx).await.progress, 1.0);
    assert_eq!(next_progress(&mut rx).await.progress, 2.0);
}

#[tokio::test]
async fn echo_returns_the_text_unchanged() {
    let demo = start_http_demo().await;
    let (client, _rx) = connect_http(&demo).await;

    let text = "héllo, \"world\"\n";
    let result = call(&client, "echo", json!({"text": text})).await;

    assert_eq!(result.is_error, Some(false));
    assert_eq!(text_of(&result), text);
}

#[tokio::test]
async fn out_of_range_arguments_are_clear_tool_errors() {
    let demo = start_http_demo().await;
    let (client, _rx) = connect_http(&demo).await;

    let result = call(&client, "slow_count", json!({"to": 0})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        text_of(&result),
        "argument `to` is 0, but it must be between 1 and 100000 (inclusive); fix it and call again"
    );

    let result = call(&client, "fail_after", json!({"delay_ms": 60_001})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("`delay_ms` is 60001, but it must be between 0 and 60000"),
        "{}",
        text_of(&result)
    );
}

#[tokio::test]
async fn cancelling_slow_count_over_http_is_recorded() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let handle = start_call(&client, "slow_count", json!({"to": 1000, "delay_ms": 20})).await;
    let request_id = request_id_json(&handle);
    // First progress: the call is certainly running on the server.
    next_progress(&mut rx).await;
    handle
        .cancel(Some("test".into()))
        .await
        .expect("send cancel");

    let record = wait_for_cancel_record(&client, "slow_count").await;
    assert_eq!(record.request_id, request_id);
    assert!(record.at_step >= 1 && record.at_step < 1000, "{record:?}");
}

#[tokio::test]
async fn ignore_cancel_records_the_cancel_but_keeps_going() {
    let demo = start_http_demo().await;
    let (client, mut rx) = connect_http(&demo).await;

    let handle = start_call(&client, "ignore_cancel", json!({"seconds": 2})).await;
    let request_id = request_id_json(&handle);
    assert_eq!(next_progress(&mut rx).await.progress, 1.0);
    handle.cancel(None).await.expect("send cancel");

    let record = wait_for_cancel_record(&client, "ignore_cancel").await;
    assert_eq!(record.request_id, request_id);
    assert_eq!(record.at_step, 1);
    // It keeps reporting progress for the call it was told to drop.
    assert_eq!(next_progress(&mut rx).await.progress, 2.0);
}

#[tokio::test]
async fn stdio_child_counts_and_cancelling_hang_is_recorded() {
    let (client, mut rx) = connect_stdio().await;

    let handle = start_call(&client, "slow_count", json!({"to": 2, "delay_ms": 0})).await;
    let token = handle.progress_token.clone();
    assert_eq!(text_of(&finish(handle).await), "counted to 2");
    for step in 1..=2 {
        let progress = next_progress(&mut rx).await;
        assert_eq!(progress.progress_token, token);
        assert_eq!(progress.progress, f64::from(step));
    }

    // On stdio the request and the cancel share one ordered pipe, so the
    // server has registered `hang` before the cancel arrives.
    let handle = start_call(&client, "hang", json!({})).await;
    let request_id = request_id_json(&handle);
    handle.cancel(None).await.expect("send cancel");
    let record = wait_for_cancel_record(&client, "hang").await;
    assert_eq!(record.request_id, request_id);
    assert_eq!(record.at_step, 0);

    client.cancel().await.expect("close the client");
}

#[tokio::test]
async fn crash_makes_the_stdio_child_exit_with_code_3() {
    // Spawned by hand (not TokioChildProcess) to keep the `Child` and read its
    // exit status; rmcp serves any (reader, writer) pair.
    let mut child = tokio::process::Command::new(BIN)
        .arg("demo-tools")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the demo-tools child");
    let stdout = child.stdout.take().expect("child stdout");
    let stdin = child.stdin.take().expect("child stdin");
    let (handler, mut rx) = recorder();
    let client = tokio::time::timeout(WAIT, handler.serve((stdout, stdin)))
        .await
        .expect("initialize in time")
        .expect("initialize over stdio");

    let handle = start_call(&client, "crash", json!({"after_ms": 50})).await;
    assert_eq!(next_progress(&mut rx).await.progress, 1.0);

    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the child exits in time")
        .expect("child exit status");
    assert_eq!(status.code(), Some(3));
    let outcome = tokio::time::timeout(WAIT, handle.await_response())
        .await
        .expect("the pending call ends in time");
    assert!(
        outcome.is_err(),
        "a crashed server cannot answer: {outcome:?}"
    );
}

/// rmcp's client always sends a progress token, so this one speaks raw
/// JSON-RPC lines to the stdio child: without a token, no progress at all.
/// It also checks that the server exits cleanly once stdin closes.
#[tokio::test]
async fn no_progress_without_a_token_and_clean_exit_on_stdin_close() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let mut child = tokio::process::Command::new(BIN)
        .arg("demo-tools")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the demo-tools child");
    let mut stdin = child.stdin.take().expect("child stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();

    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "slow_count", "arguments": {"to": 3, "delay_ms": 0}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "instant_progress", "arguments": {}}}),
    ];
    for message in messages {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write to the child");
    }

    let read_both_results = async {
        let mut results = Vec::new();
        while results.len() < 2 {
            let line = lines
                .next_line()
                .await
                .expect("read from the child")
                .expect("the child is still running");
            let message: Value = serde_json::from_str(&line).expect("JSON-RPC line");
            assert_ne!(message["method"], json!("notifications/progress"), "{line}");
            if message["id"] == json!(2) || message["id"] == json!(3) {
                results.push(message);
            }
        }
        results
    };
    let results = tokio::time::timeout(WAIT, read_both_results)
        .await
        .expect("both results in time");
    for result in results {
        let text = &result["result"]["content"][0]["text"];
        match result["id"].as_i64() {
            Some(2) => assert_eq!(text, &json!("counted to 3")),
            _ => assert_eq!(
                text,
                &json!("sent 0 progress notifications: the request carried no progress token")
            ),
        }
    }

    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the child exits in time")
        .expect("child exit status");
    assert!(status.success(), "{status:?}");
}
