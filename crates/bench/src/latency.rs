//! Progress latency: `bench_progress` on the demo upstream stamps each notification with its
//! send time; the figure is the time until an SSE reader of the job has read it, against the
//! time until an MCP client connected straight to the same upstream has it (the floor).
//! Direct and bridge batches alternate, so both see the same machine conditions.

use std::{net::SocketAddr, time::Duration};

use serde_json::json;

use crate::{
    Ctx, Demo,
    mcp::{self, BenchClient, Client},
    proc::{self, BridgeProcess},
    report::Row,
    sse::SseReader,
    stats::{Samples, ms, now_us, ratio, sent_at_us},
};

/// One notification every millisecond: a steady stream, not a flood (the ingest scenario
/// floods).
const INTERVAL_US: u64 = 1_000;
/// Time between a job handle and the job's first notification, so the reader is subscribed
/// before it (a later reader would get it from history, and its latency would mean nothing).
const SUBSCRIBE_MS: u64 = 200;

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let demo = Demo::start().await?;
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "latency",
        &crate::http_upstream_config(&demo.url, "async"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let cpu_before = bridge.cpu_us();
    let result = measure(ctx, &demo, &bridge, &bridge).await;
    let cpu = bridge.cpu_us().saturating_sub(cpu_before);
    bridge.stop().await;
    let (bridge_samples, direct_samples) = result?;
    let scenario = "progress latency (memory store)";
    let mut rows = rows(scenario, &bridge_samples, Some(&direct_samples), 1_000);
    // Everything the bridge did during the run (idle while the direct batches ran), per event
    // (the timed ones and the 50 of the warm-up batch).
    let events = (bridge_samples.count() + 50) as f64;
    rows.push(Row::new(
        scenario,
        "bridge CPU per event",
        format!("{:.1} µs", cpu as f64 / events),
    ));
    Ok(rows)
}

/// Run the alternating batches: jobs are started through `publisher`'s `/mcp` and read on
/// `subscriber`'s `/jobs/{id}/events` (the same bridge, or two replicas sharing a store).
/// Returns (bridge samples, direct samples).
pub async fn measure(
    ctx: &Ctx,
    demo: &Demo,
    publisher: &BridgeProcess,
    subscriber: &BridgeProcess,
) -> Result<(Samples, Samples), String> {
    let direct_handler = BenchClient::default();
    let direct = mcp::connect_http(&demo.url, direct_handler.clone()).await?;
    let front = mcp::connect_http(&publisher.mcp_url(), BenchClient::default()).await?;
    let (rounds, per_round) = ctx.pick((2, 100), (10, 1_000));
    // One short round of each first, not counted: connections, caches and the allocator warm up.
    let mut bridge_samples = Samples::default();
    let mut direct_samples = Samples::default();
    for round in 0..=rounds {
        let count = if round == 0 { 50 } else { per_round };
        let direct_batch = direct_batch(&direct, &direct_handler, count).await?;
        let bridge_batch =
            bridge_batch(&front, subscriber.addr, "up__bench_progress", count).await?;
        if round > 0 {
            direct_samples.extend(direct_batch);
            bridge_samples.extend(bridge_batch);
        }
    }
    let _ = direct.cancel().await;
    let _ = front.cancel().await;
    Ok((bridge_samples, direct_samples))
}

async fn direct_batch(
    client: &Client,
    handler: &BenchClient,
    count: u64,
) -> Result<Vec<u64>, String> {
    let before = handler.received();
    handler.take_samples();
    mcp::call(
        client,
        "bench_progress",
        json!({ "count": count, "interval_us": INTERVAL_US }),
    )
    .await?;
    // rmcp hands notifications to the handler in tasks of their own: the last may still be
    // on its way when the response is in.
    if !handler
        .wait_received(before + count, Duration::from_secs(10))
        .await
    {
        return Err(format!(
            "the direct client got {} of {count} progress notifications",
            handler.received() - before
        ));
    }
    Ok(handler.take_samples())
}

/// Start one `bench_progress` job through the bridge and read it on `addr` to its end.
pub async fn bridge_batch(
    front: &Client,
    addr: SocketAddr,
    tool: &str,
    count: u64,
) -> Result<Vec<u64>, String> {
    let handle = mcp::call(
        front,
        tool,
        json!({ "count": count, "interval_us": INTERVAL_US, "delay_ms": SUBSCRIBE_MS }),
    )
    .await?;
    let id = mcp::job_id(&handle)?;
    let path = mcp::events_path(&handle)?;
    let read = tokio::time::timeout(
        Duration::from_secs(30) + Duration::from_micros(count * INTERVAL_US),
        read_job(addr, &path, count),
    )
    .await
    .map_err(|_| format!("job {id}: its events did not all arrive in time"))??;
    Ok(read)
}

