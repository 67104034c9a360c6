//! Wires the bridge together from a [`Config`] and runs it: store, upstreams, jobs, the MCP
//! front door and the HTTP API on one listener, and an orderly shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use prometheus::IntGauge;
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::SessionStore,
};
use serde_json::json;
use tokio::{net::TcpListener, time::Instant};

use crate::{
    auth::{CurrentAuthenticator, JobTokens},
    config::{Config, ConfigError, EvictionCheck, StoreBackend, public_url_on, without_secret_env},
    events::StoreError,
    front::{Front, Links, SEPARATOR, WaitBounds},
    http::{
        self, ApiState, Readiness, Surface,
        admin::{AdminState, UpstreamsReport},
        auth::Guard,
        mcp_layer::{McpAnswers, McpLayer},
        sessions::{BridgeSessions, SessionGate, SessionLookup},
    },
    jobs::{DrainEnd, InputError, JobQuota, Jobs},
    metrics::Metrics,
    shutdown::{DROP_WAIT, Shutdown, ShutdownGuard, Stage, TaskCount, Tasks},
    store::{MemoryStore, RedisOptions, RedisStore, Store, TimedStore},
    traces::{self, Traces},
    upstream::{UpstreamLimits, UpstreamState, Upstreams},
};

/// How often finished jobs past retention are dropped, at most: a short retention is swept
/// more often, so a job is never kept much past it.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(10);
/// How often the store is pinged for `bridge_store_up`: one `PING` per replica this often is
/// nothing to Redis, and an alert sees an unreachable store within a scrape or two.
const STORE_PING_INTERVAL: Duration = Duration::from_secs(2);
/// How long the HTTP server may take to close its connections at shutdown.
const HTTP_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for the answers owed to `tools/call` requests, once every job has
/// ended (a long poll such as `wait_for_job` on another replica's job may hold one that long).
const ANSWERS_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the jobs cancelled at the end of the drain may take to end (their upstream told,
/// their terminal event written), and the jobs stage with them.
const JOBS_END_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the upstreams may take to stop: a stdio child gets a few seconds to exit after its
/// stdin closes, then SIGTERM, then SIGKILL (about 7 s at most).
const UPSTREAMS_STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the store may take to stop its upkeep (giving the lease up is one command) and to
/// close its connections.
const STORE_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the last export of traces may take (the exporter's own bound, and a second for
/// its thread to end).
const TRACES_FLUSH_TIMEOUT: Duration = traces::FLUSH_TIMEOUT.saturating_add(Duration::from_secs(1));

/// The stages stopped after the jobs and the answers owed, in order, each with its bound.
const LATER_STAGES: [(Stage, Duration); 5] = [
    (Stage::Http, HTTP_CLOSE_TIMEOUT),
    (Stage::Upstreams, UPSTREAMS_STOP_TIMEOUT),
    (Stage::Store, STORE_STOP_TIMEOUT),
    (Stage::Connections, STORE_STOP_TIMEOUT),
    (Stage::Traces, TRACES_FLUSH_TIMEOUT),
];

/// The longest the bridge takes to exit once its drain has ended, every bound reached: the
/// cancelled jobs end (or are dropped, [`DROP_WAIT`] later), the answers owed are written,
/// and each later stage stops (or has its tasks dropped). A deployment's stop timeout is
/// `jobs.drain_secs` plus this (docs/deployment.md; deploy/validate.py sums these constants
/// the same way, and a test holds the docs to it). Usually it takes a second or two.
pub const AFTER_DRAIN_MAX: Duration = after_drain_max();

const fn after_drain_max() -> Duration {
    let mut total = JOBS_END_TIMEOUT
        .saturating_add(DROP_WAIT)
        .saturating_add(ANSWERS_WRITE_TIMEOUT);
    let mut i = 0;
    while i < LATER_STAGES.len() {
        total = total
            .saturating_add(LATER_STAGES[i].1)
            .saturating_add(DROP_WAIT);
        i += 1;
    }
    total
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "cannot listen on {addr}: {source} (is another process using it? set --listen or BRIDGE_LISTEN)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up the job store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot set up authorization: {0}")]
    Auth(#[from] crate::auth::PolicyError),
}

/// A running bridge. [`RunningBridge::shutdown`] stops it in order; dropping it only tells
/// every task to stop, without draining jobs or waiting for anything.
pub struct RunningBridge {
    pub addr: SocketAddr,
    /// The admin listener's address, when `server.admin_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    /// `server.public_url`, with the port the bridge got when it named port 0.
    pub public_url: String,
    pub upstreams: Upstreams,
    pub jobs: Jobs,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    /// Owns every background task of the bridge.
    shutdown: Shutdown,
    /// The `tools/call` answers being written, which shutdown lets finish.
    answers: McpAnswers,
    /// Who may call: replaced on a config reload.
    access: Arc<CurrentAuthenticator>,
    _stop_on_drop: ShutdownGuard,
}

/// What the store, the upstreams and the jobs are, for the MCP service and the routes.
struct Core {
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    upstreams: Upstreams,
    jobs: Jobs,
}

/// The answer path of `POST /jobs/{id}/input` into the jobs stage.
struct JobInputs(Jobs);

impl http::InputAnswers for JobInputs {
    fn answer(
        &self,
        id: crate::model::JobId,
        answer: crate::model::InputAnswer,
    ) -> futures::future::BoxFuture<'_, Result<(), http::InputRefusal>> {
        use futures::FutureExt;
        async move {
            self.0
                .inputs()
                .answer(id, answer, "POST /jobs/{id}/input")
                .await
                .map_err(|e| match e {
                    InputError::UnknownJob => http::InputRefusal::UnknownJob,
                    InputError::NothingToAnswer => {
                        http::InputRefusal::NothingToAnswer(e.to_string())
                    }
                    InputError::Mismatch(ref mismatch) => http::InputRefusal::Mismatch {
                        field: mismatch.field.clone(),
                        message: e.to_string(),
                    },
                    InputError::TooLarge { .. } => http::InputRefusal::TooLarge(e.to_string()),
                    InputError::Unconfirmed { .. } | InputError::Unreachable(_) => {
                        http::InputRefusal::Undelivered(e.to_string())
                    }
                })
        }
        .boxed()
    }

    fn max_bytes(&self) -> usize {
        self.0.inputs().max_input_bytes()
    }
}

