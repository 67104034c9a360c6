//! Event streams the bridge writes on the socket itself (`http::serve::direct`), read with raw
//! sockets so every byte is seen: an HTTP/1.0 reader (the stream delimited by the close), a
//! request head split over several writes, a head on a stream's path that never completes
//! (cut by `server.header_read_timeout_secs`, counted), a refused stream answered by hyper on
//! a connection that stays open for the next request, and a reader that leaves mid-stream
//! (its subscriber place given back). On the memory store and on Redis.

use std::{net::SocketAddr, time::Duration};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, StoreBackend};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const STEPS: u64 = 20;

/// An SSE event as read off the wire: (id, event, data).
type Raw = (String, String, Value);

/// The response's head and its body, read until the bridge closes the connection.
async fn read_to_close(mut tcp: TcpStream) -> (String, Vec<u8>) {
    let mut all = Vec::new();
    within("the stream to end and the connection to close", async {
        tcp.read_to_end(&mut all).await.unwrap();
    })
    .await;
    let at = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&all)));
    let head = String::from_utf8(all[..at].to_vec()).unwrap();
    (head, all[at + 4..].to_vec())
}

/// The body of a chunked response, its chunks joined; panics unless it ends with the last
/// chunk.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a size line");
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            assert_eq!(body, b"\r\n", "the last chunk ends the body");
            return out;
        }
        out.extend_from_slice(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n");
        body = &body[size + 2..];
    }
}

/// The events of an SSE body (comments and `retry:` skipped).
fn events(body: &[u8]) -> Vec<Raw> {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        let (mut id, mut event, mut data) = (String::new(), String::new(), None);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.into();
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = v.into();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).unwrap());
            }
        }
        if let Some(data) = data {
            out.push((id, event, data));
        }
    }
    out
}

