//! Ingest: 100 jobs whose upstream sends progress back-to-back; the figure is progress
//! notifications per second that end up in the store, against the rate at which an MCP
//! client connected straight to the same upstream receives them (the floor: the upstream's
//! own sending speed). The upstream is the demo tool server as a stdio child, as in the
//! default config.

use std::{sync::Arc, time::Duration};

use serde_json::json;

use crate::{
    Ctx,
    mcp::{self, BenchClient},
    proc::BridgeProcess,
    report::Row,
    stats::ratio,
};

const JOBS: u64 = 100;

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let per_job: u64 = ctx.pick(50, 2_000);
    let total = JOBS * per_job;
    let scenario = format!("ingest, {JOBS} jobs × {per_job} events");

    // The floor: the same calls straight to a demo-tools child.
    let handler = BenchClient::default();
    let direct = Arc::new(mcp::connect_stdio(&ctx.bin, &["demo-tools"], handler.clone()).await?);
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
    if !handler.wait_received(total, Duration::from_secs(60)).await {
        return Err(format!(
            "the direct client got {} of {total} notifications",
            handler.received()
        ));
    }
    let direct_secs = started.elapsed().as_secs_f64();
    if let Ok(direct) = Arc::try_unwrap(direct) {
        let _ = direct.cancel().await;
    }

    let bridge = BridgeProcess::start(
        &ctx.bin,
        &ctx.dir,
        "ingest",
        &crate::stdio_upstream_config(&ctx.bin, "async"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let result = through_bridge(&bridge, per_job).await;
    bridge.stop().await;
    let (bridge_secs, stored, coalesced) = result?;

    let bridge_rate = (stored + coalesced) as f64 / bridge_secs;
    let direct_rate = total as f64 / direct_secs;
    Ok(vec![
        Row::new(
            &scenario,
            "notifications / s into the store",
            format!("{bridge_rate:.0}"),
        )
        .vs(
            "direct",
            format!("{direct_rate:.0}"),
            ratio((bridge_rate * 1000.0) as u64, (direct_rate * 1000.0) as u64),
        )
        .target("≥ 100,000/s", bridge_rate >= 100_000.0),
        Row::new(
            &scenario,
            "checked",
            format!(
                "{stored} stored + {coalesced} coalesced (latest kept) of {total} sent, none lost"
            ),
        ),
    ])
}

/// Returns (seconds until every job ended, progress events stored, notifications coalesced).
async fn through_bridge(bridge: &BridgeProcess, per_job: u64) -> Result<(f64, u64, u64), String> {
    let total = JOBS * per_job;
    let front = Arc::new(mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?);
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
        let done = bridge.metric("bridge_jobs_finished_total", None).await?;
        if done >= JOBS as f64 {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("only {done} of {JOBS} jobs ended in time"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let completed = bridge
        .metric("bridge_jobs_finished_total", Some("status=\"completed\""))
        .await?;
    let stored = bridge.metric("bridge_progress_events_total", None).await? as u64;
    let coalesced = bridge
        .metric(
            "bridge_progress_dropped_total",
            Some("reason=\"coalesced\""),
        )
        .await? as u64;
    let dropped = bridge.metric("bridge_progress_dropped_total", None).await? as u64 - coalesced;
    if let Ok(front) = Arc::try_unwrap(front) {
        let _ = front.cancel().await;
    }
    if completed < JOBS as f64 {
        return Err(format!("{completed} of {JOBS} jobs completed"));
    }
    if dropped > 0 || stored + coalesced != total {
        return Err(format!(
            "{stored} stored + {coalesced} coalesced of {total} sent; {dropped} dropped otherwise"
        ));
    }
    Ok((secs, stored, coalesced))
}
