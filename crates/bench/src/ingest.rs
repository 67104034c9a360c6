//! Ingest: 100 jobs whose upstream sends progress back-to-back; the figure is progress
//! notifications per second that end up in the store, against the rate at which an MCP
//! client connected straight to the same upstream receives them (the floor: the upstream's
//! own sending speed). The upstream is the demo tool server as a stdio child, as in the
//! default config. Direct and bridge rounds alternate; the figures are the medians.

use std::{sync::Arc, time::Duration};

use serde_json::json;

use crate::{
    Ctx,
    mcp::{self, BenchClient, Client},
    proc::{self, BridgeProcess},
    report::Row,
    stats::ratio,
};

const JOBS: u64 = 100;

/// What the bridge's counters say so far.
#[derive(Clone, Copy, Default)]
struct Counters {
    finished: u64,
    completed: u64,
    stored: u64,
    coalesced: u64,
    dropped_otherwise: u64,
}

/// The rates of every round, and what the bridge coalesced and spent on them.
struct Rounds {
    direct: Vec<f64>,
    bridge: Vec<f64>,
    coalesced: u64,
    cpu_us: u64,
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let per_job: u64 = ctx.pick(50, 2_000);
    let rounds = ctx.pick(1, 3);
    let handler = BenchClient::default();
    let direct = Arc::new(mcp::connect_stdio(&ctx.bin, &["demo-tools"], handler.clone()).await?);
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "ingest",
        &crate::stdio_upstream_config(&ctx.bin, "async"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let result = match mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await {
        Ok(front) => {
            let front = Arc::new(front);
            let result = alternate(&direct, &handler, &bridge, &front, per_job, rounds).await;
            if let Ok(front) = Arc::try_unwrap(front) {
                let _ = front.cancel().await;
            }
            result
        }
        Err(e) => Err(e),
    };
    bridge.stop().await;
    if let Ok(direct) = Arc::try_unwrap(direct) {
        let _ = direct.cancel().await;
    }
    Ok(rows(result?, per_job, rounds))
}

/// Direct and bridge rounds, taking turns.
async fn alternate(
    direct: &Arc<Client>,
    handler: &BenchClient,
    bridge: &BridgeProcess,
    front: &Arc<Client>,
    per_job: u64,
    rounds: usize,
) -> Result<Rounds, String> {
    let mut out = Rounds {
        direct: Vec::new(),
        bridge: Vec::new(),
        coalesced: 0,
        cpu_us: 0,
    };
    let cpu_before = bridge.cpu_us();
    for round in 0..rounds {
        out.direct
            .push(direct_round(direct, handler, per_job, round).await?);
        let (rate, coalesced) = bridge_round(bridge, front, per_job).await?;
        out.bridge.push(rate);
        out.coalesced += coalesced;
    }
    out.cpu_us = bridge.cpu_us() - cpu_before;
    Ok(out)
}

fn rows(mut r: Rounds, per_job: u64, rounds: usize) -> Vec<Row> {
    let total = JOBS * per_job;
    let scenario = format!("ingest, {JOBS} jobs × {per_job} events");
    let cpu_per = r.cpu_us as f64 / (total * rounds as u64) as f64;
    let d = median(&mut r.direct);
    let b = median(&mut r.bridge);
    let range = |r: &[f64]| format!("{:.0}–{:.0}", r[0], r[r.len() - 1]);
    vec![
        Row::new(
            &scenario,
            "notifications / s into the store (median)",
            format!("{b:.0}"),
        )
        .vs(
            "direct",
            format!("{d:.0}"),
            ratio((b * 1000.0) as u64, (d * 1000.0) as u64),
        )
        .target("≥ 100,000/s", b >= 100_000.0),
        Row::new(
            &scenario,
            "bridge CPU per notification",
            format!("{cpu_per:.1} µs"),
        ),
        Row::new(
            &scenario,
            "checked",
            format!(
                "{rounds} rounds each; bridge {} /s, direct {} /s; {} notifications stored or coalesced (latest kept, {} coalesced), none lost",
                range(&r.bridge),
                range(&r.direct),
                total * rounds as u64,
                r.coalesced
            ),
        ),
    ]
}

fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// The floor: 100 calls at once straight to the demo-tools child. Returns notifications/s.
async fn direct_round(
    direct: &Arc<Client>,
    handler: &BenchClient,
    per_job: u64,
    round: usize,
) -> Result<f64, String> {
    let total = JOBS * per_job;
    let before = total * round as u64;
    let started = std::time::Instant::now();
    let mut calls = Vec::new();
    for _ in 0..JOBS {
        let direct = direct.clone();
        calls.push(tokio::spawn(async move {
            mcp::call(&direct, "bench_progress", json!({ "count": per_job })).await
        }));
    }
    for call in calls {
        call.await.map_err(|e| e.to_string())??;
    }
    if !handler
        .wait_received(before + total, Duration::from_secs(60))
        .await
    {
        return Err(format!(
            "the direct client got {} of {total} notifications",
            handler.received() - before
        ));
    }
    handler.take_samples();
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

async fn counters(bridge: &BridgeProcess) -> Result<Counters, String> {
    let finished = bridge.metric("bridge_jobs_finished_total", None).await? as u64;
    let completed = bridge
        .metric("bridge_jobs_finished_total", Some("status=\"completed\""))
        .await? as u64;
    let stored = bridge.metric("bridge_progress_events_total", None).await? as u64;
    let coalesced = bridge
        .metric(
            "bridge_progress_dropped_total",
            Some("reason=\"coalesced\""),
        )
        .await? as u64;
    let dropped = bridge.metric("bridge_progress_dropped_total", None).await? as u64;
    Ok(Counters {
        finished,
        completed,
        stored,
        coalesced,
        dropped_otherwise: dropped - coalesced,
    })
}

/// 100 jobs through the bridge. Returns (notifications/s into the store, coalesced).
async fn bridge_round(
    bridge: &BridgeProcess,
    front: &Arc<Client>,
    per_job: u64,
) -> Result<(f64, u64), String> {
    let total = JOBS * per_job;
    let before = counters(bridge).await?;
    let started = std::time::Instant::now();
    let mut calls = Vec::new();
    for _ in 0..JOBS {
        let front = front.clone();
        calls.push(tokio::spawn(async move {
            mcp::job_id(
                &mcp::call(&front, "demo__bench_progress", json!({ "count": per_job })).await?,
            )
        }));
    }
    for call in calls {
        call.await.map_err(|e| e.to_string())??;
    }
    let deadline = started + Duration::from_secs(120);
    loop {
        let done = bridge.metric("bridge_jobs_finished_total", None).await? as u64;
        if done >= before.finished + JOBS {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "only {} of {JOBS} jobs ended in time",
                done - before.finished
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let after = counters(bridge).await?;
    let completed = after.completed - before.completed;
    let stored = after.stored - before.stored;
    let coalesced = after.coalesced - before.coalesced;
    let dropped = after.dropped_otherwise - before.dropped_otherwise;
    if completed < JOBS {
        return Err(format!("{completed} of {JOBS} jobs completed"));
    }
    if dropped > 0 || stored + coalesced != total {
        return Err(format!(
            "{stored} stored + {coalesced} coalesced of {total} sent; {dropped} dropped otherwise"
        ));
    }
    Ok(((stored + coalesced) as f64 / secs, coalesced))
}
