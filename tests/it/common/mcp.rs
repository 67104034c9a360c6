//! Talking MCP to the bridge: rmcp's own client (which records the progress it receives on
//! its requests), tool calls and their results, and a raw Streamable HTTP client for what no
//! SDK would send.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

// Sampling and roots are deprecated by SEP-2577; the tests still exercise their relay.
#[allow(deprecated)]
use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
        CreateMessageRequestParams, CreateMessageResult, CreateTaskResult, DetailedTask,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        FormElicitationCapability, GetTaskParams, Implementation, InputRequests, ListRootsResult,
        ProgressNotificationParam, ProtocolVersion, Root, SamplingMessage, TaskPayload,
    },
    service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use super::{
    bridge::TestBridge,
    wait::{eventually, within},
};

/// An MCP client that records the progress notifications it receives on its own requests.
#[derive(Clone, Default)]
pub struct ProgressRecorder {
    seen: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// What the client declares (rmcp's default when `None`).
    info: Option<ClientConfig>,
    /// Answer every `elicitation/create` by accepting `{"answer": this}` (decline when `None`).
    answer: Option<String>,
    /// Never answer an `elicitation/create` (a client whose user walked away).
    stall_questions: bool,
    /// Answer every `sampling/createMessage` with this text (refuse when `None`).
    sample: Option<String>,
    /// What `roots/list` answers.
    roots: Vec<String>,
}

impl ProgressRecorder {
    pub fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.seen.lock().unwrap().clone()
    }
}

