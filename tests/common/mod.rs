//! Shared helpers for the integration tests: a real bridge on a free port with the demo tool
//! server as a real child process (or over Streamable HTTP), rmcp's own client to drive it,
//! and an SSE reader built on reqwest-eventsource. Every wait has a timeout; nothing sleeps to
//! synchronise.

#![allow(dead_code)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use mcp_progress_bridge::{
    app::{self, RunningBridge},
    auth::JobTokens,
    config::{CallMode, Config, Secret, ToolConfig, TransportKind, UpstreamConfig},
};
use reqwest_eventsource::{Event, EventSource};
use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult, ProgressNotificationParam},
    service::{NotificationContext, RunningService},
    transport::StreamableHttpClientTransport,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Upper bound for any single wait. Generous: CI machines are shared and slow, and a passing
/// test never waits this long.
pub const WAIT: Duration = Duration::from_secs(20);
pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-progress-bridge");

/// Run `future` with the [`WAIT`] bound, failing the test with `what` if it takes longer.
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// The demo tool server as a stdio upstream: this test binary's sibling, the bridge itself.
pub fn demo_stdio_upstream(name: &str) -> UpstreamConfig {
    UpstreamConfig {
        name: name.into(),
        transport: TransportKind::Stdio,
        command: Some(BIN.into()),
        args: vec!["demo-tools".into()],
        env: Default::default(),
        cwd: None,
        url: None,
        headers: Default::default(),
        mode: None,
        tools: Default::default(),
    }
}

pub fn http_upstream(name: &str, url: &str) -> UpstreamConfig {
    UpstreamConfig {
        name: name.into(),
        transport: TransportKind::Http,
        command: None,
        args: Vec::new(),
        env: Default::default(),
        cwd: None,
        url: Some(url.into()),
        headers: Default::default(),
        mode: None,
        tools: Default::default(),
    }
}

/// Set one tool's mode on an upstream config.
pub fn with_tool_mode(mut upstream: UpstreamConfig, tool: &str, mode: CallMode) -> UpstreamConfig {
    upstream
        .tools
        .insert(tool.into(), ToolConfig { mode: Some(mode) });
    upstream
}

/// A bridge running in this process on 127.0.0.1 with a free port.
pub struct TestBridge {
    pub bridge: Option<RunningBridge>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

impl TestBridge {
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The events URL of a correlation, with its token.
    pub fn correlation_events_url(&self, cid: &str) -> String {
        let token = job_tokens().correlation(&cid.parse().expect("a valid correlation ID"));
        format!("{}/correlations/{cid}/events?token={token}", self.base)
    }

    pub fn running(&self) -> &RunningBridge {
        self.bridge.as_ref().expect("bridge running")
    }

