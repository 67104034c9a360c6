//! Keeps one upstream connected: connect, list tools, watch, reconnect with backoff, stop.

use std::{collections::HashMap, sync::Arc, time::Duration};

use rmcp::{
    RoleClient, ServiceExt,
    model::{ClientRequest, PingRequest},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, async_rw::AsyncRwTransport,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Live, Upstream, UpstreamState, client::UpstreamClient, stdio, tap::Tap};
use crate::config::TransportKind;

/// The first retry comes after this; each failure doubles it up to `BACKOFF_CAP`.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// A connection that stayed up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// Time allowed for the MCP handshake and for listing tools.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Calls in flight on one HTTP upstream connection at once.
const HTTP_MAX_CONCURRENT: usize = 4096;
/// How long a stdio child may take to exit after its stdin closes at shutdown.
const STDIO_GRACE: Duration = Duration::from_secs(3);

type Client = RunningService<RoleClient, UpstreamClient>;

/// A connected session and, for stdio, the child behind it.
struct Session {
    client: Client,
    child: Option<(u32, watch::Receiver<Option<String>>)>,
}

impl Upstream {
    pub(super) async fn supervise(self, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        let mut first = true;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            self.set_state(UpstreamState::Connecting);
            let connected = tokio::select! {
                session = self.connect() => session,
                _ = shutdown.cancelled() => break,
            };
            match connected {
                Ok(session) => {
                    if !first {
                        self.details().restarts += 1;
                        self.inner
                            .metrics
                            .upstream_restarts
                            .with_label_values(&[self.name()])
                            .inc();
                    }
                    let started = tokio::time::Instant::now();
                    let ended = self.run(session, &shutdown).await;
                    if shutdown.is_cancelled() {
                        break;
                    }
                    tracing::warn!(upstream = %self.name(), reason = %ended, "upstream connection ended; reconnecting");
                    self.details().last_error = Some(ended);
                    if started.elapsed() >= STABLE_AFTER {
                        failures = 0;
                    }
                }
                Err(error) => {
                    tracing::warn!(upstream = %self.name(), %error, "upstream is down");
                    self.details().last_error = Some(error);
                }
            }
            first = false;
            self.set_state(UpstreamState::Down);
            let wait = backoff(failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        self.set_state(UpstreamState::Stopped);
    }

    async fn connect(&self) -> Result<Session, String> {
        let handler = UpstreamClient {
            tools_changed: self.inner.tools_changed.clone(),
        };
        let config = &self.inner.config;
        let routes = self.inner.routes.clone();
        let session = match config.transport {
            TransportKind::Stdio => {
                let child = stdio::spawn(config, &self.inner.tasks).map_err(|e| e.to_string())?;
                let transport = Tap::new(
                    AsyncRwTransport::new_client(child.stdout, child.stdin),
                    routes,
                );
                let mut exited = child.exited;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handler.serve(transport)).await {
                    Ok(Ok(client)) => Session {
                        client,
                        child: Some((child.pid, exited)),
                    },
                    failed => {
                        stdio::stop(child.pid, &mut exited, Duration::ZERO).await;
                        let status = exited.borrow().clone().unwrap_or_default();
                        return Err(match failed {
                            Ok(Err(e)) => format!("MCP initialize failed: {e} (process {status})"),
                            _ => format!("MCP initialize timed out after {HANDSHAKE_TIMEOUT:?}"),
                        });
                    }
                }
            }
            TransportKind::Http => {
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
                let transport = Tap::new(
                    StreamableHttpClientTransport::from_config(transport_config),
                    routes,
                );
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handler.serve(transport)).await {
                    Ok(Ok(client)) => Session {
                        client,
                        child: None,
                    },
                    Ok(Err(e)) => return Err(format!("cannot connect to {url}: {e}")),
                    Err(_) => {
                        return Err(format!(
                            "connecting to {url} timed out after {HANDSHAKE_TIMEOUT:?}"
                        ));
                    }
                }
            }
        };
        Ok(session)
    }

    /// Serve one connected session until it ends or the bridge shuts down; returns why it
    /// ended.
    async fn run(&self, session: Session, shutdown: &CancellationToken) -> String {
        let Session { client, child } = session;
        let (closed_tx, closed) = watch::channel(None);
        let stop_on_shutdown = client.cancellation_token();
        let stop_on_failed_check = client.cancellation_token();
        let peer = client.peer().clone();
        self.set_live(Some(Live {
            peer: peer.clone(),
            closed,
        }));
        self.refresh_tools().await;
        self.details().last_error = None;
        self.set_state(UpstreamState::Ready);
        tracing::info!(upstream = %self.name(), tools = self.tools().len(), "upstream ready");

        // An HTTP upstream that goes away does not end the session by itself (the client keeps
        // retrying its streams), so it is pinged; a stdio child's exit ends it at once.
        let check_every = self.health_check_interval();
        let mut next_check = check_every.map(|every| tokio::time::Instant::now() + every);
        // The client's service loop runs on a task rmcp spawned; this awaits its end.
        let waiting = client.waiting();
        tokio::pin!(waiting);
        let reason = loop {
            tokio::select! {
                _ = &mut waiting => break None,
                _ = self.inner.tools_changed.notified() => self.refresh_tools().await,
                _ = sleep_until(next_check), if next_check.is_some() => {
                    if let Err(error) = ping(&peer).await {
                        self.set_live(None);
                        stop_on_failed_check.cancel();
                        let _ = (&mut waiting).await;
                        break Some(format!("health check failed: {error}"));
                    }
                    next_check = check_every.map(|every| tokio::time::Instant::now() + every);
                }
                _ = shutdown.cancelled() => {
                    self.set_live(None);
                    stop_on_shutdown.cancel();
                    let _ = (&mut waiting).await;
                    break Some("stopped: the bridge is shutting down".to_string());
                }
            }
        };
        self.set_live(None);
        let reason = match child {
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
        };
        let _ = closed_tx.send(Some(reason.clone()));
        reason
    }

    async fn refresh_tools(&self) {
        let Some(live) = self.live() else { return };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, live.peer.list_all_tools()).await {
            Ok(Ok(tools)) => {
                tracing::debug!(upstream = %self.name(), count = tools.len(), "tools listed");
                self.details().tools = Arc::new(tools);
                self.catalog_changed();
            }
            Ok(Err(e)) => {
                tracing::warn!(upstream = %self.name(), error = %e, "listing tools failed")
            }
            Err(_) => tracing::warn!(upstream = %self.name(), "listing tools timed out"),
        }
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

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl Upstream {
    fn health_check_interval(&self) -> Option<Duration> {
        let config = &self.inner.config;
        match config.transport {
            TransportKind::Http => (config.health_check_secs > 0)
                .then(|| Duration::from_secs(config.health_check_secs)),
            TransportKind::Stdio => None,
        }
    }
}

/// Exponential backoff with ±50 % jitter, so replicas restarting together do not retry in
/// lockstep.
fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.min(16));
    let capped = exp.min(BACKOFF_CAP);
    capped.mul_f64(0.5 + fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for _ in 0..100 {
            assert!(backoff(0) <= BACKOFF_BASE.mul_f64(1.5));
            assert!(backoff(0) >= BACKOFF_BASE.mul_f64(0.5));
            assert!(backoff(40) <= BACKOFF_CAP.mul_f64(1.5));
        }
    }
}
