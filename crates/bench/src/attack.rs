//! Attacker soak: one bridge at its default limits with two static tokens. Bob attacks (made-up
//! correlation IDs opened and closed, `initialize` floods whose sessions are never closed,
//! streams of made-up correlations opened and held) while alice's calls and readers run; then
//! alice alone for as long on a fresh bridge. Side by side: alice's p99 (progress delivered to
//! her readers, and her calls' round trip) and her errors, what bob was answered, and the
//! bridge's resident memory over each run. Bob connects from addresses of his own, as a client
//! behind several would: his `initialize` and made-up correlation loops from 127.0.0.2, his held
//! streams spread over 127.0.0.3 and 127.0.0.4. From one address the per-address connection
//! limit (1,024) comes first: his held streams took its connections, every later connection of
//! his was refused at accept, and his `initialize` loop stopped short of his session share. So
//! the per-principal shares of sessions and streams are what this measures.
//! Fails if one of alice's calls or readers fails or loses an event.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use parking_lot::Mutex;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
    task::JoinSet,
    time::Instant,
};

use crate::{
    Ctx,
    crowd::Crowd,
    mcp::{self, BenchClient, Client},
    proc::BridgeProcess,
    report::Row,
    stats::Samples,
};

const ALICE: &str = "alice-bench-token-0123456789abcdef";
const BOB: &str = "bob-bench-token-0123456789abcdefgh";
/// Where bob's requests come from; his held streams come from [`BOB_STREAM_ADDRS`].
const BOB_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// Where bob's held streams come from, in turn: below the per-address connection limit each.
const BOB_STREAM_ADDRS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4)),
];
const PROGRESS_EVENTS: u64 = 20;
const VICTIM_WORKERS: usize = 2;
const READERS_PER_JOB: usize = 2;
/// Streams bob tries to hold (past every default share).
const HELD_STREAMS: usize = 2_000;
/// RSS samples over one run.
const SAMPLES: u32 = 10;
const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// What alice measured in one run.
#[derive(Default)]
struct Victim {
    delivery: Samples,
    calls: Samples,
    jobs: u64,
    errors: Vec<String>,
}

/// What bob was answered: requests by kind, then by status (0: no answer, the connection
/// closed or was refused).
type Answers = BTreeMap<(&'static str, u16), u64>;

/// One run: alice's figures, bob's answers, RSS samples (MiB).
struct RunFigures {
    victim: Victim,
    answers: Answers,
    rss: Vec<f64>,
}

pub async fn run(ctx: &Ctx) -> Result<Vec<Row>, String> {
    let secs = ctx.pick(8, 90);
    let alone = one_run(ctx, "attack-off", secs, false).await?;
    let attacked = one_run(ctx, "attack-on", secs, true).await?;
    let rows = rows(secs, &alone, &attacked);
    for (label, run) in [("alone", &alone), ("attacked", &attacked)] {
        if let Some(first) = run.victim.errors.first() {
            return Err(format!(
                "{label}: {} of alice's jobs or readers failed (first: {first}); figures: {rows:?}",
                run.victim.errors.len()
            ));
        }
    }
    Ok(rows)
}

fn config(bin: &std::path::Path) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = []\n\n\
         [auth]\nmcp_tokens = [{{ name = \"alice\", token = \"{ALICE}\" }}, {{ name = \"bob\", token = \"{BOB}\" }}]\n\n{}",
        crate::stdio_upstream_config(bin, "async")
    )
}

async fn one_run(ctx: &Ctx, name: &str, secs: u64, attack: bool) -> Result<RunFigures, String> {
    let bridge = BridgeProcess::start(
        &ctx.bin,
        Some(&ctx.dir),
        name,
        &config(&ctx.bin),
        &[("RUST_LOG", "warn")],
    )
    .await
    .map_err(|e| e.to_string())?;
    let alice = Arc::new(
        mcp::connect_http_as(&bridge.mcp_url(), Some(ALICE), BenchClient::default()).await?,
    );
    let end = Instant::now() + Duration::from_secs(secs);
    let answers = Arc::new(Mutex::new(Answers::new()));
    let mut bob = JoinSet::new();
    if attack {
        spawn_attacker(&mut bob, bridge.addr, &answers, end);
    }
    let mut victims = JoinSet::new();
    for _ in 0..VICTIM_WORKERS {
        let (alice, addr) = (alice.clone(), bridge.addr);
        victims.spawn(async move { victim(addr, &alice, end).await });
    }
    let mut rss = vec![bridge.rss_kib() as f64 / 1024.0];
    for i in 1..=SAMPLES {
        tokio::time::sleep_until(
            end - Duration::from_secs(secs) + Duration::from_secs(secs) * i / SAMPLES,
        )
        .await;
        rss.push(bridge.rss_kib() as f64 / 1024.0);
    }
    let mut figures = Victim::default();
    while let Some(joined) = victims.join_next().await {
        let v = joined.map_err(|e| format!("alice's worker panicked: {e}"))?;
        figures.delivery.extend(v.delivery.values());
        figures.calls.extend(v.calls.values());
        figures.jobs += v.jobs;
        figures.errors.extend(v.errors);
    }
    bob.shutdown().await;
    if let Ok(alice) = Arc::try_unwrap(alice) {
        let _ = alice.cancel().await;
    }
    bridge.stop().await;
    let answers = answers.lock().clone();
    Ok(RunFigures {
        victim: figures,
        answers,
        rss,
    })
}

/// Alice: a progress job at a time, its call timed, two readers following it to the end.
async fn victim(addr: SocketAddr, alice: &Client, end: Instant) -> Victim {
    let mut v = Victim::default();
    while Instant::now() < end {
        let t = Instant::now();
        let arguments = json!({ "count": PROGRESS_EVENTS, "interval_us": 20_000 });
        let handle = match mcp::call(alice, "demo__bench_progress", arguments).await {
            Ok(handle) => handle,
            Err(e) => {
                v.errors.push(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        v.calls.push(t.elapsed().as_micros() as u64);
        let followed = async {
            let path = mcp::events_path(&handle)?;
            let mut crowd = Crowd::spawn(
                addr,
                std::slice::from_ref(&path),
                READERS_PER_JOB,
                PROGRESS_EVENTS,
            );
            crowd.wait_connected().await?;
            crowd.mark_all_in();
            crowd.finish(JOB_TIMEOUT).await
        };
        match followed.await {
            Ok(delivered) => v.delivery.extend(delivered.all.values()),
            Err(e) => v.errors.push(e),
        }
        v.jobs += 1;
    }
    v
}

/// Bob: two loops of made-up correlations opened and closed, one of `initialize` requests
/// whose sessions he never closes, one opening streams and holding them.
fn spawn_attacker(
    bob: &mut JoinSet<()>,
    addr: SocketAddr,
    answers: &Arc<Mutex<Answers>>,
    end: Instant,
) {
    let counted = |kind: &'static str| {
        let answers = answers.clone();
        move |status: u16| *answers.lock().entry((kind, status)).or_default() += 1
    };
    for lane in 0..2u64 {
        let count = counted("made-up correlation opened and closed");
        bob.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let path = format!("/correlations/made-up-{lane}-{n}/events");
                count(
                    request(addr, &get(addr, &path), BOB_ADDR)
                        .await
                        .map_or(0, |(status, _)| status),
                );
            }
        });
    }
    let count = counted("initialize (session never closed)");
    bob.spawn(async move {
        while Instant::now() < end {
            count(
                request(addr, &initialize(addr), BOB_ADDR)
                    .await
                    .map_or(0, |(status, _)| status),
            );
        }
    });
    let count = counted("stream opened and held");
    bob.spawn(async move {
        let mut held = Vec::new();
        for n in 0..HELD_STREAMS {
            if Instant::now() >= end {
                break;
            }
            let from = BOB_STREAM_ADDRS[n % BOB_STREAM_ADDRS.len()];
            let path = format!("/correlations/flood-{n}/events");
            let opened = request(addr, &get(addr, &path), from).await;
            match opened {
                Ok((200, tcp)) => {
                    count(200);
                    held.push(tcp);
                }
                other => {
                    count(other.map_or(0, |(status, _)| status));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        tokio::time::sleep_until(end).await;
        drop(held);
    });
}

fn get(addr: SocketAddr, path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {BOB}\r\nAccept: text/event-stream\r\n\r\n"
    )
}

fn initialize(addr: SocketAddr) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bob","version":"1"}}}"#;
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {BOB}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Send `text` from bob's address `from` and read the status of the answer; the connection is
/// returned open (dropped by the caller: with a zero linger it resets, so thousands of them
/// leave no sockets waiting).
async fn request(addr: SocketAddr, text: &str, from: IpAddr) -> std::io::Result<(u16, TcpStream)> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    // A zero linger resets at once: the deprecation is about a non-zero one blocking on drop.
    #[allow(deprecated)]
    socket.set_linger(Some(Duration::ZERO))?;
    let mut tcp = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr)).await??;
    tcp.write_all(text.as_bytes()).await?;
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut head)).await??;
    let status = std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, tcp))
}

