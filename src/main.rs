//! The `mcp-progress-bridge` command: run the bridge (default), or the demo tool server.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcp_progress_bridge::{
    app,
    auth::JobTokens,
    cli,
    config::{Config, Overrides},
    demo,
    http::access_log,
    model::{CorrelationId, JobId},
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
    /// Print a capability token signed with the config's auth.job_secret.
    Token {
        #[command(subcommand)]
        kind: TokenKind,
        /// Print the whole URL (server.public_url + path + ?token=) instead of the token.
        #[arg(long, global = true)]
        url: bool,
    },
}

#[derive(Subcommand)]
enum TokenKind {
    /// The token of a correlation stream: GET /correlations/CID/events?token=TOKEN.
    Correlation {
        /// The correlation ID, as sent in the correlation header.
        cid: String,
    },
    /// The read token of a job (GET /jobs/ID and /jobs/ID/events), or with --cancel its
    /// cancel token (POST /jobs/ID/cancel).
    Job {
        /// The job ID (32 hex digits).
        id: String,
        #[arg(long)]
        cancel: bool,
    },
}

fn init_logging(json: bool, client: bool) {
    // The client commands report their own errors; the MCP SDK's would repeat them.
    let default = if client {
        "warn,rmcp=off"
    } else {
        "info,rmcp=warn"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Whatever RUST_LOG says, the bridge may not log MCP messages: they hold job tokens. (The
    // caps are directives of their own, so they would also switch the client commands'
    // `rmcp=off` back on: those log to their own user's terminal and keep their default.)
    let filter = if client {
        filter
    } else {
        access_log::secret_safe(filter)
    };
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
        Command::DemoTools => demo::serve_stdio().await.map_err(anyhow::Error::from),
        Command::Serve => return serve(&cli).await,
        Command::Watch(args) => return cli::watch::run(args).await,
        Command::Call(args) => return cli::call::run(args).await,
        Command::Token { kind, url } => return print_token(&cli, &kind, url),
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

/// `token correlation CID` / `token job ID [--cancel]`: what an application backend (or an
/// operator) needs to open a stream the bridge did not hand it a URL for.
fn print_token(cli: &Cli, kind: &TokenKind, url: bool) -> ExitCode {
    let config = match load_config(cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if config.auth.job_secret.is_none() {
        eprintln!(
            "error: {} sets no auth.job_secret, so the bridge signs with a random key of its own \
             and no token made here would open anything. Set auth.job_secret (the same value \
             for the bridge and this command)",
            config.source.display()
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let tokens = JobTokens::from_config(&config.auth);
    let base = &config.server.public_url;
    let line = match kind {
        TokenKind::Correlation { cid } => match cid.parse::<CorrelationId>() {
            Ok(cid) => {
                let token = tokens.correlation(&cid);
                if url {
                    format!("{base}/correlations/{cid}/events?token={token}")
                } else {
                    token
                }
            }
            Err(_) => {
                eprintln!(
                    "error: {cid:?} is not a correlation ID: use 1 to {} letters, digits and . _ : -",
                    CorrelationId::MAX_LEN
                );
                return ExitCode::FAILURE;
            }
        },
        TokenKind::Job { id, cancel } => match id.parse::<JobId>() {
            Ok(id) => {
                let (token, path) = if *cancel {
                    (tokens.cancel(id), format!("/jobs/{id}/cancel"))
                } else {
                    (tokens.job(id), format!("/jobs/{id}/events"))
                };
                if url {
                    format!("{base}{path}?token={token}")
                } else {
                    token
                }
            }
            Err(_) => {
                eprintln!(
                    "error: {id:?} is not a job ID: use the 32 lowercase hex digits of a job handle"
                );
                return ExitCode::FAILURE;
            }
        },
    };
    println!("{line}");
    ExitCode::SUCCESS
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

/// Raise the open-file soft limit to the hard limit, as servers commonly do at start: every
/// SSE reader and every call in flight on an HTTP upstream holds a socket, and the usual soft
/// default (1024) would cap the bridge at about a thousand watchers although the system
/// allows far more. The hard limit is left alone; a failure only means the old limit stays.
fn raise_open_file_limit() {
    let before = rlimit::Resource::NOFILE.get().map(|(soft, _)| soft);
    if let (Ok(before), Ok(limit)) = (before, rlimit::increase_nofile_limit(u64::MAX))
        && limit > before
    {
        tracing::debug!(limit, "open-file limit raised to the hard limit");
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
