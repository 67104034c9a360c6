//! The benchmark harness: `cargo run --release --bin bench` (add `-- --quick` for the CI
//! smoke run, `-- --markdown BENCHMARKS.md` to rewrite that file).
//!
//! It starts everything on loopback — the demo tool server (over Streamable HTTP in this
//! process or as a process of its own, or as a stdio child), the bridge (the built binary, as
//! its own process, so its memory is its own), the peer gateways — runs each scenario, stops
//! everything and prints one table. Latencies are timed with the send time `bench_progress`
//! writes into each progress message (Unix µs, one machine, one clock). A scenario that errors
//! or loses an event fails the run; speed is judged only in the table, never by the exit code.

mod attack;
mod crowd;
mod fanout;
mod floor;
mod idle_gaps;
mod ingest;
mod latency;
mod many_jobs;
mod mcp;
mod nginx;
mod passthrough;
mod peers;
mod proc;
/// The bridge as a child process, the one way the tests run it too. (Shared source: the items
/// only the tests use are unused here.)
#[allow(dead_code)]
#[path = "../../../tests/it/common/process.rs"]
mod process;
mod redis;
mod report;
mod resume;
mod rollout;
mod sessions;
mod soak;
mod sse;
mod stalled;
mod stats;
mod task_server;
mod upstream;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use axum::serve::ListenerExt;
use clap::Parser;
use report::Row;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Clone)]
#[command(
    name = "bench",
    about = "Benchmarks of mcp-progress-bridge against the direct floor and peer gateways"
)]
pub struct Args {
    /// Small counts, a few seconds a scenario: proves every scenario still runs and loses
    /// nothing (CI). Judges no speed.
    #[arg(long)]
    quick: bool,
    /// Rewrite this Markdown file (BENCHMARKS.md) with the table, the machine and the method;
    /// text outside its generated section is kept.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Run only these scenarios (comma-separated): passthrough, latency, redis, ingest,
    /// many-jobs, fanout, soak, stalled, sessions, rollout, attack, idle-gaps.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The bridge binary (default: `mcp-progress-bridge` next to this one, built if needed).
    #[arg(long, value_name = "PATH")]
    bridge_bin: Option<PathBuf>,
    /// Where the peer gateways are installed (created if missing; gitignored).
    #[arg(long, value_name = "DIR", default_value = "bench-peers")]
    peers_dir: PathBuf,
    /// Leave the peer gateways out of the pass-through scenario.
    #[arg(long)]
    no_peers: bool,
    /// How long the soak scenario runs, in seconds (default: 30 in quick mode, 180 otherwise).
    #[arg(long, value_name = "N")]
    soak_secs: Option<u64>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(clap::Subcommand, Clone)]
enum Sub {
    /// The fan-out scenario's floor: a bare tokio SSE server fed by `bench_progress` on the
    /// upstream URL (the scenario starts it as its own process).
    #[command(hide = true)]
    FloorSse {
        #[arg(long)]
        upstream: String,
    },
    /// The demo tool server over Streamable HTTP, as its own process (the fan-out and
    /// many-jobs scenarios start it: see `upstream.rs`).
    #[command(hide = true)]
    DemoHttp,
}

/// What every scenario gets.
pub struct Ctx {
    pub quick: bool,
    /// The bridge binary; `BIN demo-tools` is the stdio demo tool server.
    pub bin: PathBuf,
    /// Scratch folder for configs and logs.
    pub dir: PathBuf,
    pub peers_dir: PathBuf,
    pub no_peers: bool,
    /// How long the soak scenario runs.
    pub soak_secs: u64,
}

