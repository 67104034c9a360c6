//! Several bridge processes sharing one Redis, as behind a load balancer: a job called on one
//! replica is watched, resumed, cancelled and (when its owner dies) ended on another. Each
//! test uses its own key prefix; the tests that stop Redis or count its connections run their
//! own `redis-server`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::common::*;
use rmcp::{
    ServiceError,
    model::{
        CallToolRequestParams, CallToolResponse, InputRequest, TaskPayload, TaskStatus,
        UpdateTaskParams,
    },
};
use serde_json::{Value, json};

/// The lease the replicas in these tests hold (seconds).
const LEASE_SECS: u64 = 2;

/// A replica: the bridge binary as a child process, job handles in async mode, signed with the
/// test job secret, the demo tools as its upstream (`cancellations` answered in sync mode), and
/// `extra` (the store, limits) in its config.
async fn replica(extra: &str) -> BridgeProcess {
    let config = format!(
        "[jobs]\nmode = \"async\"\n[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n{extra}\n{}",
        demo_upstream_toml("{ cancellations = { mode = \"sync\" } }")
    );
    spawn_bridge(&config, &[]).await
}

/// Two replicas on the store `store` (its `[store]` section).
async fn two_replicas(store: &str) -> (BridgeProcess, BridgeProcess) {
    tokio::join!(replica(store), replica(store))
}

