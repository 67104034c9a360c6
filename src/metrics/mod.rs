//! Prometheus metrics. One registry per bridge instance (not the process-global default), so
//! tests that run several bridges in one process see only their own figures.

use std::{collections::BTreeSet, time::Duration};

use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
    core::{Collector, Desc},
    proto::MetricFamily,
};
pub use prometheus::{Histogram, HistogramVec};

mod timings;

pub use timings::{StoreOp, mcp_method_label};

/// Why a request was refused before any handler ran: the `reason` label of
/// `bridge_requests_refused_total`, a fixed set so the series stay bounded whatever clients
/// send. Every series exists from the start at 0, so a dashboard's rate() works at once.
/// A connection refused at accept (a connection cap) is counted once, in
/// `bridge_connections_refused_total{reason}`, not here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A credential missing, invalid or not allowed (401 on `/mcp`; a job URL whose token or
    /// credential does not open it, answered 404). The detail is in
    /// `bridge_auth_rejections_total{reason}`.
    Auth,
    /// `limits.calls_per_minute` (429).
    RateLimit,
    /// `limits.job_requests_per_minute` or `limits.job_requests_per_minute_per_address` on
    /// the job and correlation routes (429).
    JobRateLimit,
    /// `limits.max_request_bytes` (413).
    BodySize,
    /// `limits.max_subscribers_per_channel` or `limits.max_subscribers` (503).
    SubscriberLimit,
    /// `limits.max_sessions`: an `initialize` while the replica holds that many MCP sessions
    /// (503).
    SessionLimit,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Refusal::Auth,
        Refusal::RateLimit,
        Refusal::JobRateLimit,
        Refusal::BodySize,
        Refusal::SubscriberLimit,
        Refusal::SessionLimit,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::Auth => "auth",
            Refusal::RateLimit => "rate_limit",
            Refusal::JobRateLimit => "job_rate_limit",
            Refusal::BodySize => "body_size",
            Refusal::SubscriberLimit => "subscriber_limit",
            Refusal::SessionLimit => "session_limit",
        }
    }
}

/// `bridge_requests_refused_total{reason}`: a cheap handle for whatever refuses requests.
#[derive(Clone)]
pub struct RefusedRequests(IntCounterVec);

impl RefusedRequests {
    pub fn count(&self, reason: Refusal) {
        self.0.with_label_values(&[reason.label()]).inc();
    }
}

/// What happened to a job passing between replicas: the `event` label of
/// `bridge_job_adoptions_total` (docs/replicas.md), a fixed set, every series at 0 from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptionEvent {
    /// This replica adopted a job whose owner's lease lapsed.
    AdoptedLeaseLapsed,
    /// This replica adopted a job its draining owner handed over.
    AdoptedHandedOver,
    /// A job this draining replica offered was taken by another one.
    HandedOver,
    /// This replica's claim found the job claimed first by another replica (or ended).
    ClaimLost,
    /// A write of this replica was refused by the fence: another replica owns the job now.
    WriteFenced,
    /// This replica ended a lost owner's job `owner_lost` (its call could not be re-attached,
    /// or the adopted job could not be carried on here).
    OwnerLost,
}

impl AdoptionEvent {
    pub const ALL: [AdoptionEvent; 6] = [
        AdoptionEvent::AdoptedLeaseLapsed,
        AdoptionEvent::AdoptedHandedOver,
        AdoptionEvent::HandedOver,
        AdoptionEvent::ClaimLost,
        AdoptionEvent::WriteFenced,
        AdoptionEvent::OwnerLost,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AdoptionEvent::AdoptedLeaseLapsed => "adopted_lease_lapsed",
            AdoptionEvent::AdoptedHandedOver => "adopted_handed_over",
            AdoptionEvent::HandedOver => "handed_over",
            AdoptionEvent::ClaimLost => "claim_lost",
            AdoptionEvent::WriteFenced => "write_fenced",
            AdoptionEvent::OwnerLost => "owner_lost",
        }
    }
}

/// `bridge_job_adoptions_total{event}`: a cheap handle for the store and the front door. The
/// default is registered nowhere (a store started outside a bridge, in tests).
#[derive(Debug, Clone)]
pub struct Adoptions(IntCounterVec);

impl Default for Adoptions {
    fn default() -> Self {
        let opts = Opts::new("bridge_job_adoptions_total", "unregistered");
        Self(IntCounterVec::new(opts, &["event"]).expect("valid metric"))
    }
}

impl Adoptions {
    pub fn count(&self, event: AdoptionEvent) {
        self.0.with_label_values(&[event.label()]).inc();
    }
}

/// The `reason` values of `bridge_progress_dropped_total`.
const PROGRESS_DROP_REASONS: [&str; 5] = [
    "unknown_token",
    "non_increasing",
    "invalid",
    "after_end",
    "coalesced",
];

