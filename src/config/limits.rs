//! `[limits]`: bounds that keep one client from exhausting the bridge. The defaults are far
//! above what a small deployment uses; each limit answers with a status that says what to do.

use serde::Deserialize;

use super::{
    ConfigError,
    bounds::{self, Bound, GIB, KIB, MIB},
};

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted on `/mcp`, in bytes (413 past it).
    pub max_request_bytes: usize,
    /// Jobs one MCP token may have running at once (all callers together when `/mcp` is
    /// open); a call past it gets a tool error asking to wait.
    pub max_jobs_per_token: usize,
    /// Requests to `/mcp` per minute per MCP token (429 with `Retry-After` past it). The whole
    /// minute's allowance may be used at once.
    pub calls_per_minute: u32,
    /// Requests to the job and correlation routes (`/jobs/…`, `/correlations/…`) per minute
    /// per principal, for a caller that shows a credential (429 with `Retry-After` past it).
    pub job_requests_per_minute: u32,
    /// Requests to the job and correlation routes per minute per client address (an IPv6 /64
    /// counts as one), for a reader with a capability token or none (429 with `Retry-After`
    /// past it). Behind a proxy every client shares the proxy's address: raise it.
    pub job_requests_per_minute_per_address: u32,
    /// Open SSE streams on one job or correlation channel (503 with `Retry-After` past it).
    pub max_subscribers_per_channel: usize,
    /// Open SSE streams in total (503 with `Retry-After` past it).
    pub max_subscribers: usize,
    /// Open SSE streams of one principal (a capability reader: of one client address);
    /// unset: a quarter of `max_subscribers` (503 with `Retry-After` past it).
    pub max_subscribers_per_principal: Option<usize>,
    /// Items kept of one list (tools, resources, resource templates, prompts) of one upstream;
    /// the rest is not offered (logged, counted in `bridge_limit_hits_total`).
    pub max_upstream_list_items: usize,
    /// Largest `resources/read` result passed on, in bytes (text and base64 blobs added up);
    /// a larger one gets an error that names this key.
    pub max_resource_read_bytes: usize,
    /// Resource URIs one MCP session (or one `subscriptions/listen` request) may follow at
    /// once; `resources/subscribe` past it gets an error.
    pub max_resource_subscriptions: usize,
    /// Task IDs one 2026-07-28 `subscriptions/listen` request may follow (its filter's
    /// `taskIds`, Tasks extension); the rest are not acknowledged (counted in
    /// `bridge_limit_hits_total`). Each followed task holds a store subscription while the
    /// listen request lasts.
    pub max_listen_task_ids: usize,
    /// Tasks followed at once by all `subscriptions/listen` requests of this replica together
    /// (each holds a store subscription to its job's channel, as an SSE reader does); a task
    /// past it is not acknowledged (the client polls `tasks/get`), counted in
    /// `bridge_limit_hits_total`.
    pub max_followed_tasks: usize,
    /// Tasks one principal's `subscriptions/listen` requests follow at once in this replica;
    /// unset: a quarter of `max_followed_tasks` (with `/mcp` open, all callers are one
    /// principal and only `max_followed_tasks` applies). A task past it is not acknowledged.
    pub max_followed_tasks_per_principal: Option<usize>,
    /// Open HTTP connections on the main listener. At the cap, the connection idle longest
    /// (no request in progress) is closed to make room; when none is idle, the new one gets
    /// 503 with `Retry-After` and is closed. Lowered at start to keep `reserved_fds` free below
    /// the open-file limit.
    pub max_connections: usize,
    /// Open HTTP connections from one client address (an IPv6 /64 counts as one); past it, 503
    /// with `Retry-After`. Behind a proxy every client shares the proxy's address: raise it.
    pub max_connections_per_address: usize,
    /// File descriptors kept free below the open-file limit for what is not a client
    /// connection (upstream children and connections, Redis, the log).
    pub reserved_fds: usize,
    /// Largest message read from an upstream, in bytes (a tool's result, mostly): a larger
    /// answer fails its job with `result_too_large`, a larger notification is dropped.
    pub max_result_bytes: usize,
    /// MCP sessions open at once in this replica; an `initialize` past it gets 503 with
    /// `Retry-After` (sessions already open keep working). Closed, idle and abandoned sessions
    /// make room (`server.session_idle_secs`).
    pub max_sessions: usize,
    /// MCP sessions of one principal open at once in this replica; unset: a quarter of
    /// `max_sessions`. An `initialize` past it gets 503 with `Retry-After`.
    pub max_sessions_per_principal: Option<usize>,
    /// Callers (MCP sessions, or principals on the session-less revision) whose
    /// `wait_for_job` bound this replica keeps, and `wait_for_job` calls it follows to learn
    /// them; past it the oldest bound is forgotten and a wait that finds no room is not
    /// followed (counted in `bridge_limit_hits_total`).
    pub max_wait_bounds: usize,
    /// Answers this replica passes to the replica running their job (Redis store) that wait
    /// for its verdict at once (each up to `store.input_relay_timeout_ms`); one more gets an
    /// error asking to retry, counted in `bridge_limit_hits_total`.
    pub max_input_relays: usize,
    /// Of those, answers to one principal's jobs; unset: a quarter of `max_input_relays`
    /// (with `/mcp` open, all callers are one principal and only `max_input_relays` applies).
    pub max_input_relays_per_principal: Option<usize>,
    /// Requests sent to one upstream connection whose spans are open at once (traces on;
    /// a request stays open until its answer, its cancel or the connection's end). Past it a
    /// request goes untraced, counted in `bridge_limit_hits_total`: an upstream that never
    /// answers cannot make the bridge hold spans without bound.
    pub max_upstream_request_spans: usize,
    /// Largest `initialize` request accepted on `/mcp`, in bytes (413 past it): a session keeps
    /// its client's `initialize` parameters for its whole life.
    pub max_initialize_bytes: usize,
    /// Bytes of frames one SSE reader may hold unread (queued in the bridge or in its write
    /// buffer) before the bridge stops making more for it; a reader that holds this much and
    /// takes nothing for a keep-alive interval is dropped (it reconnects with
    /// `Last-Event-ID`). A frame larger than this is still sent, alone.
    pub max_sse_buffer_bytes: usize,
    /// Rounds of `input_required` one call of a 2026-07-28 upstream may go through (each
    /// answered and retried by the bridge); the round past it fails the job.
    pub max_input_rounds: usize,
    /// Input requests (elicitation, sampling, roots) one `input_required` round of an upstream
    /// may carry; a round with more fails the job.
    pub max_input_requests_per_round: usize,
    /// Largest `requestState` of an upstream's `input_required` answer, in bytes (the bridge
    /// echoes it back); a larger one fails the job.
    pub max_request_state_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: 4 * 1024 * 1024,
            max_jobs_per_token: 256,
            calls_per_minute: 3000,
            job_requests_per_minute: 3000,
            job_requests_per_minute_per_address: 6000,
            max_subscribers_per_channel: 64,
            max_subscribers: 4096,
            max_subscribers_per_principal: None,
            max_upstream_list_items: 10_000,
            max_resource_read_bytes: 16 * 1024 * 1024,
            max_resource_subscriptions: 256,
            max_listen_task_ids: 32,
            max_followed_tasks: 4096,
            max_followed_tasks_per_principal: None,
            max_connections: 16_384,
            max_connections_per_address: 1024,
            reserved_fds: 512,
            max_result_bytes: 16 * 1024 * 1024,
            max_sessions: 4096,
            max_sessions_per_principal: None,
            max_wait_bounds: 4096,
            max_input_relays: 1024,
            max_input_relays_per_principal: None,
            max_upstream_request_spans: 1024,
            max_initialize_bytes: 64 * 1024,
            max_sse_buffer_bytes: 4 * 1024 * 1024,
            max_input_rounds: 16,
            max_input_requests_per_round: 16,
            max_request_state_bytes: 64 * 1024,
        }
    }
}

