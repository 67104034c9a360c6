//! Keeps one upstream connected: connect, list tools, watch, reconnect with backoff, stop.

use std::{collections::HashMap, sync::Arc, time::Duration};

use rmcp::{
    Peer, RoleClient, ServiceExt,
    model::{ClientRequest, PingRequest, ProtocolVersion},
    service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService},
    transport::{
        StreamableHttpClientTransport, async_rw::AsyncRwTransport,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    client::UpstreamClient,
    error::{self, SessionError},
    event_ids::EventIds,
    http_client::BoundedHttp,
    line_cap::{self, LineCap},
    listing::{self, HANDSHAKE_TIMEOUT},
    oversize::Oversize,
    requests,
    session_seen::SessionSeen,
    shared::{Live, Shared, UpstreamState},
    stdio,
    tap::Tap,
};
use crate::{
    config::{TransportKind, UpstreamProtocol},
    redact,
    wait::{Backoff, sleep_until},
};

/// Pauses between connection attempts: the first after half a second, doubling after each
/// failure up to 30 s (an upstream that is down for long is still tried twice a minute).
const RECONNECT: Backoff = Backoff {
    first: Duration::from_millis(500),
    cap: Duration::from_secs(30),
};
/// A connection that stayed up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// Calls in flight on one HTTP upstream connection at once.
const HTTP_MAX_CONCURRENT: usize = 4096;
/// How long a stdio child may take to exit after its stdin closes at shutdown.
const STDIO_GRACE: Duration = Duration::from_secs(3);

type Client = RunningService<RoleClient, UpstreamClient>;

/// A connected session and, for stdio, the child behind it.
struct Session {
    client: Client,
    child: Option<(u32, watch::Receiver<Option<String>>)>,
    /// An HTTP connection's upstream session, as its client sees it.
    seen: Option<SessionSeen>,
}

pub(super) async fn supervise(upstream: Arc<Shared>, shutdown: CancellationToken) {
    let upstream = &*upstream;
    let mut pauses = RECONNECT.pauses();
    let mut first = true;
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        upstream.set_state(UpstreamState::Connecting);
        let connected = tokio::select! {
            session = connect(upstream) => session,
            _ = shutdown.cancelled() => break,
        };
        match connected {
            Ok(session) => {
                if !first {
                    upstream.details().restarts += 1;
                    upstream
                        .metrics
                        .upstream_restarts
                        .with_label_values(&[upstream.name()])
                        .inc();
                }
                let started = tokio::time::Instant::now();
                let ended = run(upstream, session, &shutdown).await;
                if shutdown.is_cancelled() {
                    break;
                }
                tracing::warn!(upstream = %upstream.name(), reason = %ended, "upstream connection ended; reconnecting");
                upstream.details().last_error = Some(Arc::new(SessionError::Ended(ended)));
                if started.elapsed() >= STABLE_AFTER {
                    pauses.reset();
                }
            }
            Err(error) => {
                tracing::warn!(upstream = %upstream.name(), %error, "upstream is down");
                upstream.details().last_error = Some(Arc::new(error));
            }
        }
        first = false;
        upstream.set_state(UpstreamState::Down);
        tokio::select! {
            _ = tokio::time::sleep(pauses.next_pause()) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    upstream.set_state(UpstreamState::Stopped);
}

async fn connect(upstream: &Shared) -> Result<Session, SessionError> {
    match upstream.config.transport {
        TransportKind::Stdio => connect_stdio(upstream).await,
        TransportKind::Http => connect_http(upstream).await,
    }
}

/// What this upstream's connections do with a message over `limits.max_result_bytes`.
fn oversize(upstream: &Shared) -> Oversize {
    Oversize::new(
        upstream.name(),
        upstream.limits.max_result_bytes,
        upstream.routes.clone(),
        upstream.metrics.clone(),
    )
}

/// What this upstream's HTTP connections note of their call streams' event ids.
fn event_ids(upstream: &Shared) -> EventIds {
    EventIds {
        max: upstream.limits.tasks.max_event_id_bytes,
        metrics: upstream.metrics.clone(),
        seen: upstream.resumable.clone(),
    }
}

fn handler(upstream: &Shared) -> UpstreamClient {
    UpstreamClient {
        routes: upstream.routes.clone(),
        upstream: upstream.name().to_string(),
        tools_changed: upstream.tools_changed.clone(),
        resources_changed: upstream.resources_changed.clone(),
        prompts_changed: upstream.prompts_changed.clone(),
        resource_updates: upstream.signals.resource_updates.clone(),
    }
}

/// The MCP lifecycle on `transport` the upstream's `protocol` says: `initialize`,
/// `server/discover` at 2026-07-28, or (`auto`) the probe: rmcp's `Auto` lifecycle sends
/// `server/discover` and, when the upstream answers it with a JSON-RPC error that is not a
/// 2026-07-28 rejection (a handshake-only server says -32601 method not found, the Python
/// SDK 1.x -32602) or gives no answer within 10 s (rmcp's bound, not configurable), does
/// `initialize` on the same connection, so a stdio child is not started twice. The whole
/// start stays under [`HANDSHAKE_TIMEOUT`]. Which revision it got is in the peer's info
/// (logged when the upstream is ready, shown on `/upstreams`).
async fn start<T>(
    upstream: &Shared,
    transport: T,
) -> Result<RunningService<RoleClient, UpstreamClient>, ClientInitializeError>
where
    T: rmcp::transport::Transport<RoleClient> + 'static,
{
    match upstream.config.protocol {
        UpstreamProtocol::Handshake => handler(upstream).serve(transport).await,
        UpstreamProtocol::V2026_07_28 => {
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            handler(upstream)
                .serve_with_lifecycle(transport, lifecycle)
                .await
        }
        UpstreamProtocol::Auto => {
            // `legacy_version: None`: the fallback `initialize` offers what `handshake` does.
            let lifecycle = ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            };
            handler(upstream)
                .serve_with_lifecycle(transport, lifecycle)
                .await
        }
    }
}

