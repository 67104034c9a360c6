//! Fan-out: one job, N concurrent SSE readers, progress at 10/s. Every reader must get every
//! event. The same readers then read the floor (`floor.rs`: a bare tokio SSE server, its own
//! process, fed the same events by the same upstream), so every figure has the floor beside
//! it, measured the same way in the same run: the delivery latency over all (reader, event)
//! pairs, apart for the events before the last one; the server's CPU per delivery (its
//! process's CPU time over the delivery window, from `/proc/<pid>/stat`) and the readers' own
//! (this process's); resident memory per idle reader.

use std::time::Duration;

use serde_json::json;
use tokio::process::Command;

use crate::{
    Ctx,
    crowd::{Crowd, Delivered},
    mcp::{self, BenchClient},
    proc::{self, BridgeProcess},
    report::Row,
    stats::{ms, now_us, ratio, ratio_f},
    upstream::DemoProcess,
};

/// Progress at 10 per second.
const INTERVAL_US: u64 = 100_000;
/// Time for the server's memory to settle once every reader is in.
const SETTLE: Duration = Duration::from_millis(500);
const FLOOR: &str = "floor";

/// The job the readers follow: where its events are, and when its first one is due.
struct Job {
    events: u64,
    events_path: String,
    delay_ms: u64,
    first_due_us: u64,
}

/// What one server's run gave.
struct Measured {
    delivered: Delivered,
    connect_secs: f64,
    rss_before: u64,
    rss_idle: u64,
    idle_clean: bool,
    server_cpu_us: u64,
    readers_cpu_us: u64,
}

impl Measured {
    fn per_idle_reader_kib(&self, readers: usize) -> f64 {
        self.rss_idle.saturating_sub(self.rss_before) as f64 / readers as f64
    }

    fn per_delivery_us(&self, cpu_us: u64) -> f64 {
        cpu_us as f64 / self.delivered.deliveries.max(1) as f64
    }

    fn connect(&self, readers: usize) -> String {
        format!(
            "{readers} in {:.1} s; RSS {} → {} KiB{}",
            self.connect_secs,
            self.rss_before,
            self.rss_idle,
            if self.idle_clean {
                ""
            } else {
                " (events had started)"
            }
        )
    }
}

/// The bridge, then the floor, each read by the same readers, both fed by one upstream in a
/// process of its own (see `upstream.rs`). A failure names the server it happened on, with the
/// end of that server's log and the upstream's state: a job that failed because its upstream
/// stopped answering says so. `BENCH_SSE_WRITERS=2,0` runs the bridge once per value of
/// `server.sse_writers`, in that order, each against the same floor (its rows say which).
pub async fn run(ctx: &Ctx, readers: usize) -> Result<Vec<Row>, String> {
    let settings = writer_settings();
    let mut demo = DemoProcess::start(ctx, &format!("fanout-{readers}")).await?;
    let measured = all(ctx, &demo, readers, &settings).await;
    let measured = measured.map_err(|e| format!("{e}; the upstream: {}", demo.state()));
    demo.stop().await;
    let (on_bridge, on_floor) = measured?;
    let mut all_rows = Vec::new();
    for (writers, measured) in settings.iter().zip(&on_bridge) {
        let scenario = match writers {
            Some(n) if settings.len() > 1 => {
                format!("fan-out, {readers} readers, sse_writers = {n}")
            }
            _ => format!("fan-out, {readers} readers"),
        };
        all_rows.extend(rows(&scenario, readers, measured, &on_floor)?);
    }
    Ok(all_rows)
}

