//! Traces over OpenTelemetry: the bridge as a process, exporting to a real OTLP/HTTP receiver
//! started here (POST /v1/traces, protobuf bodies decoded with the OTLP types), with the demo
//! tool `echo_meta` showing what reached the tool server.
//!
//! One trace follows a tool call: the caller's `traceparent` (HTTP header, or `_meta`) is
//! continued by the request's `SERVER` span (`tools/call demo__echo_meta`), whose child is the
//! `job`, whose children are the upstream call's `CLIENT` span (`tools/call echo_meta`, whose
//! context the tool server gets in `_meta.traceparent`) and the `terminal_event`. Every other
//! request served (`tools/list`, `initialize`, ...) and sent upstream (`initialize`,
//! `tools/list`) has its span too, named and attributed by OpenTelemetry's MCP conventions.
//! The batch processor is told to wait a minute between exports, so what arrives was sent by
//! the flush at shutdown. Without the variables (or with traces turned off) nothing is sent
//! and the tool server gets no trace context.

use std::{path::Path, time::Duration};

use crate::common::*;
use axum::{Router, routing::post};
use serde_json::{Value, json};

/// The caller's trace (header case) and the span it calls from.
const HEADER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HEADER_PARENT: &str = "00f067aa0ba902b7";
/// The caller's trace when it travels in `_meta` instead.
const META_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const META_PARENT: &str = "b7ad6b7169203331";
/// The caller's trace of a `tools/list`, and of a request that fails.
const LIST_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
const FAIL_TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4738";

/// The attribute `key` of `span`.
fn attr<'a>(span: &'a ReceivedSpan, key: &str) -> Option<&'a str> {
    span.attributes.get(key).map(String::as_str)
}

/// `span` is of `kind` and has these attributes.
fn check_attributes(span: &ReceivedSpan, kind: i32, want: &[(&str, &str)]) {
    assert_eq!(span.kind, kind, "{span:#?}");
    for (key, value) in want {
        assert_eq!(attr(span, key), Some(*value), "{key} of {span:#?}");
    }
}

/// The bridge as a process with the demo tools, and `env`.
async fn bridge_with(env: &[(&str, &str)]) -> BridgeProcess {
    spawn_bridge(&demo_upstream_toml("{}"), env).await
}

/// A raw MCP session on the bridge, initialized.
async fn session(bridge: &BridgeProcess) -> RawMcp {
    let mut mcp = RawMcp::new(&bridge.mcp_url(), None);
    let answer = mcp.initialize().await;
    assert_eq!(answer.status, 200, "initialize: {}", answer.body);
    mcp
}

/// `tools/call demo__echo_meta` with `meta` as the request's `_meta` and `headers`: the
/// `_meta` the tool server got.
async fn echo_meta(mcp: &RawMcp, id: u64, meta: Value, headers: &[(&str, &str)]) -> Value {
    echo(mcp, id, meta, headers).await["meta"].clone()
}

/// What `echo_meta` answered: `{"meta": …, "traceparent_header": …}`.
async fn echo(mcp: &RawMcp, id: u64, meta: Value, headers: &[(&str, &str)]) -> Value {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "demo__echo_meta", "arguments": {}, "_meta": meta},
    });
    let answer = mcp.post(body.to_string(), headers).await;
    let message = answer
        .message
        .unwrap_or_else(|| panic!("no answer to tools/call: {}", answer.body));
    let result = &message["result"];
    assert_ne!(result["isError"], json!(true), "the call failed: {message}");
    result["structuredContent"].clone()
}

/// `00-<trace>-<span>-<flags>` split.
fn parts(traceparent: &str) -> (String, String) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "a W3C traceparent: {traceparent}");
    (fields[1].to_string(), fields[2].to_string())
}

/// The one span named `name` in `trace`.
fn one<'a>(spans: &'a [ReceivedSpan], trace: &str, name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == trace && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} span in trace {trace}; all spans: {spans:#?}"
    );
    found[0]
}

/// What one traced call is expected to show: its JSON-RPC id, the caller's session (its
/// nonce), and the upstream's transport.
struct Call<'a> {
    id: &'a str,
    session: &'a str,
    transport: &'a str,
}

