//! The config's sections as serde reads them (server, jobs, store, upstreams), each with its
//! defaults; the `protocol` setting of an upstream is the revision negotiation's.

use std::{collections::BTreeMap, fmt, net::SocketAddr, path::PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    glob::GlobList,
    proxies::{Cidr, ForwardedHeader},
};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the HTTP server binds (MCP endpoint, job API, health).
    pub listen: SocketAddr,
    /// Base URL clients use to reach this bridge; job handles' `events_url` and `status_url`
    /// start with it. Behind a proxy or in a container this is the public address.
    pub public_url: String,
    /// `Host` header values accepted on `/mcp` (DNS-rebinding protection). An empty list turns
    /// the check off, which a public deployment behind a proxy may need.
    pub allowed_hosts: Vec<String>,
    /// The request header whose value tags every job an MCP request starts (correlation).
    pub correlation_header: String,
    /// Interval of SSE keep-alive comments on job and correlation streams.
    pub keep_alive_secs: u64,
    /// Browser origins allowed on `/mcp` besides the bridge's own (`public_url`); `["*"]`
    /// allows any. A request with another `Origin` gets 403.
    pub allowed_origins: Vec<String>,
    /// Origins whose pages may read job and correlation endpoints cross-origin (CORS).
    pub cors_origins: Vec<String>,
    /// A second listener that alone serves `/upstreams` and `/metrics`, without a token.
    pub admin_listen: Option<SocketAddr>,
    /// Seconds a new connection may take to send its first complete request head. Past it the
    /// connection is closed (slowloris).
    pub header_read_timeout_secs: u64,
    /// Seconds a kept-alive connection may idle after a response before its next request head
    /// is complete; past it the connection is closed. Longer than the idle timeout of any
    /// proxy in front (nginx and most load balancers: 60 s), else the proxy may send a request
    /// on a connection the bridge is closing and answer 502.
    pub keep_alive_idle_secs: u64,
    /// Proxies (CIDRs or addresses) whose `forwarded_header` the per-address limits believe:
    /// a connection from one is not counted against `limits.max_connections_per_address`, and
    /// its requests count against the per-address rate by the client address it forwards (the
    /// rightmost address in the header that is not itself a trusted proxy). Empty: none.
    #[schemars(with = "Vec<String>")]
    pub trusted_proxies: Vec<Cidr>,
    /// The header a trusted proxy writes the client address in: `x-forwarded-for` or
    /// `forwarded` (RFC 7239). Only this one is read.
    pub forwarded_header: ForwardedHeader,
    /// Seconds a request body may take to arrive in full after its head (408 on `/mcp`, and
    /// the connection closes).
    pub body_read_timeout_secs: u64,
    /// Seconds an MCP session may go without a message either way (a request, a response, a
    /// notification) before it is closed and forgotten; its next request gets 404 and the
    /// client initializes again. Jobs it started keep running.
    pub session_idle_secs: u64,
    /// Shared writer tasks for job event streams: they write each new event to every reader
    /// that is caught up, instead of waking one task per reader. Unset: 2, or 1 on one core;
    /// 0: every stream writes its own events (at most 64).
    pub sse_writers: Option<usize>,
    /// Upstreams that must be connected for `/readyz` to answer 200 (`["*"]`: all of them).
    /// Empty by default: a replica is ready once its config is loaded, the store answers and
    /// every upstream has been tried once, so one broken upstream does not take every replica
    /// (and every other upstream's tools) out of the load balancer.
    pub ready_requires: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: "http://127.0.0.1:8080".into(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into()],
            correlation_header: "x-correlation-id".into(),
            keep_alive_secs: 15,
            allowed_origins: Vec::new(),
            cors_origins: Vec::new(),
            admin_listen: None,
            header_read_timeout_secs: 10,
            keep_alive_idle_secs: 75,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            body_read_timeout_secs: 30,
            session_idle_secs: 1800,
            sse_writers: None,
            ready_requires: Vec::new(),
        }
    }
}

/// How a `tools/call` is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CallMode {
    /// Answer at once with a job handle; the result is collected with `wait_for_job`.
    Async,
    /// Answer with the upstream's own result when it is done.
    Sync,
    /// Wait up to `sync_budget_ms`; answer like `sync` if done by then, else like `async`.
    Auto,
}