/// The values of `server.sse_writers` to run the bridge with (`BENCH_SSE_WRITERS`, one value
/// or a comma-separated list); `None`: the bridge's default.
fn writer_settings() -> Vec<Option<usize>> {
    let listed: Vec<Option<usize>> = std::env::var("BENCH_SSE_WRITERS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .map(Some)
        .collect();
    if listed.is_empty() {
        vec![None]
    } else {
        listed
    }
}

async fn all(
    ctx: &Ctx,
    demo: &DemoProcess,
    readers: usize,
    settings: &[Option<usize>],
) -> Result<(Vec<Measured>, Measured), String> {
    let mut on_bridge = Vec::new();
    for writers in settings {
        on_bridge.push(bridge(ctx, demo, readers, *writers).await?);
    }
    let floor = start_floor(ctx, demo, readers).await?;
    let on_floor = measure(ctx, &floor, None, readers).await;
    let on_floor = on_floor.map_err(|e| format!("{FLOOR}: {e}; its log: {}", floor.log_tail()));
    floor.stop().await;
    Ok((on_bridge, on_floor?))
}

/// The bridge (with `server.sse_writers` at `writers`, or its default), read by the readers.
async fn bridge(
    ctx: &Ctx,
    demo: &DemoProcess,
    readers: usize,
    writers: Option<usize>,
) -> Result<Measured, String> {
    let bridge = proc::start_bridge_with_writers(
        &ctx.bin,
        &ctx.dir,
        &format!("fanout-{readers}"),
        &crate::http_upstream_config(&demo.url, "async"),
        writers,
    )
    .await
    .map_err(|e| e.to_string())?;
    let on_bridge = match mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await {
        Ok(front) => {
            let measured = measure(ctx, &bridge, Some(&front), readers).await;
            let _ = front.cancel().await;
            measured
        }
        Err(e) => Err(e),
    };
    let on_bridge = on_bridge.map_err(|e| format!("bridge: {e}; its log: {}", bridge.log_tail()));
    bridge.stop().await;
    on_bridge
}

/// The floor as its own process: this binary's `floor-sse` subcommand.
async fn start_floor(
    ctx: &Ctx,
    demo: &DemoProcess,
    readers: usize,
) -> Result<BridgeProcess, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    command.args(["floor-sse", "--upstream", &demo.url]);
    BridgeProcess::spawn(command, Some(&ctx.dir), &format!("floor-{readers}"))
        .await
        .map_err(|e| format!("{FLOOR}: {e}"))
}

/// One server, N readers: the job is started through `front` (the bridge's `/mcp`) or, with
/// none, through the floor's `/start`.
async fn measure(
    ctx: &Ctx,
    server: &BridgeProcess,
    front: Option<&mcp::Client>,
    readers: usize,
) -> Result<Measured, String> {
    let job = match front {
        Some(front) => start_job(ctx, front, readers).await?,
        None => start_floor_job(ctx, server, readers).await?,
    };
    // Let the server settle after the call before the baseline is read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = server.rss_kib();
    let connect_started = std::time::Instant::now();
    let mut crowd = Crowd::spawn(
        server.addr,
        std::slice::from_ref(&job.events_path),
        readers,
        job.events,
    );
    crowd.wait_connected().await?;
    let connect_secs = connect_started.elapsed().as_secs_f64();
    crowd.mark_all_in();
    tokio::time::sleep(SETTLE).await;
    let rss_idle = server.rss_kib();
    let idle_clean = now_us() < job.first_due_us;
    let server_before = server.cpu_us();
    let readers_before = proc::cpu_us(std::process::id());
    let within = Duration::from_micros(job.events * INTERVAL_US)
        + Duration::from_millis(job.delay_ms)
        + Duration::from_secs(120);
    let delivered = crowd.finish(within).await?;
    Ok(Measured {
        delivered,
        connect_secs,
        rss_before,
        rss_idle,
        idle_clean,
        // CPU spent delivering (the upstream's few calls are noise next to it).
        server_cpu_us: server.cpu_us().saturating_sub(server_before),
        readers_cpu_us: proc::cpu_us(std::process::id()).saturating_sub(readers_before),
    })
}

/// Events per job, and how long the first one waits: until every reader is in (assumed: at
/// least 1,000 connects/s), so the idle memory is read with no event in flight. (The floor
/// keeps no history: a reader that came in after the first event would miss it.)
fn schedule(ctx: &Ctx, readers: usize) -> (u64, u64) {
    (ctx.pick(10, 50), 2_000 + readers as u64)
}

/// Start the `bench_progress` job on the bridge.
async fn start_job(ctx: &Ctx, front: &mcp::Client, readers: usize) -> Result<Job, String> {
    let (events, delay_ms) = schedule(ctx, readers);
    let handle = mcp::call(
        front,
        "up__bench_progress",
        json!({ "count": events, "interval_us": INTERVAL_US, "delay_ms": delay_ms }),
    )
    .await?;
    let first_due_us = now_us() + delay_ms * 1000;
    mcp::job_id(&handle)?;
    Ok(Job {
        events,
        events_path: mcp::events_path(&handle)?,
        delay_ms,
        first_due_us,
    })
}

