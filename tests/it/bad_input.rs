//! Every kind of bad input, against a running bridge: each gets a clear 4xx or a JSON-RPC
//! error with a message, never a 5xx, a panic or a stuck connection, and the bridge goes on
//! serving normal calls afterwards. The same for what a misbehaving upstream sends.
//!
//! The tables run every row and report every failing row at the end ([`Failures`]): one bad
//! row hides no other.

use std::{fmt::Debug, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, Secret};
use serde_json::{Value, json};

const TOKEN: &str = "bad-input-test-token-0123456789";

fn secured(config: &mut Config) {
    config.auth.mcp_tokens = vec![Secret::literal(TOKEN).into()];
}

/// One row: what is sent to /mcp, and what must come back.
struct McpCase {
    name: &'static str,
    body: Vec<u8>,
    headers: &'static [(&'static str, &'static str)],
    status: u16,
    /// The JSON-RPC error code the answer carries, if one must.
    rpc_error: Option<i64>,
    /// A piece of the error message (or body) that tells what is wrong.
    says: &'static str,
}

fn case(
    name: &'static str,
    body: impl Into<Vec<u8>>,
    status: u16,
    rpc_error: Option<i64>,
    says: &'static str,
) -> McpCase {
    McpCase {
        name,
        body: body.into(),
        headers: &[],
        status,
        rpc_error,
        says,
    }
}

fn call_body(id: u64, tool: &str, arguments: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
    .into_bytes()
}

/// What went wrong in a table's rows, reported together once every row has run.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, failure: impl FnOnce() -> String) {
        if !ok {
            self.0.push(failure());
        }
    }

    /// `what`: the row and the value compared; `body`: the answer, to see why.
    fn check_eq<T: PartialEq + Debug>(&mut self, seen: T, expected: T, what: &str, body: &str) {
        self.check(seen == expected, || {
            format!("{what}: got {seen:?}, expected {expected:?}; body: {body}")
        });
    }

    fn assert_none(self, table: &str) {
        assert!(
            self.0.is_empty(),
            "{} row(s) of {table} failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// The bridge these tests send bad input to: bearer token, a 64 KiB request limit, and
/// `slow_count` answering with a job handle.
async fn secured_bridge() -> TestBridge {
    start_bridge(|c| {
        secured(c);
        c.limits.max_request_bytes = 64 * 1024;
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Async,
        )];
    })
    .await
}