impl ClientHandler for ProgressRecorder {
    fn get_info(&self) -> ClientConfig {
        self.info.clone().unwrap_or_default()
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if self.stall_questions {
            std::future::pending::<()>().await;
        }
        Ok(match &self.answer {
            Some(answer) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(json!({ "answer": answer })),
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        match &self.sample {
            Some(text) => Ok(CreateMessageResult::new(
                SamplingMessage::assistant_text(text.clone()),
                "test-model".into(),
            )),
            None => Err(rmcp::ErrorData::invalid_request("no model here", None)),
        }
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, rmcp::ErrorData> {
        Ok(ListRootsResult::new(
            self.roots
                .iter()
                .map(|uri| Root::new(uri.clone()))
                .collect(),
        ))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.lock().unwrap().push(params);
    }
}

pub type McpClient = RunningService<RoleClient, ProgressRecorder>;

/// rmcp's own client, connected to the bridge's `/mcp` over Streamable HTTP.
pub async fn connect(bridge: &TestBridge) -> McpClient {
    connect_with(&bridge.mcp_url(), None, None).await
}

pub async fn connect_url(url: &str) -> McpClient {
    connect_with(url, None, None).await
}

/// rmcp's client with `Authorization: Bearer <token>` on every request.
pub async fn connect_with_token(bridge: &TestBridge, token: &str) -> McpClient {
    connect_with(&bridge.mcp_url(), Some(token), None).await
}

/// A client whose every request carries `X-Correlation-Id: cid`.
pub async fn connect_correlated(bridge: &TestBridge, cid: &str) -> McpClient {
    connect_with(&bridge.mcp_url(), None, Some(cid)).await
}

/// rmcp's client on `url`, with a bearer token and a correlation header when given.
pub async fn connect_with(url: &str, token: Option<&str>, correlation: Option<&str>) -> McpClient {
    let mut config = transport_config(url, token);
    if let Some(cid) = correlation {
        let mut headers = HashMap::new();
        headers.insert(
            http::HeaderName::from_static("x-correlation-id"),
            http::HeaderValue::from_str(cid).expect("a header value"),
        );
        config = config.custom_headers(headers);
    }
    start(ProgressRecorder::default(), config, Start::Handshake).await
}

/// rmcp's client on a handshake revision, declaring `name` as its `clientInfo.name`.
pub async fn connect_named(url: &str, name: &str) -> McpClient {
    let recorder = ProgressRecorder {
        info: Some(ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(name, "1"),
        )),
        ..Default::default()
    };
    start(recorder, transport_config(url, None), Start::Handshake).await
}

/// rmcp's client at 2026-07-28 (`server/discover`, no session: every request carries the
/// client's capabilities in `_meta`), with a bearer token when given, declaring the Tasks
/// extension when `tasks`.
pub async fn connect_2026(url: &str, token: Option<&str>, tasks: bool) -> McpClient {
    let mut capabilities = ClientCapabilities::default();
    if tasks {
        capabilities = ClientCapabilities::builder().enable_tasks().build();
    }
    let recorder = ProgressRecorder::declaring(capabilities);
    start(recorder, transport_config(url, token), Start::Discover2026).await
}

/// rmcp's client on a handshake revision, declaring sampling (answering every request with
/// `sample`) and roots (`roots`).
pub async fn connect_sampling(url: &str, sample: &str, roots: &[&str]) -> McpClient {
    let recorder =
        ProgressRecorder::declaring(ClientCapabilities::default()).sampling(sample, roots);
    start(recorder, transport_config(url, None), Start::Handshake).await
}

/// rmcp's client at 2026-07-28 (bearer `token` if any), declaring form elicitation and
/// answering every question with `answer` (its `call_tool` drives the `input_required` rounds).
pub async fn connect_2026_answering(url: &str, token: Option<&str>, answer: &str) -> McpClient {
    let recorder = ProgressRecorder::declaring(ClientCapabilities::default()).answering(answer);
    start(recorder, transport_config(url, token), Start::Discover2026).await
}

/// rmcp's client declaring form elicitation (answering every question with `answer`),
/// sampling (answering with `sample`) and roots (`roots`): on a handshake revision, or at
/// 2026-07-28 (`server/discover`; its `call_tool` drives the `input_required` rounds) when
/// `at_2026`.
pub async fn connect_answering_everything(
    url: &str,
    answer: &str,
    sample: &str,
    roots: &[&str],
    at_2026: bool,
) -> McpClient {
    let recorder = ProgressRecorder::declaring(ClientCapabilities::default())
        .answering(answer)
        .sampling(sample, roots);
    let how = if at_2026 {
        Start::Discover2026
    } else {
        Start::Handshake
    };
    start(recorder, transport_config(url, None), how).await
}

/// rmcp's client at 2026-07-28 (bearer `token` if any) declaring sampling (answering every
/// request with `sample`) and roots (`roots`), and no elicitation.
pub async fn connect_2026_sampling(
    url: &str,
    token: Option<&str>,
    sample: &str,
    roots: &[&str],
) -> McpClient {
    let recorder =
        ProgressRecorder::declaring(ClientCapabilities::default()).sampling(sample, roots);
    start(recorder, transport_config(url, token), Start::Discover2026).await
}

/// rmcp's client on a handshake revision, declaring form elicitation and never answering a
/// question (the request stays open; the client goes on serving everything else).
pub async fn connect_never_answering(url: &str) -> McpClient {
    let mut recorder = ProgressRecorder::declaring(ClientCapabilities::default()).answering("");
    recorder.stall_questions = true;
    start(recorder, transport_config(url, None), Start::Handshake).await
}

/// rmcp's client on a handshake revision, declaring form elicitation and answering every
/// question with `answer`.
pub async fn connect_answering(url: &str, answer: &str) -> McpClient {
    let recorder = ProgressRecorder::declaring(ClientCapabilities::default()).answering(answer);
    start(recorder, transport_config(url, None), Start::Handshake).await
}

/// What a test client declares and answers, beyond rmcp's defaults (the `connect_*` above).
impl ProgressRecorder {
    /// A client `bridge-tests` that declares `capabilities`.
    fn declaring(capabilities: ClientCapabilities) -> Self {
        Self {
            info: Some(ClientConfig::new(
                capabilities,
                Implementation::new("bridge-tests", "1"),
            )),
            ..Default::default()
        }
    }

    fn capabilities(&mut self) -> &mut ClientCapabilities {
        &mut self.info.get_or_insert_default().capabilities
    }

    /// Declaring form elicitation too, and answering every question with `answer`.
    fn answering(mut self, answer: &str) -> Self {
        let mut elicitation = ElicitationCapability::default();
        elicitation.form = Some(FormElicitationCapability::default());
        self.capabilities().elicitation = Some(elicitation);
        self.answer = Some(answer.to_string());
        self
    }

    /// Declaring sampling (answering every request with `sample`) and roots (`roots`) too.
    #[allow(deprecated)]
    fn sampling(mut self, sample: &str, roots: &[&str]) -> Self {
        let capabilities = self.capabilities();
        capabilities.sampling = Some(Default::default());
        capabilities.roots = Some(Default::default());
        self.sample = Some(sample.to_string());
        self.roots = roots.iter().map(|r| r.to_string()).collect();
        self
    }
}

/// How a test client starts.
#[derive(Clone, Copy)]
enum Start {
    /// `initialize`, on a handshake revision.
    Handshake,
    /// `server/discover` at 2026-07-28 (no session).
    Discover2026,
}

/// The transport to the bridge's `url`, with `Authorization: Bearer <token>` when given.
fn transport_config(url: &str, token: Option<&str>) -> StreamableHttpClientTransportConfig {
    let config = StreamableHttpClientTransportConfig::with_uri(url);
    match token {
        Some(token) => config.auth_header(token),
        None => config,
    }
}

/// Start `recorder` as rmcp's client over Streamable HTTP with `config`.
async fn start(
    recorder: ProgressRecorder,
    config: StreamableHttpClientTransportConfig,
    how: Start,
) -> McpClient {
    mcp_progress_bridge::tls::use_ring();
    let transport = StreamableHttpClientTransport::from_config(config);
    match how {
        Start::Handshake => within("MCP initialize", recorder.serve(transport))
            .await
            .expect("MCP initialize"),
        Start::Discover2026 => {
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            within(
                "MCP server/discover",
                recorder.serve_with_lifecycle(transport, lifecycle),
            )
            .await
            .expect("MCP server/discover")
        }
    }
}

pub fn args(value: Value) -> Option<rmcp::model::JsonObject> {
    match value {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => panic!("tool arguments must be an object, got {other}"),
    }
}

/// `tools/call` parameters for `tool` with these arguments.
pub fn call_params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Some(arguments) = args(arguments) {
        params = params.with_arguments(arguments);
    }
    params
}

/// A 2026-07-28 `tools/call` of `params` (one round, rmcp's `call_tool_once`) that must be
/// answered `input_required`: its `requestState` and its input requests.
pub async fn input_required_round(
    client: &McpClient,
    params: CallToolRequestParams,
) -> (String, InputRequests) {
    let first = within("tools/call", client.call_tool_once(params))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("not input_required: {first:?}");
    };
    let state = asked.request_state.clone().expect("requestState");
    let requests = asked.input_requests.clone().expect("inputRequests");
    (state, requests)
}

