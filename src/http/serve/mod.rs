//! The HTTP server: the bridge's own accept loop, each connection served by hyper's HTTP/1
//! connection, on the main and admin listeners (not `axum::serve`, whose HTTP/2 sniff held
//! memory for a connection's life: docs/design/http-serve.md).
//!
//! Bounds: `server.header_read_timeout_secs` (a new connection's first head),
//! `server.keep_alive_idle_secs` (an idle kept-alive one), a body deadline ([`TimedBody`]), caps on
//! connections in total and per address ([`connections`], [`connection_cap`]; 503 with
//! `Retry-After`; a trusted proxy is capped in total only). Each request gets the peer's
//! `ConnectInfo<SocketAddr>` and the [`ClientIp`] the limits count ([`forwarded`]); sockets are
//! `TCP_NODELAY`; a caught-up job stream may be written by a shared writer ([`writers`]).
//! Shutdown: stop accepting, close each connection gracefully (an SSE stream ends on
//! [`Outflow::close`]), and past the HTTP stage's bound drop them all.

mod connections;
mod direct;
mod forwarded;
mod meter;
mod outflow;
mod writers;

use std::{
    future::{Future, poll_fn},
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{Router, extract::ConnectInfo};
use bytes::Bytes;
use http::Version;
use http_body::{Body, Frame, SizeHint};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::{Instant, Sleep},
};
use tower_service::Service;

pub use self::direct::DirectStream;
pub use self::forwarded::{ClientAddress, ClientIp};
pub use self::outflow::Outflow;
use self::{
    connections::{Caps, Close, Connections, Refused, Signal, Slot},
    direct::{First, Out, Rewind},
    meter::{Metered, Shared},
    writers::{Seat, Writers},
};
use crate::shutdown::Tasks;

/// How long the loop pauses after `accept` failed for a reason other than the one client (the
/// open-file limit reached, for one): the error would otherwise repeat at once, in a loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// What a refused connection is told: come back after this many seconds.
const REFUSED_RETRY_AFTER_SECS: u64 = 1;
/// A refused connection is read (and its bytes dropped) for up to this long after its answer,
/// so that closing it does not reset the connection before the client has read the 503 (a
/// close with unread data sends a reset, which can discard the answer on its way).
const LINGER: Duration = Duration::from_secs(1);
/// Refused connections lingering at once; past it they are closed at once.
pub const MAX_LINGERING: usize = 64;
/// Open connections on the admin listener (operators only; no per-address cap).
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// How a listener serves its connections.
#[derive(Clone)]
pub struct Options {
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next complete head.
    pub keep_alive_idle: Duration,
    /// Who a request's client is (the peer, or what a trusted proxy forwards).
    pub clients: ClientAddress,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Shared writer tasks for job event streams (`server.sse_writers`; 0: none).
    pub sse_writers: usize,
}

/// The listener's counters: `bridge_connections_open{listener}`, and (shared by the listeners)
/// `bridge_connections_refused_total{reason}`, `bridge_connections_closed_total{reason}`,
/// `bridge_sse_handbacks_total{reason}`, `bridge_sse_shared_deliveries_total` and
/// `bridge_sse_delivery_lag_seconds`.
pub struct Counters {
    pub open: IntGauge,
    pub refused: IntCounterVec,
    pub closed: IntCounterVec,
    pub handbacks: IntCounterVec,
    pub shared_deliveries: IntCounter,
    pub delivery_lag: Histogram,
}

/// The total cap for `max_connections`, lowered so that `reserved_fds` file descriptors (and
/// those of the admin listener and of lingering refusals) stay free below the open-file limit
/// `nofile` for upstreams, Redis, health checks and the log. Never below half the limit: a
/// reserve larger than a small limit would leave no connection at all.
pub fn connection_cap(max_connections: usize, reserved_fds: usize, nofile: Option<u64>) -> usize {
    let Some(nofile) = nofile.map(|n| usize::try_from(n).unwrap_or(usize::MAX)) else {
        return max_connections;
    };
    let spare = nofile.saturating_sub(reserved_fds + ADMIN_MAX_CONNECTIONS + MAX_LINGERING);
    max_connections.min(spare.max(nofile / 2)).max(1)
}