/// After the bad input, a normal call works on a new session.
async fn still_serves(bridge: &TestBridge) {
    let client = connect_with_token(bridge, TOKEN).await;
    assert_eq!(
        first_text(&call(&client, "demo__echo", json!({"text": "ok"})).await),
        "ok"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_mcp_message_gets_a_clear_client_error_and_the_bridge_keeps_serving() {
    let bridge = secured_bridge().await;
    let mut raw = RawMcp::new(&bridge.mcp_url(), Some(TOKEN));
    let init = raw.initialize().await;
    assert_eq!(init.status, 200, "{}", init.body);

    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let deep_arguments = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"text":{}"x"{}}}}}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    let mut invalid_utf8 =
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":""#.to_vec();
    invalid_utf8.extend_from_slice(b"\xff\xfe\"}}}");
    let huge = call_body(5, "demo__echo", json!({"text": "a".repeat(100 * 1024)}));

    let cases = vec![
        case("empty body", "", 400, Some(-32700), "parse error"),
        case(
            "malformed JSON",
            r#"{"jsonrpc":"#,
            400,
            Some(-32700),
            "parse error",
        ),
        case("not JSON at all", "hello", 400, Some(-32700), "parse error"),
        case(
            "invalid UTF-8",
            invalid_utf8,
            400,
            Some(-32700),
            "parse error",
        ),
        case(
            "deeply nested JSON",
            deep,
            400,
            Some(-32700),
            "recursion limit",
        ),
        case(
            "deeply nested arguments",
            deep_arguments,
            400,
            Some(-32700),
            "recursion limit",
        ),
        case(
            "JSON-RPC batch",
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            400,
            Some(-32600),
            "batches",
        ),
        case("a bare number", "42", 400, Some(-32600), "JSON object"),
        case(
            "no jsonrpc member",
            r#"{"id":1,"method":"tools/list"}"#,
            400,
            Some(-32600),
            "2.0",
        ),
        case(
            "wrong jsonrpc version",
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            400,
            Some(-32600),
            "2.0",
        ),
        case(
            "id of the wrong type",
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
            400,
            Some(-32600),
            "id",
        ),
        case(
            "id above 2^63-1",
            r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"tools/list"}"#,
            400,
            Some(-32600),
            "too large",
        ),
        case(
            "id of 2^64-1",
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"tools/list"}"#,
            400,
            Some(-32600),
            "too large",
        ),
        case(
            "method of the wrong type",
            r#"{"jsonrpc":"2.0","id":1,"method":["tools/list"]}"#,
            400,
            Some(-32600),
            "method",
        ),
        case(
            "neither request nor response",
            r#"{"jsonrpc":"2.0","id":1}"#,
            400,
            Some(-32600),
            "method",
        ),
        case(
            "unknown method",
            r#"{"jsonrpc":"2.0","id":6,"method":"nope/nothing"}"#,
            200,
            Some(-32601),
            "Method not found: nope/nothing",
        ),
        case(
            "unknown tool",
            call_body(7, "demo__nope", json!({})),
            200,
            Some(-32602),
            "unknown tool",
        ),
        case(
            "unknown upstream",
            call_body(8, "nowhere__echo", json!({})),
            200,
            Some(-32602),
            "unknown tool",
        ),
        case(
            "tools/call without params",
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call"}"#,
            400,
            Some(-32602),
            "params",
        ),
        case(
            "tool name not a string",
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":5}}"#,
            400,
            Some(-32602),
            "name",
        ),
        case(
            "arguments not an object",
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"demo__echo","arguments":"x"}}"#,
            400,
            Some(-32602),
            "arguments",
        ),
        case(
            "body over the limit",
            huge,
            413,
            Some(-32600),
            "limits.max_request_bytes",
        ),
        McpCase {
            name: "wrong content type",
            body: br#"{"jsonrpc":"2.0","id":12,"method":"tools/list"}"#.to_vec(),
            headers: &[("content-type", "text/plain")],
            status: 415,
            rpc_error: None,
            says: "",
        },
        McpCase {
            name: "disallowed Origin",
            body: br#"{"jsonrpc":"2.0","id":13,"method":"tools/list"}"#.to_vec(),
            headers: &[("origin", "https://evil.example")],
            status: 403,
            rpc_error: None,
            says: "server.allowed_origins",
        },
        McpCase {
            name: "disallowed Host",
            body: br#"{"jsonrpc":"2.0","id":14,"method":"tools/list"}"#.to_vec(),
            headers: &[("host", "evil.example")],
            status: 403,
            rpc_error: None,
            says: "server.allowed_hosts",
        },
        McpCase {
            name: "unknown session",
            body: br#"{"jsonrpc":"2.0","id":15,"method":"tools/list"}"#.to_vec(),
            headers: &[("mcp-session-id", "no-such-session")],
            status: 404,
            // Not an id this bridge mints (none of any principal): refused before rmcp.
            rpc_error: Some(-32600),
            says: "send initialize",
        },
    ];
    let mut failures = Failures::default();
    for case in cases {
        // A header given by the case replaces the client's own (reqwest appends; the session
        // and content type must be replaced, so those cases use a client without them).
        let answer = if case.headers.iter().any(|(n, _)| *n == "mcp-session-id") {
            RawMcp::new(&bridge.mcp_url(), Some(TOKEN))
                .post(case.body.clone(), case.headers)
                .await
        } else if case.headers.iter().any(|(n, _)| *n == "content-type") {
            let response = reqwest::Client::new()
                .post(bridge.mcp_url())
                .bearer_auth(TOKEN)
                .header("content-type", "text/plain")
                .header("accept", "application/json, text/event-stream")
                .body(case.body.clone())
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            RawAnswer::plain(status, body)
        } else {
            raw.post(case.body.clone(), case.headers).await
        };
        let (name, body) = (case.name, &answer.body);
        failures.check_eq(answer.status, case.status, &format!("{name}: status"), body);
        failures.check_eq(
            answer.rpc_error_code(),
            case.rpc_error,
            &format!("{name}: JSON-RPC error"),
            body,
        );
        failures.check(body.contains(case.says), || {
            format!("{name}: the answer says {:?}; body: {body}", case.says)
        });
    }
    failures.assert_none("the /mcp table");

    // Arguments that do not match the tool's schema go to the upstream; its error comes back.
    let mismatched = raw
        .post(call_body(20, "demo__echo", json!({"text": 5})), &[])
        .await;
    assert_eq!(mismatched.status, 200, "{}", mismatched.body);
    let result = &mismatched.message.as_ref().expect("a message")["result"];
    assert_eq!(result["isError"], true, "{}", mismatched.body);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("invalid type"),
        "the upstream's own error: {result}"
    );

    // After all that, a normal call works, on the old session and on a new one.
    let echo = raw
        .post(
            call_body(30, "demo__echo", json!({"text": "still here"})),
            &[],
        )
        .await;
    assert_eq!(
        echo.message.as_ref().unwrap()["result"]["content"][0]["text"],
        "still here"
    );
    still_serves(&bridge).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// `DELETE /mcp` ends a live session with 200 (what the MCP SDK clients expect); a closed or