pub struct Metrics {
    registry: Registry,
    pub jobs_started: IntCounterVec,
    pub jobs_finished: IntCounterVec,
    pub jobs_running: IntGauge,
    pub progress_events: IntCounterVec,
    /// Upstream progress that was not published, by reason (`unknown_token`,
    /// `non_increasing`, `invalid`, `after_end`, `coalesced`).
    pub progress_dropped: IntCounterVec,
    pub log_dropped: IntCounterVec,
    pub sse_subscribers: IntGauge,
    pub upstream_up: IntGaugeVec,
    pub upstream_restarts: IntCounterVec,
    /// A bound on what an upstream or a client controls was hit, by `[limits]` key.
    pub limit_hits: IntCounterVec,
    /// Refused credentials on `/mcp`, job URLs and admin routes, by reason (the labels of
    /// `auth::Rejection`: `missing`, `expired`, `bad_signature`, …).
    pub auth_rejections: IntCounterVec,
    /// Fetches of issuers' signing keys, by outcome (`ok`, `error`).
    pub jwks_fetches: IntCounterVec,
    /// Requests refused before a handler ran, by [`Refusal`].
    pub refused: RefusedRequests,
    /// Open HTTP connections, by listener (`main`, `admin`).
    pub connections_open: IntGaugeVec,
    /// Connections refused at accept, by the cap reached (`max_connections`,
    /// `max_connections_per_address`).
    pub connections_refused: IntCounterVec,
    /// Connections the bridge closed, by reason (`header_timeout`, `body_timeout`, `evicted`).
    pub connections_closed: IntCounterVec,
    /// Requests about upstream tasks (tools that run only as a task), by method
    /// (`tasks/get`, `tasks/result`, `tasks/cancel`) and outcome (`ok`, `error`).
    pub upstream_task_requests: IntCounterVec,
    /// Answers to a job's question relayed between replicas (through Redis), by outcome: on
    /// the answering replica `taken`, `mismatch`, `too_large`, `nothing_to_answer`,
    /// `unknown_job`, `unconfirmed`, `owner_away`, `busy`, `store_unavailable`; on the job's
    /// replica `expired` (arrived after its sender stopped waiting, dropped).
    pub input_relays: IntCounterVec,
    /// SSE readers the bridge dropped, by reason (`buffer`: it held
    /// `limits.max_sse_buffer_bytes` unread and took nothing for a keep-alive interval).
    pub sse_readers_dropped: IntCounterVec,
    /// SSE streams a shared writer task handed back to their own task, by reason (`full`:
    /// the socket took nothing, `partial`: it took part of a frame, `behind`: the stream had
    /// not seen an event the writer had, or the writer's subscription lagged, `error`).
    pub sse_handbacks: IntCounterVec,
    /// Events written by the shared writer tasks, one per reader.
    pub sse_shared_deliveries: IntCounter,
    /// 1 from the first shutdown signal on: the replica takes no new calls while its running
    /// jobs finish (it is not ready).
    pub draining: IntGauge,
    /// Calls that would have started a job, refused because the replica was draining.
    pub calls_refused_draining: IntCounter,
    /// 1 while the job store answers a ping (memory: always; Redis: its links are up and it
    /// answered `PING`), 0 while it does not; refreshed every few seconds (`app`).
    pub store_up: IntGauge,
    /// Config reloads (SIGHUP), by result: `applied`, `refused` (the running config stays).
    pub config_reloads: IntCounterVec,
    /// Callers' `wait_for_job` bounds learned (a caller gave up on a wait and asked again).
    pub wait_bounds_learned: IntCounter,
    /// Jobs passing between replicas (adoption, the drain's hand-over), by [`AdoptionEvent`].
    pub adoptions: Adoptions,
    /// How long jobs ran on this replica, by upstream, tool ([`Metrics::tool_label`]) and
    /// terminal status.
    pub job_duration: HistogramVec,
    /// `/mcp` POSTs from the body's first byte to the response's head, by JSON-RPC method
    /// ([`mcp_method_label`]).
    pub mcp_request_duration: HistogramVec,
    /// From an upstream's progress notification reaching this replica (Redis: the event
    /// reaching this replica's pub/sub link) to its frame being handed to a reader's socket.
    pub delivery_lag: Histogram,
    /// Store calls, by [`StoreOp`].
    pub store_call_duration: HistogramVec,
    /// Upstream `tools/call` requests, from sending to the answer, by upstream and outcome.
    pub upstream_call_duration: HistogramVec,
    /// The tools the job histograms name; any other is `other` (see [`Metrics::tool_label`]).
    tools: BTreeSet<String>,
}

