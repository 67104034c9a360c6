//! Fan-out: one job, N concurrent SSE readers, progress at 10/s. Every reader must get every
//! event; the figures are the delivery latency over all (reader, event) pairs and the
//! bridge's resident memory per idle reader.

use std::{
    net::SocketAddr,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde_json::json;
use tokio::{
    sync::{Notify, Semaphore},
    task::JoinHandle,
};

use crate::{
    Ctx, Demo,
    mcp::{self, BenchClient},
    proc::{self, BridgeProcess},
    report::Row,
    sse::{Frame, SseReader},
    stats::{Samples, ms, now_us, sent_at_us},
};

/// Progress at 10 per second.
const INTERVAL_US: u64 = 100_000;
/// Readers connecting at once (the rest wait their turn): a burst of 10,000 connects would
/// only measure the listen backlog.
const CONNECTING: usize = 256;
/// Time for the bridge's memory to settle once every reader is in.
const SETTLE: Duration = Duration::from_millis(500);
/// Longest the readers may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// What one reader saw.
struct Seen {
    latencies: Vec<u64>,
    progress: u64,
    completed: bool,
    error: Option<String>,
}

impl Seen {
    fn new(events: u64) -> Self {
        Self {
            latencies: Vec::with_capacity(events as usize),
            progress: 0,
            completed: false,
            error: None,
        }
    }

    fn failed(error: String) -> Self {
        let mut seen = Self::new(0);
        seen.error = Some(error);
        seen
    }
}

/// The job the readers follow: where its events are, and when its first one is due.
struct Job {
    events: u64,
    events_path: String,
    delay_ms: u64,
    first_due_us: u64,
}

/// What the readers share: progress counters for the connect phase, the gate that limits
/// connects in flight, and the time the last reader was in (events sent before it are not
/// timed: they measure the connect burst, not the fan-out).
struct Shared {
    connected: AtomicUsize,
    failed: AtomicUsize,
    changed: Notify,
    gate: Semaphore,
    all_in_at: OnceLock<u64>,
}

impl Shared {
    fn settled(&self) -> usize {
        self.connected.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed)
    }
}

/// The bridge's figures around the run.
struct Figures {
    connect_secs: f64,
    rss_before: u64,
    rss_idle: u64,
    idle_clean: bool,
    cpu_us: u64,
    subscribers: f64,
}

pub async fn run(ctx: &Ctx, readers: usize) -> Result<Vec<Row>, String> {
    let demo = Demo::start().await?;
    let name = format!("fanout-{readers}");
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        &name,
        &crate::http_upstream_config(&demo.url, "async"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let result = measure(ctx, &bridge, readers).await;
    bridge.stop().await;
    result
}

async fn measure(ctx: &Ctx, bridge: &BridgeProcess, readers: usize) -> Result<Vec<Row>, String> {
    let front = mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?;
    let job = start_job(ctx, &front, readers).await?;
    // Let the bridge settle after the call before the baseline is read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = bridge.rss_kib();
    let connect_started = std::time::Instant::now();
    let (shared, tasks) = spawn_readers(bridge.addr, &job, readers);
    wait_connected(&shared, readers).await?;
    let connect_secs = connect_started.elapsed().as_secs_f64();
    let _ = shared.all_in_at.set(now_us());
    let failed = shared.failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(subscribe_failure(tasks, failed, readers).await);
    }
    tokio::time::sleep(SETTLE).await;
    let rss_idle = bridge.rss_kib();
    let idle_clean = now_us() < job.first_due_us;
    let cpu_before = bridge.cpu_us();
    let subscribers = bridge
        .metric("bridge_sse_subscribers", None)
        .await
        .unwrap_or(0.0);
    let within = Duration::from_micros(job.events * INTERVAL_US)
        + Duration::from_millis(job.delay_ms)
        + Duration::from_secs(120);
    let all = tokio::time::timeout(within, collect(tasks))
        .await
        .map_err(|_| "readers did not all finish in time".to_string())?;
    // CPU the bridge spent delivering (the upstream's few calls are noise next to it).
    let cpu_us = bridge.cpu_us().saturating_sub(cpu_before);
    let _ = front.cancel().await;
    let samples = check_all_delivered(&all, job.events, readers)?;
    let figures = Figures {
        connect_secs,
        rss_before,
        rss_idle,
        idle_clean,
        cpu_us,
        subscribers,
    };
    rows(readers, job.events, &samples, &figures)
}

