//! The demo tool server over Streamable HTTP as its own process (`bench demo-http`): the
//! upstream of the fan-out and many-jobs scenarios.
//!
//! Why not in the harness, as the latency scenario has it: with 10,000 readers in the harness
//! on two cores, an upstream in the same process waits behind them. It then missed the bridge's
//! health-check ping (5 s), the bridge reconnected and failed the job, and the run measured
//! the harness starving itself, not the fan-out. In a process of its own it is scheduled by
//! the kernel next to the readers and the bridge, as a real upstream would be, and its CPU is
//! not counted as the readers'.

use std::{net::SocketAddr, process::ExitCode};

use axum::{routing::get, serve::ListenerExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::{Ctx, proc::BridgeProcess};

/// The running upstream process: stopped by [`DemoProcess::stop`], killed when dropped.
pub struct DemoProcess {
    pub url: String,
    process: BridgeProcess,
}

impl DemoProcess {
    /// Start `bench demo-http` (this binary) and wait until it answers `/readyz`.
    pub async fn start(ctx: &Ctx, name: &str) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        command.arg("demo-http");
        let process = BridgeProcess::spawn(command, Some(&ctx.dir), &format!("upstream-{name}"))
            .await
            .map_err(|e| format!("the demo upstream process did not start: {e}"))?;
        Ok(Self {
            url: process.mcp_url(),
            process,
        })
    }

    /// Why a job may have failed on the upstream's side: `running` or how it ended, and the
    /// last lines of its log.
    pub fn state(&mut self) -> String {
        let alive = match self.process.exited() {
            None => "still running".to_string(),
            Some(status) => format!("exited ({status})"),
        };
        format!("{alive}; log: {}", self.process.log_tail())
    }

    pub async fn stop(self) {
        self.process.stop().await;
    }
}

/// `bench demo-http`: the demo tools at `/mcp`, `/readyz`, on a free loopback port, until
/// killed. Prints `demo-http listening on http://ADDR` once bound.
pub async fn main() -> ExitCode {
    // A long accept queue, as the bridge has: the many-jobs scenario's bridge opens
    // connections to this server by the hundred at once.
    let bind = || {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        socket.listen(4096)
    };
    let listener = match bind() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("demo-http: bind: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    // As the bridge does: small SSE writes leave at once (no Nagle delay).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let router = demo_tools::http_router(CancellationToken::new())
        .route("/readyz", get(|| async { "ready" }));
    println!("demo-http listening on http://{addr}");
    match axum::serve(listener, router).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo-http: {e}");
            ExitCode::FAILURE
        }
    }
}
