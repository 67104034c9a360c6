//! A TCP proxy in front of a bridge that cuts every open connection on demand, the way a flaky
//! network or a restarting load balancer would, and a bridge started behind one.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use mcp_progress_bridge::config::Config;
use tokio_util::sync::CancellationToken;

use super::bridge::{TestBridge, demo_config, start_config_at};

/// A TCP proxy in front of a bridge that can cut every open connection on demand, the way a
/// flaky network or a restarting load balancer would: clients see their streams drop and must
/// resume. `POST {control_url}/drop` (for scripts in other processes) or [`DropProxy::drop_all`]
/// cuts them; the proxy keeps accepting new connections.
pub struct DropProxy {
    /// `http://127.0.0.1:PORT`: give this to clients (and as the bridge's public URL).
    pub base: String,
    pub control_url: String,
    cut: tokio::sync::broadcast::Sender<()>,
    drops: Arc<AtomicUsize>,
    ct: CancellationToken,
}

impl DropProxy {
    /// Bind the proxy's ports now (so the bridge can be told its public URL); forward to the
    /// bridge once [`DropProxy::forward_to`] names it.
    pub async fn bind() -> (Self, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let addr = listener.local_addr().expect("local address");
        let (cut, _) = tokio::sync::broadcast::channel(4);
        let proxy = DropProxy {
            base: format!("http://{addr}"),
            control_url: String::new(),
            cut,
            drops: Arc::default(),
            ct: CancellationToken::new(),
        };
        (proxy, listener)
    }

    /// Start forwarding connections from `listener` to `target` and serve the control port.
    pub async fn forward_to(&mut self, listener: tokio::net::TcpListener, target: &str) {
        let target = target.trim_start_matches("http://").to_string();
        let cut = self.cut.clone();
        let ct = self.ct.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = ct.cancelled() => return,
                };
                let Ok((mut inbound, _)) = accepted else {
                    continue;
                };
                let target = target.clone();
                let mut cut = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.recv() => {}
                    }
                    // Dropping both sockets closes them: the client sees its stream end.
                });
            }
        });
        let control = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        self.control_url = format!("http://{}", control.local_addr().expect("address"));
        let cut = self.cut.clone();
        let drops = self.drops.clone();
        let router = axum::Router::new().route(
            "/drop",
            axum::routing::post(move || {
                let cut = cut.clone();
                let drops = drops.clone();
                async move {
                    let cut_now = cut.send(()).unwrap_or(0);
                    drops.fetch_add(1, Ordering::SeqCst);
                    format!("cut {cut_now} connections")
                }
            }),
        );
        let stop = self.ct.clone();
        tokio::spawn(async move {
            let _ = axum::serve(control, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
    }

    /// Cut every connection open now.
    pub fn drop_all(&self) -> usize {
        self.drops.fetch_add(1, Ordering::SeqCst);
        self.cut.send(()).unwrap_or(0)
    }

    /// How many times connections were cut (through either way).
    pub fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

impl Drop for DropProxy {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

/// A bridge (demo tools as a real stdio child) reached through a [`DropProxy`]: job handles
/// name the proxy, so every client of the job streams goes through it.
pub async fn start_bridge_behind_proxy(
    configure: impl FnOnce(&mut Config),
) -> (TestBridge, DropProxy) {
    let (mut proxy, listener) = DropProxy::bind().await;
    let bridge = start_config_at(demo_config(configure), Some(proxy.base.clone())).await;
    proxy.forward_to(listener, &bridge.base).await;
    (bridge, proxy)
}