/// Check the spans of one call in `trace`, called from `caller_span`, and the traceparent the
/// tool server got.
fn check_call(
    spans: &[ReceivedSpan],
    trace: &str,
    caller_span: &str,
    reached_tool: &Value,
    call: Call,
) {
    let request = one(spans, trace, "tools/call demo__echo_meta");
    let job = one(spans, trace, "job");
    let upstream = one(spans, trace, "tools/call echo_meta");
    let terminal = one(spans, trace, "terminal_event");
    assert_eq!(request.parent_span_id, caller_span, "continues the caller");
    assert_eq!(job.parent_span_id, request.span_id, "job under the request");
    assert_eq!(
        upstream.parent_span_id, job.span_id,
        "upstream call under the job"
    );
    assert_eq!(
        terminal.parent_span_id, job.span_id,
        "terminal event under the job"
    );
    check_attributes(
        request,
        SERVER,
        &[
            ("mcp.method.name", "tools/call"),
            ("jsonrpc.request.id", call.id),
            ("gen_ai.tool.name", "demo__echo_meta"),
            ("gen_ai.operation.name", "execute_tool"),
            ("mcp.session.id", call.session),
            ("mcp.protocol.version", "2025-06-18"),
            ("network.transport", "tcp"),
            ("network.protocol.name", "http"),
        ],
    );
    assert_eq!(attr(request, "error.type"), None, "{request:#?}");
    assert_eq!(attr(job, "tool"), Some("demo__echo_meta"));
    assert_eq!(attr(job, "upstream"), Some("demo"));
    assert!(job.attributes.contains_key("job_id"), "{job:?}");
    check_attributes(
        upstream,
        CLIENT,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "echo_meta"),
            ("gen_ai.operation.name", "execute_tool"),
            ("network.transport", call.transport),
            ("upstream", "demo"),
        ],
    );
    for key in ["jsonrpc.request.id", "mcp.protocol.version"] {
        assert!(
            upstream.attributes.contains_key(key),
            "{key}: {upstream:#?}"
        );
    }
    assert_eq!(attr(terminal, "status"), Some("completed"));
    let traceparent = reached_tool["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("the tool server got no traceparent: {reached_tool}"));
    assert_eq!(
        parts(traceparent),
        (trace.to_string(), upstream.span_id.clone()),
        "the tool server's parent is the upstream call"
    );
    assert!(
        reached_tool.get("progressToken").is_some(),
        "rmcp's progress token is there beside it: {reached_tool}"
    );
    for span in [request, job, upstream, terminal] {
        assert_eq!(span.service_name.as_deref(), Some("mcp-progress-bridge"));
    }
}

