//! Job event streams written by the shared writer tasks (`server.sse_writers`), many readers
//! on one job: readers that read at once, readers that read slowly (their sockets fill, so the
//! writers hand them back to their own tasks, mid-frame too), readers that never read (dropped
//! at their byte bound, as without shared writers), and a reader that leaves mid-job and
//! resumes with `Last-Event-ID`. Every reader that stays gets every event once, in order, and
//! the result whole. Read with raw sockets, every byte seen. On the memory store and on Redis.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, StoreBackend};
use serde_json::Value;
use tokio::{io::AsyncReadExt, net::TcpStream};

const STEPS: u64 = 1500;
const RESULT_BYTES: usize = 10 * 1024 * 1024;
const PROMPT: usize = 40;
const SLOW: usize = 5;
const STALLED: usize = 10;
const BOUND: usize = 256 * 1024;
/// Everything here takes a while on a shared two-core machine.
const LONG: Duration = Duration::from_secs(90);

fn configure(c: &mut Config) {
    c.jobs.mode = CallMode::Async;
    c.jobs.history = 5000;
    // The stalled-reader drop looks every keep-alive interval and drops a reader at its bound
    // that took nothing for two: 5 s, so a reading reader starved that long on a loaded
    // machine (readers and bridge share this process) is not taken for one that stopped.
    c.server.keep_alive_secs = 5;
    c.server.sse_writers = Some(2);
    c.limits.max_sse_buffer_bytes = BOUND;
}

/// Read until the bridge closes the connection; `pause` between reads of at most `piece`.
async fn read_all(mut tcp: TcpStream, piece: usize, pause: Option<Duration>) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = vec![0u8; piece];
    tokio::time::timeout(LONG, async {
        loop {
            let n = tcp.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            all.extend_from_slice(&buf[..n]);
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
    })
    .await
    .expect("the stream to end and the connection to close");
    all
}

/// The events of a chunked SSE response: (id, event, data); panics on a malformed body or
/// one that does not end with the last chunk.
fn events(all: &[u8], who: &str) -> Vec<(u64, String, Value)> {
    let at = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    assert!(all.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let mut body = &all[at + 4..];
    let mut joined = Vec::new();
    loop {
        let line = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            assert_eq!(body, b"\r\n", "the last chunk ends the body");
            break;
        }
        assert!(
            body.len() >= size + 2,
            "{who}: the connection closed {} bytes into a chunk of {size} (after {} bytes of events)",
            body.len(),
            joined.len()
        );
        joined.extend_from_slice(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n", "a chunk ends with CRLF");
        body = &body[size + 2..];
    }
    let text = String::from_utf8(joined).unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        let (mut id, mut event, mut data) = (None, String::new(), None);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = v.into();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).unwrap());
            }
        }
        if let (Some(id), Some(data)) = (id, data) {
            out.push((id, event, data));
        }
    }
    out
}

/// Every event once, in order: the snapshot, then consecutive ids up to `completed`, whose
/// result is whole.
fn assert_whole(events: &[(u64, String, Value)], who: &str) {
    assert_eq!(events[0].1, "status", "{who}: the snapshot first");
    let ids: Vec<u64> = events.iter().skip(1).map(|e| e.0).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "{who}: every event once, in order: {:?}",
        ids.windows(2).find(|w| w[1] != w[0] + 1)
    );
    assert_eq!(
        ids.first(),
        Some(&(events[0].0 + 1)),
        "{who}: from the snapshot on"
    );
    let (_, kind, data) = events.last().unwrap();
    assert_eq!(kind, "completed", "{who}: ends with the result");
    let text = data["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text.len(), RESULT_BYTES, "{who}: the whole result");
}

