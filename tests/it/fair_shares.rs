//! One principal cannot exhaust what others need: reading correlations that have no job leaves
//! nothing behind (the bridge's resident memory stays flat over 20,000 made-up ones, on the
//! memory store and on Redis), and the job and correlation routes are rate-limited per
//! principal and, for capability readers, per client address. The bridge runs as a child
//! process; its RSS is read from `/proc`.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ALICE: &str = "alice-fair-share-token-0123456789";
const BOB: &str = "bob-fair-share-token-0123456789ab";

/// The `[auth]` section with two static tokens, alice and bob.
fn two_callers() -> String {
    format!(
        "[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\nmcp_tokens = [\
         {{ name = \"alice\", token = \"{ALICE}\" }}, {{ name = \"bob\", token = \"{BOB}\" }}]\n"
    )
}

/// The bridge process's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Open `GET path` with alice's token, read the answer's status line, and close at once
/// (with a reset, so 20,000 of them leave no sockets waiting on this side).
async fn open_and_close(bridge: &BridgeProcess, path: &str) -> u16 {
    let socket = tokio::net::TcpStream::connect(bridge.addr).await.unwrap();
    // A zero linger resets at once: the deprecation is about a non-zero one blocking on drop.
    #[allow(deprecated)]
    socket.set_linger(Some(Duration::ZERO)).unwrap();
    let mut socket = socket;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {ALICE}\r\n\r\n",
        bridge.addr
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    socket.read_exact(&mut head).await.unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

/// `n` made-up correlations opened and closed, 32 at a time; every one is served (200).
async fn made_up_correlations(bridge: &BridgeProcess, from: usize, n: usize) {
    use futures::StreamExt;
    let statuses: Vec<u16> = futures::stream::iter(from..from + n)
        .map(|i| async move {
            open_and_close(bridge, &format!("/correlations/made-up-{i}/events")).await
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "every made-up correlation is served: {:?}",
        statuses.iter().find(|s| **s != 200)
    );
}

/// The `bridge_sse_subscribers` gauge of a bridge.
async fn open_streams(bridge: &BridgeProcess) -> u64 {
    let text = bridge
        .http()
        .get(format!("{}/metrics", bridge.base()))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("bridge_sse_subscribers "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// 20,000 made-up correlations opened and closed: RSS after them, and how much it grew (KiB),
/// measured after a warm-up of 2,000 and once every stream is closed.
async fn rss_over_made_up_correlations(store: &str) -> (u64, u64) {
    let config = format!(
        "{}[limits]\njob_requests_per_minute = 10000000\n{store}\n{}",
        two_callers(),
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[("RUST_LOG", "warn")]).await;
    made_up_correlations(&bridge, 0, 2_000).await;
    eventually("the warm-up's streams close", || async {
        open_streams(&bridge).await == 0
    })
    .await;
    let warm = rss_kib(bridge.pid);
    made_up_correlations(&bridge, 2_000, 20_000).await;
    eventually("every stream closes", || async {
        open_streams(&bridge).await == 0
    })
    .await;
    let after = rss_kib(bridge.pid);
    bridge.stop().await;
    (after, after.saturating_sub(warm))
}

/// Reading a correlation that has no job creates nothing that outlives the stream: 20,000
/// made-up ones (each kept a log and a 128-slot live ring for `jobs.retention_secs`: RSS went
/// 22 → 109 MB) leave the bridge's memory where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_correlations_leave_nothing_behind() {
    let (after, grown) = rss_over_made_up_correlations("").await;
    println!("memory store: RSS {after} KiB after 20,000 made-up correlations, grew {grown} KiB");
    assert!(
        grown < 8 * 1024,
        "RSS grew {grown} KiB over 20,000 made-up correlations (memory store)"
    );
    let Some(url) = test_redis("made_up_correlations_leave_nothing_behind").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "made_up_correlations");
    let (after, grown) = rss_over_made_up_correlations(&redis_store_toml(&url, &prefix, 5)).await;
    println!("Redis store: RSS {after} KiB after 20,000 made-up correlations, grew {grown} KiB");
    assert!(
        grown < 8 * 1024,
        "RSS grew {grown} KiB over 20,000 made-up correlations (Redis store)"
    );
}

/// The job and correlation routes answer 429 past `limits.job_requests_per_minute` for one
/// principal (another keeps its own allowance), and past
/// `limits.job_requests_per_minute_per_address` for capability readers; each refusal says
/// when to come back and is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_routes_are_rate_limited_per_principal_and_per_address() {
    let config = format!(
        "{}[limits]\njob_requests_per_minute = 5\njob_requests_per_minute_per_address = 3\n{}",
        two_callers(),
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[]).await;
    let http = bridge.http();
    let base = bridge.base();
    // A caller's own correlation stream (a credential opens it, whatever its ID).
    let own_url = format!("{base}/correlations/turn-0/events");
    let open = |token: &'static str| {
        let request = http.get(&own_url).bearer_auth(token);
        async move { request.send().await.unwrap() }
    };
    for i in 0..5 {
        assert_eq!(open(ALICE).await.status(), 200, "alice's request {i}");
    }
    let refused = open(ALICE).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body = refused.text().await.unwrap();
    assert!(body.contains("limits.job_requests_per_minute"), "{body}");
    assert_eq!(open(BOB).await.status(), 200, "bob has his own allowance");

    // Capability readers (a token, or none that opens anything) count per address.
    let tokens = job_tokens();
    let cid: mcp_progress_bridge::model::CorrelationId = "turn-1".parse().unwrap();
    let corr_url = format!(
        "{base}/correlations/turn-1/events?token={}",
        tokens.correlation(&cid)
    );
    for i in 0..3 {
        let answer = http.get(&corr_url).send().await.unwrap();
        assert_eq!(answer.status(), 200, "capability request {i}");
    }
    let refused = http.get(&corr_url).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("limits.job_requests_per_minute_per_address"),
        "{body}"
    );
    let metrics = http
        .get(format!("{base}/metrics"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "bridge_requests_refused_total{reason=\"job_rate_limit\"} 2",
        "bridge_limit_hits_total{limit=\"job_requests_per_minute\"} 1",
        "bridge_limit_hits_total{limit=\"job_requests_per_minute_per_address\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    bridge.stop().await;
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// One principal cannot take the sessions or the stream places others need: with
/// `max_sessions = 8` and `max_subscribers = 8`, alice stops at a quarter of each (503 naming
/// the key, counted) while bob still initializes and reads his own stream. (Before, alice's
/// `initialize` loop and her made-up correlation streams, each its own channel, took them all.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_takes_at_most_a_quarter_of_sessions_and_streams() {
    let config = format!(
        "{}[limits]\nmax_sessions = 8\nmax_subscribers = 8\n{}",
        two_callers(),
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[]).await;
    let mcp = bridge.mcp_url();
    let initialize = |token: &'static str| {
        let raw = RawMcp::new(&mcp, Some(token));
        async move { raw.post(INIT, &[]).await }
    };
    for i in 0..2 {
        assert_eq!(initialize(ALICE).await.status, 200, "alice's session {i}");
    }
    let refused = initialize(ALICE).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.body.contains("limits.max_sessions_per_principal"),
        "{}",
        refused.body
    );
    assert_eq!(
        initialize(BOB).await.status,
        200,
        "bob still gets a session"
    );

    let http = bridge.http();
    let open = |token: &'static str, cid: String| {
        let request = http
            .get(format!("{}/correlations/{cid}/events", bridge.base()))
            .bearer_auth(token);
        async move { request.send().await.unwrap() }
    };
    let mut held = Vec::new();
    for i in 0..2 {
        let stream = open(ALICE, format!("made-up-{i}")).await;
        assert_eq!(stream.status(), 200, "alice's stream {i}");
        held.push(stream);
    }
    let refused = open(ALICE, "made-up-9".into()).await;
    assert_eq!(refused.status(), 503);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("limits.max_subscribers_per_principal"),
        "{body}"
    );
    let own = open(BOB, "turn-1".into()).await;
    assert_eq!(own.status(), 200, "bob still reads his own stream");

    let metrics = http
        .get(format!("{}/metrics", bridge.base()))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "bridge_limit_hits_total{limit=\"max_sessions_per_principal\"} 1",
        "bridge_limit_hits_total{limit=\"max_subscribers_per_principal\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    drop((held, own));
    bridge.stop().await;
}