/// Read a job's stream from the start to its terminal event; check that it has exactly
/// `count` progress events, numbered without a gap, and ends `completed`. Returns the
/// latencies of the events sent after the reader was subscribed.
pub async fn read_job(addr: SocketAddr, path: &str, count: u64) -> Result<Vec<u64>, String> {
    let opened_at = now_us();
    // The job ID, for messages: the path is `/jobs/<id>/events?token=…`.
    let id = path
        .trim_start_matches("/jobs/")
        .split('/')
        .next()
        .unwrap_or(path);
    let mut reader = SseReader::open(addr, path)
        .await
        .map_err(|e| e.to_string())?;
    let mut latencies = Vec::with_capacity(count as usize);
    let mut progress = 0u64;
    let mut last_id: Option<u64> = None;
    loop {
        let Some(frame) = reader.next().await.map_err(|e| e.to_string())? else {
            return Err(format!(
                "job {id}: the stream ended before its terminal event"
            ));
        };
        if frame.event != "status"
            && let (Some(last), Some(id_now)) = (last_id, frame.id)
            && id_now != last + 1
        {
            return Err(format!("job {id}: event {id_now} follows {last}: a gap"));
        }
        last_id = frame.id.or(last_id);
        match frame.event.as_str() {
            "progress" => {
                progress += 1;
                if let Some(sent) = sent_at_us(&frame.data)
                    && sent >= opened_at
                {
                    latencies.push(frame.read_at_us.saturating_sub(sent));
                }
            }
            "completed" => break,
            "status" | "heartbeat" | "log" => {}
            other => return Err(format!("job {id}: unexpected event {other:?}")),
        }
    }
    if progress != count {
        return Err(format!(
            "job {id}: {progress} progress events of {count} sent"
        ));
    }
    Ok(latencies)
}

/// p50, p99 and max rows for a latency scenario; `p99_target_us` is the p99 target.
pub fn rows(
    scenario: &str,
    bridge: &Samples,
    direct: Option<&Samples>,
    p99_target_us: u64,
) -> Vec<Row> {
    let Some(b) = bridge.summary() else {
        return vec![Row::new(scenario, "FAILED", "no samples")];
    };
    let d = direct.and_then(Samples::summary);
    let with_floor = |row: Row, pick: fn(&crate::stats::Summary) -> u64| match &d {
        Some(d) => row.vs("direct", ms(pick(d)), ratio(pick(&b), pick(d))),
        None => row,
    };
    let ratio_ok = |pick: fn(&crate::stats::Summary) -> u64| {
        d.as_ref().is_none_or(|d| pick(&b) <= 2 * pick(d))
    };
    let mut rows = Vec::new();
    let p50_target = if direct.is_some() {
        "≤ 0.3 ms, ≤ 2× direct"
    } else {
        ""
    };
    let mut p50 = with_floor(Row::new(scenario, "p50", ms(b.p50)), |s| s.p50);
    if direct.is_some() {
        p50 = p50.target_parts(
            p50_target,
            &[(b.p50 <= 300, "time"), (ratio_ok(|s| s.p50), "ratio")],
        );
    }
    rows.push(p50);
    let p99_target = if direct.is_some() {
        format!("≤ {}, ≤ 2× direct", ms(p99_target_us))
    } else {
        format!("≤ {}", ms(p99_target_us))
    };
    rows.push(
        with_floor(Row::new(scenario, "p99", ms(b.p99)), |s| s.p99).target_parts(
            &p99_target,
            &[
                (b.p99 <= p99_target_us, "time"),
                (ratio_ok(|s| s.p99), "ratio"),
            ],
        ),
    );
    rows.push(with_floor(Row::new(scenario, "max", ms(b.max)), |s| s.max));
    let events = match &d {
        Some(d) => Row::new(scenario, "events timed", b.count.to_string()).vs(
            "direct",
            d.count.to_string(),
            "",
        ),
        None => Row::new(scenario, "events timed", b.count.to_string()),
    };
    rows.push(events);
    rows
}