/// Ready when the store answers (`http` checks it), every upstream has been tried once (so a
/// new replica does not serve an empty catalog), the upstreams `server.ready_requires` names
/// are connected, and the replica is not draining (so a load balancer stops sending it calls
/// while its running jobs finish). Any other upstream being down is reported, not fatal: its
/// calls get a tool error saying so, and every other upstream keeps serving.
struct BridgeReadiness {
    upstreams: Upstreams,
    jobs: Jobs,
    /// `server.ready_requires`.
    requires: Vec<String>,
}

impl Readiness for BridgeReadiness {
    fn report(&self) -> (Option<&'static str>, serde_json::Value) {
        let statuses = self.upstreams.statuses();
        let required = |name: &str| self.requires.iter().any(|r| r == "*" || r == name);
        // Tried once: connected or failed at least once (a reconnect keeps its last error).
        let starting = statuses
            .iter()
            .any(|s| s.state == UpstreamState::Connecting && s.last_error.is_none());
        let down = statuses
            .iter()
            .any(|s| required(&s.name) && s.state != UpstreamState::Ready);
        let parts = statuses
            .iter()
            // No error text: it may name hosts, paths or credentials. `/upstreams` has it.
            .map(|s| {
                json!({
                    "name": s.name,
                    "state": s.state,
                    "tools": s.tools.len(),
                    "required": required(&s.name),
                })
            })
            .collect();
        let reason = if starting {
            Some(http::NOT_READY_STARTING)
        } else if down {
            Some(http::NOT_READY_UPSTREAM)
        } else {
            None
        };
        (reason, serde_json::Value::Array(parts))
    }