/// One principal cannot take the places of followed tasks others need: with
/// `max_followed_tasks = 4`, alice's listen requests follow one task (a quarter; the rest are
/// not acknowledged, counted under the key) while bob's task is still acknowledged. (Before,
/// alice's listen requests could follow all four.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_follows_at_most_a_quarter_of_the_followed_tasks() {
    use crate::listen_tasks::{TOKEN_A, TOKEN_B, acknowledged, listen, slow_task};
    use mcp_progress_bridge::config::CallMode;
    use serde_json::json;
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Auto;
        c.jobs.sync_budget_ms = 200;
        c.limits.max_followed_tasks = 4;
        c.auth.mcp_tokens = named_tokens(&[("a", TOKEN_A), ("b", TOKEN_B)]);
    })
    .await;
    let alices = [
        slow_task(&bridge, TOKEN_A, 100).await,
        slow_task(&bridge, TOKEN_A, 100).await,
    ];
    let bobs = slow_task(&bridge, TOKEN_B, 100).await;
    let (first, _held) =
        acknowledged(listen(&bridge, TOKEN_A, json!({"taskIds": alices})).await).await;
    assert_eq!(
        first["params"]["notifications"]["taskIds"],
        json!([alices[0]]),
        "alice follows her share: {first}"
    );
    let (again, _) =
        acknowledged(listen(&bridge, TOKEN_A, json!({"taskIds": [alices[1]]})).await).await;
    assert_eq!(
        again["params"]["notifications"]["taskIds"],
        json!([]),
        "{again}"
    );
    let (bobs_ack, _) =
        acknowledged(listen(&bridge, TOKEN_B, json!({"taskIds": [bobs]})).await).await;
    assert_eq!(
        bobs_ack["params"]["notifications"]["taskIds"],
        json!([bobs]),
        "bob still follows his task: {bobs_ack}"
    );
    let metrics = bridge.running().metrics.render();
    let line = "bridge_limit_hits_total{limit=\"max_followed_tasks_per_principal\"} 2";
    assert!(metrics.contains(line), "{line} in\n{metrics}");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// One principal cannot take the places of answers waiting for a verdict from another replica