/// Start the `bench_progress` job the readers will follow. Its first event waits until every
/// reader is in (assumed: at least 2,000 connects/s), so the idle memory is read with no event
/// in flight.
async fn start_job(ctx: &Ctx, front: &mcp::Client, readers: usize) -> Result<Job, String> {
    let events: u64 = ctx.pick(10, 50);
    let delay_ms = 2_000 + readers as u64 / 2;
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

fn spawn_readers(
    addr: SocketAddr,
    job: &Job,
    readers: usize,
) -> (Arc<Shared>, Vec<JoinHandle<Seen>>) {
    let shared = Arc::new(Shared {
        connected: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        changed: Notify::new(),
        gate: Semaphore::new(CONNECTING),
        all_in_at: OnceLock::new(),
    });
    let tasks = (0..readers)
        .map(|_| {
            let (shared, path, events) = (shared.clone(), job.events_path.clone(), job.events);
            tokio::spawn(async move { read_job(shared, addr, path, events).await })
        })
        .collect();
    (shared, tasks)
}

/// One reader: subscribe (counted in `shared`), then follow the job to its end.
async fn read_job(shared: Arc<Shared>, addr: SocketAddr, path: String, events: u64) -> Seen {
    let reader = subscribe(&shared, addr, &path).await;
    let counter = if reader.is_ok() {
        &shared.connected
    } else {
        &shared.failed
    };
    counter.fetch_add(1, Ordering::Relaxed);
    shared.changed.notify_one();
    match reader {
        Ok(reader) => follow(reader, &shared, events).await,
        Err(e) => Seen::failed(e),
    }
}

/// Open the stream (a gate keeps the connects in flight few) and read its `status` event.
async fn subscribe(shared: &Shared, addr: SocketAddr, path: &str) -> Result<SseReader, String> {
    let _permit = shared.gate.acquire().await;
    let mut reader = SseReader::open(addr, path)
        .await
        .map_err(|e| e.to_string())?;
    match reader.next().await {
        Ok(Some(f)) if f.event == "status" => Ok(reader),
        other => Err(format!("no status event first: {other:?}")),
    }
}

/// Read until `completed`, checking that ids follow each other, timing each progress event
/// sent after every reader was in.
async fn follow(mut reader: SseReader, shared: &Shared, events: u64) -> Seen {
    let mut seen = Seen::new(events);
    let mut last = 0u64;
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                seen.error = Some("the stream ended before `completed`".into());
                return seen;
            }
            Err(e) => {
                seen.error = Some(e.to_string());
                return seen;
            }
        };
        if let Some(id) = frame.id {
            if id != last + 1 {
                seen.error = Some(format!("event {id} follows {last}"));
                return seen;
            }
            last = id;
        }
        match frame.event.as_str() {
            "progress" => record(&mut seen, &frame, shared),
            "completed" => {
                seen.completed = true;
                return seen;
            }
            _ => {}
        }
    }
}

fn record(seen: &mut Seen, frame: &Frame, shared: &Shared) {
    seen.progress += 1;
    let all_in = shared.all_in_at.get().copied().unwrap_or(u64::MAX);
    if let Some(sent) = sent_at_us(&frame.data)
        && sent >= all_in
    {
        seen.latencies.push(frame.read_at_us.saturating_sub(sent));
    }
}