impl Metrics {
    // Long because: a registration table, one metric per entry (name, help, labels).
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let jobs_started = counter(
            "bridge_jobs_started_total",
            "Jobs started, by upstream",
            &["upstream"],
        );
        let jobs_finished = counter(
            "bridge_jobs_finished_total",
            "Jobs ended, by upstream and terminal status",
            &["upstream", "status"],
        );
        let progress_events = counter(
            "bridge_progress_events_total",
            "Progress notifications published to job channels, by upstream",
            &["upstream"],
        );
        let progress_dropped = counter(
            "bridge_progress_dropped_total",
            "Upstream progress notifications not published, by reason",
            &["reason"],
        );
        let log_dropped = counter(
            "bridge_log_dropped_total",
            "Upstream log messages not attributed to a job, by reason",
            &["reason"],
        );
        let upstream_restarts = counter(
            "bridge_upstream_restarts_total",
            "Times an upstream connection was re-established after it went down",
            &["upstream"],
        );
        let upstream_task_requests = counter(
            "bridge_upstream_task_requests_total",
            "Requests about upstream tasks, by method and outcome",
            &["method", "outcome"],
        );
        let input_relays = counter(
            "bridge_input_relays_total",
            "Answers to a job's question (or to a caller request: a sample, the roots) relayed to or from another replica, by outcome",
            &["outcome"],
        );
        let limit_hits = counter(
            "bridge_limit_hits_total",
            "Times a bound on what an upstream or a client controls was hit, by [limits] key",
            &["limit"],
        );
        let auth_rejections = counter(
            "bridge_auth_rejections_total",
            "Bearer credentials refused, by reason",
            &["reason"],
        );
        let jwks_fetches = counter(
            "bridge_jwks_fetches_total",
            "Fetches of JWT issuers' signing keys, by outcome",
            &["outcome"],
        );
        let connections_refused = counter(
            "bridge_connections_refused_total",
            "HTTP connections refused with a 503 when accepted, by the cap reached",
            &["reason"],
        );
        let connections_closed = counter(
            "bridge_connections_closed_total",
            "HTTP connections closed by the bridge: header or body too slow, or idle longest when the connection cap was reached",
            &["reason"],
        );
        let sse_readers_dropped = counter(
            "bridge_sse_readers_dropped_total",
            "SSE readers dropped by the bridge: buffer = it held limits.max_sse_buffer_bytes unread and read nothing for a keep-alive interval",
            &["reason"],
        );
        let sse_handbacks = counter(
            "bridge_sse_handbacks_total",
            "SSE streams a shared writer task (server.sse_writers) handed back to their own task: full = the socket took nothing, partial = part of a frame, behind = the stream had not seen an event the writer had, error",
            &["reason"],
        );
        let sse_shared_deliveries = register(
            &registry,
            IntCounter::new(
                "bridge_sse_shared_deliveries_total",
                "Events written to a reader by a shared writer task (server.sse_writers), not by the reader's own task",
            ),
        );
        let calls_refused_draining = register(
            &registry,
            IntCounter::new(
                "bridge_calls_refused_draining_total",
                "Calls that would have started a job, refused (with a tool error saying to retry) because the replica was draining",
            ),
        );
        let config_reloads = counter(
            "bridge_config_reloads_total",
            "Config reloads on SIGHUP, by result: applied (tokens, admins, policies in force), refused (the file has a problem; the running config stays)",
            &["result"],
        );
        let wait_bounds_learned = register(
            &registry,
            IntCounter::new(
                "bridge_wait_bounds_learned_total",
                "Times a caller gave up on a wait_for_job and asked again, teaching the bridge how long that caller can wait",
            ),
        );
        let refused = counter(
            "bridge_requests_refused_total",
            "Requests refused before any handler ran, by reason (connections refused at accept: bridge_connections_refused_total)",
            &["reason"],
        );
        let adoptions = counter(
            "bridge_job_adoptions_total",
            "Jobs passing between replicas, by event: adopted_lease_lapsed, adopted_handed_over, handed_over, claim_lost, write_fenced, owner_lost",
            &["event"],
        );
        let build_info = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "bridge_build_info",
                    "Always 1; the labels say which build of the bridge this is",
                ),
                &["version", "profile"],
            ),
        );
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), profile])
            .set(1);
        let jobs_running = register(
            &registry,
            IntGauge::new("bridge_jobs_running", "Jobs running in this replica"),
        );
        let draining = register(
            &registry,
            IntGauge::new(
                "bridge_draining",
                "1 while the replica drains after a shutdown signal: not ready, no new calls, running jobs finishing",
            ),
        );
        let store_up = register(
            &registry,
            IntGauge::new(
                "bridge_store_up",
                "1 while the job store (memory or Redis) answers a ping, 0 while it does not; pinged every 2 s",
            ),
        );
        let sse_subscribers = register(
            &registry,
            IntGauge::new(
                "bridge_sse_subscribers",
                "Open SSE streams (jobs and correlations)",
            ),
        );
        let upstream_up = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "bridge_upstream_up",
                    "1 when the upstream is connected and its tools are listed",
                ),
                &["upstream"],
            ),
        );
        let connections_open = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "bridge_connections_open",
                    "Open HTTP connections, by listener (main, admin)",
                ),
                &["listener"],
            ),
        );
        // Series of a fixed label set exist from the start at 0, so that an alert's or a
        // dashboard's rate() works before the first count.
        let refusals = Refusal::ALL.map(Refusal::label);
        let adoption_events = AdoptionEvent::ALL.map(AdoptionEvent::label);
        #[rustfmt::skip]
        let zeros: [(&IntCounterVec, &[&str]); 7] = [
            (&progress_dropped, &PROGRESS_DROP_REASONS),
            (&connections_refused, &["max_connections", "max_connections_per_address"]),
            (&sse_readers_dropped, &["buffer"]),
            (&sse_handbacks, &["full", "partial", "behind", "error"]),
            (&config_reloads, &["applied", "refused"]),
            (&refused, &refusals),
            (&adoptions, &adoption_events),
        ];
        for (counter, values) in zeros {
            for value in values {
                counter.with_label_values(&[value]);
            }
        }
        let timings = timings::Timings::register(&registry);
        Self {
            registry,
            jobs_started,
            jobs_finished,
            jobs_running,
            progress_events,
            progress_dropped,
            log_dropped,
            sse_subscribers,
            upstream_up,
            upstream_restarts,
            limit_hits,
            upstream_task_requests,
            input_relays,
            auth_rejections,
            jwks_fetches,
            refused: RefusedRequests(refused),
            connections_open,
            connections_refused,
            connections_closed,
            sse_readers_dropped,
            sse_handbacks,
            sse_shared_deliveries,
            draining,
            calls_refused_draining,
            store_up,
            config_reloads,
            wait_bounds_learned,
            adoptions: Adoptions(adoptions),
            job_duration: timings.job_duration,
            mcp_request_duration: timings.mcp_request_duration,
            delivery_lag: timings.delivery_lag,
            store_call_duration: timings.store_call_duration,
            upstream_call_duration: timings.upstream_call_duration,
            tools: BTreeSet::new(),
        }
    }

    /// These metrics, with `tools` (namespaced, `<upstream>__<tool>`: the tools the config
    /// names) as the values the job histograms may carry in their `tool` label.
    pub fn with_tools(tools: impl IntoIterator<Item = String>) -> Self {
        Self {
            tools: tools.into_iter().collect(),
            ..Self::new()
        }
    }

    /// These metrics, with `bridge_upstream_restarts_total`'s series of every upstream in
    /// `upstreams` there from the start at 0 (an alert's `increase()` sees the first restart).
    pub fn with_upstreams<'a>(self, upstreams: impl IntoIterator<Item = &'a str>) -> Self {
        for upstream in upstreams {
            self.upstream_restarts.with_label_values(&[upstream]);
        }
        self
    }

    /// The `tool` label of `tool`: itself when the config names it, else `other`. Upstreams
    /// list what they like, as many as they like; the config is the operator's, and bounded.
    pub fn tool_label<'a>(&self, tool: &'a str) -> &'a str {
        if self.tools.contains(tool) {
            tool
        } else {
            timings::OTHER
        }
    }

    /// Count `elapsed` in `histogram`, in seconds.
    pub fn observe(histogram: &Histogram, elapsed: Duration) {
        histogram.observe(elapsed.as_secs_f64());
    }

    /// A gauge whose value is read when `/metrics` is scraped: `read` returns the current
    /// value, or `None` to keep the last one (say, a lock it would wait for is held).
    pub fn gauge_fn(
        &self,
        name: &str,
        help: &str,
        read: impl Fn() -> Option<i64> + Send + Sync + 'static,
    ) {
        let gauge = IntGauge::new(name, help).expect("valid metric");
        let collector = GaugeFn {
            gauge,
            read: Box::new(read),
        };
        self.registry
            .register(Box::new(collector))
            .expect("unique metric");
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "metrics did not encode");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `metric`, registered in `registry`.
fn register<M: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

/// A gauge set from a function at each scrape (see [`Metrics::gauge_fn`]).
struct GaugeFn {
    gauge: IntGauge,
    read: Box<dyn Fn() -> Option<i64> + Send + Sync>,
}

impl Collector for GaugeFn {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if let Some(value) = (self.read)() {
            self.gauge.set(value);
        }
        self.gauge.collect()
    }
}
