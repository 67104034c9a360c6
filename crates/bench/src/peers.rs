//! The peer gateways users pick today, installed into a local folder (gitignored) with their
//! ordinary package clients, pinned, and started in front of the same stdio demo tools.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::process::Command;

use crate::proc::{Helper, free_port};

/// Versions measured (pinned so that runs compare).
pub const SUPERGATEWAY: &str = "supergateway@4.0.0";
pub const MCP_PROXY: &str = "mcp-proxy==0.13.0";

/// A peer serving Streamable HTTP on loopback.
pub struct Peer {
    pub helper: Helper,
    pub url: String,
}

/// `npm install --prefix DIR supergateway@…`, once.
pub async fn install_supergateway(dir: &Path) -> Result<PathBuf, String> {
    let bin = dir.join("node_modules/.bin/supergateway");
    if !bin.exists() {
        eprintln!("bench: installing {SUPERGATEWAY} into {} …", dir.display());
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(dir)
            .arg(SUPERGATEWAY))
        .await?;
    }
    bin.exists()
        .then_some(bin)
        .ok_or_else(|| "npm installed no supergateway binary".into())
}

/// `python3 -m venv DIR/venv && DIR/venv/bin/pip install mcp-proxy==…`, once.
pub async fn install_mcp_proxy(dir: &Path) -> Result<PathBuf, String> {
    let venv = dir.join("venv");
    let bin = venv.join("bin/mcp-proxy");
    if !bin.exists() {
        eprintln!("bench: installing {MCP_PROXY} into {} …", venv.display());
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).await?;
        run(Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            MCP_PROXY,
        ]))
        .await?;
    }
    bin.exists()
        .then_some(bin)
        .ok_or_else(|| "pip installed no mcp-proxy command".into())
}

async fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{:?}", command.as_std());
    let output = tokio::time::timeout(Duration::from_secs(600), command.output())
        .await
        .map_err(|_| format!("{shown} timed out"))?
        .map_err(|e| format!("{shown}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&output.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        Err(format!("{shown} failed ({}): {last}", output.status))
    }
}

/// supergateway, stdio → Streamable HTTP, stateful (one child per session, as the bridge
/// keeps one child: stateless mode would start a child per request).
pub async fn start_supergateway(sg: &Path, demo: &Path, log: &Path) -> Result<Peer, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let mut command = Command::new(sg);
    command
        .arg("--stdio")
        .arg(format!("{} demo-tools", demo.display()))
        .args([
            "--outputTransport",
            "streamableHttp",
            "--stateful",
            "--logLevel",
            "none",
        ])
        .arg("--port")
        .arg(port.to_string());
    let helper = Helper::spawn("supergateway", command, log)?;
    wait_port(port, log).await?;
    Ok(Peer {
        helper,
        url: format!("http://127.0.0.1:{port}/mcp"),
    })
}

/// mcp-proxy (sparfenyuk), stdio → Streamable HTTP at `/mcp`, stateful (its default).
pub async fn start_mcp_proxy(proxy: &Path, demo: &Path, log: &Path) -> Result<Peer, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let mut command = Command::new(proxy);
    command
        .args(["--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(["--log-level", "WARNING", "--"])
        .arg(demo)
        .arg("demo-tools");
    let helper = Helper::spawn("mcp-proxy", command, log)?;
    wait_port(port, log).await?;
    Ok(Peer {
        helper,
        url: format!("http://127.0.0.1:{port}/mcp"),
    })
}

async fn wait_port(port: u16, log: &Path) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "not listening on port {port} after 30 s: {}",
        crate::proc::log_tail(log)
    ))
}
