//! Readers that never read (issue 11 item 8): 60 of them on a job with a 10 MiB result and
//! 500 progress events, beside one reader that reads everything. The bridge's RSS before,
//! once the job has ended (the stalled readers hold what they were given), and after the
//! bridge has dropped them (`limits.max_sse_buffer_bytes`; keep-alive 2 s here, so a stalled
//! reader goes after 4 to 6 s). Each store runs twice in the same run, side by side: with the
//! bound at its most (1 GiB: nobody is dropped, what they hold stays held) and at its default.

use std::time::Duration;

use serde_json::json;

use crate::{
    Ctx,
    crowd::Crowd,
    mcp::{self, BenchClient},
    proc::BridgeProcess,
    report::Row,
};

const SCENARIO: &str = "60 readers that never read, 10 MiB result";
const STALLED: usize = 60;
const EVENTS: u64 = 500;
const RESULT_BYTES: usize = 10 * 1024 * 1024;

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let redis = crate::redis::store_config().await;
    let mut stores = vec![("memory", String::new())];
    match redis {
        Ok(section) => stores.push(("redis", section)),
        Err(why) => rows.push(Row::skipped(SCENARIO, format!("Redis store: {why}"))),
    }
    for (store, section) in &stores {
        for (label, bound) in [("bound off (1 GiB)", 1u64 << 30), ("bound 4 MiB", 4 << 20)] {
            let [start, held, after] = once(ctx, store, section, bound).await?;
            let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
            rows.push(Row::new(
                SCENARIO,
                &format!("{store} store, {label}: bridge RSS before, held, after drops"),
                format!("{} → {} → {} MiB", mib(start), mib(held), mib(after)),
            ));
        }
    }
    Ok(rows)
}

async fn once(ctx: &Ctx, store: &str, section: &str, bound: u64) -> Result<[u64; 3], String> {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = []\nkeep_alive_secs = 2\n\n\
         [limits]\nmax_sse_buffer_bytes = {bound}\nmax_subscribers_per_channel = 1000\n\n\
         {section}{}",
        crate::stdio_upstream_config(&ctx.bin, "async")
    );
    let name = format!("stalled-{store}-{bound}");
    let bridge = BridgeProcess::start(&ctx.bin, Some(&ctx.dir), &name, &config, &[])
        .await
        .map_err(|e| e.to_string())?;
    let result = measure(&bridge).await;
    bridge.stop().await;
    result
}

async fn measure(bridge: &BridgeProcess) -> Result<[u64; 3], String> {
    let front = mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await?;
    let start = bridge.rss_kib();
    let handle = mcp::call(
        &front,
        "demo__bench_progress",
        json!({ "count": EVENTS, "interval_us": 2000, "delay_ms": 1000, "result_bytes": RESULT_BYTES }),
    )
    .await?;
    let path = mcp::events_path(&handle)?;
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(crate::soak::open_never_read(bridge.addr, &path).await?);
    }
    let mut crowd = Crowd::spawn(bridge.addr, std::slice::from_ref(&path), 1, EVENTS);
    crowd.wait_connected().await?;
    let delivered = crowd.finish(Duration::from_secs(120)).await?;
    if delivered.largest_terminal < RESULT_BYTES {
        return Err(format!(
            "the reader got a {}-byte result",
            delivered.largest_terminal
        ));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = bridge.rss_kib();
    // Two quiet looks a keep-alive interval apart, and a margin.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = bridge.rss_kib();
    drop(stalled);
    let _ = front.cancel().await;
    Ok([start, held, after])
}