impl Ctx {
    /// Pick the quick or the full figure.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// The demo tool server served over Streamable HTTP in this process: the upstream of the
/// latency, Redis and pass-through scenarios, where the direct client it is compared with runs
/// here too. (The fan-out and many-jobs scenarios run it as its own process:
/// [`upstream::DemoProcess`].)
pub struct Demo {
    pub url: String,
    ct: CancellationToken,
}

impl Demo {
    pub async fn start() -> Result<Self, String> {
        // A long accept queue, as the bridge has: the many-jobs scenario opens connections to
        // this server by the hundred at once.
        let bind = || {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(([127, 0, 0, 1], 0).into())?;
            socket.listen(4096)
        };
        let listener: tokio::net::TcpListener =
            bind().map_err(|e: std::io::Error| format!("bind the demo upstream: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // As the bridge does: small SSE writes leave at once (no Nagle delay).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let ct = CancellationToken::new();
        let router = demo_tools::http_router(ct.clone());
        let stop = ct.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        Ok(Self {
            url: format!("http://{addr}/mcp"),
            ct,
        })
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

/// Bridge config (all but `[server]`) with one Streamable HTTP upstream `up` at `url`.
pub fn http_upstream_config(url: &str, mode: &str) -> String {
    format!(
        "[jobs]\nmode = \"{mode}\"\n\n[[upstreams]]\nname = \"up\"\ntransport = \"http\"\nurl = \"{url}\"\n"
    )
}

/// Bridge config with the demo tools as stdio upstream `demo`.
pub fn stdio_upstream_config(bin: &Path, mode: &str) -> String {
    format!(
        "[jobs]\nmode = \"{mode}\"\n\n[[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [\"demo-tools\"]\n",
        bin.display().to_string()
    )
}

const SCENARIOS: [&str; 12] = [
    "passthrough",
    "latency",
    "redis",
    "ingest",
    "many-jobs",
    "fanout",
    "soak",
    "sessions",
    "stalled",
    "rollout",
    "attack",
    "idle-gaps",
];

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match &args.command {
        Some(Sub::FloorSse { upstream }) => return floor::main(upstream).await,
        Some(Sub::DemoHttp) => return upstream::main().await,
        None => {}
    }
    if let Some(name) = args.only.iter().find(|n| !SCENARIOS.contains(&n.as_str())) {
        eprintln!(
            "unknown scenario {name:?}; the scenarios are {}",
            SCENARIOS.join(", ")
        );
        return ExitCode::from(2);
    }
    let ctx = match prepare(&args) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let machine = Machine::read();
    eprintln!(
        "bench: {} mode, bridge {}, {} cores, {} MiB, open-file limit {}, scratch {}",
        if ctx.quick { "quick" } else { "full" },
        ctx.bin.display(),
        machine.cores,
        machine.mem_mib,
        proc::raise_fd_limit(),
        ctx.dir.display()
    );
    let load_before = load_average();
    let started = std::time::Instant::now();
    let (rows, mut failures) = run_plan(&ctx, plan(&ctx, &args)).await;
    let run = RunConditions {
        machine,
        quick: ctx.quick,
        elapsed: started.elapsed(),
        load_before,
        load_after: load_average(),
    };
    println!("\n{}", report::text(&rows, !ctx.quick));
    println!(
        "{} run on {} cores / {} MiB in {:.0} s; load average {} before, {} after",
        if ctx.quick { "quick" } else { "full" },
        run.machine.cores,
        run.machine.mem_mib,
        run.elapsed.as_secs_f64(),
        run.load_before,
        run.load_after
    );
    if let Some(path) = &args.markdown {
        match write_markdown(path, &rows, &run) {
            Ok(()) => eprintln!("bench: wrote {}", path.display()),
            Err(e) => failures.push(format!("writing {}: {e}", path.display())),
        }
    }
    conclude(&ctx.dir, &failures)
}

/// The bridge binary and a scratch folder for this run.
fn prepare(args: &Args) -> Result<Ctx, String> {
    let bin = bridge_binary(args)?;
    let dir = std::env::temp_dir().join(format!("mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(Ctx {
        quick: args.quick,
        bin,
        dir,
        peers_dir: args.peers_dir.clone(),
        no_peers: args.no_peers,
        soak_secs: args.soak_secs.unwrap_or(if args.quick { 30 } else { 180 }),
    })
}

/// What to run, in order: (label, scenario, size).
fn plan(ctx: &Ctx, args: &Args) -> Vec<(String, &'static str, Option<usize>)> {
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    // `BENCH_FANOUT_READERS=N`: one fan-out size only.
    let fanout_sizes = match std::env::var("BENCH_FANOUT_READERS").map(|n| n.parse::<usize>()) {
        Ok(Ok(n)) => vec![n],
        _ => ctx.pick(vec![50, 200], vec![1_000, 10_000]),
    };
    let mut plan = Vec::new();
    for name in SCENARIOS.into_iter().filter(|n| wanted(n)) {
        if name == "fanout" {
            for n in &fanout_sizes {
                plan.push((format!("fanout {n}"), name, Some(*n)));
            }
        } else {
            plan.push((name.to_string(), name, None));
        }
    }
    plan
}

/// Run the scenarios one after another. Returns every row, and the failures.
async fn run_plan(
    ctx: &Ctx,
    plan: Vec<(String, &'static str, Option<usize>)>,
) -> (Vec<Row>, Vec<String>) {
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (label, name, size) in plan {
        eprintln!("bench: {label} …");
        let t = std::time::Instant::now();
        let result = match name {
            "passthrough" => passthrough::run(ctx).await,
            "latency" => latency::run(ctx).await,
            "redis" => redis::run(ctx).await,
            "ingest" => ingest::run(ctx).await,
            "many-jobs" => many_jobs::run(ctx).await,
            "fanout" => fanout::run(ctx, size.unwrap_or(1_000)).await,
            "soak" => soak::run(ctx).await,
            "sessions" => sessions::run(ctx).await,
            "stalled" => stalled::run(ctx).await,
            "rollout" => rollout::run(ctx).await,
            "attack" => attack::run(ctx).await,
            "idle-gaps" => idle_gaps::run(ctx).await,
            _ => unreachable!("checked in main"),
        };
        match result {
            Ok(mut r) => {
                eprint!("{}", report::text(&r, !ctx.quick));
                rows.append(&mut r);
            }
            Err(e) => {
                eprintln!("bench: {label} FAILED: {e}");
                rows.push(Row::new(&label, "FAILED", e.clone()));
                failures.push(format!("{label}: {e}"));
            }
        }
        eprintln!("bench: {label} took {:.1} s", t.elapsed().as_secs_f64());
    }
    (rows, failures)
}

/// The exit code; the scratch folder is removed when all went well (unless `BENCH_KEEP_SCRATCH`
/// is set: the replicas' logs of a run that passed), kept for the logs if not.
fn conclude(dir: &Path, failures: &[String]) -> ExitCode {
    if failures.is_empty() && std::env::var_os("BENCH_KEEP_SCRATCH").is_some() {
        eprintln!("bench: configs and logs kept in {}", dir.display());
        return ExitCode::SUCCESS;
    }
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(dir);
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "\nbench: {} scenario(s) failed (configs and logs kept in {}):",
        failures.len(),
        dir.display()
    );
    for f in failures {
        eprintln!("  {f}");
    }
    ExitCode::FAILURE
}

/// The bridge binary next to this one. Under `cargo run` (which builds only the `bench`
/// target) it is built first, with the same profile and target folder.
fn bridge_binary(args: &Args) -> Result<PathBuf, String> {
    if let Some(bin) = &args.bridge_bin {
        return Ok(bin.clone());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe.parent().ok_or("no folder for this executable")?;
    let bin = profile_dir.join("mcp-progress-bridge");
    if let Ok(cargo) = std::env::var("CARGO")
        && let Some(target_dir) = profile_dir.parent()
    {
        let profile = if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        };
        eprintln!("bench: building mcp-progress-bridge ({profile}) …");
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--package",
                "mcp-progress-bridge",
                "--bin",
                "mcp-progress-bridge",
                "--profile",
                profile,
            ])
            .arg("--target-dir")
            .arg(target_dir)
            .status()
            .map_err(|e| format!("cargo build: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo build of mcp-progress-bridge failed ({status})"
            ));
        }
    }
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: build it (cargo build --release --bins) or pass --bridge-bin",
            bin.display()
        ))
    }
}

