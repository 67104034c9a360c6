//! Fan-out: one job, N concurrent SSE readers, progress at 10/s. Every reader must get every
//! event; the figures are the delivery latency over all (reader, event) pairs and the
//! bridge's resident memory per idle reader.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::{
    Ctx, Demo,
    mcp::{self, BenchClient},
    proc::{self, BridgeProcess},
    report::Row,
    sse::SseReader,
    stats::{Samples, ms, now_us, sent_at_us},
};

/// Progress at 10 per second.
const INTERVAL_US: u64 = 100_000;
/// Readers connecting at once (the rest wait their turn): a burst of 10,000 connects would
/// only measure the listen backlog.
const CONNECTING: usize = 256;
/// Time for the bridge's memory to settle once every reader is in.
const SETTLE: Duration = Duration::from_millis(500);

/// What one reader saw.
struct Seen {
    latencies: Vec<u64>,
    progress: u64,
    completed: bool,
    error: Option<String>,
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
    let scenario = format!("fan-out, {readers} readers");
    let events: u64 = ctx.pick(10, 50);
    // The first event waits until every reader is in (assumed: at least 2,000 connects/s),
    // so the idle memory is read with no event in flight.
    let delay_ms = 2_000 + readers as u64 / 2;
    let front = mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?;
    let handle = mcp::call(
        &front,
        "up__bench_progress",
        json!({ "count": events, "interval_us": INTERVAL_US, "delay_ms": delay_ms }),
    )
    .await?;
    let first_due = now_us() + delay_ms * 1000;
    mcp::job_id(&handle)?;
    let events_path = mcp::events_path(&handle)?;
    // Let the bridge settle after the call before the baseline is read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = bridge.rss_kib();

