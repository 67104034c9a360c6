//! The floor of the fan-out scenario: a bare tokio SSE server, run as its own process
//! (`bench floor-sse --upstream URL`, so its memory and CPU are its own, as the bridge's are),
//! fed the same progress events as the bridge and read by the same readers in the same run.
//!
//! It calls `bench_progress` on the upstream with an rmcp client, as the bridge does, renders
//! each frame once (the bridge's own event JSON and SSE frame in an HTTP/1.1 chunk), shares it
//! as `Bytes` through a `broadcast` channel and writes it with one `write_all` per connection:
//! no HTTP library, routing, auth, limits, history or keep-alives (BENCHMARKS.md, "Method"). A
//! reader more than the channel's capacity behind is dropped. Routes (every answer but the
//! stream closes the connection): `GET /readyz`; `GET /start?count=N&interval_us=I&delay_ms=D`
//! starts the job; `GET /events` streams `status`, the job's events, and ends after `completed`.

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use mcp_progress_bridge::{
    events::sse_frame,
    model::{EventBody, JobId, ProgressUpdate, wire::render_job_event},
};
use rmcp::{
    ClientHandler, RoleClient, model::ProgressNotificationParam, service::NotificationContext,
};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{Notify, broadcast},
};

use crate::mcp;

/// Frames a stream may fall behind before it is dropped.
const CHANNEL: usize = 4096;
/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// One frame on its way to every stream.
#[derive(Clone)]
struct Delivery {
    /// The SSE frame inside its HTTP/1.1 chunk.
    chunk: Bytes,
    terminal: bool,
}

/// Turns the upstream's progress notifications into frames, numbered in arrival order (rmcp
/// hands each notification to its own task, so the number is taken under the lock).
#[derive(Clone)]
struct Feed {
    inner: Arc<FeedInner>,
}

struct FeedInner {
    tx: broadcast::Sender<Delivery>,
    job_id: JobId,
    /// (last event id, progress events sent)
    state: Mutex<(u64, u64)>,
    progressed: Notify,
}

impl Feed {
    fn new() -> Self {
        let (tx, _) = broadcast::channel(CHANNEL);
        Self {
            inner: Arc::new(FeedInner {
                tx,
                job_id: JobId::random(),
                state: Mutex::new((0, 0)),
                progressed: Notify::new(),
            }),
        }
    }

    /// Render and send one event; `progress` events are counted.
    fn send(&self, body: &EventBody) {
        let inner = &self.inner;
        let mut state = inner.state.lock().expect("feed state");
        state.0 += 1;
        let ts = crate::stats::now_us() / 1000;
        let data = render_job_event(inner.job_id, state.0, ts, body);
        let (kind, terminal) = match body {
            EventBody::Progress(_) => ("progress", false),
            _ => ("completed", true),
        };
        let chunk = chunk(&sse_frame::frame(state.0, kind, &data));
        let _ = inner.tx.send(Delivery { chunk, terminal });
        if !terminal {
            state.1 += 1;
        }
        drop(state);
        inner.progressed.notify_waiters();
    }

    /// Wait until `count` progress events have been sent (rmcp may hand over the call's result
    /// before the task holding its last notification has run).
    async fn wait_progress(&self, count: u64) {
        let wait = async {
            loop {
                let notified = self.inner.progressed.notified();
                if self.inner.state.lock().expect("feed state").1 >= count {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), wait).await;
    }
}

impl ClientHandler for Feed {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.send(&EventBody::Progress(ProgressUpdate {
            progress: params.progress,
            total: params.total,
            message: params.message,
        }));
    }
}

fn chunk(frame: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(frame.len() + 12);
    out.extend_from_slice(format!("{:x}\r\n", frame.len()).as_bytes());
    out.extend_from_slice(frame);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

struct Floor {
    feed: Feed,
    upstream: mcp::Client<Feed>,
}

/// `bench floor-sse --upstream URL`: serve until killed.
pub async fn main(upstream: &str) -> ExitCode {
    let feed = Feed::new();
    let upstream = match mcp::connect_http(upstream, feed.clone()).await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("floor-sse: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match listen() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("floor-sse: bind: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    println!("floor-sse listening on http://{addr}");
    let floor = Arc::new(Floor { feed, upstream });
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve(tcp, floor.clone()));
    }
}

/// A long accept queue, as the bridge has.
fn listen() -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.listen(4096)
}

async fn serve(mut tcp: TcpStream, floor: Arc<Floor>) {
    let Some(target) = request_target(&mut tcp).await else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    match path {
        "/events" => stream(tcp, floor.feed.inner.tx.subscribe()).await,
        "/readyz" => respond(tcp, "200 OK", "ready").await,
        "/start" => {
            let answer = start(&floor, query);
            respond(tcp, "200 OK", &answer).await;
        }
        _ => respond(tcp, "404 Not Found", "").await,
    }
}

/// The target of the request line, once the whole head is in.
async fn request_target(tcp: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD || tcp.read_buf(&mut head).await.ok()? == 0 {
            return None;
        }
    }
    let line = head.split(|b| *b == b'\r').next()?;
    let target = line.split(|b| *b == b' ').nth(1)?;
    Some(String::from_utf8_lossy(target).into_owned())
}

async fn respond(mut tcp: TcpStream, status: &str, body: &str) {
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(answer.as_bytes()).await;
    let _ = tcp.shutdown().await;
}

/// Start the job: call `bench_progress` with the query's numbers; `completed` follows its
/// result.
fn start(floor: &Arc<Floor>, query: &str) -> String {
    let number = |key: &str| -> u64 {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let count = number("count");
    let args = json!({
        "count": count,
        "interval_us": number("interval_us"),
        "delay_ms": number("delay_ms"),
    });
    let floor = floor.clone();
    tokio::spawn(async move {
        match mcp::call(&floor.upstream, "bench_progress", args).await {
            Ok(result) => {
                floor.feed.wait_progress(count).await;
                let result = serde_json::to_value(&result).unwrap_or_default();
                floor.feed.send(&EventBody::Completed { result });
            }
            Err(e) => eprintln!("floor-sse: {e}"),
        }
    });
    "started".into()
}

/// The SSE response: head and `status` in one write, then every frame as it comes.
async fn stream(mut tcp: TcpStream, mut rx: broadcast::Receiver<Delivery>) {
    let mut first = RESPONSE_HEAD.to_vec();
    first.extend_from_slice(&chunk(b"event: status\ndata: {\"status\":\"running\"}\n\n"));
    if tcp.write_all(&first).await.is_err() {
        return;
    }
    drop(first);
    while let Ok(delivery) = rx.recv().await {
        if tcp.write_all(&delivery.chunk).await.is_err() {
            return;
        }
        if delivery.terminal {
            let _ = tcp.write_all(b"0\r\n\r\n").await;
            return;
        }
    }
}