    fn draining(&self) -> bool {
        self.jobs.is_draining()
    }
}

impl UpstreamsReport for BridgeReadiness {
    fn statuses(&self) -> serde_json::Value {
        serde_json::to_value(self.upstreams.statuses()).unwrap_or_default()
    }
}

/// Start everything and return once the listener is bound. Upstreams connect in the
/// background; `/readyz` says when they are up.
pub async fn start(config: Config) -> Result<RunningBridge, StartError> {
    let listener = bind(config.server.listen).map_err(|source| StartError::Bind {
        addr: config.server.listen,
        source,
    })?;
    start_with_listener(config, listener).await
}

/// Pending connections the kernel queues for the bridge before it accepts them (capped by
/// `net.core.somaxconn`). `TcpListener::bind` asks for 128: a burst of more connections at
/// once (browsers reconnecting after a restart) overflowed it, and each dropped SYN cost its
/// client a one-second retry (measured: 256 readers connecting at once took 1.0 s).
const LISTEN_BACKLOG: u32 = 4096;

/// Bind like `TcpListener::bind` (address reuse on, as std sets it on Unix), with a longer
/// accept queue.
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// [`start`] on a listener the caller has bound (tests bind port 0 first, to know the address
/// that `server.public_url` must name). A `public_url` on port 0 gets the listener's port.
pub async fn start_with_listener(
    mut config: Config,
    listener: TcpListener,
) -> Result<RunningBridge, StartError> {
    let bound = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.server.listen,
        source,
    })?;
    config.server.public_url = public_url_on(&config.server.public_url, bound);
    // Before anything that may print one of them.
    config.register_secrets();
    let shutdown = Shutdown::new();
    // Armed at once: a start that fails half-way stops what it had started.
    let stop_on_drop = shutdown.drop_guard();
    let (core, mcp_sessions) = start_core(&config, &shutdown)?;
    let http = shutdown.tasks(Stage::Http);
    let job_tokens = JobTokens::from_config(&config.auth);
    let guard = Guard::new(&config, job_tokens.clone(), &core.metrics)?;
    let (mcp, lookup) = mcp_service(&config, &core, job_tokens, mcp_sessions, &http);
    let answers = McpAnswers::default();
    let surface = routes(&config, &core, mcp, (&guard, &answers, lookup), &http);
    let (addr, admin_addr) = serve(&config, listener, surface, &core.metrics, &http).await?;
    http::announce(&guard, &config);
    tracing::info!(%addr, upstreams = config.upstreams.len(), store = ?config.store.backend, "bridge listening");
    if let Some(admin) = admin_addr {
        tracing::info!(%admin, "admin listener (/upstreams, /metrics) on its own address");
    }
    let Core {
        store,
        metrics,
        upstreams,
        jobs,
    } = core;
    Ok(RunningBridge {
        addr,
        admin_addr,
        public_url: config.server.public_url,
        upstreams,
        jobs,
        store,
        metrics,
        shutdown,
        answers,
        access: guard.authn.clone(),
        _stop_on_drop: stop_on_drop,
    })
}