/// What one principal may hold of a shared limit when its own key is unset: a quarter.
const DEFAULT_SHARE_DIVISOR: usize = 4;

impl LimitsConfig {
    /// `max_subscribers_per_principal`, or its default: a quarter of `max_subscribers`.
    pub fn subscribers_per_principal(&self) -> usize {
        share(self.max_subscribers_per_principal, self.max_subscribers)
    }

    /// `max_followed_tasks_per_principal`, or its default: a quarter of `max_followed_tasks`.
    pub fn followed_tasks_per_principal(&self) -> usize {
        share(
            self.max_followed_tasks_per_principal,
            self.max_followed_tasks,
        )
    }

    /// `max_sessions_per_principal`, or its default: a quarter of `max_sessions`.
    pub fn sessions_per_principal(&self) -> usize {
        share(self.max_sessions_per_principal, self.max_sessions)
    }

    /// `max_input_relays_per_principal`, or its default: a quarter of `max_input_relays`.
    pub fn input_relays_per_principal(&self) -> usize {
        share(self.max_input_relays_per_principal, self.max_input_relays)
    }
}

/// `configured`, or a quarter of `total` (at least 1).
fn share(configured: Option<usize>, total: usize) -> usize {
    configured.unwrap_or((total / DEFAULT_SHARE_DIVISOR).max(1))
}