fn ms(us: Option<u64>) -> String {
    us.map_or_else(|| "-".into(), |us| format!("{:.1} ms", us as f64 / 1000.0))
}

fn rows(secs: u64, alone: &RunFigures, attacked: &RunFigures) -> Vec<Row> {
    let scenario = format!(
        "attacker soak, {secs} s, alice's load with and without bob attacking (default limits)"
    );
    let p99 = |s: &Samples| ms(s.summary().map(|s| s.p99));
    let side = |metric: &str, a: String, b: String| {
        Row::new(&scenario, metric, b).vs("alice alone", a, "")
    };
    let (a, b) = (&alone.victim, &attacked.victim);
    let load = |v: &Victim| {
        let errors = v.errors.len();
        format!(
            "{} jobs, {} deliveries, {errors} errors",
            v.jobs,
            v.delivery.count()
        )
    };
    let every = secs as f64 / f64::from(SAMPLES);
    vec![
        side(
            "alice: progress delivery p99 (her readers)",
            p99(&a.delivery),
            p99(&b.delivery),
        ),
        side("alice: call round trip p99", p99(&a.calls), p99(&b.calls)),
        side("alice: jobs, readers' deliveries, errors", load(a), load(b))
            .target("0 errors", b.errors.is_empty()),
        side(
            &format!("bridge RSS, MiB, every {every:.0} s"),
            rss(alone),
            rss(attacked),
        ),
        Row::new(&scenario, "bob was answered", answered(&attacked.answers)),
    ]
}

fn rss(run: &RunFigures) -> String {
    let mib: Vec<String> = run.rss.iter().map(|m| format!("{m:.0}")).collect();
    mib.join(" → ")
}

/// Bob's answers, by kind of request: `kind: N × status, …`.
fn answered(answers: &Answers) -> String {
    let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((kind, status), n) in answers {
        let status = if *status == 0 {
            "no answer".to_string()
        } else {
            status.to_string()
        };
        by_kind
            .entry(kind)
            .or_default()
            .push(format!("{n} × {status}"));
    }
    let kinds: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, counts)| format!("{kind}: {}", counts.join(", ")))
        .collect();
    kinds.join("; ")
}