/// Start the child and do the MCP handshake on its stdin/stdout; a child that fails the
/// handshake is stopped at once, and its exit status goes into the error.
async fn connect_stdio(upstream: &Shared) -> Result<Session, SessionError> {
    let child = stdio::spawn(&upstream.config, &upstream.tasks).map_err(SessionError::Spawn)?;
    let oversize = oversize(upstream);
    let line_cap = line_cap::rmcp_line_cap(oversize.limit());
    let stdout = LineCap::with_task_support(child.stdout, oversize, upstream.task_support.clone());
    let transport = Tap::new(
        AsyncRwTransport::new_client(stdout, child.stdin).with_max_line_length(line_cap),
        upstream.routes.clone(),
    );
    let mut exited = child.exited;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, start(upstream, transport)).await {
        Ok(Ok(client)) => Ok(Session {
            client,
            child: Some((child.pid, exited)),
            seen: None,
        }),
        failed => {
            stdio::stop(child.pid, &mut exited, Duration::ZERO).await;
            let status = exited.borrow().clone().unwrap_or_default();
            Err(match failed {
                Ok(Err(e)) => SessionError::Initialize {
                    status,
                    source: Box::new(e),
                },
                _ => SessionError::InitializeTimeout(HANDSHAKE_TIMEOUT),
            })
        }
    }
}

/// Connect to a Streamable HTTP upstream with its configured headers.
async fn connect_http(upstream: &Shared) -> Result<Session, SessionError> {
    let config = &upstream.config;
    let url = config.url.clone().unwrap_or_default();
    let headers: HashMap<http::HeaderName, http::HeaderValue> = config
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
        .collect();
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url.clone())
        .custom_headers(headers)
        .reinit_on_expired_session(true)
        .max_concurrent_requests(HTTP_MAX_CONCURRENT);
    // Read at each connection: a renewed CA file is picked up on the next reconnect.
    let extra_roots = match &config.ca_file {
        Some(path) => crate::tls::read_ca_file(path).map_err(SessionError::CaFile)?,
        None => Vec::new(),
    };
    let seen = SessionSeen::default();
    let (client, transport_config) = BoundedHttp::new(
        oversize(upstream),
        upstream.task_support.clone(),
        (seen.clone(), event_ids(upstream)),
        extra_roots,
        transport_config,
    )
    .map_err(SessionError::HttpClient)?;
    let transport = Tap::new(
        StreamableHttpClientTransport::with_client(client, transport_config),
        upstream.routes.clone(),
    );
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, start(upstream, transport)).await {
        Ok(Ok(client)) => Ok(Session {
            client,
            child: None,
            seen: Some(seen),
        }),
        Ok(Err(e)) => Err(SessionError::Connect {
            url: redact::url(&url),
            detail: redact::text(&error::initialize_detail(&e)).into_owned(),
            source: Box::new(e),
        }),
        Err(_) => Err(SessionError::ConnectTimeout {
            url: redact::url(&url),
            timeout: HANDSHAKE_TIMEOUT,
        }),
    }
}

