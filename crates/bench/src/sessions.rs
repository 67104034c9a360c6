//! Abandoned sessions: 3,000 MCP sessions opened (`initialize` + `notifications/initialized`)
//! and never closed, as a client that crashes or forgets `DELETE` leaves them; twice. The
//! bridge's resident memory is read at the start, with the sessions held, once its idle timer
//! (`server.session_idle_secs`, 10 s here) has freed them, and after a second round freed the
//! same way: what one held session costs, and whether freeing gives it back.

use std::{sync::Arc, time::Duration};

use tokio::{sync::Semaphore, task::JoinSet, time::Instant};

use crate::{
    Ctx,
    proc::{self, BridgeProcess},
    report::Row,
};

const SESSIONS: usize = 3_000;
/// Sessions being opened at once.
const CONCURRENCY: usize = 32;
const IDLE_SECS: u64 = 10;
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench-abandoned","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = []\nsession_idle_secs = {IDLE_SECS}\n\n\
         [limits]\ncalls_per_minute = 10000000\nmax_connections_per_address = 100000\n\n{}",
        crate::stdio_upstream_config(&ctx.bin, "async")
    );
    let bridge = proc::BridgeProcess::start(&ctx.bin, Some(&ctx.dir), "sessions", &config, &[])
        .await
        .map_err(|e| e.to_string())?;
    let result = rounds(&bridge).await;
    bridge.stop().await;
    result
}

async fn rounds(bridge: &BridgeProcess) -> Result<Vec<Row>, String> {
    let client = reqwest::Client::new();
    // One first, so the start sample is of a warm bridge.
    open(&client, &bridge.mcp_url(), 1).await?;
    freed(bridge).await?;
    let start = bridge.rss_kib();
    let t = Instant::now();
    open(&client, &bridge.mcp_url(), SESSIONS).await?;
    let opening = t.elapsed();
    let held = bridge.rss_kib();
    let open_sessions = bridge.metric("bridge_mcp_sessions_open", None).await?;
    let freed_after = freed(bridge).await?;
    let first = bridge.rss_kib();
    open(&client, &bridge.mcp_url(), SESSIONS).await?;
    let held_again = bridge.rss_kib();
    freed(bridge).await?;
    let second = bridge.rss_kib();
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let per_session = held.saturating_sub(start) as f64 * 1024.0 / SESSIONS as f64;
    let scenario = "sessions, 3,000 abandoned";
    Ok(vec![
        Row::new(
            scenario,
            "bridge RSS: start, held, freed, held again, freed again",
            format!(
                "{} → {} → {} → {} → {} MiB",
                mib(start),
                mib(held),
                mib(first),
                mib(held_again),
                mib(second)
            ),
        ),
        Row::new(
            scenario,
            "memory per held session",
            format!("{:.1} KiB", per_session / 1024.0),
        ),
        Row::new(
            scenario,
            "load",
            format!(
                "{SESSIONS} sessions opened in {:.1} s ({open_sessions} held), never closed; freed {:.1} s after the last (session_idle_secs = {IDLE_SECS}); twice",
                opening.as_secs_f64(),
                freed_after.as_secs_f64()
            ),
        ),
    ])
}

/// Open `n` sessions and leave them.
async fn open(client: &reqwest::Client, url: &str, n: usize) -> Result<(), String> {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let (client, url) = (client.clone(), url.to_string());
        tasks.spawn(async move {
            let _permit = permit;
            open_one(&client, &url).await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| e.to_string())??;
    }
    Ok(())
}

async fn open_one(client: &reqwest::Client, url: &str) -> Result<(), String> {
    let post = |body: &'static str| {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body)
    };
    let answer = post(INITIALIZE).send().await.map_err(|e| e.to_string())?;
    if !answer.status().is_success() {
        return Err(format!("initialize answered {}", answer.status()));
    }
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or("initialize answered without a session id")?
        .to_string();
    answer.bytes().await.map_err(|e| e.to_string())?;
    let done = post(INITIALIZED)
        .header("mcp-session-id", session)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if done.status().as_u16() != 202 {
        return Err(format!(
            "notifications/initialized answered {}",
            done.status()
        ));
    }
    Ok(())
}

/// Wait until the bridge holds no session (its idle timer); how long that took.
async fn freed(bridge: &BridgeProcess) -> Result<Duration, String> {
    let t = Instant::now();
    let bound = Duration::from_secs(IDLE_SECS * 3 + 30);
    loop {
        let open = bridge.metric("bridge_mcp_sessions_open", None).await?;
        let states = bridge.metric("bridge_mcp_session_states", None).await?;
        if open == 0.0 && states == 0.0 {
            // Let the allocator settle what the sessions' tasks freed.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(t.elapsed());
        }
        if t.elapsed() > bound {
            return Err(format!(
                "{open} sessions ({states} with bridge state) still held {} s after the last was used",
                bound.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