struct Machine {
    cores: usize,
    mem_mib: u64,
    cpu: String,
    kernel: String,
}

impl Machine {
    fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or_else(|| "unknown CPU".into(), |s| s.trim().to_string());
        let mem_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .map_or(0, |kib| kib / 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_mib,
            cpu,
            kernel,
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

struct RunConditions {
    machine: Machine,
    quick: bool,
    elapsed: Duration,
    load_before: String,
    load_after: String,
}

const BEGIN: &str = "<!-- bench:begin (generated by `cargo run --release --bin bench -- --markdown BENCHMARKS.md`; edits inside are overwritten) -->";
const END: &str = "<!-- bench:end -->";

/// Replace the generated section of the file (or create the file), keeping the rest.
fn write_markdown(path: &Path, rows: &[Row], run: &RunConditions) -> std::io::Result<()> {
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(String::new, |s| s.trim().to_string());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(String::new, |s| s.trim().to_string());
    let m = &run.machine;
    let generated = format!(
        "{BEGIN}\n\
         Run of {date}, commit `{commit}`, {} mode, {:.0} s.\n\
         Machine: {} cores ({}), {} MiB memory, Linux {}. Load average (1, 5, 15 min) {} before the run, {} after: \
         the machine is shared, so absolute figures move between runs; ratios measured side by side in one run move less.\n\n\
         {}\n{END}",
        if run.quick { "quick" } else { "full" },
        run.elapsed.as_secs_f64(),
        m.cores,
        m.cpu,
        m.mem_mib,
        m.kernel,
        run.load_before,
        run.load_after,
        report::markdown(rows, !run.quick),
    );
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{generated}{}", &old[..b], &old[e + END.len()..])
        }
        _ => format!("# Benchmarks\n\n{generated}\n"),
    };
    std::fs::write(path, new)
}
