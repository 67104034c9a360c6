//! The connection layer under attack: a client that sends its request head or its body slowly
//! is cut after the configured timeout; sockets that hold the connection cap and send nothing
//! do not lock out `/healthz` or an authenticated call; the per-address cap refuses the excess
//! with a 503 that says when to come back, and so does the total cap when every connection is
//! in a request. Small caps and timeouts are configured, so each case runs in seconds.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, Secret};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const TOKEN: &str = "connections-test-token-0123456789";

fn addr(bridge: &TestBridge) -> SocketAddr {
    bridge.running().addr
}

fn closed(bridge: &TestBridge, reason: &str) -> u64 {
    let metrics = &bridge.running().metrics;
    metrics
        .connections_closed
        .with_label_values(&[reason])
        .get()
}

fn refused(bridge: &TestBridge, reason: &str) -> u64 {
    let metrics = &bridge.running().metrics;
    metrics
        .connections_refused
        .with_label_values(&[reason])
        .get()
}

fn open_connections(bridge: &TestBridge) -> i64 {
    let metrics = &bridge.running().metrics;
    metrics.connections_open.with_label_values(&["main"]).get()
}

/// A connection from `from` (a loopback address of the caller's choice).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    within("connect", socket.connect(to)).await.unwrap()
}

/// Send `head` now, then `trickle` one byte every 200 ms, until the bridge closes the
/// connection; return what it answered and when it closed, counted from the first byte.
async fn send_slowly(mut tcp: TcpStream, head: &str, trickle: &[u8]) -> (String, Duration) {
    let started = Instant::now();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let trickle = trickle.to_vec();
    let writer = tokio::spawn(async move {
        for byte in trickle {
            // Pacing the slow client, not synchronisation.
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    within("the bridge closes the slow connection", async {
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    writer.abort();
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_and_a_slow_body_are_cut_after_their_timeouts() {
    let bridge = start_bridge(|c| {
        c.server.header_read_timeout_secs = 1;
        c.server.body_read_timeout_secs = 1;
    })
    .await;
    let to = addr(&bridge);
    // Slowloris: the head, one byte at a time, for far longer than the timeout.
    let tcp = connect_from([127, 0, 0, 1], to).await;
    let header = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let (answer, after) = send_slowly(tcp, "GET /healthz HTTP/1.1\r\n", header.as_bytes()).await;
    assert!(
        answer.is_empty(),
        "no answer to a head never finished: {answer}"
    );
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(4),
        "cut after about 1 s, was {after:?}"
    );
    assert_eq!(closed(&bridge, "header_timeout"), 1);

    // A slow body: the head in one go, then the body a byte at a time.
    let tcp = connect_from([127, 0, 0, 1], to).await;
    let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                Accept: application/json, text/event-stream\r\nContent-Length: 400\r\n\r\n{";
    let (answer, after) = send_slowly(tcp, head, &[b' '; 100]).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains("server.body_read_timeout_secs"), "{answer}");
    assert!(
        after < Duration::from_secs(4),
        "cut after about 1 s, was {after:?}"
    );
    assert_eq!(closed(&bridge, "body_timeout"), 1);

    // The bridge itself is unharmed.
    assert_eq!(get_json(&format!("{}/healthz", bridge.base)).await.0, 200);
    bridge.shutdown(Duration::from_secs(1)).await;
}

fn capped(total: usize, per_address: usize) -> impl FnOnce(&mut Config) {
    move |c| {
        c.auth.mcp_tokens = vec![Secret::literal(TOKEN).into()];
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Async,
        )];
        c.limits.max_connections = total;
        c.limits.max_connections_per_address = per_address;
        // Idle sockets would otherwise be cut by the header timeout before the test is done.
        c.server.header_read_timeout_secs = 120;
        c.server.body_read_timeout_secs = 120;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_at_the_cap_lock_out_neither_health_checks_nor_callers() {
    let bridge = start_bridge(capped(8, 100)).await;
    let to = addr(&bridge);
    // The attacker fills every place, from addresses of its own: some sockets send nothing,
    // some half a head.
    let mut attacker = Vec::new();
    for i in 0..8u8 {
        let mut tcp = connect_from([127, 0, 1, 1 + i % 4], to).await;
        if i % 2 == 1 {
            tcp.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: a")
                .await
                .unwrap();
        }
        attacker.push(tcp);
    }
    eventually("the attacker holds every place", || async {
        open_connections(&bridge) == 8
    })
    .await;
    // A health check, and an authenticated MCP session with a tool call, each get a place.
    assert_eq!(get_json(&format!("{}/healthz", bridge.base)).await.0, 200);
    let client = connect_with_token(&bridge, TOKEN).await;
    let result = call(&client, "demo__echo", json!({ "text": "through" })).await;
    assert!(first_text(&result).contains("through"), "{result:?}");
    assert!(
        closed(&bridge, "evicted") >= 2,
        "idle sockets made room: {}",
        closed(&bridge, "evicted")
    );
    assert_eq!(refused(&bridge, "max_connections"), 0);
    // The sockets that made room were closed: reading one gives its end.
    let mut ended = 0;
    for tcp in &mut attacker {
        let mut buf = [0u8; 16];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut buf)).await
        {
            ended += 1;
        }
    }
    assert!(ended >= 2, "{ended} of the attacker's sockets were closed");
    assert!(open_connections(&bridge) <= 8);
    drop(client);
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Read a whole answer on a connection the bridge closes after it.
async fn answer_of(mut tcp: TcpStream, request: &str) -> String {
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    within("the answer", tcp.read_to_end(&mut answer))
        .await
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

const HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caps_refuse_the_excess_with_a_503_that_says_when_to_retry() {
    let bridge = start_bridge(capped(4, 3)).await;
    let to = addr(&bridge);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from([127, 0, 0, 5], to).await);
    }
    eventually("three connections from one address", || async {
        open_connections(&bridge) == 3
    })
    .await;
    let answer = answer_of(connect_from([127, 0, 0, 5], to).await, HEALTHZ).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    assert!(
        answer.contains("limits.max_connections_per_address"),
        "{answer}"
    );
    assert_eq!(refused(&bridge, "max_connections_per_address"), 1);
    // Another address is served.
    let answer = answer_of(connect_from([127, 0, 0, 6], to).await, HEALTHZ).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    drop(held);
    // Start the MCP part from an empty table. Without this wait the MCP call once got a 503 in
    // .ci/run (not explained: the held connections are idle and could be evicted for room).
    eventually("the held connections are closed", || async {
        open_connections(&bridge) == 0
    })
    .await;

    // Every place in a request (open event streams): no idle one can make room.
    // The job comes from an MCP client, whose own connections may briefly number more than the
    // per-address cap while the bridge still counts one the client closed (seen twice in
    // .ci/run): the bridge then answers 503 with Retry-After, and the client retries, as one
    // should.
    let mut tries = 0;
    let handle = loop {
        let client = connect_with_token(&bridge, TOKEN).await;
        let arguments = json!({ "to": 100, "delay_ms": 1000 });
        match within(
            "call demo__slow_count",
            client.call_tool(call_params("demo__slow_count", arguments)),
        )
        .await
        {
            Ok(answer) => break JobHandle::from_value(structured(&answer)),
            Err(e) if tries < 5 && e.to_string().contains("HTTP 503") => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("call demo__slow_count failed: {e}"),
        }
    };
    assert_eq!(handle.status, "running", "a running job's handle");
    eventually("the MCP client's connections are closed", || async {
        open_connections(&bridge) == 0
    })
    .await;
    let target = handle
        .events_url
        .trim_start_matches(&bridge.base)
        .to_string();
    let mut streams = Vec::new();
    for i in 0..4u8 {
        let mut tcp = connect_from([127, 0, 2, i + 1], to).await;
        let request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        within("the stream's head", tcp.read_exact(&mut head))
            .await
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "stream {i}");
        streams.push(tcp);
    }
    let answer = answer_of(connect_from([127, 0, 3, 1], to).await, HEALTHZ).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("(limits.max_connections)"), "{answer}");
    assert_eq!(refused(&bridge, "max_connections"), 1);
    drop(streams);
    bridge.shutdown(Duration::from_secs(1)).await;
}
