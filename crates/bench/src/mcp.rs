//! rmcp clients for the harness: to the bridge's `/mcp`, straight to an upstream (the floor),
//! and to the peer gateways; a handler that times every progress notification it receives.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult, ProgressNotificationParam},
    service::{NotificationContext, RunningService},
    transport::{
        ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;
use tokio::sync::Notify;

use crate::stats::{now_us, sent_at_us};

/// Longest a single call or handshake may take before the scenario fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Records the delivery latency of every `bench_progress` notification this client receives
/// (rmcp calls `on_progress` once the notification is read and parsed).
#[derive(Clone, Default)]
pub struct BenchClient {
    samples: Arc<Mutex<Vec<u64>>>,
    received: Arc<AtomicU64>,
    changed: Arc<Notify>,
}

impl BenchClient {
    /// The latencies recorded since the last call (µs).
    pub fn take_samples(&self) -> Vec<u64> {
        std::mem::take(&mut *self.samples.lock())
    }

    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Wait until `n` notifications have been received in all, or `within` has passed.
    pub async fn wait_received(&self, n: u64, within: Duration) -> bool {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.received() >= n {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

impl ClientHandler for BenchClient {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let now = now_us();
        if let Some(sent) = params
            .message
            .as_deref()
            .and_then(|m| sent_at_us(m.as_bytes()))
        {
            self.samples.lock().push(now.saturating_sub(sent));
        }
        self.received.fetch_add(1, Ordering::Relaxed);
        self.changed.notify_waiters();
    }
}

/// An rmcp client; its handler is [`BenchClient`] but for the floor's feed.
pub type Client<H = BenchClient> = RunningService<RoleClient, H>;

/// An MCP client over Streamable HTTP, allowed many calls in flight at once.
pub async fn connect_http<H: ClientHandler>(url: &str, handler: H) -> Result<Client<H>, String> {
    connect_http_as(url, None, handler).await
}

/// [`connect_http`] with `Authorization: Bearer <token>` on every request.
pub async fn connect_http_as<H: ClientHandler>(
    url: &str,
    token: Option<&str>,
    handler: H,
) -> Result<Client<H>, String> {
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).max_concurrent_requests(512);
    if let Some(token) = token {
        config = config.auth_header(token.to_string());
    }
    mcp_progress_bridge::tls::use_ring();
    let transport = StreamableHttpClientTransport::from_config(config);
    match tokio::time::timeout(CALL_TIMEOUT, handler.serve(transport)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!("MCP initialize with {url}: {e}")),
        Err(_) => Err(format!("MCP initialize with {url} timed out")),
    }
}

/// An MCP client over stdio to a child `bin args…` (the direct floor).
pub async fn connect_stdio(
    bin: &Path,
    args: &[&str],
    handler: BenchClient,
) -> Result<Client, String> {
    let command = tokio::process::Command::new(bin).configure(|cmd| {
        // Its log lines (session ended, …) are not the harness's output.
        cmd.args(args).stderr(std::process::Stdio::null());
    });
    let child =
        TokioChildProcess::new(command).map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    match tokio::time::timeout(CALL_TIMEOUT, handler.serve(child)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!("MCP initialize over stdio: {e}")),
        Err(_) => Err("MCP initialize over stdio timed out".into()),
    }
}

/// Call a tool; a protocol error or a tool error (`isError`) is an error here.
pub async fn call<H: ClientHandler>(
    client: &Client<H>,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(map) = arguments {
        params = params.with_arguments(map);
    }
    let result = match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return Err(format!("call {tool}: {e}")),
        Err(_) => return Err(format!("call {tool} timed out")),
    };
    if result.is_error == Some(true) {
        return Err(format!("call {tool}: tool error {:?}", first_text(&result)));
    }
    Ok(result)
}

/// A string field of a job handle (an async call's answer).
fn handle_field(result: &CallToolResult, field: &str) -> Result<String, String> {
    let structured = result
        .structured_content
        .clone()
        .or_else(|| serde_json::from_str(&first_text(result)).ok())
        .unwrap_or(Value::Null);
    structured[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("not a job handle: {}", first_text(result)))
}

/// The job ID of a job handle.
pub fn job_id(result: &CallToolResult) -> Result<String, String> {
    handle_field(result, "job_id")
}

/// The path and query of a job handle's `events_url`, as given (it carries the job's read
/// token), for the harness's own SSE reader.
pub fn events_path(result: &CallToolResult) -> Result<String, String> {
    handle_path(result, "events_url")
}

/// The path and query of a job handle's `status_url` (with the job's read token).
pub fn status_path(result: &CallToolResult) -> Result<String, String> {
    handle_path(result, "status_url")
}

fn handle_path(result: &CallToolResult, field: &str) -> Result<String, String> {
    let url = handle_field(result, field)?;
    let url = url.as_str();
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
    Ok(path.to_string())
}

pub fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}
