//! `[upstream_tasks]`: bounds on what an upstream's own tasks (MCP 2025-11-25,
//! `execution.taskSupport: "required"`, see docs/tasks.md) may make the bridge do. The upstream
//! picks the poll interval, the status messages and how many statuses it pushes; these keep
//! each within reach of a safe value. Each hit counts in
//! `bridge_limit_hits_total{limit="upstream_tasks.<key>"}`.

use serde::Deserialize;

use super::{
    ConfigError,
    bounds::{self, Bound, MIB},
};

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTasksConfig {
    /// Shortest pause between two `tasks/get` polls of one upstream task, in ms: a smaller
    /// `pollInterval` from the upstream is raised to it.
    pub min_poll_ms: u64,
    /// Longest pause between two polls, in ms: a larger `pollInterval` is lowered to it.
    pub max_poll_ms: u64,
    /// The pause between polls when the upstream suggests none, in ms.
    pub default_poll_ms: u64,
    /// `tasks/get` requests sent for one upstream task; past it the task is cancelled upstream
    /// (`tasks/cancel`) and the job fails (`timeout`).
    pub max_polls: u64,
    /// Status notifications (`notifications/tasks/status`) held per upstream connection for
    /// tasks not yet named, and per task waiting to be read; more are dropped (a poll sees the
    /// status anyway).
    pub max_queued_statuses: usize,
    /// Bytes of one task's `statusMessage` kept (UTF-8, cut at a character boundary and ended
    /// with `…`): the progress message and the failure message it becomes.
    pub max_status_message_bytes: usize,
    /// How long a call whose upstream task outlives its Streamable HTTP connection waits for
    /// the next connection to poll the task there, in seconds (`0`: it fails `upstream_lost` at
    /// once). A stdio child's tasks die with it: such a call fails at once whatever this says.
    pub resume_within_secs: u64,
    /// Longest `tools/list` answer (a stdio line, an SSE event's data, a JSON body) read a
    /// second time for `execution.taskSupport`, in bytes; a larger list loses its declarations
    /// and its tools are called the plain way.
    pub max_declaration_bytes: usize,
    /// Longest SSE event id of an upstream's call stream kept as the job's resume cursor
    /// (`durable`), in bytes of visible ASCII; a longer or odd one is not kept (counted), so
    /// the cursor stays on the last good id.
    pub max_event_id_bytes: usize,
    /// Requests of an upstream (`elicitation/create`, `sampling/createMessage`, `roots/list`,
    /// `ping`, ...) answered on one stream the bridge reads without rmcp: an adopted job's
    /// resumed call stream or its task's `tasks/result` stream. Past it they go unanswered
    /// (counted), so a hostile stream cannot keep the adopter asking.
    pub max_asks_per_stream: usize,
}

impl Default for UpstreamTasksConfig {
    fn default() -> Self {
        Self {
            min_poll_ms: 100,
            max_poll_ms: 10_000,
            default_poll_ms: 1000,
            max_polls: 100_000,
            max_queued_statuses: 16,
            max_status_message_bytes: 4096,
            max_declaration_bytes: 4 * 1024 * 1024,
            resume_within_secs: 300,
            max_event_id_bytes: 256,
            max_asks_per_stream: 64,
        }
    }
}

pub(super) fn validate(
    tasks: &UpstreamTasksConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let t = tasks;
    #[rustfmt::skip]
    let bounds = [
        Bound::new("resume_within_secs", t.resume_within_secs, 0..=86_400),
        Bound::new("min_poll_ms", t.min_poll_ms, 10..=600_000),
        Bound::new("max_poll_ms", t.max_poll_ms, 10..=600_000),
        Bound::new("default_poll_ms", t.default_poll_ms, 10..=600_000),
        Bound::new("max_polls", t.max_polls, 1..=100_000_000),
        Bound::new("max_queued_statuses", t.max_queued_statuses, 1..=10_000),
        Bound::new("max_status_message_bytes", t.max_status_message_bytes, 16..=MIB),
        Bound::new("max_declaration_bytes", t.max_declaration_bytes, 1024..=256 * MIB),
        Bound::new("max_event_id_bytes", t.max_event_id_bytes, 16..=4096),
        Bound::new("max_asks_per_stream", t.max_asks_per_stream, 1..=10_000),
    ];
    bounds::check("upstream_tasks", bounds).map_err(|(key, message)| err(&key, message))?;
    if tasks.min_poll_ms > tasks.max_poll_ms {
        return Err(err(
            "upstream_tasks.min_poll_ms",
            format!(
                "is {} ms, more than upstream_tasks.max_poll_ms ({} ms)",
                tasks.min_poll_ms, tasks.max_poll_ms
            ),
        ));
    }
    if !(tasks.min_poll_ms..=tasks.max_poll_ms).contains(&tasks.default_poll_ms) {
        return Err(err(
            "upstream_tasks.default_poll_ms",
            format!(
                "must be between upstream_tasks.min_poll_ms ({}) and upstream_tasks.max_poll_ms \
                 ({}), got {}",
                tasks.min_poll_ms, tasks.max_poll_ms, tasks.default_poll_ms
            ),
        ));
    }
    Ok(())
}