/// The store, the upstreams and the jobs, started; and where MCP sessions are recorded, when
/// the store keeps them.
fn start_core(
    config: &Config,
    shutdown: &Shutdown,
) -> Result<(Core, Option<McpSessions>), StartError> {
    // The tools the config names get their own series in the job histograms.
    let tools = config.upstreams.iter().flat_map(|upstream| {
        (upstream.tools.keys()).map(move |tool| format!("{}{SEPARATOR}{tool}", upstream.name))
    });
    let upstreams = config
        .upstreams
        .iter()
        .map(|upstream| upstream.name.as_str());
    let metrics = Arc::new(Metrics::with_tools(tools).with_upstreams(upstreams));
    // Names this process as the owner of the jobs it runs (cancel routing, owner-loss
    // detection): random, because a restarted process has lost its upstream calls and must
    // not inherit the old one's jobs.
    let replica = format!("replica-{:016x}", fastrand::u64(..));
    let (store, mcp_sessions) = start_store(config, &replica, &metrics, shutdown)?;
    let upstreams = Upstreams::start(
        &without_secret_env(&config.auth, &config.upstreams),
        UpstreamLimits {
            max_list_items: config.limits.max_upstream_list_items,
            max_resource_read_bytes: config.limits.max_resource_read_bytes,
            max_result_bytes: config.limits.max_result_bytes,
            max_input_rounds: config.limits.max_input_rounds,
            max_input_requests_per_round: config.limits.max_input_requests_per_round,
            max_request_state_bytes: config.limits.max_request_state_bytes,
            max_request_spans: config.limits.max_upstream_request_spans,
            tasks: config.upstream_tasks,
        },
        metrics.clone(),
        shutdown.tasks(Stage::Upstreams),
    );
    let jobs = Jobs::new(
        store.clone(),
        config.jobs.clone(),
        replica,
        metrics.clone(),
        shutdown.tasks(Stage::Jobs),
    );
    // Jobs adopted from lost replicas (Redis), carried on here; the store hands them up.
    shutdown
        .tasks(Stage::Jobs)
        .spawn_until_stopped(crate::front::carry_on_adopted(
            upstreams.clone(),
            jobs.clone(),
            store.adoptions(),
            metrics.adoptions.clone(),
        ));
    let core = Core {
        store,
        metrics,
        upstreams,
        jobs,
    };
    Ok((core, mcp_sessions))
}

/// Where rmcp records MCP sessions, when not only in this replica's memory.
type McpSessions = Arc<dyn SessionStore>;

/// The job store the config names, with its upkeep running, and (with Redis) the record of
/// MCP sessions, kept there too so that any replica can serve a session.
fn start_store(
    config: &Config,
    replica: &str,
    metrics: &Arc<Metrics>,
    shutdown: &Shutdown,
) -> Result<(Arc<dyn Store>, Option<McpSessions>), StartError> {
    let (store, sessions): (Arc<dyn Store>, _) = match config.store.backend {
        StoreBackend::Memory => (
            Arc::new(MemoryStore::new(
                config.jobs.history,
                config.jobs.retention_secs,
            )),
            None,
        ),
        StoreBackend::Redis => {
            let options = redis_options(config, metrics);
            // A `rediss://` client builds a rustls config: ring must be the provider first.
            crate::tls::use_ring();
            let redis = RedisStore::start(options, replica.to_string(), shutdown)?;
            let sessions = redis.mcp_sessions(Duration::from_secs(config.server.session_idle_secs));
            (Arc::new(redis), Some(sessions))
        }
    };
    let store = TimedStore::wrap(store, metrics.clone());
    let sweep = Duration::from_millis(config.jobs.retention_secs.saturating_mul(500))
        .clamp(Duration::from_millis(200), EXPIRY_INTERVAL);
    shutdown
        .tasks(Stage::Store)
        .spawn_until_stopped(expire_jobs(store.clone(), sweep));
    shutdown
        .tasks(Stage::Store)
        .spawn_until_stopped(watch_store(store.clone(), metrics.store_up.clone()));
    Ok((store, sessions))
}