/// `inline`: the store delivers the large result live (the memory store does; Redis may send
/// readers to history for it, so its socket need not fill under a writer).
async fn many_readers_one_job(bridge: TestBridge, inline: bool) {
    let to = bridge.running().addr;
    let client = connect(&bridge).await;
    let job = large_result_job(&client, STEPS, 2000, RESULT_BYTES).await;
    let path = job.events_path(&bridge.base);
    let mut readers = Vec::new();
    for i in 0..PROMPT + SLOW {
        let slow = i >= PROMPT;
        let tcp = raw_sse_reader(to, path, None).await;
        let (piece, pause) = if slow {
            (8 * 1024, Some(Duration::from_millis(1)))
        } else {
            (64 * 1024, None)
        };
        readers.push(tokio::spawn(read_all(tcp, piece, pause)));
    }
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(raw_sse_reader(to, path, Some(4096)).await);
    }
    // One reader leaves a third of the way and resumes from its last id. (By the progress
    // value, not the id: an upstream that reports faster than the store takes events has its
    // queued progress merged, so a job may have far fewer events than steps.)
    let first = read_sse_request_within(LONG, reqwest::Client::new().get(&job.events_url), |e| {
        e.event == "progress" && e["progress"].as_f64() >= Some((STEPS / 3) as f64)
    })
    .await;
    let at = first.last().unwrap().seq();
    let brief = |events: &[SseEvent]| -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| (e.id.clone(), e.event.clone()))
            .collect()
    };
    assert_eq!(
        first.last().unwrap().event,
        "progress",
        "the first reader leaves before the end; its last events: {:?}",
        brief(&first[first.len().saturating_sub(5)..])
    );
    let resumed = read_sse_request_within(
        LONG,
        reqwest::Client::new()
            .get(&job.events_url)
            .header("Last-Event-ID", at.to_string()),
        SseEvent::is_terminal,
    )
    .await;
    // (A heartbeat carries the reader's position, and may come first.)
    let resumed: Vec<SseEvent> = resumed
        .into_iter()
        .filter(|e| e.event != "heartbeat")
        .collect();
    assert_eq!(
        resumed[0].seq(),
        at + 1,
        "resumed right after its last id; its first events: {:?}",
        brief(&resumed[..resumed.len().min(5)])
    );
    assert_consecutive(&resumed);
    assert_eq!(resumed.last().unwrap().event, "completed");

    let mut ends = Vec::new();
    for (i, reader) in readers.into_iter().enumerate() {
        let who = if i >= PROMPT {
            "a slow reader"
        } else {
            "a reader"
        };
        let all = reader.await.unwrap();
        let metrics = &bridge.running().metrics;
        let counts = || {
            let handbacks = |r: &str| metrics.sse_handbacks.with_label_values(&[r]).get();
            format!(
                "dropped {}, handbacks full {} partial {} behind {} error {}",
                metrics
                    .sse_readers_dropped
                    .with_label_values(&["buffer"])
                    .get(),
                handbacks("full"),
                handbacks("partial"),
                handbacks("behind"),
                handbacks("error")
            )
        };
        let events = events(&all, &format!("{who} {i} ({})", counts()));
        assert_whole(&events, who);
        ends.push(events.last().unwrap().0);
    }
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "one job, one end");
    assert_eq!(resumed.last().unwrap().seq(), ends[0]);

    // The readers that never read hold their bound and take nothing: dropped, as without
    // shared writers.
    let metrics = &bridge.running().metrics;
    let dropped = metrics.sse_readers_dropped.with_label_values(&["buffer"]);
    eventually_within(
        Duration::from_secs(30),
        "every reader that never reads dropped",
        || async { dropped.get() >= STALLED as u64 && metrics.sse_subscribers.get() == 0 },
    )
    .await;
    assert_eq!(dropped.get(), STALLED as u64, "only those");
    // The shared writers wrote, and handed back the sockets that filled.
    assert!(
        metrics.sse_shared_deliveries.get() > 0,
        "the shared writers wrote"
    );
    let handbacks = |reason: &str| metrics.sse_handbacks.with_label_values(&[reason]).get();
    assert!(
        !inline || handbacks("full") + handbacks("partial") > 0,
        "full sockets were handed back"
    );
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_writers_on_the_memory_store() {
    let bridge = start_bridge(configure).await;
    many_readers_one_job(bridge, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_writers_on_redis() {
    let Some(url) = test_redis("shared_writers_on_redis").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "sse-writers");
    let config = demo_config(|c| {
        configure(c);
        c.store.backend = StoreBackend::Redis;
        c.store.redis_url = url;
        c.store.key_prefix = prefix.to_string();
    });
    let bridge = start_config(config).await;
    many_readers_one_job(bridge, false).await;
    drop(prefix);
}
