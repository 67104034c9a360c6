//! The histograms: how long jobs, `/mcp` requests, deliveries, store and upstream calls take.
//! Every label has a fixed set of values or the config's (upstream and tool names), so the
//! series stay bounded whatever clients and upstreams send; buckets fit each one's range
//! (jobs: seconds to an hour; requests and store calls: fractions of a millisecond up).
//! Observing costs a few atomic adds (the bench's side-by-side run: BENCHMARKS.md).

use prometheus::{Histogram, HistogramOpts, HistogramVec, Registry};

/// The label value of anything outside a label's known set.
pub(super) const OTHER: &str = "other";

/// Jobs: a second's fraction (a sync call answered at once) to the hour a job may run.
const JOB_SECONDS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];
/// `/mcp` requests and upstream calls: a millisecond's fraction to the 100 s an agent waits.
const REQUEST_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    100.0,
];
/// Deliveries and store calls: tens of microseconds (memory store) to seconds (Redis away).
const FAST_SECONDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    5.0,
];

/// The JSON-RPC methods `/mcp` serves by name in `bridge_mcp_request_duration_seconds`.
const MCP_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "tasks/update",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/roots/list_changed",
];

/// The `method` label of a `/mcp` message: its method when known, `response` for a client's
/// answer (no method), else `other`.
pub fn mcp_method_label(method: Option<&str>) -> &'static str {
    match method {
        None => "response",
        Some(method) => MCP_METHODS
            .iter()
            .find(|known| **known == method)
            .copied()
            .unwrap_or(OTHER),
    }
}

/// The store calls `bridge_store_call_duration_seconds` times: its `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    CreateJob,
    Append,
    RecordReattach,
    Heartbeat,
    Snapshot,
    Open,
    Replay,
    Expire,
    Ping,
    RequestCancel,
    RelayAnswer,
    ReplyAnswer,
    ListTask,
    ListedTasks,
}

impl StoreOp {
    pub const ALL: [StoreOp; 14] = [
        StoreOp::CreateJob,
        StoreOp::Append,
        StoreOp::RecordReattach,
        StoreOp::Heartbeat,
        StoreOp::Snapshot,
        StoreOp::Open,
        StoreOp::Replay,
        StoreOp::Expire,
        StoreOp::Ping,
        StoreOp::RequestCancel,
        StoreOp::RelayAnswer,
        StoreOp::ReplyAnswer,
        StoreOp::ListTask,
        StoreOp::ListedTasks,
    ];

    pub fn label(self) -> &'static str {
        match self {
            StoreOp::CreateJob => "create_job",
            StoreOp::Append => "append",
            StoreOp::RecordReattach => "record_reattach",
            StoreOp::Heartbeat => "heartbeat",
            StoreOp::Snapshot => "snapshot",
            StoreOp::Open => "open",
            StoreOp::Replay => "replay",
            StoreOp::Expire => "expire",
            StoreOp::Ping => "ping",
            StoreOp::RequestCancel => "request_cancel",
            StoreOp::RelayAnswer => "relay_answer",
            StoreOp::ReplyAnswer => "reply_answer",
            StoreOp::ListTask => "list_task",
            StoreOp::ListedTasks => "listed_tasks",
        }
    }
}

pub(super) struct Timings {
    pub job_duration: HistogramVec,
    pub mcp_request_duration: HistogramVec,
    pub delivery_lag: Histogram,
    pub store_call_duration: HistogramVec,
    pub upstream_call_duration: HistogramVec,
}

impl Timings {
    pub(super) fn register(registry: &Registry) -> Self {
        let vec = |name: &str, help: &str, buckets: &[f64], labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            let h = HistogramVec::new(opts, labels).expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let job_duration = vec(
            "bridge_job_duration_seconds",
            "How long jobs ran on this replica (an adopted one: from its adoption), by upstream, tool (the tools the config names; any other: other) and terminal status",
            JOB_SECONDS,
            &["upstream", "tool", "status"],
        );
        let mcp_request_duration = vec(
            "bridge_mcp_request_duration_seconds",
            "POST /mcp from the request to the response's head (a JSON answer: whole), by JSON-RPC method (unknown ones: other; a client's answer: response)",
            REQUEST_SECONDS,
            &["method"],
        );
        let store_call_duration = vec(
            "bridge_store_call_duration_seconds",
            "Calls of the job store, by operation",
            FAST_SECONDS,
            &["operation"],
        );
        for op in StoreOp::ALL {
            store_call_duration.with_label_values(&[op.label()]);
        }
        let upstream_call_duration = vec(
            "bridge_upstream_call_duration_seconds",
            "Upstream tools/call requests, from sending to the answer (or the error), by upstream and outcome (ok, error)",
            REQUEST_SECONDS,
            &["upstream", "outcome"],
        );
        let delivery_lag = Histogram::with_opts(
            HistogramOpts::new(
                "bridge_sse_delivery_lag_seconds",
                "From an upstream's progress notification reaching this replica (Redis store: the event reaching this replica's pub/sub link) to its frame handed to an SSE reader's socket, per reader",
            )
            .buckets(FAST_SECONDS.to_vec()),
        )
        .expect("valid metric");
        registry
            .register(Box::new(delivery_lag.clone()))
            .expect("unique metric");
        Self {
            job_duration,
            mcp_request_duration,
            delivery_lag,
            store_call_duration,
            upstream_call_duration,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_are_the_known_methods_or_other() {
        assert_eq!(mcp_method_label(Some("tools/call")), "tools/call");
        assert_eq!(mcp_method_label(None), "response");
        assert_eq!(mcp_method_label(Some("tools/call\u{0}x")), "other");
        assert_eq!(mcp_method_label(Some(&"a".repeat(10_000))), "other");
    }
}