/// What the Redis store needs from the config. Built here, in the wiring, so that the store
/// does not read the config (and the config, which validates Redis URLs, does not need the
/// store).
fn redis_options(config: &Config, metrics: &Metrics) -> RedisOptions {
    RedisOptions {
        url: config.store.redis_url.clone(),
        key_prefix: config.store.key_prefix.clone(),
        history: config.jobs.history,
        retention: Duration::from_secs(config.jobs.retention_secs),
        lease: Duration::from_secs(config.store.lease_secs),
        outage_buffer: config.store.outage_buffer,
        command_timeout: Duration::from_millis(config.store.command_timeout_ms),
        relay_timeout: Duration::from_millis(config.store.input_relay_timeout_ms),
        max_answer_bytes: config
            .jobs
            .max_input_bytes
            .max(config.jobs.max_sample_bytes),
        max_relays: config.limits.max_input_relays,
        max_relays_per_principal: config.limits.input_relays_per_principal(),
        adoption_events: metrics.adoptions.clone(),
        refuse_evicting_policy: config.store.redis_eviction_check == EvictionCheck::Refuse,
        ca_file: config.store.redis_ca_file.clone(),
        cluster: config.store.redis_cluster,
    }
}

/// The one [`Front`] every MCP session is served by.
fn front_door(config: &Config, core: &Core, job_tokens: &JobTokens, http: &Tasks) -> Front {
    Front::new(
        core.upstreams.clone(),
        core.jobs.clone(),
        config.jobs.clone(),
        Links::new(&config.server.public_url, job_tokens.clone()),
        config.server.correlation_header.clone(),
        JobQuota::new(config.limits.max_jobs_per_token),
        (
            config.limits.max_resource_subscriptions,
            config.limits.max_listen_task_ids,
            (
                config.limits.max_followed_tasks,
                config.limits.followed_tasks_per_principal(),
            ),
        ),
        core.metrics.clone(),
        WaitBounds::new(
            config.limits.max_wait_bounds,
            core.metrics.wait_bounds_learned.clone(),
            core.metrics.limit_hits.clone(),
        ),
        http,
    )
}

/// The MCP front door as an HTTP service: one [`Front`] for every session, whose sessions end
/// when the HTTP side stops.
fn mcp_service(
    config: &Config,
    core: &Core,
    job_tokens: JobTokens,
    shared_sessions: Option<McpSessions>,
    http: &Tasks,
) -> (
    (StreamableHttpService<Front, BridgeSessions>, Front),
    SessionLookup,
) {
    let front = front_door(config, core, &job_tokens, http);
    let mut mcp_config = http::origins::mcp_transport(
        StreamableHttpServerConfig::default()
            .with_cancellation_token(http.stopping().child_token())
            .with_sse_keep_alive(Some(Duration::from_secs(config.server.keep_alive_secs)))
            // A request on the session-less revision (2026-07-28) is answered as plain JSON
            // unless something streams before its answer (progress of a sync call, a
            // subscription): SDKs cap one SSE event (the Python SDK at 1 MiB), not a JSON body.
            // Sessions of older revisions are SSE either way (rmcp's legacy session mode).
            .with_json_response(true),
        &config.server,
        config.limits.max_request_bytes,
    );
    mcp_config.session_store = shared_sessions.clone();
    let ended = {
        let front = front.clone();
        Arc::new(move |session: &str| front.session_ended(session))
    };
    let sessions = SessionLookup {
        local: Arc::new(BridgeSessions::new(
            Duration::from_secs(config.server.session_idle_secs),
            job_tokens,
            ended,
        )),
        shared: shared_sessions,
    };
    count_sessions(&core.metrics, &sessions.local);
    let service = StreamableHttpService::new(
        {
            let front = front.clone();
            move || Ok(front.clone())
        },
        sessions.local.clone(),
        mcp_config,
    );
    ((service, front), sessions)
}

/// `bridge_mcp_sessions_open`: the sessions rmcp holds in this replica, read at each scrape
/// (rmcp removes a session from its map when the session ends, however it ends). The 2026-07-28
/// revision has no sessions: its requests are not counted here.
fn count_sessions(metrics: &Metrics, manager: &Arc<BridgeSessions>) {
    let manager = Arc::downgrade(manager);
    metrics.gauge_fn(
        "bridge_mcp_sessions_open",
        "MCP sessions open in this replica",
        move || {
            // Never wait in a scrape: a session being opened right now holds the lock.
            i64::try_from(manager.upgrade()?.try_count()?).ok()
        },
    );
}