/// What one listener serves, and how.
struct Listener {
    routes: Router,
    http1: http1::Builder,
    connections: Arc<Connections>,
    header_read_timeout: Duration,
    body_read_timeout: Duration,
    clients: ClientAddress,
    lingering: Arc<Semaphore>,
    counters: Counters,
    body_expired: IntCounter,
    writers: Option<Arc<Writers>>,
}

/// Serve `routes` on `listener` until the HTTP stage stops, then until its connections have
/// closed.
pub fn spawn(
    http: &Tasks,
    listener: TcpListener,
    routes: Router,
    options: Options,
    counters: Counters,
) {
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        // Every head after the first (which `serve` times itself, from the connection's
        // opening): hyper's timer runs from the end of the previous response, idle included.
        .header_read_timeout(options.keep_alive_idle);
    let caps = Caps {
        total: options.max_connections,
        per_address: options.max_connections_per_address,
    };
    let served = Arc::new(Listener {
        routes,
        http1,
        connections: Connections::new(caps, counters.open.clone()),
        header_read_timeout: options.header_read_timeout,
        body_read_timeout: options.body_read_timeout,
        clients: options.clients,
        lingering: Arc::new(Semaphore::new(MAX_LINGERING)),
        body_expired: counters.closed.with_label_values(&["body_timeout"]),
        writers: Writers::spawn(
            options.sse_writers,
            http,
            (&counters.handbacks, &counters.shared_deliveries),
            &counters.delivery_lag,
        ),
        counters,
    });
    let tasks = http.clone();
    http.spawn(async move { accept_loop(listener, served, tasks).await });
}

async fn accept_loop(listener: TcpListener, served: Arc<Listener>, http: Tasks) {
    // Dropped before the end only when the stage overran its bound (the task is dropped).
    let _close_now = CloseOnDrop(served.connections.clone());
    let stop = http.stopping().clone();
    while let Some(accepted) = stop.run_until_cancelled(listener.accept()).await {
        match accepted {
            Ok((tcp, peer)) => served.clone().admit(tcp, peer, &http),
            Err(error) if is_client_error(&error) => {}
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; pausing");
                let pause = tokio::time::sleep(ACCEPT_ERROR_PAUSE);
                if stop.run_until_cancelled(pause).await.is_none() {
                    break;
                }
            }
        }
    }
    drop(listener);
    served.connections.close_all(Close::Graceful);
    served.connections.all_closed().await;
}

/// Closes every connection of a listener at once when dropped.
struct CloseOnDrop(Arc<Connections>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close_all(Close::Now);
    }
}

/// An error of one connection that `accept` reports (as std's and axum's loops treat them).
fn is_client_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

impl Listener {
    /// Serve a new connection on a task of its own, or refuse it.
    fn admit(self: Arc<Self>, tcp: TcpStream, peer: SocketAddr, http: &Tasks) {
        let capped = !self.clients.trusts(peer.ip());
        match self.connections.admit(peer.ip(), capped) {
            Ok((slot, evicted)) => {
                if evicted {
                    self.counters.closed.with_label_values(&["evicted"]).inc();
                }
                http.spawn_tracked(async move { self.serve(tcp, peer, slot).await });
            }
            Err(refused) => {
                let (reason, cap) = match refused {
                    Refused::Total => ("max_connections", "limits.max_connections"),
                    Refused::PerAddress => (
                        "max_connections_per_address",
                        "limits.max_connections_per_address",
                    ),
                };
                self.counters.refused.with_label_values(&[reason]).inc();
                tracing::debug!(%peer, reason, "connection refused");
                let answer = refusal(cap);
                // A fresh socket's send buffer takes the short answer whole.
                let _ = tcp.try_write(&answer);
                if let Ok(place) = self.lingering.clone().try_acquire_owned() {
                    http.spawn_tracked(async move {
                        linger(tcp).await;
                        drop(place);
                    });
                }
            }
        }
    }