/// A whole job stream: `status` first, ids consecutive, every step, `completed` last.
fn assert_whole(events: &[Raw], who: &str) {
    assert_eq!(events[0].1, "status", "{who}: {events:?}");
    let ids: Vec<u64> = events.iter().map(|e| e.0.parse().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{who}: {ids:?}");
    let steps: Vec<f64> = events
        .iter()
        .filter(|e| e.1 == "progress")
        .map(|e| e.2["progress"].as_f64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{who}: {steps:?}");
    assert_eq!(steps.last(), Some(&(STEPS as f64)), "{who}");
    assert_eq!(events.last().unwrap().1, "completed", "{who}");
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn connect(to: SocketAddr) -> TcpStream {
    within("connect", TcpStream::connect(to)).await.unwrap()
}

fn subscribers(bridge: &TestBridge) -> i64 {
    bridge.running().metrics.sse_subscribers.get()
}

async fn readers_of_every_kind(bridge: TestBridge) {
    let to = bridge.running().addr;
    let client = crate::common::connect(&bridge).await;
    let job = running_job(
        &client,
        "demo__bench_progress",
        json!({ "count": STEPS, "interval_us": 50_000, "delay_ms": 1500 }),
    )
    .await;
    let path = job.events_path(&bridge.base);

    // HTTP/1.0: no chunks, the end of the stream is the close.
    let mut old = connect(to).await;
    let request = format!("GET {path} HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n");
    old.write_all(request.as_bytes()).await.unwrap();

    // HTTP/1.1, the head in pieces (cut inside the request line, a header name, the end).
    let mut split = connect(to).await;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {to}\r\nAccept: text/event-stream\r\nOrigin: http://x\r\n\r\n"
    );
    let cuts = [3, 9, request.len() - 30, request.len() - 1];
    let mut from = 0;
    for cut in cuts {
        split
            .write_all(&request.as_bytes()[from..cut])
            .await
            .unwrap();
        // Pacing, so the pieces arrive apart; nothing is timed.
        tokio::time::sleep(Duration::from_millis(50)).await;
        from = cut;
    }
    split.write_all(&request.as_bytes()[from..]).await.unwrap();

    // A reader that leaves after the first bytes: its place is given back.
    let mut leaving = connect(to).await;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\n\r\n");
    leaving.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = within("the first bytes", leaving.read(&mut first))
        .await
        .unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));

    // A refused stream (a wrong token) is answered by hyper, and the connection serves the
    // next request.
    let mut refused = connect(to).await;
    let wrong = format!("{}?token=wrong", path.split('?').next().unwrap());
    let requests = format!(
        "GET {wrong} HTTP/1.1\r\nHost: {to}\r\n\r\nGET /healthz HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n"
    );
    // The second request in a second write: the first head must be taken alone.
    refused
        .write_all(&requests.as_bytes()[..requests.find("GET /healthz").unwrap()])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    refused
        .write_all(&requests.as_bytes()[requests.find("GET /healthz").unwrap()..])
        .await
        .unwrap();
    let mut answers = Vec::new();
    within("both answers", refused.read_to_end(&mut answers))
        .await
        .unwrap();
    let answers = String::from_utf8_lossy(&answers);
    assert!(answers.starts_with("HTTP/1.1 404 "), "{answers}");
    assert!(
        answers.contains("\"status\":\"ok\""),
        "the next request answered: {answers}"
    );

    drop(leaving);
    let live = read_job_events(&job.events_url).await;
    assert_consecutive(&live);

    let (head, body) = read_to_close(old).await;
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    assert_eq!(header(&head, "content-type"), Some("text/event-stream"));
    assert_eq!(header(&head, "transfer-encoding"), None, "{head}");
    assert!(body.starts_with(b"retry: 2000\n\n"));
    assert_whole(&events(&body), "HTTP/1.0");

    let (head, body) = read_to_close(split).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(header(&head, "transfer-encoding"), Some("chunked"));
    assert_eq!(
        header(&head, "cache-control"),
        Some("no-cache, no-transform")
    );
    assert_eq!(header(&head, "x-accel-buffering"), Some("no"));
    assert!(header(&head, "date").is_some(), "{head}");
    assert_eq!(header(&head, "connection"), Some("close"));
    assert_whole(&events(&dechunk(&body)), "split head");

    eventually("every place given back", || async {
        subscribers(&bridge) == 0
    })
    .await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_readers_on_the_memory_store() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    readers_of_every_kind(bridge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_readers_on_redis() {
    let Some(url) = test_redis("raw_readers_on_redis").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "sse-direct");
    let config = demo_config(|c| {
        c.jobs.mode = CallMode::Async;
        c.store.backend = StoreBackend::Redis;
        c.store.redis_url = url;
        c.store.key_prefix = prefix.to_string();
    });
    let bridge = start_config(config).await;
    readers_of_every_kind(bridge).await;
    drop(prefix);
}

/// A head on a stream's path that never completes is cut at the header timeout, counted as
/// one, and answered nothing; so is a connection that sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_head_that_never_completes_is_cut_at_the_header_timeout() {
    let bridge = start_bridge(|c| c.server.header_read_timeout_secs = 1).await;
    let to = bridge.running().addr;
    let timeouts = || {
        bridge
            .running()
            .metrics
            .connections_closed
            .with_label_values(&["header_timeout"])
            .get()
    };
    let mut slow = connect(to).await;
    slow.write_all(b"GET /jobs/0123/events HTTP/1.1\r\nX-Slow: a")
        .await
        .unwrap();
    let silent = connect(to).await;
    let trickle = async {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if slow.write_all(b"a").await.is_err() {
                break;
            }
        }
    };
    let (_, (head, _)) = tokio::join!(trickle, async {
        let mut answer = Vec::new();
        let mut tcp = silent;
        within(
            "the silent connection is closed",
            tcp.read_to_end(&mut answer),
        )
        .await
        .unwrap();
        (answer, ())
    });
    assert!(head.is_empty(), "nothing answered to a silent connection");
    let mut answer = Vec::new();
    within("the slow head is cut", slow.read_to_end(&mut answer))
        .await
        .ok();
    assert!(answer.is_empty(), "no answer to a head never finished");
    eventually("both counted", || async { timeouts() == 2 }).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}