/// Every route: `/mcp`, the job API, and the admin routes (apart when they have a listener of
/// their own).
fn routes(
    config: &Config,
    core: &Core,
    (mcp, front): (StreamableHttpService<Front, BridgeSessions>, Front),
    (guard, answers, sessions): (&Guard, &McpAnswers, SessionLookup),
    http: &Tasks,
) -> Surface {
    let readiness = || {
        Arc::new(BridgeReadiness {
            upstreams: core.upstreams.clone(),
            jobs: core.jobs.clone(),
            requires: config.server.ready_requires.clone(),
        })
    };
    let api = http::router(ApiState {
        broker: core.store.clone(),
        bus: core.store.clone(),
        metrics: core.metrics.clone(),
        readiness: readiness(),
        keep_alive: Duration::from_secs(config.server.keep_alive_secs),
        max_sse_buffer_bytes: config.limits.max_sse_buffer_bytes,
        shutdown: http.stopping().clone(),
        guard: guard.clone(),
        inputs: Some(Arc::new(JobInputs(core.jobs.clone()))),
    });
    let admin = http::admin::router(AdminState {
        metrics: core.metrics.clone(),
        upstreams: readiness(),
    });
    http::assemble(
        // Next to rmcp: what it does not speak, adapted on the wire (`front::tasks_2025::adapt`).
        Router::new()
            .nest_service("/mcp", mcp)
            .route_layer(axum::middleware::from_fn_with_state(
                front.core(),
                crate::front::adapt_the_wire,
            )),
        api,
        admin,
        McpLayer {
            guard: guard.clone(),
            sessions: SessionGate::new(sessions, &config.limits, &core.metrics),
            answers: answers.clone(),
            max_request_bytes: config.limits.max_request_bytes,
            timing: core.metrics.mcp_request_duration.clone(),
        },
        config.server.admin_listen.is_some(),
    )
}

/// Serve the routes on `listener` (and the admin routes on their own listener, bound here)
/// until the HTTP side stops. Returns the addresses served.
async fn serve(
    config: &Config,
    listener: TcpListener,
    surface: Surface,
    metrics: &Metrics,
    http: &Tasks,
) -> Result<(SocketAddr, Option<SocketAddr>), StartError> {
    let bind_error = |addr| move |source| StartError::Bind { addr, source };
    let addr = listener
        .local_addr()
        .map_err(bind_error(config.server.listen))?;
    let admin = match (config.server.admin_listen, surface.admin) {
        (Some(at), Some(routes)) => {
            let listener = TcpListener::bind(at).await.map_err(bind_error(at))?;
            let bound = listener.local_addr().map_err(bind_error(at))?;
            Some((listener, routes, bound))
        }
        _ => None,
    };
    let counters = |name: &str| http::serve::Counters {
        open: metrics.connections_open.with_label_values(&[name]),
        refused: metrics.connections_refused.clone(),
        closed: metrics.connections_closed.clone(),
        handbacks: metrics.sse_handbacks.clone(),
        shared_deliveries: metrics.sse_shared_deliveries.clone(),
        delivery_lag: metrics.delivery_lag.clone(),
    };
    let options = serve_options(config, metrics);
    let main = final_routes(surface.main);
    http::serve::spawn(http, listener, main, options.clone(), counters("main"));
    let admin_addr = admin.map(|(listener, routes, bound)| {
        let options = http::serve::Options {
            max_connections: http::serve::ADMIN_MAX_CONNECTIONS,
            max_connections_per_address: http::serve::ADMIN_MAX_CONNECTIONS,
            sse_writers: 0,
            ..options
        };
        http::serve::spawn(
            http,
            listener,
            final_routes(routes),
            options,
            counters("admin"),
        );
        bound
    });
    Ok((addr, admin_addr))
}