/// unknown session, deleted or used, gets 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_answers_200_then_404() {
    let bridge = secured_bridge().await;
    let mut raw = RawMcp::new(&bridge.mcp_url(), Some(TOKEN));
    let init = raw.initialize().await;
    assert_eq!(init.status, 200, "{}", init.body);
    let (status, body) = raw.delete().await;
    assert_eq!(status, 200, "a live session: {body}");
    let (status, body) = raw.delete().await;
    assert_eq!(status, 404, "deleted again: {body}");
    let list = raw
        .post(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#, &[])
        .await;
    assert_eq!(list.status, 404, "used after DELETE: {}", list.body);
    let mut unknown = RawMcp::new(&bridge.mcp_url(), Some(TOKEN));
    unknown.session = Some("no-such-session".into());
    let (status, body) = unknown.delete().await;
    assert_eq!(status, 404, "an unknown session: {body}");
    still_serves(&bridge).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_job_api_request_gets_a_client_error_and_the_bridge_keeps_serving() {
    let bridge = secured_bridge().await;
    // A real job to aim at.
    let client = connect_with_token(&bridge, TOKEN).await;
    let handle = running_job(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
    let events_url = handle.events_url.clone();
    read_job_events(&events_url).await;
    let job_id = &handle.job_id;
    let token = handle.read_token();
    let base = &bridge.base;
    let http = reqwest::Client::new();
    let job_cases: Vec<(&str, reqwest::RequestBuilder, u16)> = vec![
        (
            "Last-Event-ID not a number",
            http.get(&events_url).header("last-event-id", "x"),
            400,
        ),
        (
            "Last-Event-ID negative",
            http.get(&events_url).header("last-event-id", "-1"),
            400,
        ),
        (
            "Last-Event-ID fractional",
            http.get(&events_url).header("last-event-id", "1.5"),
            400,
        ),
        (
            "Last-Event-ID overflowing",
            http.get(&events_url)
                .header("last-event-id", "99999999999999999999999"),
            400,
        ),
        (
            "Last-Event-ID in the future",
            http.get(&events_url).header("last-event-id", "9999"),
            400,
        ),
        (
            "last_event_id query not a number",
            http.get(format!("{events_url}&last_event_id=abc")),
            400,
        ),
        (
            "Last-Event-ID not text",
            http.get(&events_url).header(
                "last-event-id",
                reqwest::header::HeaderValue::from_bytes(b"\xff").unwrap(),
            ),
            400,
        ),
        (
            "token given twice",
            http.get(format!("{events_url}&token={token}")),
            400,
        ),
        (
            "last_event_id given twice",
            http.get(format!("{events_url}&last_event_id=1&last_event_id=2")),
            400,
        ),
        (
            "upper-case job ID",
            http.get(format!(
                "{base}/jobs/{}?token={token}",
                job_id.to_uppercase()
            )),
            404,
        ),
        (
            "job ID with odd characters",
            http.get(format!("{base}/jobs/%00%0a%22%3Cscript%3E?token={token}")),
            404,
        ),
        (
            "job ID not UTF-8",
            http.get(format!("{base}/jobs/%FF%FE?token={token}")),
            404,
        ),
        (
            "job ID far too long",
            http.get(format!("{base}/jobs/{}?token={token}", "a".repeat(5000))),
            404,
        ),
        (
            "encoded slashes",
            http.get(format!("{base}/jobs/..%2F..%2Fupstreams?token={token}")),
            404,
        ),
        (
            "correlation ID with spaces",
            http.get(format!("{base}/correlations/a%20b/events?token={token}")),
            404,
        ),
        (
            "correlation ID too long",
            http.get(format!("{base}/correlations/{}/events", "c".repeat(500))),
            404,
        ),
        (
            "token with invalid percent-encoding",
            http.get(format!("{base}/jobs/{job_id}?token=%ZZ")),
            404,
        ),
        (
            "token that is not base64",
            http.get(format!("{base}/jobs/{job_id}?token=@@@@")),
            404,
        ),
        (
            "cancel with GET",
            http.get(format!("{base}/jobs/{job_id}/cancel?token={token}")),
            404,
        ),
        (
            "job route with a wrong method",
            http.delete(format!("{base}/jobs/{job_id}?token={token}")),
            405,
        ),
        (
            "unknown route",
            http.get(format!("{base}/jobs/{job_id}/nothing")),
            404,
        ),
    ];
    let mut failures = Failures::default();
    for (name, request, expected) in job_cases {
        let response = within(name, request.send()).await.expect(name);
        let status = response.status().as_u16();
        let json = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let body = response.text().await.unwrap_or_default();
        failures.check_eq(status, expected, &format!("{name}: status"), &body);
        // The API's own refusals are its JSON error body, never a framework's plain text.
        if status == 400 {
            let parsed: Value = serde_json::from_str(&body).unwrap_or_default();
            failures.check(json && parsed["error"]["code"].is_string(), || {
                format!("{name}: a JSON error body, got: {body}")
            });
        }
    }
    failures.assert_none("the job API table");
    still_serves(&bridge).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_tricks_sent_byte_for_byte_get_client_errors_and_the_bridge_keeps_serving() {
    let bridge = secured_bridge().await;
    // Sent byte for byte: HTTP clients would normalise them away.
    let addr = bridge.running().addr;
    let mut failures = Failures::default();
    for target in [
        "/jobs/../upstreams",
        "/jobs/./x",
        "//jobs/x",
        "/jobs/x/../../metrics",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/jobs/%2e%2e%2fupstreams",
        "/jobs/%2e%2e",
        "/jobs/\\..\\upstreams",
        "/jobs/x%00/events",
        "*",
    ] {
        let status = raw_http_status(addr, "GET", target).await;
        failures.check((400..500).contains(&status), || {
            format!("{target}: a client error, got {status}")
        });
    }
    failures.assert_none("the path tricks");
    still_serves(&bridge).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_upstream_cannot_break_a_job_or_the_bridge() {
    let Some(python) = python() else { return };
    let bridge = start_bridge(|c| {
        let mut bad = misbehaving_upstream("bad", &python);
        bad.mode = Some(CallMode::Async);
        c.upstreams.push(bad);
    })
    .await;
    let client = connect(&bridge).await;
    let tools = within("list", client.list_all_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "bad__misbehave"));

    // Malformed progress: only the well-formed, increasing, finite values come through.
    let handle = running_job(&client, "bad__misbehave", json!({"case": "progress"})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(
        progress_values(&events),
        vec![1.0, 2.0, 1e308],
        "{events:#?}"
    );
    let progress: Vec<&SseEvent> = events.iter().filter(|e| e.event == "progress").collect();
    assert_eq!(
        progress[0].data["total"],
        Value::Null,
        "a negative total is dropped"
    );
    let message = progress[0].data["message"].as_str().unwrap();
    assert!(
        message.len() <= 4096 + 3 && message.ends_with('…'),
        "a long message is cut"
    );
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed");
    assert_eq!(
        last.data["result"]["content"][0]["text"],
        "survived progress"
    );

    // Lines that are not MCP at all, and a line past the reader's limit.
    for case in ["garbage", "oversized"] {
        let handle = running_job(&client, "bad__misbehave", json!({"case": case})).await;
        let events = read_job_events(&handle.events_url).await;
        assert_eq!(progress_values(&events), vec![1.0], "{case}: {events:#?}");
        assert_eq!(
            events.last().unwrap().data["result"]["content"][0]["text"],
            format!("survived {case}")
        );
    }

    let metrics = metrics_text(&bridge.base).await;
    for reason in ["invalid", "non_increasing", "unknown_token"] {
        let series = format!("bridge_progress_dropped_total{{reason=\"{reason}\"}}");
        assert!(
            series_value(&metrics, &series).is_some_and(|n| n > 0.0),
            "dropped progress is counted as {reason}:\n{metrics}"
        );
    }
    // The same upstream connection, and the others, still serve.
    let again = running_job(&client, "bad__misbehave", json!({"case": "garbage"})).await;
    let events = read_job_events(&again.events_url).await;
    assert_eq!(events.last().unwrap().event, "completed");
    assert_eq!(
        bridge
            .running()
            .upstreams
            .get("bad")
            .unwrap()
            .status()
            .restarts,
        0,
        "the connection never broke"
    );
    let echo = call(&client, "demo__echo", json!({"text": "fine"})).await;
    assert_eq!(first_text(&echo), "fine");
    bridge.shutdown(Duration::from_secs(1)).await;
}