/// The requests the bridge sent the upstream when it connected, each a `CLIENT` span of its
/// own; and no attribute of any span holds the session's tag (what opens the session).
fn check_upstream_requests_and_secrets(spans: &[ReceivedSpan], transport: &str, session: &str) {
    for method in ["initialize", "tools/list"] {
        let sent = spans
            .iter()
            .find(|s| s.name == method && s.kind == CLIENT)
            .unwrap_or_else(|| panic!("no {method} sent upstream: {spans:#?}"));
        check_attributes(
            sent,
            CLIENT,
            &[
                ("mcp.method.name", method),
                ("network.transport", transport),
            ],
        );
        assert!(
            sent.attributes.contains_key("jsonrpc.request.id"),
            "{sent:#?}"
        );
    }
    let listed = spans
        .iter()
        .find(|s| s.name == "tools/list" && s.kind == CLIENT)
        .expect("tools/list sent");
    assert!(
        listed.attributes.contains_key("mcp.protocol.version"),
        "known after initialize: {listed:#?}"
    );
    let (_, tag) = session.split_once('.').expect("<nonce>.<tag>");
    for span in spans {
        for value in span.attributes.values() {
            assert!(!value.contains(tag), "the session's tag in {span:#?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_one_trace_from_the_caller_to_the_tool_server() {
    let receiver = OtlpReceiver::start().await;
    let bridge = bridge_with(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
        // Only the flush at shutdown sends: what arrives proves it.
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
    ])
    .await;
    let mcp = session(&bridge).await;

    // The caller's context in the HTTP header, with a tracestate to pass on.
    let header = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    let by_header = echo_meta(
        &mcp,
        2,
        json!({}),
        &[("traceparent", &header), ("tracestate", "caller=1")],
    )
    .await;
    assert_eq!(by_header["tracestate"], json!("caller=1"), "{by_header}");
    // The caller's context in `_meta`, which wins over a header.
    let in_meta = format!("00-{META_TRACE}-{META_PARENT}-01");
    let other = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    let by_meta = echo_meta(
        &mcp,
        3,
        json!({"traceparent": in_meta}),
        &[("traceparent", &other)],
    )
    .await;
    // No context at all: a new trace, still passed on.
    let fresh = echo_meta(&mcp, 4, json!({}), &[]).await;
    // Other requests served have their spans too: a list, and one answered with an error.
    let listed = format!("00-{LIST_TRACE}-{HEADER_PARENT}-01");
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}});
    let answer = mcp
        .post(list.to_string(), &[("traceparent", &listed)])
        .await;
    assert!(answer.message.is_some_and(|m| m.get("result").is_some()));
    let failing = format!("00-{FAIL_TRACE}-{HEADER_PARENT}-01");
    let read = json!({"jsonrpc": "2.0", "id": "r-6", "method": "resources/read",
        "params": {"uri": "bridge://nowhere/at-all"}});
    let answer = mcp
        .post(read.to_string(), &[("traceparent", &failing)])
        .await;
    let error = answer.message.expect("an answer")["error"].clone();
    let code = error["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {error}"));
    let session_id = mcp.session.clone().expect("a session");
    let nonce = session_id.split('.').next().unwrap();

    assert!(
        receiver.spans().is_empty(),
        "nothing exported before the flush"
    );
    let status = bridge.stop().await.expect("the bridge stops on SIGTERM");
    assert!(status.success(), "{status:?}");

    let spans = receiver.spans();
    let call = |id| Call {
        id,
        session: nonce,
        transport: "pipe",
    };
    check_call(&spans, HEADER_TRACE, HEADER_PARENT, &by_header, call("2"));
    check_call(&spans, META_TRACE, META_PARENT, &by_meta, call("3"));
    let (fresh_trace, _) = parts(fresh["traceparent"].as_str().expect("a traceparent"));
    assert_ne!(fresh_trace, HEADER_TRACE);
    assert_ne!(fresh_trace, META_TRACE);
    let root = one(&spans, &fresh_trace, "tools/call demo__echo_meta");
    assert_eq!(
        root.parent_span_id, "",
        "a call without a context starts a trace"
    );
    check_call(&spans, &fresh_trace, "", &fresh, call("4"));
    let list = one(&spans, LIST_TRACE, "tools/list");
    assert_eq!(list.parent_span_id, HEADER_PARENT);
    check_attributes(
        list,
        SERVER,
        &[
            ("mcp.method.name", "tools/list"),
            ("jsonrpc.request.id", "5"),
            ("mcp.session.id", nonce),
            ("network.transport", "tcp"),
        ],
    );
    for key in ["gen_ai.tool.name", "gen_ai.operation.name", "error.type"] {
        assert_eq!(attr(list, key), None, "{key}: {list:#?}");
    }
    let read = one(&spans, FAIL_TRACE, "resources/read");
    let code = code.to_string();
    check_attributes(
        read,
        SERVER,
        &[
            ("jsonrpc.request.id", "r-6"),
            ("error.type", &code),
            ("rpc.response.status_code", &code),
        ],
    );
    let initialize = spans
        .iter()
        .find(|s| s.name == "initialize" && s.kind == SERVER)
        .unwrap_or_else(|| panic!("the session's initialize: {spans:#?}"));
    assert_eq!(attr(initialize, "mcp.protocol.version"), Some("2025-06-18"));
    check_upstream_requests_and_secrets(&spans, "pipe", &session_id);
    // Only the bridge's own spans: no other crate's. Every one but the job's own is an MCP
    // request's.
    for span in &spans {
        assert!(
            ["job", "terminal_event"].contains(&span.name.as_str())
                || span.attributes.contains_key("mcp.method.name"),
            "{span:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_gets_the_trace_context_as_a_header_too() {
    let receiver = OtlpReceiver::start().await;
    let demo = start_http_demo().await;
    let config = format!(
        "[[upstreams]]\nname = \"demo\"\ntransport = \"http\"\nurl = \"{}\"\n",
        demo.url
    );
    let bridge = spawn_bridge(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    )
    .await;
    let mcp = session(&bridge).await;
    let header = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    let echoed = echo(&mcp, 2, json!({}), &[("traceparent", &header)]).await;
    bridge.stop().await.expect("the bridge stops");
    let spans = receiver.spans();
    let session_id = mcp.session.clone().expect("a session");
    let call = Call {
        id: "2",
        session: session_id.split('.').next().unwrap(),
        transport: "tcp",
    };
    check_call(&spans, HEADER_TRACE, HEADER_PARENT, &echoed["meta"], call);
    check_upstream_requests_and_secrets(&spans, "tcp", &session_id);
    assert_eq!(
        echoed["traceparent_header"], echoed["meta"]["traceparent"],
        "the header says what `_meta` says: {echoed}"
    );
    demo.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_delays_a_stop_by_the_flush_bound_at_most() {
    // Accepts every connection and request, answers none.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let silent = Router::new().route("/v1/traces", post(std::future::pending::<()>));
    let server = tokio::spawn(async move { axum::serve(listener, silent).await });
    // In a directory of the test's own: the log outlives the process.
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{SERVER_ON_PORT_0}\n{}", demo_upstream_toml("{}"));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ("RUST_LOG", "info,rmcp=warn"),
    ];
    let bridge = BridgeProcess::start(Path::new(BIN), Some(dir.path()), "silent", &config, &env)
        .await
        .unwrap_or_else(|e| panic!("the bridge did not start: {e}"));
    let mcp = session(&bridge).await;
    echo_meta(&mcp, 2, json!({}), &[]).await;
    let log = dir.path().join("silent.log");
    let started = std::time::Instant::now();
    let status = bridge.stop().await.expect("the bridge stops by itself");
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    // The flush bound (5 s) and the rest of a shutdown, well under the 60 s export timeout.
    assert!(took < Duration::from_secs(15), "the stop took {took:?}");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        log.contains("the last traces could not be exported"),
        "{log}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_variables_there_are_no_traces_and_no_trace_context() {
    let receiver = OtlpReceiver::start().await;
    let header = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    // No endpoint: no exporter. An endpoint with traces turned off (both standard ways): none
    // either, and the receiver would see anything sent.
    let cases: [&[(&str, &str)]; 3] = [
        // JSON logs: a job's lines, written inside its spans, carry no ids either.
        &[("BRIDGE_LOG_JSON", "true")],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_TRACES_EXPORTER", "none"),
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    ];
    for env in cases {
        let bridge = bridge_with(env).await;
        let mcp = session(&bridge).await;
        let reached = echo_meta(&mcp, 2, json!({}), &[("traceparent", &header)]).await;
        assert!(
            reached.get("traceparent").is_none(),
            "{env:?}: no trace context is made or passed on: {reached}"
        );
        assert!(reached.get("progressToken").is_some(), "{reached}");
        let log = bridge.log();
        assert!(!log.contains("exporting traces"), "{env:?}: {log}");
        eventually("the job's end is logged", || async {
            bridge.log().contains("job ended")
        })
        .await;
        let log = bridge.log();
        assert!(!log.contains("trace_id"), "{env:?}: {log}");
        bridge.stop().await.expect("the bridge stops");
    }
    assert_eq!(receiver.requests(), 0, "nothing was exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_setting_the_bridge_cannot_honour_stops_it_at_start() {
    let config = format!("{SERVER_ON_PORT_0}\n{}", demo_upstream_toml("{}"));
    for (env, says) in [
        (
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\"",
        ),
        (
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_TRACES_EXPORTER", "zipkin"),
            ],
            "OTEL_TRACES_EXPORTER=\"zipkin\"",
        ),
    ] {
        let started =
            BridgeProcess::start(std::path::Path::new(BIN), None, "otel", &config, &env).await;
        let Err(error) = started else {
            panic!("{env:?}: the bridge started");
        };
        let error = error.to_string();
        assert!(
            error.starts_with("the bridge refused its config"),
            "{env:?}: want a config error (exit 2), got {error}"
        );
        assert!(error.contains(says), "{error}");
    }
}

/// A JSON log line as the bridge wrote it.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect()
}