    pub async fn shutdown(mut self, grace: Duration) {
        if let Some(bridge) = self.bridge.take() {
            bridge.shutdown(grace).await;
        }
    }
}

/// Start a bridge with the demo tools as stdio upstream `demo`, after `configure` has had its
/// say, and wait until every upstream is ready.
pub async fn start_bridge(configure: impl FnOnce(&mut Config)) -> TestBridge {
    let mut config = Config::default_for_tests();
    config.upstreams = vec![demo_stdio_upstream("demo")];
    configure(&mut config);
    start_config(config).await
}

/// The `auth.job_secret` of test bridges that set none: every test bridge (and every replica
/// in a test) signs job URLs alike, and tests can mint tokens with [`job_tokens`].
pub const TEST_JOB_SECRET: &str = "test-job-secret-0123456789abcdef-not-for-production";

/// Mints the tokens a test bridge with [`TEST_JOB_SECRET`] accepts.
pub fn job_tokens() -> JobTokens {
    JobTokens::new(TEST_JOB_SECRET.as_bytes())
}

/// Start a bridge with exactly this config (its listen address is replaced by a free port; a
/// missing `auth.job_secret` becomes [`TEST_JOB_SECRET`]).
pub async fn start_config(mut config: Config) -> TestBridge {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    config.server.listen = addr;
    config.server.public_url = format!("http://{addr}");
    if config.auth.job_secret.is_none() {
        config.auth.job_secret = Some(Secret::literal(TEST_JOB_SECRET));
    }
    let bridge = app::start_with_listener(config, listener)
        .await
        .expect("bridge starts");
    for upstream in bridge.upstreams.iter() {
        assert!(
            upstream.ready(WAIT).await,
            "upstream {} did not become ready",
            upstream.name()
        );
    }
    TestBridge {
        bridge: Some(bridge),
        base: format!("http://{addr}"),
    }
}

/// The demo tools served over Streamable HTTP in this process; stops when dropped.
pub struct HttpDemo {
    pub url: String,
    ct: CancellationToken,
}

impl Drop for HttpDemo {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

pub async fn start_http_demo() -> HttpDemo {
    let ct = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    let router = mcp_progress_bridge::demo::http_router(ct.clone());
    let stop = ct.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    HttpDemo {
        url: format!("http://{addr}/mcp"),
        ct,
    }
}

/// An MCP client that records the progress notifications it receives on its own requests.
#[derive(Clone, Default)]
pub struct ProgressRecorder {
    seen: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    changed: Arc<Notify>,
}

impl ProgressRecorder {
    pub fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.seen.lock().unwrap().clone()
    }
}

impl ClientHandler for ProgressRecorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.lock().unwrap().push(params);
        self.changed.notify_waiters();
    }
}

pub type McpClient = RunningService<RoleClient, ProgressRecorder>;

/// rmcp's own client, connected to the bridge's `/mcp` over Streamable HTTP.
pub async fn connect(bridge: &TestBridge) -> McpClient {
    connect_url(&bridge.mcp_url()).await
}

pub async fn connect_url(url: &str) -> McpClient {
    let transport = StreamableHttpClientTransport::from_uri(url);
    within(
        "MCP initialize",
        ProgressRecorder::default().serve(transport),
    )
    .await
    .expect("MCP initialize")
}

/// rmcp's client with `Authorization: Bearer <token>` on every request.
pub async fn connect_with_token(bridge: &TestBridge, token: &str) -> McpClient {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            bridge.mcp_url(),
        )
        .auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    within(
        "MCP initialize",
        ProgressRecorder::default().serve(transport),
    )
    .await
    .expect("MCP initialize")
}

pub fn args(value: Value) -> Option<rmcp::model::JsonObject> {
    match value {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => panic!("tool arguments must be an object, got {other}"),
    }
}

/// Call a tool through the bridge and return its result (panics on a protocol error).
pub async fn call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Some(arguments) = args(arguments) {
        params = params.with_arguments(arguments);
    }
    within(&format!("call {tool}"), client.call_tool(params))
        .await
        .unwrap_or_else(|e| panic!("call {tool} failed: {e}"))
}

