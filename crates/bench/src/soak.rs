//! Soak: a mixed load for `--soak-secs` (quick mode: 30 s) on one bridge with the demo tools as
//! a stdio child (async mode); its resident memory and open file descriptors are read at the
//! start, in the middle, at the end and once all the load made has expired ("settled"). Flat is
//! the goal: the figures are reported, not judged; the run fails only if a call errors or a
//! reader loses an event. The load, all at once until the time is up: MCP sessions opened, used
//! for one call and closed; progress jobs (20 events, 20 ms apart), two readers following each to
//! the end and one leaving after the first event; `echo` results of 3 MiB, one reader getting all
//! of each and one never reading; slowloris clients (headers one byte every half second, never
//! finished, reconnecting when closed). The bridge keeps finished jobs `RETENTION_SECS` (the
//! default hour would let a short soak only grow), so the load reaches a steady state in seconds.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    task::JoinSet,
    time::Instant,
};

use crate::{
    Ctx,
    crowd::Crowd,
    mcp::{self, BenchClient, Client},
    proc::{self, BridgeProcess},
    report::Row,
    sse::SseReader,
};

const PROGRESS_EVENTS: u64 = 20;
const LARGE_BYTES: usize = 3 * 1024 * 1024;
const SLOWLORIS: usize = 16;
const JOB_WORKERS: usize = 2;
/// Longest one job (with its readers) may take.
const JOB_TIMEOUT: Duration = Duration::from_secs(60);
/// `jobs.retention_secs` of the soak bridge.
const RETENTION_SECS: u64 = 5;

/// What the load did.
#[derive(Default)]
struct Tally {
    sessions: AtomicU64,
    jobs: AtomicU64,
    readers: AtomicU64,
    large: AtomicU64,
    slowloris_bytes: AtomicU64,
    slowloris_closed: AtomicU64,
}

impl Tally {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// RSS (KiB) and open fds of the bridge at one moment.
type Sample = (u64, usize);

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let bridge = proc::start_bridge(
        &ctx.bin,
        &ctx.dir,
        "soak",
        &crate::stdio_upstream_config(&ctx.bin, "async").replacen(
            "[jobs]\n",
            &format!("[jobs]\nretention_secs = {RETENTION_SECS}\n"),
            1,
        ),
    )
    .await
    .map_err(|e| e.to_string())?;
    let result = match mcp::connect_http(&bridge.mcp_url(), BenchClient::default()).await {
        Ok(front) => {
            let front = Arc::new(front);
            let result = soak(ctx, &bridge, &front).await;
            if let Ok(front) = Arc::try_unwrap(front) {
                let _ = front.cancel().await;
            }
            result
        }
        Err(e) => Err(e),
    };
    bridge.stop().await;
    result
}

async fn soak(ctx: &Ctx, bridge: &BridgeProcess, front: &Arc<Client>) -> Result<Vec<Row>, String> {
    // One of each first, so the samples start from a warm bridge.
    let tally = Arc::new(Tally::default());
    progress_job(bridge.addr, front, &tally).await?;
    large_result(bridge.addr, front, &tally, Instant::now()).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = sample(bridge);
    let secs = ctx.soak_secs;
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let mut load = spawn_load(bridge, front, &tally, end);
    tokio::time::sleep_until(started + Duration::from_secs(secs / 2)).await;
    let middle = sample(bridge);
    while let Some(joined) = load.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("a load task panicked: {e}")),
        }
    }
    // Let what the load left behind close before the end sample.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end_sample = sample(bridge);
    // Every job the load made has expired (retention plus the expiry sweep) before the last.
    tokio::time::sleep(Duration::from_secs(RETENTION_SECS + 3)).await;
    let settled = sample(bridge);
    Ok(rows(secs, &tally, [start, middle, end_sample, settled]))
}

fn sample(bridge: &BridgeProcess) -> Sample {
    (bridge.rss_kib(), bridge.open_fds())
}

/// Every kind of load, each looping until `end`.
fn spawn_load(
    bridge: &BridgeProcess,
    front: &Arc<Client>,
    tally: &Arc<Tally>,
    end: Instant,
) -> JoinSet<Result<(), String>> {
    let addr = bridge.addr;
    let mut load = JoinSet::new();
    let url = bridge.mcp_url();
    let t = tally.clone();
    load.spawn(async move { sessions(&url, &t, end).await });
    for _ in 0..JOB_WORKERS {
        let (front, t) = (front.clone(), tally.clone());
        load.spawn(async move {
            while Instant::now() < end {
                progress_job(addr, &front, &t).await?;
            }
            Ok(())
        });
    }
    let (front, t) = (front.clone(), tally.clone());
    load.spawn(async move {
        while Instant::now() < end {
            large_result(addr, &front, &t, end).await?;
        }
        Ok(())
    });
    for _ in 0..SLOWLORIS {
        let t = tally.clone();
        load.spawn(async move {
            slowloris(addr, &t, end).await;
            Ok(())
        });
    }
    load
}

