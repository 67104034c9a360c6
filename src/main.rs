//! The `mcp-progress-bridge` command: run the bridge (default), the demo tool server, or the
//! terminal client commands (`watch`, `call`, `token`).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, builder::BoolishValueParser};
use mcp_progress_bridge::{
    app,
    auth::JobTokens,
    cli,
    config::{Config, Overrides, public_url_mismatch},
    http::access_log,
    model::{CorrelationId, JobId},
    traces::{Traces, WithTraceIds},
};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing_subscriber::{
    EnvFilter, Layer, filter::FilterExt, layer::SubscriberExt, util::SubscriberInitExt,
};

/// Exit code for a configuration that cannot be used (bad file, key or value).
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(
    name = "mcp-progress-bridge",
    version,
    about = "MCP progress bridge: long tool calls become jobs with a live SSE progress channel"
)]
struct Cli {
    /// Without a subcommand the bridge runs: these are `serve`'s options.
    #[command(flatten)]
    serve: ServeArgs,
    /// Log as JSON lines (for log collectors) instead of text.
    #[arg(long, global = true, env = "BRIDGE_LOG_JSON", value_parser = BoolishValueParser::new())]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where the bridge finds its config and where it listens. Options of running the bridge
/// only: the client commands never read a config (`token` has its own `--config`).
#[derive(clap::Args, Default)]
struct ServeArgs {
    /// Config file (TOML). Default: config/bridge.toml.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on, overriding server.listen and BRIDGE_LISTEN. server.public_url
    /// (the base of job URLs) stays as configured: set BRIDGE_PUBLIC_URL to match.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bridge (the default).
    Serve(ServeArgs),
    /// Run the demo MCP tool server on stdin/stdout (the default config's upstream).
    DemoTools {
        /// Also serve a prompt (`introduce`) and a resource (`demo://asking/greeting`) that ask
        /// for a name in `input_required` answers (protocol 2026-07-28 only).
        #[arg(long)]
        asking: bool,
    },
    /// Follow a job's event stream with a progress bar; exit 0 completed (result printed),
    /// 1 failed, 130 cancelled, 2 when the job cannot be followed.
    Watch(cli::watch::WatchArgs),
    /// Call a tool through a bridge's /mcp endpoint and watch the job it starts (exit codes as
    /// for watch).
    Call(cli::call::CallArgs),
    /// Print a capability token signed with the config's auth.job_secret.
    Token(TokenArgs),
    /// Check a config as `serve` would read it (the file, the environment, --listen) without
    /// starting: every problem on a line naming its key; exit 0 when it is usable, 2 when not.
    CheckConfig(ServeArgs),
    /// Print the JSON Schema of the config file (docs/config.schema.json): its keys, types and
    /// defaults, for editors and CI; ranges and cross-key rules are check-config's.
    ConfigSchema,
}

#[derive(clap::Args)]
struct TokenArgs {
    #[command(subcommand)]
    kind: TokenKind,
    /// Print the whole URL (server.public_url + path + ?token=) instead of the token.
    #[arg(long, global = true)]
    url: bool,
    /// The bridge's config file: its auth.job_secret signs the token. Default:
    /// config/bridge.toml.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// How long the token opens its URL, in seconds. Default: the config's
    /// auth.job_token_ttl_secs.
    #[arg(long, global = true, value_name = "SECS")]
    ttl: Option<u64>,
}

#[derive(Subcommand)]
enum TokenKind {
    /// The token of a correlation stream: GET /correlations/CID/events?token=TOKEN.
    Correlation {
        /// The correlation ID, as sent in the correlation header.
        cid: String,
    },
    /// The read token of a job (GET /jobs/ID and /jobs/ID/events), or with --cancel its
    /// cancel token (POST /jobs/ID/cancel), with --input its input token (POST /jobs/ID/input).
    Job {
        /// The job ID (32 hex digits).
        id: String,
        /// Print the job's cancel token (POST /jobs/ID/cancel) instead of its read token.
        #[arg(long, conflicts_with = "input")]
        cancel: bool,
        /// Print the job's input token (POST /jobs/ID/input) instead of its read token.
        #[arg(long)]
        input: bool,
    },
}

/// Logs to stderr, and with `traces`, the bridge's spans to the OTLP exporter as well.
fn init_logging(json: bool, client: bool, traces: Option<&Traces>) {
    // The client commands report their own errors; the MCP SDK's would repeat them. The bridge
    // keeps rmcp at warn: at info it dumps each peer's whole `initialize` info at every start.
    let default = if client {
        "warn,rmcp=off"
    } else {
        "info,rmcp=warn"
    };
    let level = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Whatever RUST_LOG says, the bridge may not log MCP messages: they hold job tokens.
    let filter = level.and(access_log::secret_caps());
    // Logs go to stderr: for `demo-tools`, stdout is the MCP protocol stream.
    // Colour only for a person at a terminal: a demo child's stderr is read by the bridge.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Each line at most `access_log::MAX_LOG_LINE_BYTES`: what a line quotes may be a client's.
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(access_log::CappedLines { json })
        .with_ansi(ansi);
    let registry = tracing_subscriber::registry();
    if json {
        registry
            .with(
                layer
                    .json()
                    .event_format(WithTraceIds(tracing_subscriber::fmt::format().json()))
                    .with_filter(filter),
            )
            .with(traces.map(Traces::layer))
            .init();
    } else {
        registry
            .with(layer.with_filter(filter))
            .with(traces.map(Traces::layer))
            .init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let Cli {
        serve: outer,
        log_json,
        command,
    } = Cli::parse();
    let client = matches!(command, Some(Command::Watch(_) | Command::Call(_)));
    // Only the bridge itself exports traces (a demo-tools child inherits the variables).
    let traces = match command {
        None | Some(Command::Serve(_)) => match Traces::from_env() {
            Ok(traces) => traces,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        _ => None,
    };
    init_logging(log_json, client, traces.as_ref());
    match command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve(args.or(outer), traces).await,
        Command::Token(token) => {
            refuse_serve_options(&outer, "token", false);
            let config = token.config.clone().or(outer.config);
            print_token(config, &token)
        }
        Command::CheckConfig(args) => check_config(&args.or(outer)),
        Command::ConfigSchema => {
            refuse_serve_options(&outer, "config-schema", true);
            let schema = Config::file_schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Command::DemoTools { asking } => {
            refuse_serve_options(&outer, "demo-tools", true);
            match demo_tools::serve_stdio(asking).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&anyhow::Error::from(e)),
            }
        }
        Command::Watch(args) => {
            refuse_serve_options(&outer, "watch", true);
            cli::watch::run(args).await
        }
        Command::Call(args) => {
            refuse_serve_options(&outer, "call", true);
            cli::call::run(args).await
        }
    }
}

impl ServeArgs {
    /// These options, completed by the ones given before the subcommand
    /// (`mcp-progress-bridge --config X serve`).
    fn or(self, outer: ServeArgs) -> ServeArgs {
        ServeArgs {
            config: self.config.or(outer.config),
            listen: self.listen.or(outer.listen),
        }
    }
}

/// `--listen`, and `--config` where the command reads no config, written before a subcommand
/// that would ignore them: a usage error (exit 2) instead of silence. `token` takes `--config`
/// in either place, as it always has.
fn refuse_serve_options(given: &ServeArgs, command: &str, config_too: bool) {
    let option = match (given.listen.is_some(), config_too && given.config.is_some()) {
        (true, _) => "--listen",
        (false, true) => "--config",
        (false, false) => return,
    };
    Cli::command()
        .error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "{option} is an option of running the bridge (mcp-progress-bridge [serve]); \
                 `{command}` does not use it"
            ),
        )
        .exit()
}