/// Start the same job on the floor.
async fn start_floor_job(ctx: &Ctx, floor: &BridgeProcess, readers: usize) -> Result<Job, String> {
    let (events, delay_ms) = schedule(ctx, readers);
    let url = format!(
        "{}/start?count={events}&interval_us={INTERVAL_US}&delay_ms={delay_ms}",
        floor.base()
    );
    let answer = floor.http().get(&url).send().await;
    let first_due_us = now_us() + delay_ms * 1000;
    match answer {
        Ok(r) if r.status().is_success() => Ok(Job {
            events,
            events_path: "/events".into(),
            delay_ms,
            first_due_us,
        }),
        Ok(r) => Err(format!("GET /start: {}", r.status())),
        Err(e) => Err(format!("GET /start: {e}")),
    }
}

/// The rows of one size: every figure of the bridge against the floor's.
fn rows(scenario: &str, readers: usize, b: &Measured, f: &Measured) -> Result<Vec<Row>, String> {
    let row = |metric: &str, bridge: String, floor: String, ratio: String| {
        Row::new(scenario, metric, bridge).vs(FLOOR, floor, ratio)
    };
    let (Some(bb), Some(fb), Some(ba), Some(fa)) = (
        b.delivered.before_last.summary(),
        f.delivered.before_last.summary(),
        b.delivered.all.summary(),
        f.delivered.all.summary(),
    ) else {
        return Err("no event was sent after every reader had subscribed: raise the delay".into());
    };
    let p99_ratio = bb.p99 as f64 / fb.p99.max(1) as f64;
    let p99 = row(
        "delivery p99, before the last event",
        ms(bb.p99),
        ms(fb.p99),
        ratio(bb.p99, fb.p99),
    );
    let p99 = if readers >= 10_000 {
        p99.target("≤ 1.15× floor", p99_ratio <= 1.15)
    } else {
        p99.target("≤ 12.000 ms", bb.p99 <= 12_000)
    };
    let mut rows = vec![
        row(
            "delivery p50, before the last event",
            ms(bb.p50),
            ms(fb.p50),
            ratio(bb.p50, fb.p50),
        ),
        p99,
        row(
            "delivery p99, all events",
            ms(ba.p99),
            ms(fa.p99),
            ratio(ba.p99, fa.p99),
        ),
        row(
            "delivery max, all events",
            ms(ba.max),
            ms(fa.max),
            ratio(ba.max, fa.max),
        ),
    ];
    rows.extend(cost_rows(scenario, readers, b, f));
    Ok(rows)
}

/// CPU and memory rows, and what was checked.
fn cost_rows(scenario: &str, readers: usize, b: &Measured, f: &Measured) -> Vec<Row> {
    let row = |metric: &str, bridge: String, floor: String, ratio: String| {
        Row::new(scenario, metric, bridge).vs(FLOOR, floor, ratio)
    };
    let us = |v: f64| format!("{v:.1} µs");
    let (b_cpu, f_cpu) = (
        b.per_delivery_us(b.server_cpu_us),
        f.per_delivery_us(f.server_cpu_us),
    );
    let (b_readers, f_readers) = (
        b.per_delivery_us(b.readers_cpu_us),
        f.per_delivery_us(f.readers_cpu_us),
    );
    let (b_rss, f_rss) = (
        b.per_idle_reader_kib(readers),
        f.per_idle_reader_kib(readers),
    );
    let checked = |m: &Measured| {
        format!(
            "{} of {} delivered, {} timed",
            m.delivered.deliveries,
            m.delivered.deliveries,
            m.delivered.all.count()
        )
    };
    vec![
        row(
            "server CPU per delivery",
            us(b_cpu),
            us(f_cpu),
            ratio_f(b_cpu, f_cpu),
        )
        .target("≤ 1.25× floor", b_cpu <= 1.25 * f_cpu),
        row(
            "readers' CPU per delivery",
            us(b_readers),
            us(f_readers),
            ratio_f(b_readers, f_readers),
        ),
        row(
            "server RSS per idle reader",
            format!("{b_rss:.1} KiB"),
            format!("{f_rss:.1} KiB"),
            ratio_f(b_rss, f_rss),
        )
        .target("≤ 8 KiB", b_rss <= 8.0),
        row("events × readers", checked(b), checked(f), String::new()),
        row(
            "connect",
            b.connect(readers),
            f.connect(readers),
            String::new(),
        ),
    ]
}