    let connected = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let changed = Arc::new(Notify::new());
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let all_in_at = Arc::new(std::sync::OnceLock::<u64>::new());
    let mut tasks = Vec::with_capacity(readers);
    for _ in 0..readers {
        let (connected, failed, changed, gate, all_in_at) = (
            connected.clone(),
            failed.clone(),
            changed.clone(),
            gate.clone(),
            all_in_at.clone(),
        );
        let path = events_path.clone();
        let addr = bridge.addr;
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen {
                latencies: Vec::with_capacity(events as usize),
                progress: 0,
                completed: false,
                error: None,
            };
            let permit = gate.acquire_owned().await;
            let opened = SseReader::open(addr, &path).await;
            let mut reader = match opened {
                Ok(mut r) => match r.next().await {
                    Ok(Some(f)) if f.event == "status" => r,
                    other => {
                        seen.error = Some(format!("no status event first: {other:?}"));
                        failed.fetch_add(1, Ordering::Relaxed);
                        changed.notify_one();
                        return seen;
                    }
                },
                Err(e) => {
                    seen.error = Some(e.to_string());
                    failed.fetch_add(1, Ordering::Relaxed);
                    changed.notify_one();
                    return seen;
                }
            };
            drop(permit);
            connected.fetch_add(1, Ordering::Relaxed);
            changed.notify_one();
            let mut last = 0u64;
            loop {
                match reader.next().await {
                    Ok(Some(frame)) => {
                        if let Some(id) = frame.id {
                            if id != last + 1 {
                                seen.error = Some(format!("event {id} follows {last}"));
                                return seen;
                            }
                            last = id;
                        }
                        match frame.event.as_str() {
                            "progress" => {
                                seen.progress += 1;
                                let all_in = all_in_at.get().copied().unwrap_or(u64::MAX);
                                if let Some(sent) = sent_at_us(&frame.data)
                                    && sent >= all_in
                                {
                                    seen.latencies.push(frame.read_at_us.saturating_sub(sent));
                                }
                            }
                            "completed" => {
                                seen.completed = true;
                                return seen;
                            }
                            _ => {}
                        }
                    }
                    Ok(None) => {
                        seen.error = Some("the stream ended before `completed`".into());
                        return seen;
                    }
                    Err(e) => {
                        seen.error = Some(e.to_string());
                        return seen;
                    }
                }
            }
        }));
    }
    let connect_started = std::time::Instant::now();
    let wait_connected = async {
        loop {
            let notified = changed.notified();
            let done = connected.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed);
            if done >= readers {
                return;
            }
            notified.await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), wait_connected)
        .await
        .is_err()
    {
        return Err(format!(
            "only {} of {readers} readers connected in 120 s",
            connected.load(Ordering::Relaxed)
        ));
    }
    let connect_secs = connect_started.elapsed().as_secs_f64();
    let _ = all_in_at.set(now_us());
    if failed.load(Ordering::Relaxed) > 0 {
        let errors = collect(tasks).await;
        let first = errors
            .iter()
            .find_map(|s| s.error.clone())
            .unwrap_or_default();
        return Err(format!(
            "{} of {readers} readers could not subscribe (first error: {first})",
            failed.load(Ordering::Relaxed)
        ));
    }
    tokio::time::sleep(SETTLE).await;
    let rss_idle = bridge.rss_kib();
    let idle_clean = now_us() < first_due;
    let cpu_before = bridge.cpu_us();
    let subscribers = bridge
        .metric("bridge_sse_subscribers", None)
        .await
        .unwrap_or(0.0);

    let all = tokio::time::timeout(
        Duration::from_micros(events * INTERVAL_US)
            + Duration::from_millis(delay_ms)
            + Duration::from_secs(120),
        collect(tasks),
    )
    .await
    .map_err(|_| "readers did not all finish in time".to_string())?;
    // CPU the bridge spent delivering (the upstream's few calls are noise next to it).
    let cpu_per_delivery =
        bridge.cpu_us().saturating_sub(cpu_before) as f64 / (events as usize * readers) as f64;
    let _ = front.cancel().await;

    let mut samples = Samples::default();
    let mut short = 0usize;
    let mut first_error = None;
    for seen in &all {
        if seen.error.is_some() || !seen.completed || seen.progress != events {
            short += 1;
            if first_error.is_none() {
                first_error = Some(seen.error.clone().unwrap_or_else(|| {
                    format!(
                        "{} of {events} progress events, completed: {}",
                        seen.progress, seen.completed
                    )
                }));
            }
        }
        samples.extend(seen.latencies.iter().copied());
    }
    if short > 0 {
        return Err(format!(
            "{short} of {readers} readers did not get every event (first: {})",
            first_error.unwrap_or_default()
        ));
    }
    let per_reader_bytes = rss_idle.saturating_sub(rss_before) as f64 * 1024.0 / readers as f64;
    let mut rows = Vec::new();
    let Some(s) = samples.summary() else {
        return Err("no event was sent after every reader had subscribed: raise the delay".into());
    };
    let p99_target_us = 50_000;
    let big = readers >= 10_000;
    let p99 = Row::new(&scenario, "delivery p99", ms(s.p99));
    rows.push(Row::new(&scenario, "delivery p50", ms(s.p50)));
    rows.push(if big {
        p99.target("≤ 50.000 ms", s.p99 <= p99_target_us)
    } else {
        p99
    });
    rows.push(Row::new(&scenario, "delivery max", ms(s.max)));
    rows.push(Row::new(
        &scenario,
        "events × readers",
        format!(
            "{} of {} delivered, {} timed",
            events as usize * readers,
            events as usize * readers,
            s.count
        ),
    ));
    rows.push(Row::new(
        &scenario,
        "bridge CPU per delivery",
        format!("{cpu_per_delivery:.1} µs"),
    ));
    let rss_row = Row::new(
        &scenario,
        "bridge RSS per idle reader",
        format!("{:.1} KiB", per_reader_bytes / 1024.0),
    );
    rows.push(rss_row.target("≤ 8 KiB", per_reader_bytes <= 8.0 * 1024.0));
    rows.push(Row::new(
        &scenario,
        "connect",
        format!(
            "{readers} in {connect_secs:.1} s; gauge {subscribers:.0}; RSS {} → {} KiB{}",
            rss_before,
            rss_idle,
            if idle_clean {
                ""
            } else {
                " (events had started)"
            }
        ),
    ));
    Ok(rows)
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Seen>>) -> Vec<Seen> {
    let mut all = Vec::with_capacity(tasks.len());
    for t in tasks {
        all.push(t.await.unwrap_or(Seen {
            latencies: Vec::new(),
            progress: 0,
            completed: false,
            error: Some("reader task panicked".into()),
        }));
    }
    all
}