async fn wait_connected(shared: &Shared, readers: usize) -> Result<(), String> {
    let wait = async {
        loop {
            let notified = shared.changed.notified();
            if shared.settled() >= readers {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, wait)
        .await
        .map_err(|_| {
            format!(
                "only {} of {readers} readers connected in {} s",
                shared.connected.load(Ordering::Relaxed),
                CONNECT_TIMEOUT.as_secs()
            )
        })
}

/// The error when some readers could not subscribe (those still following are stopped).
async fn subscribe_failure(tasks: Vec<JoinHandle<Seen>>, failed: usize, readers: usize) -> String {
    let mut first = None;
    for t in tasks {
        if !t.is_finished() {
            t.abort();
            continue;
        }
        if let Ok(Seen { error: Some(e), .. }) = t.await {
            first.get_or_insert(e);
        }
    }
    format!(
        "{failed} of {readers} readers could not subscribe (first error: {})",
        first.unwrap_or_default()
    )
}

/// Every reader got every progress event and `completed`: the latencies of all of them.
fn check_all_delivered(all: &[Seen], events: u64, readers: usize) -> Result<Samples, String> {
    let mut samples = Samples::default();
    let mut short = 0usize;
    let mut first_error = None;
    for seen in all {
        if seen.error.is_some() || !seen.completed || seen.progress != events {
            short += 1;
            first_error.get_or_insert_with(|| {
                seen.error.clone().unwrap_or_else(|| {
                    format!(
                        "{} of {events} progress events, completed: {}",
                        seen.progress, seen.completed
                    )
                })
            });
        }
        samples.extend(seen.latencies.iter().copied());
    }
    if short > 0 {
        return Err(format!(
            "{short} of {readers} readers did not get every event (first: {})",
            first_error.unwrap_or_default()
        ));
    }
    Ok(samples)
}

fn rows(readers: usize, events: u64, samples: &Samples, f: &Figures) -> Result<Vec<Row>, String> {
    let scenario = format!("fan-out, {readers} readers");
    let Some(s) = samples.summary() else {
        return Err("no event was sent after every reader had subscribed: raise the delay".into());
    };
    let deliveries = events as usize * readers;
    let cpu_per_delivery = f.cpu_us as f64 / deliveries as f64;
    let per_reader_bytes = f.rss_idle.saturating_sub(f.rss_before) as f64 * 1024.0 / readers as f64;
    let p99 = Row::new(&scenario, "delivery p99", ms(s.p99));
    let p99 = if readers >= 10_000 {
        p99.target("≤ 50.000 ms", s.p99 <= 50_000)
    } else {
        p99
    };
    let rss_row = Row::new(
        &scenario,
        "bridge RSS per idle reader",
        format!("{:.1} KiB", per_reader_bytes / 1024.0),
    );
    Ok(vec![
        Row::new(&scenario, "delivery p50", ms(s.p50)),
        p99,
        Row::new(&scenario, "delivery max", ms(s.max)),
        Row::new(
            &scenario,
            "events × readers",
            format!("{deliveries} of {deliveries} delivered, {} timed", s.count),
        ),
        Row::new(
            &scenario,
            "bridge CPU per delivery",
            format!("{cpu_per_delivery:.1} µs"),
        ),
        rss_row.target("≤ 8 KiB", per_reader_bytes <= 8.0 * 1024.0),
        Row::new(
            &scenario,
            "connect",
            format!(
                "{readers} in {:.1} s; gauge {:.0}; RSS {} → {} KiB{}",
                f.connect_secs,
                f.subscribers,
                f.rss_before,
                f.rss_idle,
                if f.idle_clean {
                    ""
                } else {
                    " (events had started)"
                }
            ),
        ),
    ])
}

async fn collect(tasks: Vec<JoinHandle<Seen>>) -> Vec<Seen> {
    let mut all = Vec::with_capacity(tasks.len());
    for t in tasks {
        all.push(
            t.await
                .unwrap_or_else(|_| Seen::failed("reader task panicked".into())),
        );
    }
    all
}
