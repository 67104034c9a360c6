//! Prometheus metrics. One registry per bridge instance (not the process-global default), so
//! tests that run several bridges in one process see only their own figures.

use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

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
    /// Open HTTP connections, by listener (`main`, `admin`).
    pub connections_open: IntGaugeVec,
    /// Connections refused at accept, by the cap reached (`max_connections`,
    /// `max_connections_per_address`).
    pub connections_refused: IntCounterVec,
    /// Connections the bridge closed, by reason (`header_timeout`, `body_timeout`, `evicted`).
    pub connections_closed: IntCounterVec,
}

impl Metrics {
    // Long, and left so: a table, one registration per metric with its name and help text,
    // read down the page like the list of fields above.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
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
        let jobs_running = IntGauge::new("bridge_jobs_running", "Jobs running in this replica")
            .expect("valid metric");
        registry
            .register(Box::new(jobs_running.clone()))
            .expect("unique metric");
        let sse_subscribers = IntGauge::new(
            "bridge_sse_subscribers",
            "Open SSE streams (jobs and correlations)",
        )
        .expect("valid metric");
        registry
            .register(Box::new(sse_subscribers.clone()))
            .expect("unique metric");
        let upstream_up = IntGaugeVec::new(
            Opts::new(
                "bridge_upstream_up",
                "1 when the upstream is connected and its tools are listed",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(upstream_up.clone()))
            .expect("unique metric");
        let connections_open = IntGaugeVec::new(
            Opts::new(
                "bridge_connections_open",
                "Open HTTP connections, by listener (main, admin)",
            ),
            &["listener"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(connections_open.clone()))
            .expect("unique metric");
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
            auth_rejections,
            jwks_fetches,
            connections_open,
            connections_refused,
            connections_closed,
        }
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