/// The main listener's timeouts and caps; the total cap lowered to keep file descriptors free
/// below the open-file limit (which `main` raised to the hard limit before).
fn serve_options(config: &Config, metrics: &Metrics) -> http::serve::Options {
    let limits = &config.limits;
    let nofile = rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft);
    let max_connections =
        http::serve::connection_cap(limits.max_connections, limits.reserved_fds, nofile);
    if max_connections < limits.max_connections {
        tracing::warn!(
            max_connections,
            configured = limits.max_connections,
            open_file_limit = nofile,
            reserved_fds = limits.reserved_fds,
            "open connections capped below limits.max_connections to keep file descriptors \
             free; raise the open-file limit (ulimit -n) to allow more"
        );
    }
    http::serve::Options {
        header_read_timeout: Duration::from_secs(config.server.header_read_timeout_secs),
        keep_alive_idle: Duration::from_secs(config.server.keep_alive_idle_secs),
        clients: http::serve::ClientAddress::new(
            &config.server.trusted_proxies,
            config.server.forwarded_header,
            metrics.limit_hits.with_label_values(&["forwarded_hops"]),
        ),
        body_read_timeout: Duration::from_secs(config.server.body_read_timeout_secs),
        max_connections,
        max_connections_per_address: limits.max_connections_per_address,
        sse_writers: config
            .server
            .sse_writers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(2))),
    }
}

/// `with_state(())` once, here: it turns every handler into its final route. A router whose
/// state is still to come converts handlers again when it is called (served through
/// `axum::serve` as a plain `Router`, that was a copy of the route tables per connection,
/// about 6 KiB per open SSE stream, measured with massif).
fn final_routes(routes: Router) -> Router {
    routes.with_state(())
}

/// Drop finished jobs past retention, `every` so often (until the store stage stops).
async fn expire_jobs(store: Arc<dyn Store>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        match store.expire().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(expired = n, "finished jobs past retention dropped"),
            Err(e) => tracing::warn!(error = %e, "expiring jobs failed"),
        }
    }
}

/// Keep `bridge_store_up` current: ping the store every [`STORE_PING_INTERVAL`] (until the
/// store stage stops), whether or not anything probes `/readyz`, so that an alert on it works
/// wherever the bridge runs. A Redis link that is down answers at once, without a round trip.
async fn watch_store(store: Arc<dyn Store>, up: IntGauge) {
    let mut tick = tokio::time::interval(STORE_PING_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        up.set(i64::from(store.ping().await.is_ok()));
    }
}

impl RunningBridge {
    /// The bridge's background tasks, counted (a view that outlives the bridge).
    pub fn tasks(&self) -> TaskCount {
        self.shutdown.count()
    }

    /// Export `traces` until the bridge stops, and flush them as the last step of its
    /// shutdown (see [`Stage::Traces`]).
    pub fn export_traces(&self, traces: Traces) {
        traces.flush_at_shutdown(&self.shutdown.tasks(Stage::Traces));
    }

    /// A re-read config (SIGHUP): its static tokens, admins and policies are put in force for
    /// the next request; the rest of `running` stays, and a changed key that waits for a
    /// restart is named in the log. Returns the config now in force: `running` itself when the
    /// new one cannot be used (logged, `bridge_config_reloads_total{result="refused"}`).
    pub fn reload(&self, running: Config, next: Result<Config, ConfigError>) -> Config {
        let refused = |why: &dyn std::fmt::Display| {
            self.metrics
                .config_reloads
                .with_label_values(&["refused"])
                .inc();
            tracing::error!(error = %why, "config reload refused: the running config stays");
        };
        let next = match next {
            Ok(next) => next,
            Err(e) => {
                refused(&e);
                return running;
            }
        };
        let applied = running.reloaded(&next);
        applied.register_secrets();
        if let Err(e) = self.access.replace(&applied, &self.metrics) {
            refused(&e);
            return running;
        }
        self.metrics
            .config_reloads
            .with_label_values(&["applied"])
            .inc();
        tracing::info!(
            mcp_tokens = applied.auth.mcp_tokens.len(),
            policies = applied.auth.policies.len(),
            "config reloaded: static tokens, admins and policies in force"
        );
        let kept = running.kept_until_restart(&next);
        if !kept.is_empty() {
            tracing::warn!(keys = ?kept, "config reload: these changed keys take effect only after a restart");
        }
        applied
    }