/// `params` again, with the `requestState` of its `input_required` round and `answer` to its
/// input request `key`.
pub fn retried(
    params: CallToolRequestParams,
    state: &str,
    key: &str,
    answer: Value,
) -> CallToolRequestParams {
    params
        .with_request_state(state)
        .with_input_responses([(key.to_string(), answer)].into_iter().collect())
}

/// The input requests of task `task_id` (the Tasks extension), once it asks: `tasks/get` until
/// it is `input_required` with a request.
pub async fn task_input_requests(client: &McpClient, task_id: &str) -> InputRequests {
    eventually("the task asks", || async {
        let got = client.get_task(GetTaskParams::new(task_id)).await.unwrap();
        match got.task.payload {
            TaskPayload::InputRequired { input_requests } if !input_requests.is_empty() => {
                Some(input_requests)
            }
            _ => None,
        }
    })
    .await
}

/// Call `tool`, which must come back as a task.
pub async fn task_of(client: &McpClient, tool: &str, arguments: Value) -> CreateTaskResult {
    let answer = within(
        "tools/call",
        client.call_tool_once(call_params(tool, arguments)),
    )
    .await
    .expect("tools/call");
    match answer {
        CallToolResponse::Task(task) => task,
        other => panic!("{tool} did not come back as a task: {other:?}"),
    }
}

/// Task `task_id` once it has ended: `tasks/get` until its status is terminal.
pub async fn ended_task(client: &McpClient, task_id: &str) -> DetailedTask {
    eventually("the task ends", || async {
        let got = client.get_task(GetTaskParams::new(task_id)).await.unwrap();
        got.task.status().is_terminal().then_some(got.task)
    })
    .await
}