/// The one line whose message is `message`.
fn line_saying<'a>(lines: &'a [Value], message: &str) -> &'a Value {
    let found: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == message)
        .collect();
    assert_eq!(found.len(), 1, "one {message:?} line: {lines:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_inside_a_span_carry_the_ids_of_the_exported_span() {
    let receiver = OtlpReceiver::start().await;
    let bridge = bridge_with(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ("BRIDGE_LOG_JSON", "true"),
    ])
    .await;
    let mcp = session(&bridge).await;
    let header = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    echo_meta(&mcp, 2, json!({}), &[("traceparent", &header)]).await;
    eventually("the job's end is logged", || async {
        bridge.log().contains("\"job ended\"")
    })
    .await;
    let log = bridge.log();
    bridge.stop().await.expect("the bridge stops");
    let spans = receiver.spans();
    let lines = json_lines(&log);
    let job = one(&spans, HEADER_TRACE, "job");
    let created = line_saying(&lines, "job created");
    let ended = line_saying(&lines, "job ended");
    assert_eq!(created["trace_id"], HEADER_TRACE, "{created}");
    assert_eq!(created["span_id"], job.span_id.as_str(), "{created}");
    assert_eq!(ended["trace_id"], HEADER_TRACE, "{ended}");
    assert_eq!(ended["span_id"], job.span_id.as_str(), "{ended}");
    let hex = |v: &Value, len: usize| {
        v.as_str().is_some_and(|s| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        })
    };
    let mut with_ids = 0;
    for line in &lines {
        let (Some(trace), Some(span)) = (line.get("trace_id"), line.get("span_id")) else {
            assert!(line.get("span_id").is_none(), "{line}");
            continue;
        };
        with_ids += 1;
        assert!(hex(trace, 32) && hex(span, 16), "well-formed ids: {line}");
        assert!(
            spans
                .iter()
                .any(|s| s.trace_id == *trace && s.span_id == *span),
            "the ids of a span the bridge exported: {line}"
        );
    }
    assert!(with_ids >= 2, "{log}");
    let outside = line_saying(&lines, "bridge listening");
    assert!(
        outside.get("trace_id").is_none(),
        "no span, no ids: {outside}"
    );
}

