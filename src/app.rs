//! Wires the bridge together from a [`Config`] and runs it: store, upstreams, jobs, the MCP
//! front door and the HTTP API on one listener, and an orderly shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, serve::ListenerExt};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    auth::JobTokens,
    config::{Config, StoreBackend, without_secret_env},
    front::{Front, JobQuota, Links},
    http::{
        self, ApiState, Readiness,
        admin::{AdminState, UpstreamsReport},
        auth::Guard,
    },
    jobs::Jobs,
    metrics::Metrics,
    store::{MemoryStore, RedisOptions, RedisStore, Store, StoreError},
    upstream::{UpstreamLimits, UpstreamState, Upstreams},
};

/// How often finished jobs past retention are dropped, at most: a short retention is swept
/// more often, so a job is never kept much past it.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(10);
/// How long the HTTP server may take to close its connections at shutdown.
const HTTP_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

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
}

/// A running bridge. Dropping it does not stop it; call [`RunningBridge::shutdown`].
pub struct RunningBridge {
    pub addr: SocketAddr,
    /// The admin listener's address, when `server.admin_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    pub upstreams: Upstreams,
    pub jobs: Jobs,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    http_shutdown: CancellationToken,
    upstream_shutdown: CancellationToken,
    /// Stops the store's background tasks (Redis connections, lease), last of all.
    store_shutdown: CancellationToken,
    server: JoinHandle<()>,
}

/// Ready when every upstream is connected and the bridge is not shutting down (so a load
/// balancer stops sending it calls while it drains).
struct BridgeReadiness {
    upstreams: Upstreams,
    jobs: Jobs,
}

impl Readiness for BridgeReadiness {
    fn report(&self) -> (bool, serde_json::Value) {
        let statuses = self.upstreams.statuses();
        let ready =
            !self.jobs.is_closed() && statuses.iter().all(|s| s.state == UpstreamState::Ready);
        let parts = statuses
            .iter()
            // No error text: it may name hosts, paths or credentials. `/upstreams` has it.
            .map(|s| json!({ "name": s.name, "state": s.state, "tools": s.tools.len() }))
            .collect();
        (ready, serde_json::Value::Array(parts))
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
/// that `server.public_url` must name).
pub async fn start_with_listener(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<RunningBridge, StartError> {
    let metrics = Arc::new(Metrics::new());
    // Names this process as the owner of the jobs it runs (cancel routing, owner-loss
    // detection): random, because a restarted process has lost its upstream calls and must
    // not inherit the old one's jobs.
    let replica = format!("replica-{:016x}", fastrand::u64(..));
    let store_shutdown = CancellationToken::new();
    // With Redis, MCP sessions are recorded there too, so any replica can serve a session.
    let (store, mcp_sessions): (Arc<dyn Store>, _) = match config.store.backend {
        StoreBackend::Memory => (
            Arc::new(MemoryStore::new(
                config.jobs.history,
                config.jobs.retention_secs,
            )),
            None,
        ),
        StoreBackend::Redis => {
            let redis = RedisStore::start(
                redis_options(&config),
                replica.clone(),
                store_shutdown.clone(),
            )?;
            let sessions = redis.mcp_sessions();
            (Arc::new(redis), Some(sessions))
        }
    };
    let upstream_shutdown = CancellationToken::new();
    let upstreams = Upstreams::start(
        &without_secret_env(&config.auth, &config.upstreams),
        UpstreamLimits {
            max_list_items: config.limits.max_upstream_list_items,
            max_resource_read_bytes: config.limits.max_resource_read_bytes,
        },
        metrics.clone(),
        upstream_shutdown.clone(),
    );
    let jobs = Jobs::new(store.clone(), config.jobs.clone(), replica, metrics.clone());
    let job_tokens = JobTokens::from_config(&config.auth);
    let guard = Guard::new(&config, job_tokens.clone());
    let links = Links::new(&config.server.public_url, job_tokens);
    let front = Front::new(
        upstreams.clone(),
        jobs.clone(),
        config.jobs.clone(),
        links,
        config.server.correlation_header.clone(),
        JobQuota::new(config.limits.max_jobs_per_token),
        config.limits.max_resource_subscriptions,
        metrics.clone(),
    );

    let http_shutdown = CancellationToken::new();
    let mut mcp_config = http::origins::mcp_transport(
        StreamableHttpServerConfig::default()
            .with_cancellation_token(http_shutdown.child_token())
            .with_sse_keep_alive(Some(Duration::from_secs(config.server.keep_alive_secs)))
            // A request on the session-less revision (2026-07-28) is answered as plain JSON
            // unless something streams before its answer (progress of a sync call, a
            // subscription): SDKs cap one SSE event (the Python SDK at 1 MiB), not a JSON body.
            // Sessions of older revisions are SSE either way (rmcp's legacy session mode).
            .with_json_response(true),
        &config.server,
        config.limits.max_request_bytes,
    );
    mcp_config.session_store = mcp_sessions;
    let mcp = StreamableHttpService::new(
        move || Ok(front.clone()),
        Arc::new(LocalSessionManager::default()),
        mcp_config,
    );
    let api = http::router(ApiState {
        store: store.clone(),
        metrics: metrics.clone(),
        readiness: Arc::new(BridgeReadiness {
            upstreams: upstreams.clone(),
            jobs: jobs.clone(),
        }),
        keep_alive: Duration::from_secs(config.server.keep_alive_secs),
        shutdown: http_shutdown.clone(),
        guard: guard.clone(),
    });
    let admin = http::admin::router(AdminState {
        metrics: metrics.clone(),
        upstreams: Arc::new(BridgeReadiness {
            upstreams: upstreams.clone(),
            jobs: jobs.clone(),
        }),
    });
    let surface = http::surface::assemble(
        Router::new().nest_service("/mcp", mcp),
        api,
        admin,
        &guard,
        config.limits.max_request_bytes,
        config.server.admin_listen.is_some(),
    );
    let admin_listener = match config.server.admin_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { addr, source })?,
        ),
        None => None,
    };
    http::surface::announce(&guard, &config);

    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.server.listen,
        source,
    })?;

    let admin_addr = match &admin_listener {
        Some(l) => Some(l.local_addr().map_err(|source| StartError::Bind {
            addr: config.server.admin_listen.unwrap_or(addr),
            source,
        })?),
        None => None,
    };

    let sweep = Duration::from_millis(config.jobs.retention_secs.saturating_mul(500))
        .clamp(Duration::from_millis(200), EXPIRY_INTERVAL);
    tokio::spawn(expire_jobs(store.clone(), sweep, http_shutdown.clone()));
    // TCP_NODELAY on every connection: SSE frames and MCP answers are small writes that must
    // leave at once. With Nagle's algorithm a frame written while the previous one is not yet
    // acknowledged waits for the reader's delayed ACK, up to 40 ms (measured: progress p99
    // 26.7 ms without it; see BENCHMARKS.md).
    let listener = listener.tap_io(set_nodelay);
    // `with_state(())` once, here, and `into_make_service` below: served as a plain `Router`,
    // axum would rebuild its route tables for every accepted connection and keep that copy
    // for the connection's life (about 6 KiB per open SSE stream, measured with massif).
    let main_app = surface.main.with_state(());
    let server = tokio::spawn({
        let stop = http_shutdown.clone();
        async move {
            let serve = axum::serve(listener, main_app.into_make_service())
                .with_graceful_shutdown(stop.clone().cancelled_owned());
            let admin = async move {
                let (Some(listener), Some(admin)) = (admin_listener, surface.admin) else {
                    return Ok(());
                };
                axum::serve(
                    listener.tap_io(set_nodelay),
                    admin.with_state(()).into_make_service(),
                )
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
            };
            let (main, admin) = tokio::join!(serve, admin);
            if let Err(e) = main.and(admin) {
                tracing::error!(error = %e, "HTTP server failed");
            }
        }
    });
    tracing::info!(%addr, upstreams = config.upstreams.len(), store = ?config.store.backend, "bridge listening");
    if let Some(admin) = admin_addr {
        tracing::info!(%admin, "admin listener (/upstreams, /metrics) on its own address");
    }
    Ok(RunningBridge {
        addr,
        admin_addr,
        upstreams,
        jobs,
        store,
        metrics,
        http_shutdown,
        upstream_shutdown,
        store_shutdown,
        server,
    })
}

