//! The `mcp-progress-bridge` command: run the bridge (default), or the demo tool server.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcp_progress_bridge::{
    app,
    config::{Config, Overrides},
    demo,
};
use tracing_subscriber::EnvFilter;

/// Exit code for a configuration that cannot be used (bad file, key or value).
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(
    name = "mcp-progress-bridge",
    version,
    about = "MCP progress bridge: long tool calls become jobs with a live SSE progress channel"
)]
struct Cli {
    /// Config file (TOML). Default: config/bridge.toml.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on, overriding the config and BRIDGE_LISTEN.
    #[arg(long, global = true, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Log as JSON lines (for log collectors) instead of text.
    #[arg(long, global = true, env = "BRIDGE_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bridge (the default).
    Serve,
    /// Run the demo MCP tool server on stdin/stdout (the default config's upstream).
    DemoTools,
}

fn init_logging(json: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    // Logs go to stderr: for `demo-tools`, stdout is the MCP protocol stream.
    // Colour only for a person at a terminal: a demo child's stderr is read by the bridge.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_json);
    let result = match cli.command.as_ref().unwrap_or(&Command::Serve) {
        Command::DemoTools => demo::serve_stdio().await,
        Command::Serve => return serve(&cli).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cli: &Cli) -> ExitCode {
    raise_open_file_limit();
    let config = match load_config(cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(cli: &Cli) -> Result<Config, mcp_progress_bridge::config::ConfigError> {
    let mut overrides = Overrides::from_env()?;
    if cli.listen.is_some() {
        overrides.listen = cli.listen;
    }
    Config::load(cli.config.as_deref(), &overrides)
}

async fn run(config: Config) -> anyhow::Result<()> {
    tracing::info!(config = %config.source.display(), "starting");
    let bridge = app::start(config).await?;
    println!(
        "mcp-progress-bridge listening on http://{} (MCP endpoint: /mcp)",
        bridge.addr
    );
    shutdown_signal()
        .await
        .context("waiting for a shutdown signal")?;
    tracing::info!("shutdown requested");
    bridge.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

/// Raise the open-file soft limit to the hard limit, as servers commonly do at start: every
/// SSE reader and every call in flight on an HTTP upstream holds a socket, and the usual soft
/// default (1024) would cap the bridge at about a thousand watchers although the system
/// allows far more. The hard limit is left alone; a failure only means the old limit stays.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a valid local struct.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
            && limit.rlim_cur < limit.rlim_max
            && {
                let old = limit.rlim_cur;
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 && old < limit.rlim_cur
            }
    };
    if raised {
        tracing::debug!(
            limit = limit.rlim_cur,
            "open-file limit raised to the hard limit"
        );
    }
}

/// SIGINT (Ctrl-C) or SIGTERM (container stop).
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
