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
    config::{CallMode, Config, Secret, UpstreamConfig},
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
    UpstreamConfig::stdio(name, BIN, &["demo-tools"])
}

pub fn http_upstream(name: &str, url: &str) -> UpstreamConfig {
    UpstreamConfig::http(name, url)
}

/// Set one tool's mode on an upstream config.
pub fn with_tool_mode(mut upstream: UpstreamConfig, tool: &str, mode: CallMode) -> UpstreamConfig {
    upstream.tools.entry(tool.into()).or_default().mode = Some(mode);
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
pub async fn start_config(config: Config) -> TestBridge {
    start_config_at(config, None).await
}

/// [`start_config`], with job handles pointing at `public_url` instead of the bridge itself
/// (for a bridge behind a [`DropProxy`]).
/// With `BRIDGE_TEST_STORE=redis` (a second pass in `.ci/run`), a memory-store config runs on
/// the test Redis instead, under a fresh key prefix: the whole end-to-end suite then checks
/// that both stores behave alike.
pub async fn start_config_at(mut config: Config, public_url: Option<String>) -> TestBridge {
    let on_test_redis = std::env::var("BRIDGE_TEST_STORE").is_ok_and(|v| v == "redis")
        && config.store.backend == mcp_progress_bridge::config::StoreBackend::Memory;
    if on_test_redis {
        let url = test_redis("BRIDGE_TEST_STORE=redis")
            .await
            .expect("BRIDGE_TEST_STORE=redis needs a Redis");
        config.store.backend = mcp_progress_bridge::config::StoreBackend::Redis;
        config.store.redis_url = url;
        config.store.key_prefix = unique_prefix("e2e");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    config.server.listen = addr;
    config.server.public_url = public_url.unwrap_or_else(|| format!("http://{addr}"));
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
    // (A test that configures Redis itself may keep it down on purpose: no wait then.)
    if on_test_redis {
        let store = bridge.store.clone();
        within("the store is ready", async {
            while store.ping().await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
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

impl HttpDemo {
    /// `host:port` of the server.
    pub fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }

    /// Stop the server and wait until its port is free again.
    pub async fn stop(self) {
        let authority = self.authority();
        drop(self);
        within("the demo server stops", async {
            while tokio::net::TcpStream::connect(&authority).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

pub async fn start_http_demo() -> HttpDemo {
    start_http_demo_at("127.0.0.1:0").await
}

/// The demo tools over Streamable HTTP on a given address (to restart one on the same port).
pub async fn start_http_demo_at(addr: &str) -> HttpDemo {
    let ct = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind the demo's address");
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
    tool_list_changes: Arc<std::sync::atomic::AtomicUsize>,
}

impl ProgressRecorder {
    pub fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.seen.lock().unwrap().clone()
    }

    /// How many `notifications/tools/list_changed` the client has received.
    pub fn tool_list_changes(&self) -> usize {
        self.tool_list_changes
            .load(std::sync::atomic::Ordering::SeqCst)
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

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tool_list_changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

pub type McpClient = RunningService<RoleClient, ProgressRecorder>;

/// The progress values the client got on its own requests, once it has `n` of them, sorted.
/// rmcp's client hands each notification to its handler in a task of its own, so the last ones
/// may be handled after the answer, and in any order (the bridge sends them in order before
/// the answer; the Python SDK's interop test checks the order on the wire).
pub async fn caller_progress(client: &McpClient, n: usize) -> Vec<f64> {
    within("the caller's progress notifications", async {
        loop {
            let mut seen: Vec<f64> = client
                .service()
                .progress()
                .iter()
                .map(|p| p.progress)
                .collect();
            if seen.len() >= n {
                seen.sort_by(f64::total_cmp);
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

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

/// The cancels upstream `name` has seen, once it has seen `at_least` of them.
pub async fn cancels_seen(client: &McpClient, upstream: &str, at_least: usize) -> Vec<Value> {
    within(&format!("{upstream} sees {at_least} cancel(s)"), async {
        loop {
            let seen = structured(
                &call(
                    client,
                    &format!("{upstream}__cancellations"),
                    serde_json::json!({}),
                )
                .await,
            );
            let list = seen["cancelled"].as_array().cloned().unwrap_or_default();
            if list.len() >= at_least {
                return list;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// A client whose every request carries `X-Correlation-Id: cid`.
pub async fn connect_correlated(bridge: &TestBridge, cid: &str) -> McpClient {
    let mut headers = std::collections::HashMap::new();
    headers.insert(
        http::HeaderName::from_static("x-correlation-id"),
        http::HeaderValue::from_str(cid).unwrap(),
    );
    let transport = StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            bridge.mcp_url(),
        )
        .custom_headers(headers),
    );
    within("initialize", ProgressRecorder::default().serve(transport))
        .await
        .unwrap()
}

/// `event["field"]` reads a field of the event's JSON data.
impl std::ops::Index<&str> for SseEvent {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        &self.data[key]
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
    stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    read_sse_request_within(WAIT, request, stop).await
}

/// [`read_sse_request`] with its own bound, for a test whose readers all live for the whole
/// test (a thousand of them on a shared two-core machine take a while to open).
pub async fn read_sse_request_within(
    bound: Duration,
    request: reqwest::RequestBuilder,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let mut source = EventSource::new(request).expect("an SSE request");
    let mut events = Vec::new();
    tokio::time::timeout(bound, async {
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
    .await
    .unwrap_or_else(|_| panic!("timed out: SSE events"));
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

/// GET a URL; `None` while nothing listens there yet.
pub async fn try_get_json(url: &str) -> Option<(u16, Value)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.unwrap_or(Value::Null)))
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

/// A TCP proxy in front of a bridge that can cut every open connection on demand, the way a
/// flaky network or a restarting load balancer would: clients see their streams drop and must
/// resume. `POST {control_url}/drop` (for scripts in other processes) or [`DropProxy::drop_all`]
/// cuts them; the proxy keeps accepting new connections.
pub struct DropProxy {
    /// `http://127.0.0.1:PORT`: give this to clients (and as the bridge's public URL).
    pub base: String,
    pub control_url: String,
    cut: tokio::sync::broadcast::Sender<()>,
    drops: Arc<std::sync::atomic::AtomicUsize>,
    ct: CancellationToken,
}

impl DropProxy {
    /// Bind the proxy's ports now (so the bridge can be told its public URL); forward to the
    /// bridge once [`DropProxy::forward_to`] names it.
    pub async fn bind() -> (Self, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let addr = listener.local_addr().expect("local address");
        let (cut, _) = tokio::sync::broadcast::channel(4);
        let proxy = DropProxy {
            base: format!("http://{addr}"),
            control_url: String::new(),
            cut,
            drops: Arc::default(),
            ct: CancellationToken::new(),
        };
        (proxy, listener)
    }

    /// Start forwarding connections from `listener` to `target` and serve the control port.
    pub async fn forward_to(&mut self, listener: tokio::net::TcpListener, target: &str) {
        let target = target.trim_start_matches("http://").to_string();
        let cut = self.cut.clone();
        let ct = self.ct.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = ct.cancelled() => return,
                };
                let Ok((mut inbound, _)) = accepted else {
                    continue;
                };
                let target = target.clone();
                let mut cut = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.recv() => {}
                    }
                    // Dropping both sockets closes them: the client sees its stream end.
                });
            }
        });
        let control = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        self.control_url = format!("http://{}", control.local_addr().expect("address"));
        let cut = self.cut.clone();
        let drops = self.drops.clone();
        let router = axum::Router::new().route(
            "/drop",
            axum::routing::post(move || {
                let cut = cut.clone();
                let drops = drops.clone();
                async move {
                    let cut_now = cut.send(()).unwrap_or(0);
                    drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    format!("cut {cut_now} connections")
                }
            }),
        );
        let stop = self.ct.clone();
        tokio::spawn(async move {
            let _ = axum::serve(control, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
    }

    /// Cut every connection open now.
    pub fn drop_all(&self) -> usize {
        self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.cut.send(()).unwrap_or(0)
    }

    /// How many times connections were cut (through either way).
    pub fn drops(&self) -> usize {
        self.drops.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for DropProxy {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

/// A bridge (demo tools as a real stdio child) reached through a [`DropProxy`]: job handles
/// name the proxy, so every client of the job streams goes through it.
pub async fn start_bridge_behind_proxy(
    configure: impl FnOnce(&mut Config),
) -> (TestBridge, DropProxy) {
    let (mut proxy, listener) = DropProxy::bind().await;
    let mut config = Config::default_for_tests();
    config.upstreams = vec![demo_stdio_upstream("demo")];
    configure(&mut config);
    let bridge = start_config_at(config, Some(proxy.base.clone())).await;
    proxy.forward_to(listener, &bridge.base).await;
    (bridge, proxy)
}

/// Whether CI asked for every prerequisite to be present (`BRIDGE_TEST_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("BRIDGE_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// Whether a prerequisite is present; when it is not, the test is skipped with the reason
/// printed, or, under `BRIDGE_TEST_STRICT=1`, fails (see [`skip_or_fail`]).
pub fn prerequisite(present: bool, what: &str) -> bool {
    if !present {
        skip_or_fail(std::thread::current().name().unwrap_or("test"), what);
    }
    present
}

/// The Python interpreter of a venv that has the official MCP SDK: `BRIDGE_TEST_PYTHON`, or
/// the repository's `.venv` if it has one.
pub fn python_with_mcp() -> Option<std::path::PathBuf> {
    let candidate = std::env::var_os("BRIDGE_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
        });
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(candidate)
}

/// A test that needs something outside Rust (node, Chromium, a Python venv) calls this when it
/// is missing: it prints why the test is skipped and returns, unless `BRIDGE_TEST_STRICT=1`,
/// where a missing prerequisite is a failure.
pub fn skip_or_fail(test: &str, why: &str) {
    if strict() {
        panic!("{test}: {why} (BRIDGE_TEST_STRICT=1: prerequisites must be present; run .ci/run)");
    }
    // Straight to the process's stderr: `eprintln!` would be captured, and the reason lost,
    // for a test that passes by skipping.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (.ci/run installs it)"
    );
}

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory (`target/` or CARGO_TARGET_DIR): where tests leave files for people.
pub fn target_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf()
}

/// `node`, if it is on PATH and answers.
pub fn node() -> Option<std::path::PathBuf> {
    let ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| "node".into())
}

/// Run a command to its end (bounded by `limit`) from an async test, with its output captured;
/// the output is printed so a failing test shows it.
pub async fn run_to_end(
    mut command: tokio::process::Command,
    limit: Duration,
) -> std::process::Output {
    command.kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{command:?} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    println!(
        "--- {:?} exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
        command.as_std().get_program(),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

// ---------------------------------------------------------------------------------------------
// Redis: the shared server, private servers a test may stop and restart, and bridge processes.

/// Skip `test` with a printed reason, or fail it in strict mode (see [`skip_or_fail`]).
pub fn skip<T>(test: &str, reason: &str) -> Option<T> {
    skip_or_fail(test, reason);
    None
}

/// The Redis the tests share: `BRIDGE_TEST_REDIS_URL`, else the default local one, if it
/// answers `PING`.
pub async fn test_redis(test: &str) -> Option<String> {
    let url = std::env::var("BRIDGE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    match redis_ping(&url).await {
        Ok(()) => Some(url),
        Err(e) => skip(
            test,
            &format!(
                "no Redis answers at {url} ({e}); start one (`redis-server`) or set BRIDGE_TEST_REDIS_URL"
            ),
        ),
    }
}

async fn redis_ping(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(Duration::from_secs(2), ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2 s".into()),
    }
}

/// A key prefix no other test (or run) uses.
pub fn unique_prefix(test: &str) -> String {
    format!("test-{test}-{:016x}", fastrand::u64(..))
}

/// A TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `redis-server` of the test's own, on a free port, with its data in a temporary
/// directory (append-only file, fsync always: a restart loses nothing). Stopped when dropped.
pub struct PrivateRedis {
    pub port: u16,
    pub url: String,
    dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    pub async fn start(test: &str) -> Option<Self> {
        let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        if binary.is_none() {
            return skip(
                test,
                "redis-server is not installed (apt-get install redis-server)",
            );
        }
        let port = free_port();
        let mut redis = Self {
            port,
            url: format!("redis://127.0.0.1:{port}"),
            dir: tempfile::tempdir().expect("a temporary directory"),
            child: None,
        };
        redis.run().await;
        Some(redis)
    }

    async fn run(&mut self) {
        let dir = self.dir.path();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let url = self.url.clone();
        within("the private redis-server answers", async {
            while redis_ping(&url).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// Stop it (SIGTERM: Redis finishes writing its data) and wait until it has exited.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            within("redis-server exits", async {
                while child.try_wait().expect("wait").is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
        }
    }

    pub async fn restart(&mut self) {
        self.stop().await;
        self.run().await;
    }

    /// `CLIENT LIST` lines of every connection but the one asking.
    pub async fn other_clients(&self) -> Vec<String> {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        // The crate's default response timeout (500 ms) is short for a loaded test machine.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let me: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .unwrap();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await
            .unwrap();
        list.lines()
            .filter(|l| !l.starts_with(&format!("id={me} ")))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `[store]` section for a Redis-backed bridge in tests: short lease, so owner loss is
/// noticed within a few seconds.
pub fn redis_store_toml(url: &str, prefix: &str, lease_secs: u64) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\nkey_prefix = \"{prefix}\"\nlease_secs = {lease_secs}\n"
    )
}

/// A bridge as a separate process (the built binary) on a free port, with the demo tools as
/// its upstream (`cancellations` answered in sync mode) and `extra` appended to its config.
/// Killed when dropped.
pub struct BridgeProcess {
    pub base: String,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
}

impl BridgeProcess {
    pub async fn start(extra: &str) -> Self {
        let port = free_port();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
             [jobs]\nmode = \"async\"\n\
             [auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n\
             {extra}\n\
             [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"{BIN}\"\n\
             args = [\"demo-tools\"]\ntools = {{ cancellations = {{ mode = \"sync\" }} }}\n"
        );
        let path = dir.path().join("bridge.toml");
        std::fs::write(&path, config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("bridge.log")).expect("a log file");
        let child = std::process::Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .env_remove("BRIDGE_LISTEN")
            .env_remove("BRIDGE_PUBLIC_URL")
            .env_remove("BRIDGE_REDIS_URL")
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the bridge starts");
        let bridge = Self {
            base: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            dir,
        };
        bridge.ready().await;
        bridge
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Wait until `/readyz` answers 200 (store and upstreams ready).
    pub async fn ready(&self) {
        let url = format!("{}/readyz", self.base);
        let client = reqwest::Client::new();
        let ready = async {
            loop {
                if let Ok(r) = client.get(&url).send().await
                    && r.status() == 200
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(WAIT, ready).await.is_err() {
            panic!("bridge {} not ready; its log:\n{}", self.base, self.log());
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bridge.log")).unwrap_or_default()
    }

    /// SIGKILL: no shutdown, no goodbye to Redis.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Start a job through `client` and return its handle (`job_id`, `events_url`, …).
pub async fn start_job(client: &McpClient, tool: &str, arguments: Value) -> Value {
    let handle = structured(&call(client, tool, arguments).await);
    assert_eq!(handle["status"], "running", "a job handle: {handle}");
    handle
}

/// The events URL of a job on another bridge.
pub fn events_url_on(base: &str, job_id: &str) -> String {
    job_events_url(base, job_id)
}

/// A job's URLs on a test bridge, signed with [`TEST_JOB_SECRET`] (what the job handle would
/// carry), for tests that learn a job's ID some other way than from its handle.
pub fn job_events_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/events?token={token}")
}

pub fn job_status_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}?token={token}")
}

pub fn job_cancel_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().cancel(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/cancel?token={token}")
}

/// Events in order with consecutive ids, each progress once: what every reader must see.
pub fn assert_consecutive(events: &[SseEvent]) {
    let ids: Vec<u64> = events.iter().map(SseEvent::seq).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "ids are consecutive: {ids:?}"
    );
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