    /// Serve one connection until it closes, or until it is told to: its first request head
    /// is read here, and a stream request is served by [`direct`]; anything else by hyper.
    async fn serve(&self, tcp: TcpStream, peer: SocketAddr, slot: Slot) {
        if let Err(error) = tcp.set_nodelay(true) {
            // SSE frames and MCP answers are small writes that must leave at once: with
            // Nagle's algorithm a frame waits for the reader's delayed ACK, up to 40 ms
            // (measured: progress p99 26.7 ms without it; see BENCHMARKS.md).
            tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
        }
        // A head must be complete this long after the connection opened (as hyper's timer).
        let deadline = Instant::now() + self.header_read_timeout;
        let first = tokio::select! {
            first = direct::read_head(&tcp, deadline) => first,
            // No request in progress: whatever the order, the connection closes now.
            _ = slot.signal().changed(Close::No) => return,
        };
        let outflow = Arc::new(Outflow::default());
        let tcp = Metered::new(tcp, outflow.meter().clone());
        match first {
            First::Closed => {}
            First::TimedOut => self.header_timed_out(),
            First::Other(read) => {
                let io = Rewind::new(read, tcp);
                let start = (Start::Fresh(deadline), Orders::new(slot.signal()));
                Box::pin(self.serve_hyper(io, peer, &slot, outflow, start)).await;
            }
            First::Stream(request, read) => {
                self.serve_stream(request, read, tcp, peer, &slot, outflow)
                    .await
            }
        }
    }

    fn header_timed_out(&self) {
        self.counters
            .closed
            .with_label_values(&["header_timeout"])
            .inc();
    }

    /// Route a stream request; write the stream on the socket ([`direct`]), or hand any
    /// other answer to hyper, which writes it as the answer to the head `read` (replayed).
    async fn serve_stream(
        &self,
        mut request: hyper::Request<axum::body::Body>,
        read: Bytes,
        tcp: Metered,
        peer: SocketAddr,
        slot: &Slot,
        outflow: Arc<Outflow>,
    ) {
        let busy = slot.busy();
        let version = request.version();
        let client = self.clients.of(peer, request.headers());
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(client);
        request.extensions_mut().insert(outflow.clone());
        let mut orders = Orders::new(slot.signal());
        let answer = self.routes.clone().call(request);
        let response = tokio::select! {
            response = answer => match response {
                Ok(response) => response,
                Err(never) => match never {},
            },
            () = orders.close_now(&outflow) => return,
        };
        if response.extensions().get::<DirectStream>().is_none() {
            let io = Rewind::new(read, tcp);
            let start = (Start::Answered(response, busy), orders);
            Box::pin(self.serve_hyper(io, peer, slot, outflow, start)).await;
            return;
        }
        drop(read);
        let writers = self.writers.as_deref();
        pump(tcp, response, version, orders, (&outflow, writers)).await;
        drop(busy);
    }

    /// Serve a connection with hyper until it closes, or until it is told to.
    // Long because: one select loop over what can happen to the connection (its end, a stall,
    // a close order, the first head's deadline); its arms share the loop's state.
    async fn serve_hyper(
        &self,
        io: Rewind,
        peer: SocketAddr,
        slot: &Slot,
        outflow: Arc<Outflow>,
        (start, mut orders): (Start, Orders<'_>),
    ) {
        let (deadline, answered) = match start {
            Start::Fresh(deadline) => (Some(deadline), None),
            Start::Answered(response, busy) => (None, Some((response, busy))),
        };
        let answered = parking_lot::Mutex::new(answered);
        let started = AtomicBool::new(deadline.is_none());
        let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| {
            started.store(true, Ordering::Relaxed);
            // The first request's answer, when the router has given it already.
            let ready = answered.lock().take();
            let routed = match ready {
                Some(ready) => Err(ready),
                None => {
                    let busy = slot.busy();
                    let (mut parts, body) = request.into_parts();
                    let client = self.clients.of(peer, &parts.headers);
                    parts.extensions.insert(ConnectInfo(peer));
                    parts.extensions.insert(client);
                    parts.extensions.insert(outflow.clone());
                    let body =
                        TimedBody::new(body, self.body_read_timeout, self.body_expired.clone());
                    // `Router::call` needs `&mut`; a clone is a reference count.
                    let answer = self
                        .routes
                        .clone()
                        .call(hyper::Request::from_parts(parts, body));
                    Ok((answer, busy))
                }
            };
            async move {
                let (response, busy) = match routed {
                    Ok((answer, busy)) => (answer.await?, busy),
                    Err(ready) => ready,
                };
                Ok::<_, std::convert::Infallible>(response.map(|body| Answer { body, _busy: busy }))
            }
        });
        let connection = self.http1.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        if orders.seen == Close::Graceful {
            connection.as_mut().graceful_shutdown();
        }
        let stalled = outflow.stalled();
        tokio::pin!(stalled);
        // The first head's deadline counts from the connection's opening, not from here.
        let head_due = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
        tokio::pin!(head_due);
        let mut watch_head = deadline.is_some();
        let result = loop {
            tokio::select! {
                result = connection.as_mut() => break result,
                // An SSE reader that stopped reading at its bound: dropped (counted).
                () = &mut stalled => return,
                order = orders.next(&outflow) => {
                    if order != Close::Graceful {
                        return;
                    }
                    // A stream in progress sees it when hyper polls it next (below).
                    connection.as_mut().graceful_shutdown();
                }
                () = &mut head_due, if watch_head => {
                    watch_head = false;
                    if !started.load(Ordering::Relaxed) {
                        self.header_timed_out();
                        return;
                    }
                }
            }
        };
        match result {
            Err(error) if error.is_timeout() => self.header_timed_out(),
            Err(error) => tracing::debug!(%error, %peer, "HTTP connection ended with an error"),
            Ok(()) => {}
        }
    }
}

