//! Progress latency with the Redis store: the job runs on replica A, its reader is on
//! replica B, so every event crosses Redis. Skipped, with the reason printed, while the
//! bridge has no Redis store (`[store] backend = "redis"`) or no Redis answers.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{Ctx, Demo, latency, report::Row};

const SCENARIO: &str = "progress latency (Redis store, 2 replicas)";

/// The config section that selects the Redis store. Kept here, in one place, so it follows
/// the store's config if its keys change.
/// Both replicas share the store (under a key prefix of this run's own) and the job secret
/// (a job URL signed by A must open on B).
fn store_section(url: &str) -> String {
    let prefix = format!("bench-{:016x}", fastrand::u64(..));
    format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\nkey_prefix = \"{prefix}\"\n\n\
         [auth]\njob_secret = \"bench-job-secret-shared-by-both-replicas\"\n\n"
    )
}

/// Where Redis is: `BRIDGE_BENCH_REDIS_URL`, else `BRIDGE_TEST_REDIS_URL` (what CI sets),
/// else the default local port.
fn redis_url() -> String {
    std::env::var("BRIDGE_BENCH_REDIS_URL")
        .or_else(|_| std::env::var("BRIDGE_TEST_REDIS_URL"))
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let url = redis_url();
    if let Err(why) = ping(&url).await {
        return Ok(vec![Row::skipped(
            SCENARIO,
            format!("no Redis at {url} ({why})"),
        )]);
    }
    let demo = Demo::start().await?;
    let config = format!(
        "{}{}",
        store_section(&url),
        crate::http_upstream_config(&demo.url, "async")
    );
    let a = match crate::proc::start_bridge(&ctx.bin, &ctx.dir, "redis-a", &config).await {
        Ok(a) => a,
        Err(e) => return Err(e.to_string()),
    };
    let b = match crate::proc::start_bridge(&ctx.bin, &ctx.dir, "redis-b", &config).await {
        Ok(b) => b,
        Err(e) => {
            a.stop().await;
            return Err(e.to_string());
        }
    };
    let result = latency::measure(ctx, &demo, &a, &b).await;
    a.stop().await;
    b.stop().await;
    let (bridge, direct) = result?;
    let mut rows = latency::rows(SCENARIO, &bridge, Some(&direct), 3_000);
    // The memory-store targets (p50 ≤ 0.3 ms, 2× direct) do not apply across Redis: only
    // p99 ≤ 3 ms does.
    for row in rows.iter_mut() {
        row.missed.clear();
        if row.metric == "p50" {
            row.target.clear();
            row.verdict = crate::report::Verdict::Info;
        }
        if row.metric == "p99" {
            row.target = "≤ 3.000 ms".into();
            row.verdict =
                crate::report::Verdict::of(bridge.summary().is_some_and(|s| s.p99 <= 3_000));
        }
    }
    Ok(rows)
}

/// The config section of a Redis store under a key prefix of its own, or why there is none.
pub async fn store_config() -> Result<String, String> {
    let url = redis_url();
    ping(&url)
        .await
        .map_err(|why| format!("no Redis at {url} ({why})"))?;
    Ok(store_section(&url))
}

/// `PING` over a raw connection: no Redis client is needed just to know one is there.
async fn ping(url: &str) -> Result<(), String> {
    let hostport = url
        .trim_start_matches("redis://")
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let attempt = async {
        let mut stream = TcpStream::connect(&hostport)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(b"PING\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if buf[..n].starts_with(b"+PONG") {
            Ok(())
        } else {
            Err(format!("answered {:?}", String::from_utf8_lossy(&buf[..n])))
        }
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .map_err(|_| "no answer in 2 s".to_string())?
}