impl fmt::Display for CallMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallMode::Async => "async",
            CallMode::Sync => "sync",
            CallMode::Auto => "auto",
        })
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct JobsConfig {
    pub mode: CallMode,
    /// `auto` mode: how long a call may take and still be answered with its result.
    pub sync_budget_ms: u64,
    /// How long a finished job stays readable (snapshot and events).
    pub retention_secs: u64,
    /// Events kept per job for `Last-Event-ID` replay; older ones are dropped.
    pub history: usize,
    /// Progress events of one job closer together than this are coalesced; the latest value
    /// is always delivered.
    pub min_progress_interval_ms: u64,
    /// While a job runs without progress, a `heartbeat` event goes out this often, so a UI can
    /// tell "working, no news" from "stalled". 0 turns heartbeats off.
    pub heartbeat_secs: u64,
    /// Jobs running at once in this replica; a call past it gets a tool error saying so.
    pub max_jobs: usize,
    /// On SIGTERM/SIGINT the replica drains: it takes no new calls, and the jobs running in it
    /// get this long to end; the ones still running then are cancelled. The process exits as
    /// soon as its last job has ended. `shutdown_grace_secs` is the deprecated name of this key.
    #[serde(alias = "shutdown_grace_secs")]
    pub drain_secs: u64,
    /// The `pollIntervalMs` a task (MCP Tasks extension) suggests to its client: how often
    /// `tasks/get` is worth asking.
    pub task_poll_interval_ms: u64,
    /// A question a tool asks during a call (elicitation) that nobody answers within this long
    /// is declined, and the job goes on.
    pub input_timeout_secs: u64,
    /// Largest answer to a question (the JSON body of `POST /jobs/{id}/input`, or one answer of
    /// `tasks/update`).
    pub max_input_bytes: usize,
    /// Questions one job may have waiting at once; one more is declined at once.
    pub max_pending_inputs: usize,
    /// Answers one client request may carry in `inputResponses` (a retried 2026-07-28
    /// `tools/call`, `tasks/update`); a request with more is refused whole, before any answer
    /// is read. At least twice `max_pending_inputs` (a round holds at most that many
    /// questions, and as many samples and roots requests).
    pub max_input_responses: usize,
    /// Largest question a tool may ask (its `elicitation/create` message and requested
    /// schema, as JSON): a larger one is declined at once, before it reaches the waiting
    /// caller or the job.
    pub max_question_bytes: usize,
    /// Largest answer a 2026-07-28 caller gives in `inputResponses` to an upstream's
    /// `sampling/createMessage` or `roots/list` (relayed to it in an `input_required` round).
    pub max_sample_bytes: usize,
    /// Tasks remembered for `tasks/list` (MCP 2025-11-25) per caller: with the memory store
    /// in the replica (all callers together at most four times this, the longest list
    /// forgetting first), with Redis shared by every replica; the oldest is forgotten first
    /// (it stays readable by `tasks/get`).
    pub max_listed_tasks: usize,
    /// Tasks in one page of `tasks/list`.
    pub task_list_page_size: usize,
    /// `notifications/tasks/status` (MCP 2025-11-25) one task's session is sent at most;
    /// past it only the task's end is told.
    pub max_task_status_notifications: usize,
    /// The longest one `wait_for_job` of a client blocks, in seconds, by the `clientInfo.name`
    /// its session declared at `initialize` (for a client that reads each answer with a short
    /// timeout); other clients' bounds are learned (docs/agents.md).
    pub wait_for_job_secs_by_client: BTreeMap<String, u64>,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self {
            mode: CallMode::Auto,
            sync_budget_ms: 3000,
            retention_secs: 3600,
            history: 1000,
            min_progress_interval_ms: 0,
            heartbeat_secs: 10,
            max_jobs: 10_000,
            drain_secs: 900,
            task_poll_interval_ms: 1000,
            input_timeout_secs: 300,
            max_input_bytes: 65_536,
            max_pending_inputs: 4,
            max_input_responses: 32,
            max_question_bytes: 65_536,
            max_sample_bytes: 1_048_576,
            max_listed_tasks: 10_000,
            task_list_page_size: 50,
            max_task_status_notifications: 64,
            wait_for_job_secs_by_client: BTreeMap::new(),
        }
    }
}

/// Which engine holds jobs and their events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// In this process: one replica, nothing to install.
    Memory,
    /// In Redis: several replicas share every job (see docs/replicas.md).
    Redis,
}