/// How hyper starts on a connection: from its first head (due by this instant), or with the
/// answer to it, routed already (and the request it keeps busy).
enum Start {
    Fresh(Instant),
    Answered(hyper::Response<axum::body::Body>, connections::Busy),
}

/// The close orders one connection's task follows (see [`Signal`]): the one it acted on last,
/// and what it does on the next.
struct Orders<'a> {
    signal: &'a Signal,
    seen: Close,
}

impl<'a> Orders<'a> {
    fn new(signal: &'a Signal) -> Self {
        Self {
            signal,
            seen: Close::No,
        }
    }

    /// Wait for the next order and return it. Told to close gracefully, the connection's
    /// stream is told too: it ends after its queued frames ([`Outflow::close`]).
    async fn next(&mut self, outflow: &Outflow) -> Close {
        self.seen = self.signal.changed(self.seen).await;
        if self.seen == Close::Graceful {
            outflow.close();
        }
        self.seen
    }

    /// Return once the connection must close at once (evicted, or the shutdown overran its
    /// bound); a graceful close is followed as in [`Orders::next`] meanwhile.
    async fn close_now(&mut self, outflow: &Outflow) {
        while self.next(outflow).await == Close::Graceful {}
    }
}

/// Write a stream's response head and frames on the socket until the stream ends (then close
/// the connection), the reader leaves or stalls at its bound, or the connection is told to
/// close (gracefully: the stream ends after its queued frames). With shared writers, the
/// stream may hand the socket to one while it is caught up ([`writers`]); the end of a frame
/// a writer could not write whole is written here before anything the stream makes next.
// Long because: one loop that alternates writing and polling the stream, with the same exits
// (stall, close order, reader gone) in both selects; split, the state would travel in a struct.
async fn pump(
    tcp: Metered,
    response: hyper::Response<axum::body::Body>,
    version: Version,
    mut orders: Orders<'_>,
    (outflow, writers): (&Arc<Outflow>, Option<&Writers>),
) {
    let chunked = version == Version::HTTP_11;
    let head = direct::response_head(&response, chunked, version == Version::HTTP_10);
    let tcp = Arc::new(tcp.into_tcp());
    if let Some(writers) = writers {
        outflow.install(writers.seat(tcp.clone(), chunked, outflow.meter().clone()));
    }
    let seat = outflow.seat();
    // No writer writes on the socket once this task has ended.
    let _unseat = Unseat(seat);
    let mut tcp = Shared::new(tcp, outflow.meter().clone());
    let mut body = response.into_body();
    let stalled = outflow.stalled();
    tokio::pin!(stalled);
    let mut out = Some(Out::raw(head));
    let mut ended = false;
    let mut last_chunk = chunked;
    loop {
        if out.is_none()
            && let Some(rest) = seat.and_then(|seat| seat.take_rest())
        {
            out = Some(Out::raw(rest));
        }
        if let Some(piece) = &mut out {
            tokio::select! {
                biased;
                written = direct::write_out(&mut tcp, piece) => {
                    if written.is_err() {
                        return;
                    }
                    // A large frame stops counting as held here (see `Meter::send`).
                    out = None;
                }
                () = &mut stalled => return,
                () = orders.close_now(outflow) => return,
            }
            continue;
        }
        if ended {
            if last_chunk {
                last_chunk = false;
                out = Some(Out::raw(Bytes::from_static(b"0\r\n\r\n")));
                continue;
            }
            if let Some(seat) = seat {
                seat.unseat();
            }
            drop(body);
            if let Ok(mut tcp) = Arc::try_unwrap(tcp.into_tcp()) {
                let _ = tcp.shutdown().await;
            }
            return;
        }
        let frame = tokio::select! {
            biased;
            frame = poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)) => frame,
            () = &mut stalled => return,
            // Told to close gracefully, the stream ends at its next poll, after its queued
            // frames.
            () = orders.close_now(outflow) => return,
            () = direct::reader_left(tcp.tcp()) => return,
        };
        match frame {
            None => ended = true,
            Some(Err(error)) => {
                tracing::debug!(%error, "an event stream failed");
                return;
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    out = Some(Out::frame(data, chunked));
                }
            }
        }
    }
}