/// (Redis store): three replicas, alice's two questions on R1, bob's on R2, every answer sent
/// to R3 (as a load balancer may). R1 pauses (SIGSTOP: as slow to give verdicts as a replica
/// can be), so alice's answers, relayed from R3 to R1, wait; with `max_input_relays = 2` and a
/// share of one, the first holds her share and the second is refused at once, naming the key
/// and counted, while bob's answer still gets its place, is taken on R2 and ends his job.
/// (Before, one bound of 1024 for all: alice's waiting answers could leave bob's none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_cannot_take_the_places_of_relayed_answers() {
    use serde_json::json;
    let Some(url) = test_redis("fair_shares::relays").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "relay-shares");
    // A lease long enough that R1's pause does not hand its jobs over; a relay wait longer
    // than the test needs; alice's two questions on two upstreams (a connection shows a
    // question only while one call is in flight on it).
    let config = format!(
        "{}[jobs]\nmode = \"async\"\n[limits]\nmax_input_relays = 2\n\
         max_input_relays_per_principal = 1\n{}input_relay_timeout_ms = 60000\n{}{}",
        two_callers(),
        redis_store_toml(&url, &prefix, 120),
        demo_upstream_toml("{}"),
        demo_upstream_toml("{}").replace("name = \"demo\"", "name = \"other\"")
    );
    let (r1, r2, r3) = tokio::join!(
        spawn_bridge(&config, &[]),
        spawn_bridge(&config, &[]),
        spawn_bridge(&config, &[])
    );
    let alice = connect_with(&r1.mcp_url(), Some(ALICE), None).await;
    let bob = connect_with(&r2.mcp_url(), Some(BOB), None).await;
    // A question asked on `on`, and its input and events URLs on R3.
    let ask = |client, on: String, tool: &'static str, question: &'static str| {
        let r3 = r3.base();
        async move {
            let handle = running_job(client, tool, json!({"question": question})).await;
            let events = handle.events_url.replace(&on, &r3);
            read_sse(&events, None, |e| e.event == "input_required").await;
            (handle.input_url().replace(&on, &r3), events)
        }
    };
    let (alice_1, _) = ask(&alice, r1.base(), "demo__ask", "First?").await;
    let (alice_2, _) = ask(&alice, r1.base(), "other__ask", "Second?").await;
    let (bob_input, bob_events) = ask(&bob, r2.base(), "demo__ask", "Yours?").await;

    r1.signal(libc::SIGSTOP);
    let answer = |input: String| {
        tokio::spawn(async move {
            let body = json!({"action": "accept", "content": {"answer": "alice"}});
            let (status, answer) = post_answer(&input, body).await;
            (input, status, answer)
        })
    };
    let first = answer(alice_1);
    let second = answer(alice_2);
    // One of alice's answers holds her share (it waits for R1); the other is refused.
    let either = within(
        "one of alice's answers",
        futures::future::select(first, second),
    )
    .await;
    let (refused, held) = match either {
        futures::future::Either::Left((done, other)) => (done, other),
        futures::future::Either::Right((done, other)) => (done, other),
    };
    let (refused_input, status, body) = refused.expect("alice's answer");
    assert_eq!(status, 503, "{body}");
    let message = body.to_string();
    assert!(
        message.contains("limits.max_input_relays_per_principal"),
        "{message}"
    );

    let (status, body) = post_answer(
        &bob_input,
        json!({"action": "accept", "content": {"answer": "bob"}}),
    )
    .await;
    assert_eq!(status, 200, "bob's answer finds a place: {body}");
    assert!(
        !held.is_finished(),
        "alice's other answer still waits for R1 (else bob's found a free place by luck)"
    );
    let events = read_sse(&bob_events, None, SseEvent::is_terminal).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed", "{last:?}");
    assert_eq!(last.data["result"]["content"][0]["text"], "you said: bob");

    let metrics = r3
        .http()
        .get(format!("{}/metrics", r3.base()))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "bridge_limit_hits_total{limit=\"max_input_relays_per_principal\"} 1",
        "bridge_input_relays_total{outcome=\"taken\"} 1",
        "bridge_input_relays_total{outcome=\"busy\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("bridge_limit_hits_total{limit=\"max_input_relays\"}"));

    // R1 goes on: it takes alice's held answer, which was still within its wait; her place
    // is free again, and her refused answer gets through now.
    r1.signal(libc::SIGCONT);
    let (_, status, body) = within("alice's held answer", held)
        .await
        .expect("the answer task");
    assert_eq!(status, 200, "{body}");
    let again = json!({"action": "accept", "content": {"answer": "alice"}});
    let (status, body) = post_answer(&refused_input, again).await;
    assert_eq!(status, 200, "{body}");
    drop((alice, bob));
    tokio::join!(r1.stop(), r2.stop(), r3.stop());
}
