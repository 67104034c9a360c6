//! Many jobs: N concurrent jobs through one Streamable HTTP upstream, each reporting
//! progress. Figures: the bridge's resident memory per live job, how fast jobs are created
//! (calls answered with a handle) and how fast they complete. With the stdio upstream, SSE
//! readers are attached too (the realistic case: a watcher or two per job, not 10,000 on one):
//! one on every job, then a second on every other job (two on each would be 20,000 sockets on
//! each side, the open-file hard limit of the machine the figures come from); the memory
//! each round adds is reported per reader, and every reader must get every event.

use std::{sync::Arc, time::Duration};

use serde_json::json;
use tokio::sync::Semaphore;

use crate::{
    Ctx,
    crowd::Crowd,
    mcp::{self, BenchClient},
    proc::{self, BridgeProcess},
    report::Row,
    upstream::DemoProcess,
};

/// Progress events per job.
const EVENTS: u64 = 5;
const INTERVAL_US: u64 = 200_000;
/// Calls in flight at once from the harness.
const IN_FLIGHT: usize = 128;
/// Time for the bridge's memory to settle after a round of readers is in.
const SETTLE: Duration = Duration::from_millis(500);

/// One form of the scenario: the tool, the upstream's name in the table, rounds of readers.
struct Variant {
    tool: &'static str,
    upstream: &'static str,
    /// Rounds of readers to attach: 0, or 2 (every job, then every other job).
    reader_rounds: usize,
}

const HTTP: Variant = Variant {
    tool: "up__bench_progress",
    upstream: "HTTP upstream",
    reader_rounds: 0,
};
const STDIO: Variant = Variant {
    tool: "demo__bench_progress",
    upstream: "stdio upstream",
    reader_rounds: 2,
};

/// The readers attached to the jobs, and the bridge's RSS after each round of them.
struct Attached {
    crowds: Vec<Crowd>,
    rss_after: Vec<u64>,
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    // The upstream in a process of its own (see `upstream.rs`): 10,000 calls in flight are
    // 10,000 connections to it, next to the harness's own work.
    let mut demo = DemoProcess::start(ctx, "many-jobs").await?;
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "many-jobs",
        &crate::http_upstream_config(&demo.url, "async"),
    )
    .await
    .map_err(|e| e.to_string());
    let result = match bridge {
        Ok(bridge) => {
            let result = measure(ctx, &bridge, &HTTP).await;
            let result = result.map_err(|e| format!("{e}; bridge log: {}", bridge.log_tail()));
            bridge.stop().await;
            result
        }
        Err(e) => Err(e),
    };
    let result = result.map_err(|e| format!("{e}; the upstream: {}", demo.state()));
    demo.stop().await;
    let mut rows = result?;
    // The same with the demo tools as a stdio child: no connection per call to the upstream,
    // so what is left is the job's own memory.
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "many-jobs-stdio",
        &crate::stdio_upstream_config(&ctx.bin, "async"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let result = measure(ctx, &bridge, &STDIO).await;
    let result = result.map_err(|e| format!("{e}; bridge log: {}", bridge.log_tail()));
    bridge.stop().await;
    rows.extend(result?);
    Ok(rows)
}

/// What the bridge's counters say once every job has ended.
struct Outcome {
    completed: f64,
    stored: f64,
    complete_secs: f64,
}