/// Takes a connection's socket from its writer when the connection's task ends.
struct Unseat<'a>(Option<&'a Arc<Seat>>);

impl Drop for Unseat<'_> {
    fn drop(&mut self) {
        if let Some(seat) = self.0 {
            seat.unseat();
        }
    }
}

/// The answer to a refused connection, closed after it.
fn refusal(cap: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": {
        "code": "too_many_connections",
        "message": format!("the bridge is at its connection limit ({cap}); retry after the time in Retry-After"),
        "retry_after_secs": REFUSED_RETRY_AFTER_SECS,
    } })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {REFUSED_RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Close a refused connection after its answer: send FIN, then read and drop what the client
/// still sends, for [`LINGER`] at most.
async fn linger(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = tcp.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// A response body that keeps its connection counted as in a request until it is dropped
/// (written out, or the connection closed).
struct Answer {
    body: axum::body::Body,
    _busy: connections::Busy,
}

impl http_body::Body for Answer {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Reading a request body took longer than `server.body_read_timeout_secs`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {0:?} of its head (server.body_read_timeout_secs); send it in one go"
)]
pub struct BodyTimedOut(pub Duration);

/// Whether `error` (or what caused it) is a [`BodyTimedOut`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A request body with a deadline: the whole body must have arrived within
/// `server.body_read_timeout_secs` of its head, or reading it fails with [`BodyTimedOut`]
/// (hyper bounds only the wait for a head). The timer is made only when a read finds nothing
/// to take (an empty or fast body never allocates one).
pub struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    /// `bridge_connections_closed_total{reason="body_timeout"}`.
    expired: IntCounter,
}

impl TimedBody {
    pub fn new(inner: Incoming, timeout: Duration, expired: IntCounter) -> Self {
        Self {
            inner,
            timeout,
            deadline: Instant::now() + timeout,
            timer: None,
            expired,
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            this.expired.inc();
            return Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_keeps_file_descriptors_free() {
        let fixed = ADMIN_MAX_CONNECTIONS + MAX_LINGERING;
        assert_eq!(connection_cap(16_384, 512, None), 16_384);
        assert_eq!(connection_cap(16_384, 512, Some(1_048_576)), 16_384);
        assert_eq!(connection_cap(16_384, 512, Some(20_000)), 16_384);
        assert_eq!(
            connection_cap(100_000, 512, Some(20_000)),
            20_000 - 512 - fixed
        );
        assert_eq!(connection_cap(16_384, 512, Some(1024)), 512, "half");
        assert_eq!(connection_cap(16_384, 512, Some(1)), 1);
    }

    #[test]
    fn a_refusal_is_a_complete_503() {
        let answer = String::from_utf8(refusal("limits.max_connections")).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("\r\nretry-after: 1\r\n"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "too_many_connections");
    }
}