/// An upstream that never answers cannot make the bridge hold spans without bound: with
/// `limits.max_upstream_request_spans = 4`, seven `resources/read` left unanswered by the
/// upstream open four request spans; the other three go untraced, each counted under the key,
/// and what is exported when the bridge stops is those four spans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_holds_at_most_the_bound_of_request_spans() {
    const BOUND: usize = 4;
    const READS: usize = 7;
    let Some(python) = python() else {
        return;
    };
    let receiver = OtlpReceiver::start().await;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/silent_upstream.py"
    );
    let config = format!(
        "[limits]\nmax_upstream_request_spans = {BOUND}\n\
         [[upstreams]]\nname = \"silent\"\ntransport = \"stdio\"\ncommand = \"{python}\"\n\
         args = [\"{fixture}\"]\n"
    );
    let bridge = spawn_bridge(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    )
    .await;
    let client = connect_url(&bridge.mcp_url()).await;
    let resources = within("resources/list", client.list_all_resources())
        .await
        .expect("resources/list");
    let uri = resources.first().expect("the silent resource").uri.clone();
    let reads: Vec<_> = (0..READS)
        .map(|_| {
            let peer = client.peer().clone();
            let params = rmcp::model::ReadResourceRequestParams::new(uri.clone());
            tokio::spawn(async move { peer.read_resource(params).await })
        })
        .collect();
    let hits = format!(
        "bridge_limit_hits_total{{limit=\"max_upstream_request_spans\"}} {}",
        READS - BOUND
    );
    eventually("the reads past the bound counted", || async {
        metrics_text(&bridge.base()).await.contains(&hits)
    })
    .await;
    assert!(
        reads.iter().all(|r| !r.is_finished()),
        "the upstream answered no read"
    );
    for read in &reads {
        read.abort();
    }
    client.cancel().await.ok();
    bridge.stop().await.expect("the bridge stops on SIGTERM");

    let upstream_reads: Vec<_> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.kind == CLIENT && s.name == "resources/read")
        .collect();
    assert_eq!(
        upstream_reads.len(),
        BOUND,
        "request spans of the reads: {upstream_reads:#?}"
    );
    for span in &upstream_reads {
        assert!(attr(span, "error.type").is_some(), "{span:#?}");
    }
}