async fn measure(ctx: &Ctx, bridge: &BridgeProcess, v: &Variant) -> Result<Vec<Row>, String> {
    let jobs: usize = ctx.pick(200, 10_000);
    // Each job waits this long before its first event, so all of them are live at once when
    // the memory is read (assumed: at least 1,000 jobs created and 2,000 readers connected per
    // second).
    let hold_ms = 2_000 + jobs as u64 + (jobs * v.reader_rounds) as u64 / 2;
    let front = Arc::new(mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?);
    // One job first, so the upstream connection and the session are warm for the baseline.
    let warm = mcp::call(&front, v.tool, json!({ "count": 1 })).await?;
    mcp::job_id(&warm)?;
    wait_metric(bridge, "bridge_jobs_running", 0.0, Duration::from_secs(10)).await?;
    let rss_before = bridge.rss_kib();

    let started = std::time::Instant::now();
    let paths = create_jobs(&front, v.tool, jobs, hold_ms).await?;
    let create_secs = started.elapsed().as_secs_f64();
    let running = bridge.metric("bridge_jobs_running", None).await?;
    let rss_live = bridge.rss_kib();
    let attached = attach(bridge, &paths, v.reader_rounds).await;
    let fds_live = bridge.open_fds();
    let live_clean = started.elapsed() < Duration::from_millis(hold_ms);

    let outcome = wait_all_done(bridge, jobs, hold_ms).await;
    if let Ok(front) = Arc::try_unwrap(front) {
        let _ = front.cancel().await;
    }
    let (outcome, attached) = (outcome?, attached?);
    let scenario = format!("many jobs, {jobs} concurrent, {}", v.upstream);
    let per_job = rss_live.saturating_sub(rss_before) as f64 / running.max(1.0);
    let mut rows = vec![
        Row::new(
            &scenario,
            "bridge RSS per live job",
            format!("{per_job:.1} KiB"),
        ),
        Row::new(
            &scenario,
            "jobs created / s",
            format!("{:.0}", jobs as f64 / create_secs),
        ),
        Row::new(
            &scenario,
            "jobs completed / s",
            format!("{:.0}", jobs as f64 / outcome.complete_secs),
        ),
    ];
    let live = Live {
        rss_before,
        rss_live,
        jobs: running.max(1.0),
    };
    rows.extend(reader_rows(&scenario, &live, attached, hold_ms).await?);
    rows.push(Row::new(
        &scenario,
        "checked",
        format!(
            "{running:.0} live at once{}, {fds_live} open fds; {:.0} completed; {:.0} progress events stored, none dropped; RSS {rss_before} → {rss_live} KiB",
            if live_clean {
                ""
            } else {
                " (some had started reporting)"
            },
            outcome.completed,
            outcome.stored
        ),
    ));
    Ok(rows)
}

/// `rounds` rounds of readers: the first on every job, the next on every other job; the
/// bridge's RSS read after each round has settled.
async fn attach(
    bridge: &BridgeProcess,
    paths: &[String],
    rounds: usize,
) -> Result<Attached, String> {
    let mut attached = Attached {
        crowds: Vec::new(),
        rss_after: Vec::new(),
    };
    for round in 0..rounds {
        let these: Vec<String> = paths.iter().step_by(round + 1).cloned().collect();
        let mut crowd = Crowd::spawn(bridge.addr, &these, 1, EVENTS);
        crowd.wait_connected().await?;
        tokio::time::sleep(SETTLE).await;
        attached.rss_after.push(bridge.rss_kib());
        attached.crowds.push(crowd);
    }
    Ok(attached)
}

/// The bridge's memory before the jobs, with every job live, and how many were.
struct Live {
    rss_before: u64,
    rss_live: u64,
    jobs: f64,
}