/// MCP sessions opened, used for one call, closed.
async fn sessions(url: &str, tally: &Tally, end: Instant) -> Result<(), String> {
    while Instant::now() < end {
        let client = mcp::connect_http(url, BenchClient::default()).await?;
        let handle = mcp::call(&client, "demo__echo", json!({ "text": "hello" })).await;
        let _ = client.cancel().await;
        mcp::job_id(&handle?)?;
        Tally::add(&tally.sessions, 1);
    }
    Ok(())
}

/// A progress job with two readers to the end and one that leaves after the first event.
async fn progress_job(addr: SocketAddr, front: &Client, tally: &Tally) -> Result<(), String> {
    let handle = mcp::call(
        front,
        "demo__bench_progress",
        json!({ "count": PROGRESS_EVENTS, "interval_us": 20_000 }),
    )
    .await?;
    let path = mcp::events_path(&handle)?;
    let mut crowd = Crowd::spawn(addr, std::slice::from_ref(&path), 2, PROGRESS_EVENTS);
    let mut leaver = SseReader::open(addr, &path)
        .await
        .map_err(|e| format!("leaving reader: {e}"))?;
    for _ in 0..2 {
        leaver
            .next()
            .await
            .map_err(|e| format!("leaving reader: {e}"))?;
    }
    drop(leaver);
    crowd.wait_connected().await?;
    crowd.finish(JOB_TIMEOUT).await?;
    Tally::add(&tally.jobs, 1);
    Tally::add(&tally.readers, 3);
    Ok(())
}

/// A 3 MiB result, read whole by one reader while another never reads.
async fn large_result(
    addr: SocketAddr,
    front: &Client,
    tally: &Tally,
    end: Instant,
) -> Result<(), String> {
    let text = "x".repeat(LARGE_BYTES);
    let handle = mcp::call(front, "demo__echo", json!({ "text": text })).await?;
    let path = mcp::events_path(&handle)?;
    let stalled = open_never_read(addr, &path).await?;
    let mut crowd = Crowd::spawn(addr, std::slice::from_ref(&path), 1, 0);
    crowd.wait_connected().await?;
    let delivered = crowd.finish(JOB_TIMEOUT).await?;
    if delivered.largest_terminal < LARGE_BYTES {
        return Err(format!(
            "the reader of a {LARGE_BYTES}-byte result got a {}-byte `completed`",
            delivered.largest_terminal
        ));
    }
    // The stalled reader is held a while longer (never past the end), then dropped.
    tokio::time::sleep_until(end.min(Instant::now() + Duration::from_secs(3))).await;
    drop(stalled);
    Tally::add(&tally.large, 1);
    Tally::add(&tally.readers, 2);
    Ok(())
}

/// A reader that sends its request and never reads a byte of the answer.
pub async fn open_never_read(addr: SocketAddr, path: &str) -> Result<TcpStream, String> {
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("stalled reader: {e}"))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("stalled reader: {e}"))?;
    Ok(tcp)
}

/// Request headers one byte every half second, never finished; when the bridge closes the
/// connection, count it and start again.
async fn slowloris(addr: SocketAddr, tally: &Tally, end: Instant) {
    let head = b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Slow: ";
    while Instant::now() < end {
        let Ok(mut tcp) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let mut sent = 0usize;
        let mut buf = [0u8; 256];
        loop {
            let byte = head.get(sent).copied().unwrap_or(b'a');
            tokio::select! {
                () = tokio::time::sleep_until(end) => return,
                read = tcp.read(&mut buf) => {
                    // An answer (408, 400) or a close: the bridge gave up on this one.
                    let _ = read;
                    Tally::add(&tally.slowloris_closed, 1);
                    break;
                }
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    if tcp.write_all(&[byte]).await.is_err() {
                        Tally::add(&tally.slowloris_closed, 1);
                        break;
                    }
                    sent += 1;
                    Tally::add(&tally.slowloris_bytes, 1);
                }
            }
        }
    }
}

fn rows(secs: u64, t: &Tally, samples: [Sample; 4]) -> Vec<Row> {
    let scenario = format!("soak, {secs} s mixed load, retention {RETENTION_SECS} s");
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let [(r0, f0), (r1, f1), (r2, f2), (r3, f3)] = samples;
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    vec![
        Row::new(
            &scenario,
            "bridge RSS: start, middle, end, settled",
            format!("{} → {} → {} → {} MiB", mib(r0), mib(r1), mib(r2), mib(r3)),
        ),
        Row::new(
            &scenario,
            "bridge open fds: start, middle, end, settled",
            format!("{f0} → {f1} → {f2} → {f3}"),
        ),
        Row::new(
            &scenario,
            "load",
            format!(
                "{} MCP sessions opened and closed; {} progress jobs ({PROGRESS_EVENTS} events, 2 readers to the end, 1 leaving early); {} results of {} MiB (1 reader, 1 never reading); {SLOWLORIS} slowloris clients ({} header bytes sent, {} connections closed by the bridge)",
                get(&t.sessions),
                get(&t.jobs),
                get(&t.large),
                LARGE_BYTES / (1024 * 1024),
                get(&t.slowloris_bytes),
                get(&t.slowloris_closed),
            ),
        ),
        Row::new(
            &scenario,
            "checked",
            format!(
                "no call failed; {} readers, each got every event of its job (the leaving ones until they left)",
                get(&t.readers)
            ),
        ),
    ]
}