/// The structured content of a result, or its first text content parsed as JSON.
pub fn structured(result: &CallToolResult) -> Value {
    if let Some(value) = &result.structured_content {
        return value.clone();
    }
    let text = result
        .content
        .iter()
        .find_map(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

pub fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// One SSE event as a reader sees it.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: String,
    pub event: String,
    pub data: Value,
}

impl SseEvent {
    pub fn seq(&self) -> u64 {
        self.id
            .parse()
            .unwrap_or_else(|_| panic!("event id {:?} is not a number", self.id))
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.event.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// Open an SSE stream (optionally resuming after `last_event_id`) and read events until
/// `stop` says enough or the stream ends. The stream is not reconnected.
pub async fn read_sse(
    url: &str,
    last_event_id: Option<u64>,
    stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    read_sse_request(request, stop).await
}

pub async fn read_sse_request(
    request: reqwest::RequestBuilder,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let mut source = EventSource::new(request).expect("an SSE request");
    let mut events = Vec::new();
    within("SSE events", async {
        while let Some(item) = source.next().await {
            match item {
                Ok(Event::Open) => {}
                Ok(Event::Message(m)) => {
                    let data =
                        serde_json::from_str(&m.data).unwrap_or(Value::String(m.data.clone()));
                    let event = SseEvent {
                        id: m.id,
                        event: m.event,
                        data,
                    };
                    let enough = stop(&event);
                    events.push(event);
                    if enough {
                        break;
                    }
                }
                Err(reqwest_eventsource::Error::StreamEnded) => break,
                Err(e) => panic!("SSE stream failed: {e}"),
            }
        }
    })
    .await;
    source.close();
    events
}

/// Read a job's stream from the start until its terminal event.
pub async fn read_job_events(events_url: &str) -> Vec<SseEvent> {
    read_sse(events_url, None, SseEvent::is_terminal).await
}

/// The `progress` values of the progress events, in order.
pub fn progress_values(events: &[SseEvent]) -> Vec<f64> {
    events
        .iter()
        .filter(|e| e.event == "progress")
        .map(|e| e.data["progress"].as_f64().expect("progress is a number"))
        .collect()
}

/// GET a URL and return the status and JSON body.
pub async fn get_json(url: &str) -> (u16, Value) {
    let response = within("GET", reqwest::get(url)).await.expect("GET");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

pub async fn post_json(url: &str) -> (u16, Value) {
    let response = within("POST", reqwest::Client::new().post(url).send())
        .await
        .expect("POST");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// A Python 3 to run test fixtures with (`BRIDGE_TEST_PYTHON`, else `python3`), or `None`
/// after saying why the caller skips; with `BRIDGE_TEST_STRICT=1` a missing one fails.
pub fn python() -> Option<String> {
    let python = std::env::var("BRIDGE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let works = std::process::Command::new(&python)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let why = format!("{python} does not run: install Python 3 or set BRIDGE_TEST_PYTHON");
    if std::env::var("BRIDGE_TEST_STRICT").is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// The test-only misbehaving MCP server (tests/fixtures/misbehaving_upstream.py) as a stdio
/// upstream.
pub fn misbehaving_upstream(name: &str, python: &str) -> UpstreamConfig {
    let mut upstream = demo_stdio_upstream(name);
    upstream.command = Some(python.into());
    upstream.args = vec![
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/misbehaving_upstream.py"
        )
        .into(),
    ];
    upstream
}

/// A raw MCP Streamable HTTP client for requests no SDK would send.
pub struct RawMcp {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    client: reqwest::Client,
}

/// A raw answer: the status, the headers and the JSON-RPC message in the body, if any (read
/// from JSON or from the SSE stream of the answer).
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    pub message: Option<Value>,
}

impl RawAnswer {
    pub fn rpc_error_code(&self) -> Option<i64> {
        self.message.as_ref()?["error"]["code"].as_i64()
    }
}

impl RawMcp {
    pub fn new(url: &str, token: Option<&str>) -> Self {
        Self {
            url: url.into(),
            token: token.map(str::to_string),
            session: None,
            client: reqwest::Client::new(),
        }
    }

    /// A POST with the usual MCP headers, the session and the token (when set) and `extra`.
    pub async fn post(&self, body: impl Into<reqwest::Body>, extra: &[(&str, &str)]) -> RawAnswer {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = within("raw MCP POST", request.send()).await.expect("POST");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = within("raw MCP body", response.text())
            .await
            .unwrap_or_default();
        let message = serde_json::from_str(&body).ok().or_else(|| {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id").is_some() || m.get("error").is_some())
        });
        RawAnswer {
            status,
            headers,
            body,
            message,
        }
    }

    /// initialize + notifications/initialized; keeps the session ID.
    pub async fn initialize(&mut self) -> RawAnswer {
        let answer = self
            .post(
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
                &[],
            )
            .await;
        self.session = answer
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let done = self
            .post(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                &[],
            )
            .await;
        assert_eq!(done.status, 202, "initialized: {}", done.body);
        answer
    }
}

/// Send `request_target` as the raw request line's target (no normalisation on the way) and
/// return the status code.
pub async fn raw_http_status(addr: std::net::SocketAddr, method: &str, target: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = within("connect", tokio::net::TcpStream::connect(addr))
        .await
        .expect("connect");
    let request =
        format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    within("raw response", async {
        while !head.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {line:?}"))
}