/// The smallest `max_result_bytes`: the limit bounds every message of an upstream, its
/// `initialize` answer and pages of lists included, which must still get through.
const MIN_RESULT_BYTES: u64 = 64 * 1024;
/// The largest `max_result_bytes`: a result is held in memory whole, copied into its job's
/// terminal event, and with the Redis store written to Redis, whose strings stop at 512 MB.
const MAX_RESULT_BYTES: u64 = 256 * 1024 * 1024;

pub(super) fn validate(
    limits: &LimitsConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let l = limits;
    #[rustfmt::skip]
    let bounds = [
        Bound::new("max_followed_tasks", l.max_followed_tasks, 1..=10_000_000),
        Bound::new("max_followed_tasks_per_principal", l.followed_tasks_per_principal(), 1..=10_000_000),
        Bound::new("max_listen_task_ids", l.max_listen_task_ids, 1..=4096),
        Bound::new("max_request_bytes", l.max_request_bytes, 1024..=256 * MIB),
        Bound::new("max_jobs_per_token", l.max_jobs_per_token, 1..=1_000_000),
        Bound::new("calls_per_minute", l.calls_per_minute, 1..=10_000_000),
        Bound::new("job_requests_per_minute", l.job_requests_per_minute, 1..=10_000_000),
        Bound::new("job_requests_per_minute_per_address", l.job_requests_per_minute_per_address, 1..=10_000_000),
        Bound::new("max_subscribers_per_channel", l.max_subscribers_per_channel, 1..=1_000_000),
        Bound::new("max_subscribers", l.max_subscribers, 1..=10_000_000),
        Bound::new("max_subscribers_per_principal", l.subscribers_per_principal(), 1..=10_000_000),
        Bound::new("max_upstream_list_items", l.max_upstream_list_items, 1..=1_000_000),
        Bound::new("max_resource_read_bytes", l.max_resource_read_bytes, 1024..=GIB),
        Bound::new("max_resource_subscriptions", l.max_resource_subscriptions, 1..=1_000_000),
        Bound::new("max_connections", l.max_connections, 1..=10_000_000),
        Bound::new("max_connections_per_address", l.max_connections_per_address, 1..=10_000_000),
        Bound::new("reserved_fds", l.reserved_fds, 16..=1_000_000),
        Bound::new("max_result_bytes", l.max_result_bytes, MIN_RESULT_BYTES..=MAX_RESULT_BYTES),
        Bound::new("max_sse_buffer_bytes", l.max_sse_buffer_bytes, 64 * KIB..=GIB),
        Bound::new("max_sessions", l.max_sessions, 1..=10_000_000),
        Bound::new("max_sessions_per_principal", l.sessions_per_principal(), 1..=10_000_000),
        Bound::new("max_wait_bounds", l.max_wait_bounds, 1..=10_000_000),
        Bound::new("max_input_relays", l.max_input_relays, 1..=1_000_000),
        Bound::new("max_input_relays_per_principal", l.input_relays_per_principal(), 1..=1_000_000),
        Bound::new("max_upstream_request_spans", l.max_upstream_request_spans, 1..=1_000_000),
        Bound::new("max_initialize_bytes", l.max_initialize_bytes, 1024..=4 * MIB),
        Bound::new("max_input_rounds", l.max_input_rounds, 1..=1000),
        Bound::new("max_input_requests_per_round", l.max_input_requests_per_round, 1..=1000),
        Bound::new("max_request_state_bytes", l.max_request_state_bytes, 16..=16 * MIB),
    ];
    bounds::check("limits", bounds).map_err(|(key, message)| err(&key, message))
}
