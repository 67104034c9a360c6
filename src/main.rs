//! The `mcp-progress-bridge` command: run the bridge (default), or the demo tool server.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcp_progress_bridge::{
    app, cli,
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
    /// Follow a job's event stream with a progress bar; exit 0 completed (result printed),
    /// 1 failed, 130 cancelled, 2 when the job cannot be followed.
    Watch(cli::watch::WatchArgs),
    /// Call a tool through a bridge's /mcp endpoint and watch the job it starts (exit codes as
    /// for watch).
    Call(cli::call::CallArgs),
}

fn init_logging(json: bool, client: bool) {
    // The client commands report their own errors; the MCP SDK's would repeat them.
    let default = if client {
        "warn,rmcp=off"
    } else {
        "info,rmcp=warn"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
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
    let mut cli = Cli::parse();
    let client = matches!(cli.command, Some(Command::Watch(_) | Command::Call(_)));
    init_logging(cli.log_json, client);
    let result = match cli.command.take().unwrap_or(Command::Serve) {
        Command::DemoTools => demo::serve_stdio().await,
        Command::Serve => return serve(&cli).await,
        Command::Watch(args) => return cli::watch::run(args).await,
        Command::Call(args) => return cli::call::run(args).await,
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
    let grace = Duration::from_secs(config.jobs.shutdown_grace_secs);
    let bridge = app::start(config).await?;
    println!(
        "mcp-progress-bridge listening on http://{} (MCP endpoint: /mcp)",
        bridge.addr
    );
    shutdown_signal()
        .await
        .context("waiting for a shutdown signal")?;
    tracing::info!("shutdown requested");
    bridge.shutdown(grace).await;
    Ok(())
}

/// SIGINT (Ctrl-C) or SIGTERM (container stop).
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