/// `[store]`: where jobs live. Only `backend` matters for `memory`; the rest configure Redis.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    /// `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS) or `unix:///path`. Redis 6
    /// or newer (the bridge speaks RESP3). `BRIDGE_REDIS_URL` overrides it, so a password need
    /// not sit in the file.
    pub redis_url: String,
    /// Start of every key and pub/sub channel name, so several bridges (or tests) can share one
    /// Redis without seeing each other's jobs. Replicas of one bridge must use the same prefix.
    pub key_prefix: String,
    /// How long a replica's lease on its running jobs lasts without renewal. A replica that
    /// dies has its running jobs failed (`owner_lost`) by another replica at most about
    /// `lease_secs * 4 / 3` later (the lease, plus one check interval of a third of it).
    pub lease_secs: u64,
    /// Events of one running job held in this replica while Redis is unreachable, written in
    /// order when it returns. Past this, newer progress replaces the newest held progress and
    /// log lines are dropped; the terminal event is always kept.
    pub outage_buffer: usize,
    /// Longest wait for one Redis command before the connection counts as lost.
    pub command_timeout_ms: u64,
    /// An answer to a job's question that reaches a replica other than the one running the
    /// job is passed to that one through Redis; the answering client waits at most this long
    /// for its verdict (taken, does not fit, answered already), else is told it is unconfirmed.
    pub input_relay_timeout_ms: u64,
    /// What the bridge does when Redis's `maxmemory-policy` may evict its keys (every policy
    /// but `noeviction`: every key the bridge writes has a TTL, so even `volatile-*` policies
    /// take them, and an evicted job loses its events). `refuse`: the store stays unready
    /// (`/readyz` says why) until the policy is `noeviction`; `warn`: an error in the log at
    /// each connect, and the bridge serves. Where `CONFIG` is disabled (managed offerings)
    /// the policy cannot be read: the log says so and the bridge serves.
    pub redis_eviction_check: EvictionCheck,
    /// A PEM file of the CA certificates that sign Redis's TLS certificate (a private CA), for
    /// a `rediss://` URL; trusted instead of the system's roots. Read at start.
    pub redis_ca_file: Option<PathBuf>,
    /// `redis_url` is one node of a Redis Cluster (any node, or the cluster's configuration
    /// endpoint): the bridge learns the others from it and sends each command to the node that
    /// holds its keys' slot. Off for one Redis (with or without replicas behind one address).
    pub redis_cluster: bool,
}

/// `store.redis_eviction_check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvictionCheck {
    /// Keep the store unready while Redis may evict job keys.
    Refuse,
    /// Log an error and serve.
    Warn,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: StoreBackend::Memory,
            redis_url: "redis://127.0.0.1:6379".into(),
            key_prefix: "mcp-progress-bridge".into(),
            lease_secs: 15,
            outage_buffer: 1000,
            command_timeout_ms: 2000,
            input_relay_timeout_ms: 5000,
            redis_eviction_check: EvictionCheck::Refuse,
            redis_ca_file: None,
            redis_cluster: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Stdio,
    Http,
}

/// One real MCP server the bridge fronts. Its tools appear as `<name>__<tool>`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    pub name: String,
    pub transport: TransportKind,
    /// stdio: the program to run. `mcp-progress-bridge` means this binary itself.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// http: the Streamable HTTP endpoint of the server.
    pub url: Option<String>,
    /// http: headers sent with every request (for example `Authorization`). A value, as each of
    /// `env`'s and `url`, may be `env:NAME` or `file:/path`: read at start.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// http: a PEM file of CA certificates trusted for this upstream's https URL, on top of the
    /// system's (for a private CA). Read at start and at each connection.
    pub ca_file: Option<PathBuf>,
    /// Call mode for every tool of this upstream (overrides `[jobs] mode`).
    pub mode: Option<CallMode>,
    /// Hard limit of one call of any of this upstream's tools, in seconds (none by default).
    pub timeout_secs: Option<u64>,
    /// Limit on the time a call may go without progress, in seconds (none by default).
    pub idle_timeout_secs: Option<u64>,
    /// http: ping the upstream this often; one that does not answer is reconnected (its
    /// in-flight jobs fail). 0 turns the check off.
    #[serde(default = "default_health_check_secs")]
    pub health_check_secs: u64,
    /// Per-tool overrides, keyed by the upstream's own tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    /// Which of this upstream's tools, resources and prompts the bridge shows (allow/deny
    /// globs, see `GlobList`); everything by default.
    #[serde(default)]
    pub expose: Expose,
    /// Whether the upstream's log messages reach a job: `none` (the default: MCP log messages
    /// name no request, so none provably belongs to a call), or `attribute_when_single`: a line
    /// goes to the call in flight when it is the only one on the connection. Opt in only for
    /// an upstream that logs nothing after its answers and serves one user (docs/security.md).
    #[serde(default)]
    pub logs: LogAttribution,
    /// How the bridge starts its MCP session with the upstream: `handshake` (the default:
    /// `initialize`, revision 2025-11-25 or the newest the upstream offers below it),
    /// `2026-07-28` (`server/discover`, no session; the upstream may then answer a call with
    /// `input_required`, which the bridge answers and retries, docs/tasks.md), or `auto`
    /// (`server/discover` first, `initialize` when the upstream answers it with an error or
    /// not within 10 s). Not `auto` by default: the Python SDK 2.x servers answer
    /// `server/discover`, and `auto` moves them to 2026-07-28, where `resources/subscribe` (which
    /// the bridge uses to follow resource updates) is gone (docs/tasks.md, "Not (yet) done").
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// Whether this upstream's calls are made so that they outlive the replica running them
    /// (docs/replicas.md): `auto` (the default: on a Streamable HTTP upstream, a tool whose
    /// `execution.taskSupport` is `optional` or `required` is called as an upstream task that
    /// another replica can adopt), `tasks` (the same, and a config error on stdio, where a
    /// call dies with its replica whatever is done), or `off` (only the tools that require a
    /// task run as one, and no job of this upstream is adopted).
    #[serde(default)]
    pub durable: Durable,
}