    /// [`RunningBridge::shutdown_unless`] with nothing to cut the drain short.
    pub async fn shutdown(self, drain: Duration) {
        self.shutdown_unless(drain, std::future::pending()).await;
    }

    /// Stop in order, and return when every task of the bridge has ended: drain (take no new
    /// calls, let running jobs end until `drain` passes or `cut_short` resolves, then cancel
    /// the rest: each gets its terminal event), write the answers owed, close the HTTP side
    /// (SSE streams end after their terminal events, MCP sessions end), stop the upstreams
    /// (children exit), then stop the store (the lease is given up, then its connections
    /// close), and last flush the traces. Each stage after the drain gets its tasks' end, or
    /// drops them past a bound: all of it within [`AFTER_DRAIN_MAX`].
    pub async fn shutdown_unless(self, drain: Duration, cut_short: impl Future<Output = ()>) {
        self.drain(drain, cut_short).await;
        // Every job has ended: let the answers of the callers who waited for them be written
        // before the HTTP stage ends the MCP sessions, and their streams with them.
        if !self.answers.written(ANSWERS_WRITE_TIMEOUT).await {
            tracing::warn!(
                under_way = self.answers.under_way(),
                "tool-call answers still being written at shutdown; closing anyway"
            );
        }
        for (stage, within) in LATER_STAGES {
            self.shutdown.stop(stage, within).await;
        }
        tracing::info!("bridge stopped");
    }

    /// The drain, then the end of the jobs stage: the jobs left when it ends are cancelled and
    /// get [`JOBS_END_TIMEOUT`] to end (their terminal events written).
    async fn drain(&self, within: Duration, cut_short: impl Future<Output = ()>) {
        let running = self.jobs.running_here();
        tracing::info!(
            running,
            drain_secs = within.as_secs(),
            "draining: no new calls; running jobs go on until they end or the drain time passes"
        );
        let end = self.jobs.drain(within, cut_short).await;
        let jobs_end = Instant::now() + JOBS_END_TIMEOUT;
        match end {
            DrainEnd::Emptied if running > 0 => tracing::info!("drained: every job ended"),
            DrainEnd::Emptied => {}
            DrainEnd::TimePassed | DrainEnd::CutShort => {
                tracing::warn!(
                    left = self.jobs.running_here(),
                    ?end,
                    "drain ended with jobs running: they are cancelled"
                );
                self.jobs.drained(JOBS_END_TIMEOUT).await;
            }
        }
        let left = jobs_end.saturating_duration_since(Instant::now());
        self.shutdown.stop(Stage::Jobs, left).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The docs give operators the longest the bridge takes after its drain, to size their stop
    /// timeouts by: it must be this code's (deploy/validate.py checks the deploy/ numbers).
    #[test]
    fn the_docs_state_the_bound_after_the_drain_that_the_code_has() {
        let secs = AFTER_DRAIN_MAX.as_secs();
        assert_eq!(AFTER_DRAIN_MAX, Duration::from_secs(secs), "whole seconds");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for (doc, says) in [
            ("docs/deployment.md", format!("at most **{secs} s** more")),
            (
                "docs/lifecycle.md",
                format!("at most **{secs} s** after the drain"),
            ),
            ("docs/configuration.md", format!("this plus {secs} s")),
        ] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            assert!(text.contains(&says), "{doc} must say {says:?}");
        }
    }
}