/// Memory per reader for each round, per job with its readers (the realistic case: a watcher
/// or two on each job), and the check that every reader got every event.
async fn reader_rows(
    scenario: &str,
    live: &Live,
    attached: Attached,
    hold_ms: u64,
) -> Result<Vec<Row>, String> {
    let rss_live = live.rss_live;
    let mut rows = Vec::new();
    let mut before = rss_live;
    let mut readers = 0;
    let mut deliveries = 0;
    let within = Duration::from_millis(hold_ms) + Duration::from_secs(120);
    for (round, (crowd, rss)) in attached
        .crowds
        .into_iter()
        .zip(attached.rss_after)
        .enumerate()
    {
        let n = crowd.len();
        let per_reader = rss.saturating_sub(before) as f64 / n.max(1) as f64;
        let which = if round == 0 { "first" } else { "second" };
        rows.push(Row::new(
            scenario,
            &format!("bridge RSS per idle reader ({which} on a job)"),
            format!("{per_reader:.1} KiB"),
        ));
        before = rss;
        readers += n;
        deliveries += crowd.finish(within).await?.deliveries;
    }
    if readers > 0 {
        let each = before.saturating_sub(rss_live) as f64 / readers as f64;
        let per_job = before.saturating_sub(live.rss_before) as f64 / live.jobs;
        rows.push(Row::new(
            scenario,
            "bridge RSS per live job with its readers",
            format!(
                "{per_job:.1} KiB ({:.1} readers a job)",
                readers as f64 / live.jobs
            ),
        ));
        rows.push(Row::new(
            scenario,
            "bridge RSS per idle reader (all rounds)",
            format!("{each:.1} KiB"),
        ));
        rows.push(Row::new(
            scenario,
            "readers",
            format!(
                "{readers} attached (RSS {rss_live} → {before} KiB); all got every event ({deliveries} progress deliveries) and `completed`"
            ),
        ));
    }
    Ok(rows)
}

/// `jobs` calls of `tool`, `IN_FLIGHT` at a time, each holding its first event `hold_ms`.
async fn create_jobs(
    front: &Arc<mcp::Client>,
    tool: &'static str,
    jobs: usize,
    hold_ms: u64,
) -> Result<Vec<String>, String> {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let (front, gate) = (front.clone(), gate.clone());
        calls.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            let handle = mcp::call(
                &front,
                tool,
                json!({ "count": EVENTS, "interval_us": INTERVAL_US, "delay_ms": hold_ms }),
            )
            .await?;
            mcp::job_id(&handle)?;
            mcp::events_path(&handle)
        }));
    }
    let mut paths = Vec::with_capacity(jobs);
    for call in calls {
        paths.push(call.await.map_err(|e| e.to_string())??);
    }
    Ok(paths)
}

/// Poll the finished counter until every job has ended; then check that all completed and
/// every progress event was stored (the warm-up job counted out).
async fn wait_all_done(
    bridge: &BridgeProcess,
    jobs: usize,
    hold_ms: u64,
) -> Result<Outcome, String> {
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(hold_ms)
        + Duration::from_micros(EVENTS * INTERVAL_US)
        + Duration::from_secs(120);
    let mut first_done: Option<std::time::Instant> = None;
    let all_done = loop {
        let done = bridge.metric("bridge_jobs_finished_total", None).await? - 1.0;
        if done >= 1.0 && first_done.is_none() {
            first_done = Some(std::time::Instant::now());
        }
        if done >= jobs as f64 {
            break std::time::Instant::now();
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("only {done} of {jobs} jobs finished in time"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let completed = bridge
        .metric("bridge_jobs_finished_total", Some("status=\"completed\""))
        .await?
        - 1.0;
    let stored = bridge.metric("bridge_progress_events_total", None).await? - 1.0;
    let dropped = bridge.metric("bridge_progress_dropped_total", None).await?;
    if completed < jobs as f64 {
        return Err(format!("{completed} of {jobs} jobs completed"));
    }
    let expected = (jobs as u64 * EVENTS) as f64;
    if stored != expected || dropped > 0.0 {
        return Err(format!(
            "{stored} progress events stored of {expected} sent ({dropped} dropped)"
        ));
    }
    let complete_secs = all_done
        .duration_since(first_done.unwrap_or(all_done))
        .as_secs_f64()
        .max(0.001);
    Ok(Outcome {
        completed,
        stored,
        complete_secs,
    })
}

async fn wait_metric(
    bridge: &BridgeProcess,
    name: &str,
    value: f64,
    within: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if bridge.metric(name, None).await? == value {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{name} did not reach {value}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