/// The `[store]` section of replicas on a Redis Cluster of the test's own.
fn cluster_store(cluster: &RedisCluster) -> String {
    format!(
        "{}redis_cluster = true\n",
        redis_store_toml(&cluster.url(), "replicas", LEASE_SECS)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_called_on_one_replica_streams_on_another_once_and_in_order() {
    let Some(url) = test_redis("replicas::stream").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "stream");
    a_job_called_on_one_replica_streams_on_another_once_and_in_order_on(&redis_store_toml(
        &url, &prefix, LEASE_SECS,
    ))
    .await;
}

/// [`a_job_called_on_one_replica_streams_on_another_once_and_in_order`] on the replicas' store `store`.
async fn a_job_called_on_one_replica_streams_on_another_once_and_in_order_on(store: &str) {
    let (a, b) = two_replicas(store).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(&on_a, "demo__slow_count", json!({"to": 10, "delay_ms": 50})).await;
    let job_id = handle.job_id.as_str();
    assert!(handle.events_url.starts_with(&a.base()));

    let events = read_job_events(&job_events_url(&b.base(), job_id)).await;
    assert_eq!(events[0].event, "status");
    assert_consecutive(&events);
    assert_eq!(
        progress_values(&events),
        (1..=10).map(f64::from).collect::<Vec<_>>()
    );
    let last = events.last().unwrap();
    assert_eq!((last.event.as_str(), last.seq()), ("completed", 11));
    assert_eq!(last.data["result"]["structuredContent"]["counted"], 10);

    // Snapshot and the job tools answer on the other replica too.
    let (status, snapshot) = get_json(&job_status_url(&b.base(), job_id)).await;
    assert_eq!(
        (status, snapshot["status"].as_str()),
        (200, Some("completed"))
    );
    let on_b = connect_url(&b.mcp_url()).await;
    let waited = call(
        &on_b,
        "wait_for_job",
        json!({"job_id": job_id, "timeout_seconds": 5}),
    )
    .await;
    assert_eq!(first_text(&waited), "counted to 10");

    // A second job, waited for on B while it runs on A.
    let handle = running_job(&on_a, "demo__slow_count", json!({"to": 3, "delay_ms": 100})).await;
    let waited = call(
        &on_b,
        "wait_for_job",
        json!({"job_id": handle.job_id, "timeout_seconds": 15}),
    )
    .await;
    assert_eq!(first_text(&waited), "counted to 3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap() {
    let Some(url) = test_redis("replicas::resume").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "resume");
    reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap_on(
        &redis_store_toml(&url, &prefix, LEASE_SECS),
    )
    .await;
}

/// [`reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap`] on the replicas' store `store`.
async fn reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap_on(
    store: &str,
) {
    let (a, b) = two_replicas(store).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(
        &on_a,
        "demo__slow_count",
        json!({"to": 12, "delay_ms": 100}),
    )
    .await;
    let job_id = handle.job_id.as_str();

    // Read on A until the third progress event, then "reconnect" to B.
    let first = read_sse(&job_events_url(&a.base(), job_id), None, |e| {
        e.event == "progress" && e.data["progress"] == 3.0
    })
    .await;
    let last_seen = first.last().unwrap().seq();
    let rest = read_sse(
        &job_events_url(&b.base(), job_id),
        Some(last_seen),
        SseEvent::is_terminal,
    )
    .await;
    assert_eq!(
        rest[0].seq(),
        last_seen + 1,
        "no status event, no gap: {rest:?}"
    );
    assert_consecutive(&rest);
    let mut all = progress_values(&first);
    all.extend(progress_values(&rest));
    assert_eq!(
        all,
        (1..=12).map(f64::from).collect::<Vec<_>>(),
        "every step exactly once"
    );
    assert_eq!(rest.last().unwrap().event, "completed");

    // After the end, both replicas replay the same tail to the same position.
    let from_a = read_sse(&job_events_url(&a.base(), job_id), Some(8), |_| false).await;
    let from_b = read_sse(&job_events_url(&b.base(), job_id), Some(8), |_| false).await;
    let ids = |e: &[SseEvent]| {
        e.iter()
            .map(|e| (e.seq(), e.data.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&from_a), ids(&from_b));
    assert_eq!(
        from_b.iter().map(SseEvent::seq).collect::<Vec<_>>(),
        (9..=13).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner() {
    let Some(url) = test_redis("replicas::cancel").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "cancel");
    a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner_on(&redis_store_toml(
        &url, &prefix, LEASE_SECS,
    ))
    .await;
}

/// [`a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner`] on the replicas' store `store`.
async fn a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner_on(store: &str) {
    let (a, b) = two_replicas(store).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(
        &on_a,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let job_id = handle.job_id.as_str();
    let on_b_url = job_events_url(&b.base(), job_id);
    read_sse(&on_b_url, None, |e| e.event == "progress").await;

    let (status, snapshot) = post_json(&job_cancel_url(&b.base(), job_id)).await;
    assert_eq!(status, 202, "{snapshot}");
    let events = read_job_events(&on_b_url).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled");
    assert!(last.data["reason"].as_str().unwrap().contains("POST"));
    assert_consecutive(&events[1..]);

    // The upstream on A (the owner) saw the cancel.
    assert_eq!(
        cancels_seen(&on_a, "demo", 1).await[0]["tool"],
        "slow_count"
    );

    // cancel_job through B's MCP front: same route, answered once the job has ended.
    let handle = running_job(
        &on_a,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let on_b = connect_url(&b.mcp_url()).await;
    let answer = call_json(&on_b, "cancel_job", json!({"job_id": handle.job_id})).await;
    assert_eq!(
        (answer["status"].as_str(), answer["cancelled"].as_bool()),
        (Some("cancelled"), Some(true)),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease() {
    let Some(url) = test_redis("replicas::owner_lost").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "owner-lost");
    killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease_on(&redis_store_toml(
        &url, &prefix, LEASE_SECS,
    ))
    .await;
}

/// [`killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease`] on the replicas' store `store`.
async fn killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease_on(store: &str) {
    let (mut a, b) = two_replicas(store).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(
        &on_a,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    let job_id = handle.job_id.clone();
    let url_b = job_events_url(&b.base(), &job_id);
    let seen = read_sse(&url_b, None, |e| e.event == "progress").await;
    let last_seen = seen.last().unwrap().seq();

    // A subscriber on B is waiting when A dies.
    let reader =
        tokio::spawn(async move { read_sse(&url_b, Some(last_seen), SseEvent::is_terminal).await });
    let killed = Instant::now();
    a.kill();
    let events = reader.await.unwrap();
    let took = killed.elapsed();
    let last = events.last().unwrap();
    assert_eq!(last.event, "failed", "{events:?}");
    assert_eq!(last.data["reason"], "owner_lost");
    assert!(
        last.data["message"]
            .as_str()
            .unwrap()
            .contains("run the tool again")
    );
    assert_consecutive(&events);
    // Bound: the lease, one check interval (a third of it), plus slack for a loaded machine.
    let bound = Duration::from_millis(LEASE_SECS * 1000 * 4 / 3) + Duration::from_secs(2);
    assert!(
        took <= bound,
        "owner loss noticed after {took:?}, bound {bound:?}"
    );
    let (status, snapshot) = get_json(&job_status_url(&b.base(), &job_id)).await;
    assert_eq!((status, snapshot["status"].as_str()), (200, Some("failed")));
    assert_eq!(snapshot["error"]["reason"], "owner_lost");
}

/// The message of the job API's JSON error body (the whole body when it has none).
fn api_message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_string)
}

/// `shown` (what a client got while Redis at `port` was down) says the store is unreachable and
/// names neither Redis's address nor the OS error, and does not repeat itself.
fn assert_no_internals(what: &str, shown: &str, port: u16) {
    assert!(
        shown.contains("job store is unreachable"),
        "{what}: {shown}"
    );
    for internal in [
        port.to_string().as_str(),
        "redis://",
        "127.0.0.1",
        "os error",
        "refused",
    ] {
        assert!(
            !shown.to_lowercase().contains(internal),
            "{what} shows {internal:?}: {shown}"
        );
    }
    assert_eq!(
        shown.matches("unreachable").count() + shown.matches("unavailable").count(),
        1,
        "{what} says it once: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_under_a_running_job_loses_no_event() {
    let Some(mut redis) = PrivateRedis::start("replicas::redis_restart").await else {
        return;
    };
    let (a, b) = two_replicas(&redis_store_toml(
        &redis.url,
        &unique_prefix("restart"),
        LEASE_SECS,
    ))
    .await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(
        &on_a,
        "demo__slow_count",
        json!({"to": 30, "delay_ms": 100}),
    )
    .await;
    let job_id = handle.job_id.clone();
    let url_b = job_events_url(&b.base(), &job_id);
    let seen = read_sse(&url_b, None, |e| e.event == "progress").await;
    let resume_at = seen.last().unwrap().seq();
    // A reader on B that is connected (it has its first event) before Redis goes away.
    let connected = std::sync::Arc::new(tokio::sync::Notify::new());
    let reader = tokio::spawn({
        let connected = connected.clone();
        async move {
            read_sse(&url_b, Some(resume_at - 1), |e| {
                connected.notify_one();
                e.is_terminal()
            })
            .await
        }
    });
    within("the reader on B is connected", connected.notified()).await;

    redis.stop().await;
    // Readiness says why, at once; new calls and reads fail fast with a clear error.
    let (status, body) = eventually("readyz reports the store down", || async {
        let (status, body) = get_json(&format!("{}/readyz", a.base())).await;
        (status == 503).then_some((status, body))
    })
    .await;
    assert_eq!(status, 503);
    // Says why, without details that could name hosts or credentials (those are in the log).
    let why = body["store"]["error"].as_str().unwrap();
    assert!(why.contains("unreachable"), "{why}");
    assert!(
        !why.contains(&redis.port.to_string()),
        "no address on /readyz: {why}"
    );
    let started = Instant::now();
    let (status, body) = get_json(&job_status_url(&b.base(), &job_id)).await;
    assert_eq!(status, 503, "{body}");
    // Clients are told what to do, never where Redis is or what the OS said: the log says.
    assert_no_internals("the job API's 503", &api_message(&body), redis.port);
    let on_b = connect_url(&b.mcp_url()).await;
    let error = within(
        "a call while Redis is down",
        on_b.call_tool(call_params("demo__echo", json!({"text": "x"}))),
    )
    .await
    .expect_err("no job can start without the store");
    assert_no_internals("the MCP error", &error.to_string(), redis.port);
    let logged = b.log();
    for what in [
        "the job API could not reach the job store",
        "a call could not create its job",
    ] {
        let line = logged.lines().find(|l| l.contains(what));
        assert!(
            line.is_some_and(|l| l.contains(&redis.port.to_string())),
            "the log has the detail ({what}): {logged}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "failed fast: {:?}",
        started.elapsed()
    );

    // Keep Redis down until A has taken at least one more progress event from its upstream:
    // that one can only have been held.
    let progress_on_a = || async {
        let text = metrics_text(&a.base()).await;
        text.lines()
            .find(|l| l.starts_with("bridge_progress_events_total{upstream=\"demo\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = progress_on_a().await;
    eventually("A takes progress while Redis is down", || async {
        progress_on_a().await > before
    })
    .await;
    assert_eq!(
        get_json(&format!("{}/readyz", a.base())).await.0,
        503,
        "still down"
    );
    // B's gauge follows the store by its own pings (nothing probes B's /readyz meanwhile).
    let store_up = |base: String| async move {
        let text = metrics_text(&base).await;
        text.lines()
            .find_map(|l| l.strip_prefix("bridge_store_up "))
            .map(str::to_string)
    };
    eventually("B's bridge_store_up says the store is down", || async {
        store_up(b.base()).await.as_deref() == Some("0")
    })
    .await;

    redis.restart().await;
    eventually("B's bridge_store_up says the store is back", || async {
        store_up(b.base()).await.as_deref() == Some("1")
    })
    .await;
    a.wait_ready().await.unwrap();
    b.wait_ready().await.unwrap();
    let events = reader.await.unwrap();
    assert_eq!(events[0].seq(), resume_at);
    assert_consecutive(&events);
    let mut all = progress_values(&seen[..seen.len() - 1]);
    all.extend(progress_values(&events));
    assert_eq!(
        all,
        (1..=30).map(f64::from).collect::<Vec<_>>(),
        "held events were written, in order: {events:?}"
    );
    assert_eq!(events.last().unwrap().event, "completed", "{}", a.log());
    let (_, snapshot) = get_json(&job_status_url(&b.base(), &job_id)).await;
    assert_eq!(
        (snapshot["status"].as_str(), snapshot["seq"].as_u64()),
        (Some("completed"), Some(31))
    );
    let log = a.log();
    assert!(
        log.contains("lost the Redis connection"),
        "A noticed the outage: {log}"
    );
    assert!(
        log.contains("events held while Redis was away"),
        "A held events: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscribers_share_two_redis_connections() {
    let Some(redis) = PrivateRedis::start("replicas::connections").await else {
        return;
    };
    let prefix = unique_prefix("connections");
    // 1,000 readers of one job: past the default per-job limit of the security section.
    let extra = format!(
        "{}[limits]\nmax_subscribers_per_channel = 2000\n",
        redis_store_toml(&redis.url, &prefix, LEASE_SECS)
    );
    let bridge = replica(&extra).await;
    let named = |clients: &[String]| -> Vec<String> {
        clients
            .iter()
            .filter_map(|l| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix("name="))
                    .map(str::to_string)
            })
            .collect()
    };
    let before = redis.other_clients().await;
    assert_eq!(before.len(), 2, "{before:#?}");

    let client = connect_url(&bridge.mcp_url()).await;
    let mut jobs = Vec::new();
    for _ in 0..10 {
        let handle = running_job(
            &client,
            "demo__slow_count",
            json!({"to": 1000, "delay_ms": 100}),
        )
        .await;
        jobs.push(handle.job_id);
    }
    let http = reqwest::Client::new();
    let opened = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    // A thousand opens at once on a starved machine can outlast the store's command timeout
    // (a 503 with Retry-After): the readers open a refused stream again, as the bridge's
    // JavaScript client does. What is checked is the two connections, not the opening speed.
    for i in 0..1000 {
        let request = http.get(job_events_url(&bridge.base(), &jobs[i % jobs.len()]));
        let opened = opened.clone();
        readers.push(tokio::spawn(async move {
            read_sse_request_patiently(Duration::from_secs(90), request, |e| {
                if e.event == "status" {
                    opened.fetch_add(1, Ordering::SeqCst);
                }
                e.is_terminal()
            })
            .await
        }));
    }
    eventually_within(
        Duration::from_secs(60),
        "1000 subscribers have their first event within 60 s",
        || async { opened.load(Ordering::SeqCst) >= 1000 },
    )
    .await;
    let metrics = metrics_text(&bridge.base()).await;
    assert!(
        metrics.contains("bridge_sse_subscribers 1000"),
        "all streams open"
    );
    let during = redis.other_clients().await;
    assert_eq!(
        during.len(),
        2,
        "two connections with 1000 subscribers: {during:#?}"
    );
    let mut names = named(&during);
    names.sort();
    assert!(
        names[0].starts_with(&prefix) && names[0].ends_with(":cmd"),
        "{names:?}"
    );
    assert!(
        names[1].starts_with(&prefix) && names[1].ends_with(":sub"),
        "{names:?}"
    );
    assert_eq!(named(&before).len(), 2);

    for job in &jobs {
        let (status, _) = post_json(&job_cancel_url(&bridge.base(), job)).await;
        assert_eq!(status, 202);
    }
    for reader in readers {
        let events: Vec<SseEvent> = reader.await.unwrap();
        assert_eq!(events.last().unwrap().event, "cancelled");
    }
    assert_eq!(redis.other_clients().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_starts_without_redis_and_says_why_it_is_not_ready() {
    // Nothing listens there, and nothing else can while the test holds it.
    let held = HeldPort::new();
    let port = held.port();
    let url = format!("redis://127.0.0.1:{port}");
    let bridge = start_bridge(|c| {
        c.store.backend = mcp_progress_bridge::config::StoreBackend::Redis;
        c.store.redis_url = url.clone();
        c.store.key_prefix = unique_prefix("no-redis");
    })
    .await;
    let (status, body) = get_json(&format!("{}/readyz", bridge.base)).await;
    assert_eq!(status, 503);
    let why = body["store"]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("unreachable") && !why.contains(&url),
        "says why, not where: {body}"
    );
    assert_eq!(
        body["upstreams"][0]["state"], "ready",
        "the rest of the bridge runs"
    );
    let client = connect(&bridge).await;
    let started = Instant::now();
    let error = within(
        "a call without Redis",
        client.call_tool(call_params("demo__echo", json!({"text": "x"}))),
    )
    .await
    .expect_err("no job without the store");
    assert_no_internals("the MCP error", &error.to_string(), port);
    assert!(started.elapsed() < Duration::from_secs(1), "fails fast");
    let (status, body): (u16, Value) =
        get_json(&job_status_url(&bridge.base, &"0".repeat(32))).await;
    assert_eq!(status, 503, "{body}");
    assert_no_internals("the job API's 503", &api_message(&body), port);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_started_on_one_replica_is_served_by_another() {
    let Some(url) = test_redis("replicas::mcp_session").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "mcp-session");
    an_mcp_session_started_on_one_replica_is_served_by_another_on(&redis_store_toml(
        &url, &prefix, LEASE_SECS,
    ))
    .await;
}

/// [`an_mcp_session_started_on_one_replica_is_served_by_another`] on the replicas' store `store`.
async fn an_mcp_session_started_on_one_replica_is_served_by_another_on(store: &str) {
    let (a, b) = two_replicas(store).await;
    let http = reqwest::Client::new();
    let post = |url: String, session: Option<String>, body: Value| {
        let mut request = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        async move {
            let response = within("MCP POST", request.send()).await.expect("POST");
            let status = response.status().as_u16();
            let session = response
                .headers()
                .get("mcp-session-id")
                .map(|v| v.to_str().unwrap().to_string());
            let text = within("MCP answer", response.text())
                .await
                .unwrap_or_default();
            (status, session, text)
        }
    };
    let (status, session, _) = post(
        a.mcp_url(),
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200);
    let session = session.expect("a session ID");
    let (status, _, _) = post(
        a.mcp_url(),
        Some(session.clone()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    // The next request lands on B, which never saw this session.
    let (status, _, text) = post(
        b.mcp_url(),
        Some(session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "demo__echo", "arguments": {"text": "across replicas"}}}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    // (These replicas answer with a job handle: the call was served, by B, in A's session.)
    assert!(
        text.contains("\"result\"") && text.contains("\"tool\":\"demo__echo\""),
        "{text}"
    );
}

const TOKEN_A: &str = "token-of-a-0123456789abcdef";
const TOKEN_B: &str = "token-of-b-0123456789abcdef";

/// Two replicas whose `/mcp` takes the tokens of principals `a` and `b`, the demo tools in
/// `mode` (job handles in async mode; in sync mode a 2026-07-28 caller gets the question in an
/// `input_required` round).
async fn two_replicas_with_tokens(
    url: &str,
    prefix: &str,
    mode: &str,
) -> (BridgeProcess, BridgeProcess) {
    two_replicas_with_tokens_and(url, prefix, mode, "").await
}

/// [`two_replicas_with_tokens`] with `jobs` (more `[jobs]` keys, one a line).
async fn two_replicas_with_tokens_and(
    url: &str,
    prefix: &str,
    mode: &str,
    jobs: &str,
) -> (BridgeProcess, BridgeProcess) {
    let config = format!(
        "[jobs]\nmode = \"{mode}\"\n{jobs}\n[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n\
         mcp_tokens = [{{ name = \"a\", token = \"{TOKEN_A}\" }}, {{ name = \"b\", token = \"{TOKEN_B}\" }}]\n\
         {}\n{}",
        redis_store_toml(url, prefix, LEASE_SECS),
        demo_upstream_toml("{}")
    );
    tokio::join!(spawn_bridge(&config, &[]), spawn_bridge(&config, &[]))
}

/// The value of `bridge_input_relays_total{outcome}` in a replica's metrics (0 when absent).
async fn relays(base: &str, outcome: &str) -> u64 {
    let request = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .bearer_auth(TOKEN_A)
        .send();
    let response = within("GET /metrics", request).await.expect("GET /metrics");
    assert_eq!(response.status().as_u16(), 200);
    let metrics = within("the metrics text", response.text()).await.unwrap();
    let line = format!("bridge_input_relays_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A question waits in the replica that runs the job (A); answers reach B, as behind a load
/// balancer, by each path — the handle's `input_url`, `answer_job_input`, `tasks/update` —
/// and B relays them to A through Redis: A checks them as a local answer (a mismatch is a
/// 400 naming the field, given by B; a second answer 409), the job goes on with the answer,
/// and another principal's answer on B finds no job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_reach_another_replica_are_taken_by_the_one_running_the_job() {
    let Some(url) = test_redis("replicas::answers").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "answers");
    let (a, b) = two_replicas_with_tokens(&url, &prefix, "async").await;

    // 1. The handle's input_url, posted to B.
    let on_a = connect_with(&a.mcp_url(), Some(TOKEN_A), None).await;
    let handle = running_job(&on_a, "demo__ask", json!({"question": "Your name?"})).await;
    let on_b_events = handle.events_url.replace(&a.base(), &b.base());
    assert_ne!(on_b_events, handle.events_url);
    read_sse(&on_b_events, None, |e| e.event == "input_required").await;
    let on_b_input = handle.input_url().replace(&a.base(), &b.base());
    let (status, body) = post_answer(
        &on_b_input,
        json!({"action": "accept", "content": {"answer": 5}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "content.answer", "{body}");
    let (status, body) = post_answer(
        &on_b_input,
        json!({"action": "accept", "content": {"answer": "Ada"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_answer(
        &on_b_input,
        json!({"action": "accept", "content": {"answer": "Eve"}}),
    )
    .await;
    assert_eq!(status, 409, "a second answer: {body}");
    let events = read_job_events(&on_b_events).await;
    let answered = events.iter().find(|e| e.event == "input_answered").unwrap();
    assert_eq!(answered.data["by"], "POST /jobs/{id}/input");
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed");
    assert_eq!(last.data["result"]["content"][0]["text"], "you said: Ada");
    // The answer was relayed, not found on B (which has no question of its own).
    assert_eq!(relays(&b.base(), "taken").await, 1);

    // 2. answer_job_input on B: another principal finds no job; the owner's mismatch is
    // named; the answer is taken once.
    let handle = running_job(&on_a, "demo__ask", json!({"question": "Port?"})).await;
    read_sse(
        &handle.events_url.replace(&a.base(), &b.base()),
        None,
        |e| e.event == "input_required",
    )
    .await;
    let b_as_a = connect_with(&b.mcp_url(), Some(TOKEN_A), None).await;
    let b_as_b = connect_with(&b.mcp_url(), Some(TOKEN_B), None).await;
    answer_job_input_once(&b_as_a, &b_as_b, &handle.job_id).await;
    let done = call(
        &b_as_a,
        "wait_for_job",
        json!({"job_id": handle.job_id, "timeout_seconds": 15}),
    )
    .await;
    assert_eq!(first_text(&done), "you said: 8080");

    // 3. tasks/update on B for a task started on A.
    let tasks_a = connect_2026(&a.mcp_url(), Some(TOKEN_A), true).await;
    let created = task_of(&tasks_a, "demo__ask", json!({"question": "Color?"})).await;
    let task_id = created.task.task_id;
    let tasks_b = connect_2026(&b.mcp_url(), Some(TOKEN_A), true).await;
    let key = task_input_requests(&tasks_b, &task_id)
        .await
        .into_keys()
        .next()
        .unwrap();
    let update = |answer: Value| {
        UpdateTaskParams::new(
            task_id.clone(),
            [(key.clone(), answer)].into_iter().collect(),
        )
    };
    let good = json!({"action": "accept", "content": {"answer": "blue"}});
    let tasks_b_as_b = connect_2026(&b.mcp_url(), Some(TOKEN_B), true).await;
    let foreign = tasks_b_as_b.update_task(update(good.clone())).await;
    assert!(
        foreign.is_err(),
        "another principal's tasks/update: {foreign:?}"
    );
    let bad = tasks_b
        .update_task(update(json!({"action": "accept", "content": {"nope": 1}})))
        .await;
    let error = format!("{:?}", bad.expect_err("a mismatch is refused"));
    assert!(error.contains("content"), "{error}");
    tasks_b
        .update_task(update(good))
        .await
        .expect("tasks/update");
    let task = ended_task(&tasks_b, &task_id).await;
    assert_eq!(task.status(), TaskStatus::Completed);
    let TaskPayload::Completed { result } = task.payload else {
        unreachable!()
    };
    assert_eq!(result["content"][0]["text"], "you said: blue");

    // Every answer B took went through A; A relayed none.
    assert_eq!(relays(&b.base(), "taken").await, 3);
    assert_eq!(relays(&b.base(), "mismatch").await, 3);
    // (The second answers' 409s are B's own or A's verdict: B relays only while the job runs,
    // and the demo tool ends at once once answered.)
    assert_eq!(relays(&a.base(), "taken").await, 0);
}

/// At 2026-07-28 the caller that got the question in an `input_required` round on A retries
/// the call with its answer on B: B relays the answer to A and answers with the job's result.
/// Another principal's retry on B is refused like an unknown one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_retry_on_another_replica_answers_the_job() {
    let Some(url) = test_redis("replicas::rounds").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "rounds");
    let (a, b) = two_replicas_with_tokens(&url, &prefix, "sync").await;
    let on_a = connect_2026_answering(&a.mcp_url(), Some(TOKEN_A), "Linus").await;
    let params = || call_params("demo__ask", json!({"question": "Which kernel?"}));
    let (state, requests) = input_required_round(&on_a, params()).await;
    let key = requests.into_keys().next().unwrap();
    let retry = |answer: Value| retried(params(), &state, &key, answer);
    let good = json!({"action": "accept", "content": {"answer": "Linus"}});
    let b_as_b = connect_2026_answering(&b.mcp_url(), Some(TOKEN_B), "Eve").await;
    let refused = within("B's retry", b_as_b.call_tool_once(retry(good.clone()))).await;
    assert!(refused.is_err(), "another principal's retry: {refused:?}");
    let b_as_a = connect_2026_answering(&b.mcp_url(), Some(TOKEN_A), "Linus").await;
    let refused = within(
        "a retry that does not fit",
        b_as_a.call_tool_once(retry(json!({"action": "accept", "content": {"answer": 5}}))),
    )
    .await;
    let error = format!("{:?}", refused.expect_err("a mismatch is refused"));
    assert!(error.contains("content.answer"), "{error}");
    let done = within("the retry on B", b_as_a.call_tool_once(retry(good)))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "you said: Linus");
    assert_eq!(relays(&b.base(), "taken").await, 1);
}

/// The first round of `params` called by `client` (sync mode, a 2026-07-28 caller that takes
/// samples and roots): its `requestState` and the key of its one request, which must be what
/// `is_wanted` says.
async fn first_round(
    client: &McpClient,
    params: CallToolRequestParams,
    is_wanted: impl Fn(&InputRequest) -> bool,
) -> (String, String) {
    let (state, requests) = input_required_round(client, params).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, request) = requests.into_iter().next().unwrap();
    assert!(is_wanted(&request), "{key}: {request:?}");
    (state, key)
}

/// The JSON-RPC error a retry was refused with (its code and message), whole.
fn refusal(outcome: Result<CallToolResponse, ServiceError>) -> String {
    match outcome {
        Err(ServiceError::McpError(e)) => format!("{:?} {}", e.code, e.message),
        other => panic!("not refused with a JSON-RPC error: {other:?}"),
    }
}

/// At 2026-07-28 the tool's sample (and roots) wait on A, the replica running the call, for
/// its caller; the caller's retry with the answer reaches B, as behind a load balancer that
/// does not pin it. B relays the answer to A through Redis, A checks and takes it, and the
/// sample reaches the tool. Every hostile retry on B is refused exactly as the same retry on
/// A is: another principal's (as unknown), an answer past `jobs.max_sample_bytes`, one that
/// is no `CreateMessageResult`; a second answer finds nothing waiting. The roots likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_answered_on_another_replica_reaches_the_tool() {
    let Some(url) = test_redis("replicas::samples").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "samples");
    let (a, b) =
        two_replicas_with_tokens_and(&url, &prefix, "sync", "max_sample_bytes = 1024").await;
    let on_a = connect_2026_sampling(&a.mcp_url(), Some(TOKEN_A), "unused", &[]).await;
    let b_as_a = connect_2026_sampling(&b.mcp_url(), Some(TOKEN_A), "unused", &[]).await;
    let b_as_b = connect_2026_sampling(&b.mcp_url(), Some(TOKEN_B), "unused", &[]).await;
    let a_as_b = connect_2026_sampling(&a.mcp_url(), Some(TOKEN_B), "unused", &[]).await;
    let params = || call_params("demo__sample", json!({"prompt": "Which model?"}));
    let (state, key) = first_round(&on_a, params(), |r| {
        matches!(r, InputRequest::CreateMessage(_))
    })
    .await;
    let retry = |answer: Value| retried(params(), &state, &key, answer);
    let good = json!({"model": "model-of-b", "role": "assistant",
        "content": {"type": "text", "text": "from B"}});
    let oversized = json!({"model": "m", "role": "assistant",
        "content": {"type": "text", "text": "x".repeat(2000)}});
    let unfit = json!({"role": "assistant", "content": {"type": "text", "text": "no model"}});

    // Each hostile retry, on the owner and on B: the same refusal, the sample still waiting.
    for (what, client_a, client_b, answer, wanted) in [
        (
            "another principal's retry",
            &a_as_b,
            &b_as_b,
            good.clone(),
            "names no call of yours",
        ),
        (
            "an oversized answer",
            &on_a,
            &b_as_a,
            oversized,
            "jobs.max_sample_bytes (1024)",
        ),
        (
            "an answer of the wrong shape",
            &on_a,
            &b_as_a,
            unfit,
            "missing field `model`",
        ),
    ] {
        let on_owner = refusal(within(what, client_a.call_tool_once(retry(answer.clone()))).await);
        let on_b = refusal(within(what, client_b.call_tool_once(retry(answer))).await);
        assert!(
            on_owner.contains(wanted) && on_owner.contains("-32602"),
            "{what}: {on_owner}"
        );
        assert_eq!(on_b, on_owner, "{what}: B refuses it as the owner does");
    }

    let done = within("the retry on B", b_as_a.call_tool_once(retry(good.clone())))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "the model said: from B");
    // First answer wins: nothing waits any more, on either replica.
    let again_b = refusal(
        within(
            "a second answer on B",
            b_as_a.call_tool_once(retry(good.clone())),
        )
        .await,
    );
    let again_a = refusal(within("a second answer on A", on_a.call_tool_once(retry(good))).await);
    assert!(again_b.contains("nothing of this job waits"), "{again_b}");
    assert_eq!(again_b, again_a);
    // B relayed the shape it could not judge and the good answer; the size it refused itself.
    assert_eq!(relays(&b.base(), "unfit").await, 1);
    assert_eq!(relays(&b.base(), "taken").await, 1);
    assert_eq!(relays(&b.base(), "too_large").await, 0);
    assert_eq!(relays(&a.base(), "taken").await, 0);

    // The roots, answered on B.
    let roots = || call_params("demo__roots", json!({}));
    let (state, key) =
        first_round(&on_a, roots(), |r| matches!(r, InputRequest::ListRoots(_))).await;
    let answer = json!({"roots": [{"uri": "file:///from-b"}]});
    let done = within(
        "the roots retry on B",
        b_as_a.call_tool_once(retried(roots(), &state, &key, answer)),
    )
    .await
    .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("not complete: {done:?}");
    };
    assert_eq!(first_text(&result), "roots: file:///from-b");
    assert_eq!(relays(&b.base(), "taken").await, 2);
}

/// One MCP 2025-11-25 request to `url` as `token`, in `session` (none: `initialize`); the
/// session ID the answer names and the JSON-RPC answer.
async fn post_2025(
    url: &str,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = within("MCP POST", request.send()).await.expect("POST");
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = within("MCP answer", response.text())
        .await
        .unwrap_or_default();
    let answer = serde_json::from_str::<Value>(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
    });
    (session, answer.unwrap_or(Value::Null))
}

/// A 2025-11-25 session of `token` on `url`, initialized.
async fn session_2025(url: &str, token: &str) -> String {
    session_2025_with(url, token, json!({})).await
}

/// A 2025-11-25 session of `token` on `url` whose client declares `capabilities`, initialized.
async fn session_2025_with(url: &str, token: &str, capabilities: Value) -> String {
    let (session, answer) = post_2025(
        url,
        token,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let session = session.expect("a session ID");
    post_2025(
        url,
        token,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    session
}

/// The task IDs `tasks/list` gives `token` on `url`, every page.
async fn listed_2025(url: &str, token: &str, session: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..100 {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let (_, answer) = post_2025(
            url,
            token,
            Some(session),
            json!({"jsonrpc": "2.0", "id": 100 + page, "method": "tasks/list", "params": params}),
        )
        .await;
        let result = &answer["result"];
        assert!(result["tasks"].is_array(), "{answer}");
        ids.extend(
            result["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].as_str().unwrap().to_string()),
        );
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    ids
}

/// `tasks/list` (MCP 2025-11-25) reads the caller's index in Redis: a task created on one
/// replica is listed on the other, newest first, a page at a time across both; another
/// principal lists none of them; the index keeps at most `jobs.max_listed_tasks` a caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_listed_on_one_replica_include_those_created_on_another() {
    let Some(url) = test_redis("replicas::tasks_list").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "tasks-list");
    let config = format!(
        "[jobs]\nmode = \"async\"\ntask_list_page_size = 2\nmax_listed_tasks = 4\n\
         [auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n\
         mcp_tokens = [{{ name = \"a\", token = \"{TOKEN_A}\" }}, {{ name = \"b\", token = \"{TOKEN_B}\" }}]\n\
         {}\n{}",
        redis_store_toml(&url, &prefix, LEASE_SECS),
        demo_upstream_toml("{}")
    );
    let (one, two) = tokio::join!(spawn_bridge(&config, &[]), spawn_bridge(&config, &[]));
    let on_one = session_2025(&one.mcp_url(), TOKEN_A).await;
    let on_two = session_2025(&two.mcp_url(), TOKEN_A).await;
    let mut created = Vec::new();
    for (n, (url, session)) in [
        (one.mcp_url(), &on_one),
        (two.mcp_url(), &on_two),
        (one.mcp_url(), &on_one),
    ]
    .into_iter()
    .enumerate()
    {
        let (_, answer) = post_2025(
            &url,
            TOKEN_A,
            Some(session),
            json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": {
                "name": "demo__echo", "arguments": {"text": "listed"}, "task": {}}}),
        )
        .await;
        let id = answer["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {answer}"))
            .to_string();
        created.push(id);
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    assert_eq!(
        listed_2025(&one.mcp_url(), TOKEN_A, &on_one).await,
        newest_first
    );
    assert_eq!(
        listed_2025(&two.mcp_url(), TOKEN_A, &on_two).await,
        newest_first
    );
    // Another principal lists none of them, on either replica.
    let theirs = session_2025(&two.mcp_url(), TOKEN_B).await;
    assert!(
        listed_2025(&two.mcp_url(), TOKEN_B, &theirs)
            .await
            .is_empty()
    );
    // The bound: two more tasks (on the other replica) forget the oldest one.
    for n in 0..2 {
        let (_, answer) = post_2025(
            &two.mcp_url(),
            TOKEN_A,
            Some(&on_two),
            json!({"jsonrpc": "2.0", "id": 20 + n, "method": "tools/call", "params": {
                "name": "demo__echo", "arguments": {"text": "more"}, "task": {}}}),
        )
        .await;
        assert!(answer["result"]["task"]["taskId"].is_string(), "{answer}");
    }
    let listed = listed_2025(&one.mcp_url(), TOKEN_A, &on_one).await;
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert!(
        !listed.contains(&created[0]),
        "the oldest is forgotten: {listed:?}"
    );
    let request = reqwest::Client::new()
        .get(format!("{}/metrics", two.base()))
        .bearer_auth(TOKEN_A)
        .send();
    let response = within("GET /metrics", request).await.expect("GET /metrics");
    let metrics = within("the metrics text", response.text()).await.unwrap();
    assert!(
        metrics.contains("bridge_limit_hits_total{limit=\"max_listed_tasks\"} 1"),
        "the fifth task forgot the oldest, on the replica that added it: {metrics}"
    );
}

/// A 2025-11-25 `tasks/result` on `url` in `session`, read as it streams: each request the
/// bridge sends on its response stream (an `elicitation/create`) is answered with
/// `answer(request)`, POSTed in the same session; the requests seen, and the JSON-RPC answer
/// to `tasks/result` itself.
async fn task_result_answering(
    url: &str,
    token: &str,
    session: &str,
    task_id: &str,
    answer: impl Fn(&Value) -> Value,
) -> (Vec<Value>, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 77, "method": "tasks/result",
        "params": {"taskId": task_id}});
    let request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .body(body.to_string());
    let mut response = within("tasks/result", request.send()).await.expect("POST");
    let mut buffer = String::new();
    let mut asked = Vec::new();
    loop {
        let chunk = within("the tasks/result stream", response.chunk())
            .await
            .expect("the stream reads")
            .expect("the stream ends only after the answer");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let Some(message) = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            else {
                continue;
            };
            if message["id"] == 77 && message.get("method").is_none() {
                return (asked, message);
            }
            if message["method"] == "elicitation/create" {
                let (_, ack) = post_2025(
                    url,
                    token,
                    Some(session),
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": answer(&message)}),
                )
                .await;
                assert!(
                    ack.is_null(),
                    "a response is acknowledged without a body: {ack}"
                );
                asked.push(message);
            }
        }
    }
}

/// `tasks/result` (MCP 2025-11-25) on a replica that does not run the task's job reads the
/// shared store: it answers what it answers on the owner (the same result, naming the same
/// task and job), also while the job still runs. A question the task's tool asks meanwhile is
/// sent to the client waiting on B's `tasks/result` (the question is in the shared
/// snapshot), and the client's answer, taken on B, is relayed to A, where the tool waits.
/// Another principal's `tasks/result` on B finds no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_on_another_replica_answers_as_the_owner_does() {
    let Some(url) = test_redis("replicas::tasks_result").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "tasks-result");
    let (a, b) = two_replicas_with_tokens(&url, &prefix, "async").await;
    let on_a = session_2025(&a.mcp_url(), TOKEN_A).await;
    let call_as_task = |id: u64, tool: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments, "task": {}}})
    };
    let task_of = |answer: &Value| {
        answer["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {answer}"))
            .to_string()
    };

    // 1. A task that runs a while: tasks/result on B waits for it as on A.
    let (_, created) = post_2025(
        &a.mcp_url(),
        TOKEN_A,
        Some(&on_a),
        call_as_task(10, "demo__slow_count", json!({"to": 3, "delay_ms": 300})),
    )
    .await;
    let task_id = task_of(&created);
    let on_b = session_2025(&b.mcp_url(), TOKEN_A).await;
    let result_request = json!({"jsonrpc": "2.0", "id": 11, "method": "tasks/result",
        "params": {"taskId": task_id}});
    let (_, from_b) = post_2025(&b.mcp_url(), TOKEN_A, Some(&on_b), result_request.clone()).await;
    let (_, from_a) = post_2025(&a.mcp_url(), TOKEN_A, Some(&on_a), result_request.clone()).await;
    assert!(from_b["result"]["content"].is_array(), "{from_b}");
    assert_eq!(from_b["result"]["content"], from_a["result"]["content"]);
    assert_eq!(
        from_b["result"].get("isError"),
        from_a["result"].get("isError")
    );
    let meta = |answer: &Value| answer["result"]["_meta"].clone();
    assert_eq!(
        meta(&from_b)["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    assert_eq!(
        meta(&from_b)["io.modelcontextprotocol/related-task"],
        meta(&from_a)["io.modelcontextprotocol/related-task"]
    );
    assert_eq!(
        meta(&from_b)["mcp-progress-bridge/job"]["job_id"],
        meta(&from_a)["mcp-progress-bridge/job"]["job_id"]
    );
    // Another principal: no such task, on B as on A.
    let theirs = session_2025(&b.mcp_url(), TOKEN_B).await;
    let (_, foreign) = post_2025(&b.mcp_url(), TOKEN_B, Some(&theirs), result_request).await;
    assert!(
        foreign["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no task")),
        "{foreign}"
    );

    // 2. A task whose tool asks a question: the client waiting on B's tasks/result answers.
    let (_, created) = post_2025(
        &a.mcp_url(),
        TOKEN_A,
        Some(&on_a),
        call_as_task(20, "demo__ask", json!({"question": "Which colour?"})),
    )
    .await;
    let task_id = task_of(&created);
    let eliciting =
        session_2025_with(&b.mcp_url(), TOKEN_A, json!({"elicitation": {"form": {}}})).await;
    let (asked, answer) = task_result_answering(
        &b.mcp_url(),
        TOKEN_A,
        &eliciting,
        &task_id,
        |_| json!({"action": "accept", "content": {"answer": "blue"}}),
    )
    .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["params"]["message"], "Which colour?");
    assert_eq!(
        asked[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    assert_eq!(
        answer["result"]["content"][0]["text"], "you said: blue",
        "{answer}"
    );
    let events_url = answer["result"]["_meta"]["mcp-progress-bridge/job"]["events_url"]
        .as_str()
        .expect("events_url")
        .to_string();
    let events = read_job_events(&events_url).await;
    let answered = events.iter().find(|e| e.event == "input_answered").unwrap();
    assert_eq!(answered.data["by"], "tasks/result");
    // The answer was taken on A, where the question waited.
    assert_eq!(relays(&b.base(), "taken").await, 1);
}

/// The same on a Redis Cluster of three primaries the test starts: the job's keys, the
/// replicas' leases and running sets and the MCP sessions live in different slots.
mod on_cluster {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_called_on_one_replica_streams_on_another_once_and_in_order() {
        let Some(cluster) = RedisCluster::start("replicas::on_cluster::a_job_called_on_one_replica_streams_on_another_once_and_in_order").await else {
            return;
        };
        super::a_job_called_on_one_replica_streams_on_another_once_and_in_order_on(&cluster_store(
            &cluster,
        ))
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap() {
        let Some(cluster) = RedisCluster::start("replicas::on_cluster::reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap").await else {
            return;
        };
        super::reconnecting_to_the_other_replica_with_last_event_id_replays_exactly_the_gap_on(
            &cluster_store(&cluster),
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner() {
        let Some(cluster) = RedisCluster::start(
            "replicas::on_cluster::a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner",
        )
        .await
        else {
            return;
        };
        super::a_cancel_on_one_replica_stops_the_upstream_call_on_the_owner_on(&cluster_store(
            &cluster,
        ))
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease() {
        let Some(cluster) = RedisCluster::start("replicas::on_cluster::killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease").await else {
            return;
        };
        super::killing_the_owner_fails_its_jobs_on_another_replica_within_the_lease_on(
            &cluster_store(&cluster),
        )
        .await;
    }

    /// An unplanned failover of the node both replicas' `redis_url` names: that primary is
    /// killed (`SIGKILL`) while a job runs on A and a reader follows it on B, and its replica is
    /// elected. Both replicas' pub/sub links move to another node of the cluster and their
    /// command links follow the slots: the reader on B, connected throughout, gets every event
    /// once and in order, a cancel sent to B reaches A, and the job ends `cancelled`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_primary_of_redis_url_loses_no_event_cancel_or_terminal_event() {
        let Some(mut cluster) = RedisCluster::start_for_kills(
            "replicas::on_cluster::killing_the_primary_of_redis_url_loses_no_event_cancel_or_terminal_event",
        )
        .await
        else {
            return;
        };
        let (a, b) = two_replicas(&cluster_store(&cluster)).await;
        let on_a = connect_url(&a.mcp_url()).await;
        // Far longer than the failover: it is cancelled once past it.
        let arguments = json!({"to": 2000, "delay_ms": 100});
        let handle = running_job(&on_a, "demo__slow_count", arguments).await;
        let on_b_url = job_events_url(&b.base(), &handle.job_id);
        let before = read_sse(&on_b_url, Some(0), |e| e.event == "progress").await;
        let request = reqwest::Client::new()
            .get(&on_b_url)
            .header("Last-Event-ID", before.last().unwrap().seq().to_string());
        let reader = tokio::spawn(read_sse_request_within(
            Duration::from_secs(120),
            request,
            SseEvent::is_terminal,
        ));

        let seed = cluster.ports[0];
        cluster.kill_primary(seed).await;
        // Live events on B again: a reader that opens now reads three more steps past the head.
        let (_, now) = get_json(&job_status_url(&b.base(), &handle.job_id)).await;
        assert_eq!(now["status"], "running", "{now}");
        let head = read_sse(&on_b_url, None, |e| e.event == "status")
            .await
            .last()
            .unwrap()
            .seq();
        read_sse(&on_b_url, Some(head), |e| e.seq() >= head + 3).await;

        let (status, body) = post_json(&job_cancel_url(&b.base(), &handle.job_id)).await;
        assert_eq!(status, 202, "{body}");
        let after = reader.await.expect("the reader on B");
        let all: Vec<SseEvent> = before.into_iter().chain(after).collect();
        assert_consecutive(&all);
        let last = all.last().unwrap();
        assert_eq!(last.event, "cancelled", "{all:#?}");
        assert!(
            last.data["reason"].as_str().unwrap().contains("POST"),
            "{last:?}"
        );
        assert_eq!(
            cancels_seen(&on_a, "demo", 1).await[0]["tool"],
            "slow_count",
            "the upstream on A saw the cancel"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_mcp_session_started_on_one_replica_is_served_by_another() {
        let Some(cluster) = RedisCluster::start(
            "replicas::on_cluster::an_mcp_session_started_on_one_replica_is_served_by_another",
        )
        .await
        else {
            return;
        };
        super::an_mcp_session_started_on_one_replica_is_served_by_another_on(&cluster_store(
            &cluster,
        ))
        .await;
    }
}