/// Print a failure and its causes, each once.
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", error_chain(error));
    ExitCode::FAILURE
}

/// `error: cause: cause…`, without a cause whose text the message already holds: an error
/// such as `StartError::Bind` quotes its source in its own words (so that what to do comes
/// after it), and anyhow's `{:#}` would print the source a second time.
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

async fn serve(args: ServeArgs, traces: Option<Traces>) -> ExitCode {
    raise_open_file_limit();
    let config = match usable_config(&args) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match run(config, &args, traces).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// `token correlation CID` / `token job ID [--cancel]`: what an application backend (or an
/// operator) needs to open a stream the bridge did not hand it a URL for.
fn print_token(config: Option<PathBuf>, args: &TokenArgs) -> ExitCode {
    let serve = ServeArgs {
        config,
        listen: None,
    };
    let config = match usable_config(&serve) {
        Ok(config) => config,
        Err(code) => return code,
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
    let mut auth = config.auth.clone();
    if let Some(ttl) = args.ttl {
        if ttl == 0 {
            eprintln!("error: --ttl 0 would make a token that opens nothing; give seconds >= 1");
            return ExitCode::FAILURE;
        }
        auth.job_token_ttl_secs = ttl;
    }
    let tokens = JobTokens::from_config(&auth);
    match token_line(&tokens, &config.server.public_url, &args.kind, args.url) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The token (or with `url`, the whole URL under `base`) that `kind` asks for.
fn token_line(
    tokens: &JobTokens,
    base: &str,
    kind: &TokenKind,
    url: bool,
) -> Result<String, String> {
    let (token, path) = match kind {
        TokenKind::Correlation { cid } => {
            let cid = cid.parse::<CorrelationId>().map_err(|_| {
                format!(
                    "{cid:?} is not a correlation ID: use 1 to {} letters, digits and . _ : -",
                    CorrelationId::MAX_LEN
                )
            })?;
            (
                tokens.correlation(&cid),
                format!("/correlations/{cid}/events"),
            )
        }
        TokenKind::Job { id, cancel, input } => {
            let id = id.parse::<JobId>().map_err(|_| {
                format!("{id:?} is not a job ID: use the 32 lowercase hex digits of a job handle")
            })?;
            if *cancel {
                (tokens.cancel(id), format!("/jobs/{id}/cancel"))
            } else if *input {
                (tokens.input(id), format!("/jobs/{id}/input"))
            } else {
                (tokens.job(id), format!("/jobs/{id}/events"))
            }
        }
    };
    Ok(if url {
        format!("{base}{path}?token={token}")
    } else {
        token
    })
}

/// `check-config`: every problem, each on its line; exit 2 if there is one.
fn check_config(args: &ServeArgs) -> ExitCode {
    let problems = match Overrides::from_env() {
        Err(e) => vec![e],
        Ok(mut overrides) => {
            overrides.listen = args.listen.or(overrides.listen);
            match Config::check(args.config.as_deref(), &overrides) {
                Ok(config) => {
                    for line in &config.deprecations {
                        println!("warning: {line}");
                    }
                    println!("{}: the config is valid", config.source.display());
                    return ExitCode::SUCCESS;
                }
                Err(problems) => problems,
            }
        }
    };
    for problem in &problems {
        eprintln!("{problem}");
    }
    eprintln!("{} problem(s)", problems.len());
    ExitCode::from(EXIT_CONFIG)
}

/// The config, or its problem printed and the exit code of an unusable config.
fn usable_config(args: &ServeArgs) -> Result<Config, ExitCode> {
    load_config(args).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn load_config(args: &ServeArgs) -> Result<Config, mcp_progress_bridge::config::ConfigError> {
    let mut overrides = Overrides::from_env()?;
    if args.listen.is_some() {
        overrides.listen = args.listen;
    }
    Config::load(args.config.as_deref(), &overrides)
}

async fn run(config: Config, args: &ServeArgs, traces: Option<Traces>) -> anyhow::Result<()> {
    tracing::info!(config = %config.source.display(), "starting");
    for line in &config.deprecations {
        tracing::warn!("{line}");
    }
    // Registered before the bridge starts: a signal from then on starts its drain.
    let mut signals = Signals::new().context("listening for shutdown signals")?;
    let mut hangups = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    let drain = Duration::from_secs(config.jobs.drain_secs);
    let mut running = config.clone();
    let bridge = app::start(config).await?;
    let public_url = bridge.public_url.clone();
    if let Some(traces) = traces {
        tracing::info!("exporting traces over OTLP/HTTP (OTEL_EXPORTER_OTLP_* variables)");
        bridge.export_traces(traces);
    }
    if let Some(warning) = public_url_mismatch(&public_url, bridge.addr) {
        tracing::warn!("{warning}");
    }
    // The first line is what scripts wait for (the benchmark harness reads the address in it).
    println!("mcp-progress-bridge listening on http://{}", bridge.addr);
    println!("  jobs page:    {public_url}/");
    println!("  MCP endpoint: {public_url}/mcp");
    if let Some(admin) = bridge.admin_addr {
        println!("  admin:        http://{admin} (/upstreams, /metrics)");
    }
    // SIGHUP re-reads the config (what it applies: RunningBridge::reload); one during the
    // drain is ignored.
    let first = loop {
        tokio::select! {
            first = signals.next() => break first,
            Some(()) = hangups.recv() => {
                tracing::info!(config = %running.source.display(), "SIGHUP: reloading the config");
                running = bridge.reload(running, load_config(args));
            }
        }
    };
    tracing::info!(signal = first, "shutdown requested: draining");
    // A second signal during the drain cuts it short: the jobs left are cancelled now.
    let second = async move {
        let second = signals.next().await;
        tracing::warn!(
            signal = second,
            "second shutdown signal: the drain is cut short, running jobs are cancelled now"
        );
    };
    bridge.shutdown_unless(drain, second).await;
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

/// SIGINT (Ctrl-C) and SIGTERM (container stop), each time one comes: the first starts the
/// drain, the second cuts it short.
struct Signals {
    term: Signal,
    interrupt: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal's name. A stream that can no longer receive waits forever.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            Some(()) = self.term.recv() => "SIGTERM",
            Some(()) = self.interrupt.recv() => "SIGINT",
            else => std::future::pending().await,
        }
    }
}