/// `[[upstreams]] durable`: whether an upstream's calls are made re-attachable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Durable {
    #[default]
    Auto,
    Tasks,
    /// Plain calls whose response stream can be resumed (`GET` + `Last-Event-ID`).
    Resume,
    Off,
}

impl Durable {
    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Durable::Auto => "auto",
            Durable::Tasks => "tasks",
            Durable::Resume => "resume",
            Durable::Off => "off",
        }
    }
}

/// `[[upstreams]] protocol`: the MCP lifecycle the bridge uses with an upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum UpstreamProtocol {
    /// `initialize` / `notifications/initialized`: 2025-11-25 and earlier.
    #[default]
    #[serde(rename = "handshake")]
    Handshake,
    /// `server/discover` at 2026-07-28, every request self-contained.
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
    /// `server/discover` at 2026-07-28 first; `initialize` on the same connection when the
    /// upstream answers the probe with a JSON-RPC error (-32601 method not found from a
    /// handshake-only server, or any other) or does not answer within 10 s.
    #[serde(rename = "auto")]
    Auto,
}

impl UpstreamProtocol {
    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamProtocol::Handshake => "handshake",
            UpstreamProtocol::V2026_07_28 => "2026-07-28",
            UpstreamProtocol::Auto => "auto",
        }
    }
}

/// `[[upstreams]] logs`: which of an upstream's log messages (`notifications/message`) are
/// shown on a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogAttribution {
    /// On no job: counted in `bridge_log_dropped_total{reason="unattributed"}`.
    #[default]
    None,
    /// On the job of the only call in flight on the connection. A line the upstream sends
    /// after one call's answer, while another user's call is the only one, lands on that
    /// other user's job: the upstream must not log late.
    AttributeWhenSingle,
}

/// `[[upstreams]] expose = { tools = [...], resources = [...], prompts = [...] }`: allow/deny
/// lists of globs over the upstream's own names (tool and prompt names; resource URIs and
/// template URIs). What a list hides is neither listed nor callable: a hidden tool, prompt or
/// resource is refused exactly like an unknown one. A list left out shows everything.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Expose {
    pub tools: GlobList,
    pub resources: GlobList,
    pub prompts: GlobList,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub mode: Option<CallMode>,
    pub timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
}

/// The time limits of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallLimits {
    pub timeout: Option<std::time::Duration>,
    pub idle_timeout: Option<std::time::Duration>,
}

fn default_health_check_secs() -> u64 {
    10
}

impl UpstreamConfig {
    /// A stdio upstream running `command args…`, everything else at its default.
    pub fn stdio(name: &str, command: &str, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            transport: TransportKind::Stdio,
            command: Some(command.into()),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            mode: None,
            timeout_secs: None,
            idle_timeout_secs: None,
            health_check_secs: default_health_check_secs(),
            tools: BTreeMap::new(),
            expose: Expose::default(),
            logs: LogAttribution::None,
            ca_file: None,
            protocol: UpstreamProtocol::Handshake,
            durable: Durable::Auto,
        }
    }

    /// A Streamable HTTP upstream at `url`, everything else at its default.
    pub fn http(name: &str, url: &str) -> Self {
        Self {
            transport: TransportKind::Http,
            command: None,
            args: Vec::new(),
            url: Some(url.into()),
            ..Self::stdio(name, "", &[])
        }
    }

    /// The call mode of one of this upstream's tools: tool override, else upstream, else the
    /// global default.
    pub fn mode_for(&self, tool: &str, default: CallMode) -> CallMode {
        self.tools
            .get(tool)
            .and_then(|t| t.mode)
            .or(self.mode)
            .unwrap_or(default)
    }

    /// The time limits of one of this upstream's tools: tool override, else upstream.
    pub fn limits_for(&self, tool: &str) -> CallLimits {
        let tool = self.tools.get(tool);
        let secs = std::time::Duration::from_secs;
        CallLimits {
            timeout: tool
                .and_then(|t| t.timeout_secs)
                .or(self.timeout_secs)
                .map(secs),
            idle_timeout: tool
                .and_then(|t| t.idle_timeout_secs)
                .or(self.idle_timeout_secs)
                .map(secs),
        }
    }
}