/// What the Redis store needs from the config. Built here, in the wiring, so that the store
/// does not read the config (and the config, which validates Redis URLs, does not need the
/// store).
fn redis_options(config: &Config) -> RedisOptions {
    RedisOptions {
        url: config.store.redis_url.clone(),
        key_prefix: config.store.key_prefix.clone(),
        history: config.jobs.history,
        retention: Duration::from_secs(config.jobs.retention_secs),
        lease: Duration::from_secs(config.store.lease_secs),
        outage_buffer: config.store.outage_buffer,
        command_timeout: Duration::from_millis(config.store.command_timeout_ms),
    }
}

fn set_nodelay(tcp: &mut tokio::net::TcpStream) {
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
    }
}

async fn expire_jobs(store: Arc<dyn Store>, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => match store.expire().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(expired = n, "finished jobs past retention dropped"),
                Err(e) => tracing::warn!(error = %e, "expiring jobs failed"),
            },
            _ = stop.cancelled() => return,
        }
    }
}

impl RunningBridge {
    /// Stop in order: take no new calls, give running jobs `grace` to finish, cancel the rest
    /// upstream (each gets its terminal event), close the HTTP side (SSE streams end after
    /// their terminal events), then stop the upstreams (children exit).
    pub async fn shutdown(self, grace: Duration) {
        self.jobs.close();
        let running = self.jobs.running_here();
        if running > 0 {
            tracing::info!(
                running,
                ?grace,
                "waiting for running jobs before shutting down"
            );
            if !self.jobs.drained(grace).await {
                self.jobs.cancel_all_local("the bridge is shutting down");
                self.jobs.drained(Duration::from_secs(10)).await;
            }
        }
        self.http_shutdown.cancel();
        if tokio::time::timeout(HTTP_CLOSE_TIMEOUT, self.server)
            .await
            .is_err()
        {
            tracing::warn!("HTTP connections did not close in time");
        }
        self.upstream_shutdown.cancel();
        self.upstreams.stopped().await;
        self.store_shutdown.cancel();
        tracing::info!("bridge stopped");
    }
}