/// Call a tool through the bridge and return its result (panics on a protocol error).
pub async fn call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    within(
        &format!("call {tool}"),
        client.call_tool(call_params(tool, arguments)),
    )
    .await
    .unwrap_or_else(|e| panic!("call {tool} failed: {e}"))
}

/// Call a tool and return its answer as JSON (see [`structured`]): for the job tools'
/// answers and the demo's `cancellations`.
pub async fn call_json(client: &McpClient, tool: &str, arguments: Value) -> Value {
    structured(&call(client, tool, arguments).await)
}

/// The structured content of a result, or its first text content parsed as JSON.
pub fn structured(result: &CallToolResult) -> Value {
    if let Some(value) = &result.structured_content {
        return value.clone();
    }
    let text = first_text(result);
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

/// The progress values the client got on its own requests, once it has `n` of them, sorted.
/// rmcp's client hands each notification to its handler in a task of its own, so the last ones
/// may be handled after the answer, and in any order (the bridge sends them in order before
/// the answer; the Python SDK's interop test and `bridge.rs`'s raw request check the order on
/// the wire).
pub async fn caller_progress(client: &McpClient, n: usize) -> Vec<f64> {
    eventually("the caller's progress notifications", || async {
        let mut seen: Vec<f64> = client
            .service()
            .progress()
            .iter()
            .map(|p| p.progress)
            .collect();
        seen.sort_by(f64::total_cmp);
        (seen.len() >= n).then_some(seen)
    })
    .await
}

/// The cancels upstream `name` has seen, once it has seen `at_least` of them.
pub async fn cancels_seen(client: &McpClient, upstream: &str, at_least: usize) -> Vec<Value> {
    let tool = format!("{upstream}__cancellations");
    eventually(&format!("{upstream} sees {at_least} cancel(s)"), || async {
        let seen = call_json(client, &tool, json!({})).await;
        let list = seen["cancelled"].as_array().cloned().unwrap_or_default();
        (list.len() >= at_least).then_some(list)
    })
    .await
}

/// A raw MCP Streamable HTTP client for requests no SDK would send.
pub struct RawMcp {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
    client: reqwest::Client,
}

/// A raw answer: the status, the headers, the body, and the JSON-RPC messages in it (from a
/// JSON body, or every `data:` of an SSE body, in order).
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    /// The answer to the request: a JSON body, or the first SSE message with an `id` or an
    /// `error`.
    pub message: Option<Value>,
    pub messages: Vec<Value>,
}

impl RawAnswer {
    /// An answer read from a plain (non-MCP) response.
    pub fn plain(status: u16, body: String) -> Self {
        Self {
            status,
            headers: Default::default(),
            body,
            message: None,
            messages: Vec::new(),
        }
    }

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

    /// [`RawMcp::new`] sending through `client` (one that trusts a private CA, say).
    pub fn with_client(url: &str, client: reqwest::Client) -> Self {
        Self {
            client,
            ..Self::new(url, None)
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
        let (message, messages) = match serde_json::from_str::<Value>(&body) {
            Ok(message) => (Some(message.clone()), vec![message]),
            Err(_) => {
                let messages: Vec<Value> = body
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .filter_map(|d| serde_json::from_str(d.trim()).ok())
                    .collect();
                let answer = messages
                    .iter()
                    .find(|m| m.get("id").is_some() || m.get("error").is_some())
                    .cloned();
                (answer, messages)
            }
        };
        RawAnswer {
            status,
            headers,
            body,
            message,
            messages,
        }
    }

    /// `DELETE` of the session (with the token, when set): the status and the body.
    pub async fn delete(&self) -> (u16, String) {
        let mut request = self
            .client
            .delete(&self.url)
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = within("raw MCP DELETE", request.send())
            .await
            .expect("DELETE");
        let status = response.status().as_u16();
        let body = within("raw MCP DELETE body", response.text())
            .await
            .unwrap_or_default();
        (status, body)
    }

    /// initialize alone; keeps the session ID, if one is given.
    pub async fn initialize_only(&mut self) -> RawAnswer {
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
        answer
    }

    /// initialize + notifications/initialized; keeps the session ID.
    pub async fn initialize(&mut self) -> RawAnswer {
        let answer = self.initialize_only().await;
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
