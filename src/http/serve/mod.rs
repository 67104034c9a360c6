//! The HTTP server: the bridge's own accept loop, each connection served by hyper's HTTP/1
//! connection, on the main listener and on the admin listener.
//!
//! Why not `axum::serve`: it serves through hyper-util's auto builder, which first reads 24
//! bytes to tell HTTP/2 from HTTP/1. The bridge speaks HTTP/1 only (axum's `http2` feature is
//! off, no route upgrades), and the sniff cost memory: hyper's first read then held an
//! incomplete head, grew its read buffer from 8 to 16 KiB, and kept it for the connection's
//! life, an open SSE stream included (issue 16's profile). Owning the loop also puts every
//! connection in a table the bridge controls (`connections`).
//!
//! Every request gets the peer's address as axum's `ConnectInfo<SocketAddr>` (the admin routes
//! use it), and every connection `TCP_NODELAY`.
//!
//! Shutdown: the loop runs on the HTTP stage's tasks. When the stage stops, it stops accepting,
//! tells each connection to close gracefully (hyper finishes the response in progress: an SSE
//! stream ends on the same token after its last frames), and waits until they have. If the
//! stage overruns its bound, the loop is dropped, and dropping it closes every connection at
//! once.

mod connections;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::IntGauge;
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

use self::connections::{Close, Connections, Slot};
use crate::shutdown::Tasks;

/// How long the loop pauses after `accept` failed for a reason other than the one client (the
/// open-file limit reached, for one): the error would otherwise repeat at once, in a loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// What one listener serves, and how.
struct Listener {
    routes: Router,
    http1: http1::Builder,
    connections: Arc<Connections>,
}

/// Serve `routes` on `listener` until the HTTP stage stops, then until its connections have
/// closed. `open` counts the listener's open connections.
pub fn spawn(http: &Tasks, listener: TcpListener, routes: Router, open: IntGauge) {
    let mut http1 = http1::Builder::new();
    http1.timer(TokioTimer::new());
    let served = Arc::new(Listener {
        routes,
        http1,
        connections: Connections::new(open),
    });
    let tasks = http.clone();
    http.spawn(async move { accept_loop(listener, served, tasks).await });
}

async fn accept_loop(listener: TcpListener, served: Arc<Listener>, http: Tasks) {
    // Dropped before the end only when the stage overran its bound (the task is dropped).
    let _close_now = CloseOnDrop(served.connections.clone());
    let stop = http.stopping().clone();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let slot = served.connections.admit();
                let served = served.clone();
                http.spawn_tracked(async move { served.serve(tcp, peer, slot).await });
            }
            Err(error) if is_client_error(&error) => {}
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; pausing");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
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
    /// Serve one connection until it closes, or until it is told to.
    async fn serve(&self, tcp: TcpStream, peer: SocketAddr, slot: Slot) {
        if let Err(error) = tcp.set_nodelay(true) {
            // SSE frames and MCP answers are small writes that must leave at once: with
            // Nagle's algorithm a frame waits for the reader's delayed ACK, up to 40 ms
            // (measured: progress p99 26.7 ms without it; see BENCHMARKS.md).
            tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
        }
        let routes = self.routes.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            // `Router::call` needs `&mut`; a clone is a reference count.
            routes.clone().call(request)
        });
        let connection = self.http1.serve_connection(TokioIo::new(tcp), service);
        tokio::pin!(connection);
        let signal = slot.signal();
        let mut graceful = false;
        let result = loop {
            tokio::select! {
                result = connection.as_mut() => break result,
                () = signal.changed() => match signal.order() {
                    Close::Now => return,
                    Close::Graceful if !graceful => {
                        graceful = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    Close::Graceful | Close::No => {}
                },
            }
        };
        if let Err(error) = result {
            tracing::debug!(%error, %peer, "HTTP connection ended with an error");
        }
    }
}