/// Serve one connected session until it ends or the bridge shuts down; returns why it
/// ended.
async fn run(upstream: &Shared, session: Session, shutdown: &CancellationToken) -> String {
    let Session {
        client,
        child,
        seen,
    } = session;
    let (closed_tx, closed) = watch::channel(None);
    let stop_on_shutdown = client.cancellation_token();
    let stop_on_failed_check = client.cancellation_token();
    let peer = client.peer().clone();
    upstream.set_live(Some(Live {
        peer: peer.clone(),
        closed,
        seen,
    }));
    came_up(upstream, &peer).await;

    // An HTTP upstream that goes away does not end the session by itself (the client keeps
    // retrying its streams), so it is pinged; a stdio child's exit ends it at once.
    let check_every = health_check_interval(upstream);
    let mut next_check = check_every.map(|every| tokio::time::Instant::now() + every);
    // The client's service loop runs on a task rmcp spawned; this awaits its end.
    let waiting = client.waiting();
    tokio::pin!(waiting);
    let reason = loop {
        tokio::select! {
            _ = &mut waiting => break None,
            _ = upstream.tools_changed.notified() => listing::refresh_tools(upstream).await,
            _ = upstream.resources_changed.notified() => listing::refresh_resources(upstream).await,
            _ = upstream.prompts_changed.notified() => listing::refresh_prompts(upstream).await,
            _ = sleep_until(next_check), if next_check.is_some() => {
                if let Err(error) = ping(&peer).await {
                    upstream.set_live(None);
                    stop_on_failed_check.cancel();
                    let _ = (&mut waiting).await;
                    break Some(format!("health check failed: {error}"));
                }
                next_check = check_every.map(|every| tokio::time::Instant::now() + every);
            }
            _ = shutdown.cancelled() => {
                upstream.set_live(None);
                stop_on_shutdown.cancel();
                let _ = (&mut waiting).await;
                break Some("stopped: the bridge is shutting down".to_string());
            }
        }
    };
    upstream.set_live(None);
    let reason = stop_child(child, reason).await;
    let _ = closed_tx.send(Some(reason.clone()));
    reason
}

/// A new session is up: learn what it offers, renew the subscriptions, show it ready.
async fn came_up(upstream: &Shared, peer: &Peer<RoleClient>) {
    listing::learn_capabilities(upstream, peer);
    listing::refresh_tools(upstream).await;
    listing::refresh_resources(upstream).await;
    listing::refresh_prompts(upstream).await;
    requests::resubscribe(upstream).await;
    upstream.details().last_error = None;
    upstream.set_state(UpstreamState::Ready);
    tracing::info!(upstream = %upstream.name(), tools = upstream.tools().len(),
        protocol = %upstream.protocol().unwrap_or_default(),
        configured = upstream.config.protocol.as_str(), "upstream ready");
}

/// Stop a stdio child (if any) after its session ended, and say why the session ended:
/// `reason` if the bridge ended it, otherwise how the child or connection went. A child that
/// exited by itself gets a short grace; one the bridge stops gets [`STDIO_GRACE`].
async fn stop_child(
    child: Option<(u32, watch::Receiver<Option<String>>)>,
    reason: Option<String>,
) -> String {
    match child {
        Some((pid, mut exited)) => {
            let grace = if reason.is_some() {
                STDIO_GRACE
            } else {
                Duration::from_secs(1)
            };
            stdio::stop(pid, &mut exited, grace).await;
            let status = exited
                .borrow()
                .clone()
                .unwrap_or_else(|| "was killed".into());
            reason.unwrap_or_else(|| format!("process {status}"))
        }
        None => reason.unwrap_or_else(|| "connection closed".to_string()),
    }
}

/// How long a health-check ping may take before the upstream counts as gone.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

async fn ping(peer: &rmcp::Peer<RoleClient>) -> Result<(), String> {
    let request = ClientRequest::PingRequest(PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    match tokio::time::timeout(PING_TIMEOUT, peer.send_request(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer to ping within {PING_TIMEOUT:?}")),
    }
}

fn health_check_interval(upstream: &Shared) -> Option<Duration> {
    let config = &upstream.config;
    match config.transport {
        TransportKind::Http => {
            (config.health_check_secs > 0).then(|| Duration::from_secs(config.health_check_secs))
        }
        TransportKind::Stdio => None,
    }
}
