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
    config::Config,
    front::{Front, Links},
    http::{self, ApiState, Readiness},
    jobs::Jobs,
    metrics::Metrics,
    store::{MemoryStore, Store},
    upstream::{UpstreamState, Upstreams},
};

/// How often finished jobs past retention are dropped.
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
}

/// A running bridge. Dropping it does not stop it; call [`RunningBridge::shutdown`].
pub struct RunningBridge {
    pub addr: SocketAddr,
    pub upstreams: Upstreams,
    pub jobs: Jobs,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    http_shutdown: CancellationToken,
    upstream_shutdown: CancellationToken,
    server: JoinHandle<()>,
}

struct UpstreamReadiness(Upstreams);

impl Readiness for UpstreamReadiness {
    fn report(&self) -> (bool, serde_json::Value) {
        let statuses = self.0.statuses();
        let ready = statuses.iter().all(|s| s.state == UpstreamState::Ready);
        let parts = statuses
            .iter()
            .map(|s| json!({ "name": s.name, "state": s.state, "tools": s.tools.len(), "error": s.last_error }))
            .collect();
        (ready, serde_json::Value::Array(parts))
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
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
        config.jobs.history,
        config.jobs.retention_secs,
    ));
    let upstream_shutdown = CancellationToken::new();
    let upstreams = Upstreams::start(
        &config.upstreams,
        metrics.clone(),
        upstream_shutdown.clone(),
    );
    let replica = format!("replica-{:08x}", fastrand::u32(..));
    let jobs = Jobs::new(store.clone(), config.jobs.clone(), replica, metrics.clone());
    let links = Links::new(&config.server.public_url);
    let front = Front::new(
        upstreams.clone(),
        jobs.clone(),
        config.jobs.clone(),
        links,
        config.server.correlation_header.clone(),
    );

    let http_shutdown = CancellationToken::new();
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(http_shutdown.child_token())
        .with_sse_keep_alive(Some(Duration::from_secs(config.server.keep_alive_secs)));
    mcp_config = if config.server.allowed_hosts.is_empty() {
        mcp_config.disable_allowed_hosts()
    } else {
        mcp_config.with_allowed_hosts(config.server.allowed_hosts.clone())
    };
    let mcp = StreamableHttpService::new(
        move || Ok(front.clone()),
        Arc::new(LocalSessionManager::default()),
        mcp_config,
    );
    let api = http::router(ApiState {
        store: store.clone(),
        metrics: metrics.clone(),
        readiness: Arc::new(UpstreamReadiness(upstreams.clone())),
        keep_alive: Duration::from_secs(config.server.keep_alive_secs),
        shutdown: http_shutdown.clone(),
    });
    // `with_state(())` once, here, and `into_make_service` below: served as a plain `Router`,
    // axum would rebuild its route tables for every accepted connection and keep that copy
    // for the connection's life (about 6 KiB per open SSE stream, measured with massif).
    let app = Router::new()
        .nest_service("/mcp", mcp)
        .merge(api)
        .with_state(());

    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.server.listen,
        source,
    })?;

    tokio::spawn(expire_jobs(store.clone(), http_shutdown.clone()));
    // TCP_NODELAY on every connection: SSE frames and MCP answers are small writes that must
    // leave at once. With Nagle's algorithm a frame written while the previous one is not yet
    // acknowledged waits for the reader's delayed ACK, up to 40 ms (measured: progress p99
    // 26.7 ms without it; see BENCHMARKS.md).
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
        }
    });
    let server = tokio::spawn({
        let stop = http_shutdown.clone();
        async move {
            let serve = axum::serve(listener, app.into_make_service())
                .with_graceful_shutdown(stop.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        }
    });
    tracing::info!(%addr, upstreams = config.upstreams.len(), "bridge listening");
    Ok(RunningBridge {
        addr,
        upstreams,
        jobs,
        store,
        metrics,
        http_shutdown,
        upstream_shutdown,
        server,
    })
}

async fn expire_jobs(store: Arc<dyn Store>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(EXPIRY_INTERVAL);
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
    /// Stop in order: give running jobs `grace` to finish, cancel the rest upstream (each gets
    /// its terminal event), close the HTTP side (SSE streams end), then stop the upstreams
    /// (children exit).
    pub async fn shutdown(self, grace: Duration) {
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
        tracing::info!("bridge stopped");
    }
}
