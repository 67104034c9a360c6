//! MCP sessions: freed when closed or idle (rmcp's and the bridge's state alike), bounded in
//! number and in what each keeps, and usable only by the principal that opened them. A job is
//! not a session: the jobs of a session that ends run on.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, StoreBackend};
use serde_json::Value;

const ALICE: &str = "alice-session-token-0123456789";
const BOB: &str = "bob-session-token-0123456789ab";

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
/// A sync call that says nothing for 2.5 s (no progress token: nothing reaches the session).
const SILENT_SYNC_CALL: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__slow_count","arguments":{"to":2,"delay_ms":2500}}}"#;

fn demo(c: &mut Config) {
    c.upstreams = vec![with_tool_mode(
        demo_stdio_upstream("demo"),
        "slow_count",
        CallMode::Sync,
    )];
}

fn two_principals(c: &mut Config) {
    demo(c);
    c.auth.mcp_tokens = named_tokens(&[("alice", ALICE), ("bob", BOB)]);
}

/// `/metrics`, with a token when `/mcp` has them.
async fn metrics(bridge: &TestBridge, token: Option<&str>) -> String {
    let mut request = reqwest::Client::new().get(format!("{}/metrics", bridge.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = within("GET /metrics", request.send())
        .await
        .expect("GET /metrics");
    within("the metrics text", response.text())
        .await
        .expect("the metrics text")
}

/// The value of the series `series` (name and labels, as written), 0 if absent.
fn value(metrics: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Sessions rmcp holds, and sessions the bridge keeps state for.
async fn sessions_held(bridge: &TestBridge, token: Option<&str>) -> (f64, f64) {
    let text = metrics(bridge, token).await;
    (
        value(&text, "bridge_mcp_sessions_open"),
        value(&text, "bridge_mcp_session_states"),
    )
}

async fn wait_sessions(bridge: &TestBridge, token: Option<&str>, n: f64, what: &str) {
    eventually(what, || async {
        sessions_held(bridge, token).await == (n, n)
    })
    .await;
}

fn refused(metrics: &str, reason: &str) -> f64 {
    value(
        metrics,
        &format!("bridge_requests_refused_total{{reason=\"{reason}\"}}"),
    )
}

async fn finished(bridge: &TestBridge, status: &str) -> f64 {
    value(
        &metrics(bridge, None).await,
        &format!("bridge_jobs_finished_total{{status=\"{status}\",upstream=\"demo\"}}"),
    )
}

async fn opened(bridge: &TestBridge, token: Option<&str>) -> RawMcp {
    let mut raw = RawMcp::new(&bridge.mcp_url(), token);
    let answer = raw.initialize().await;
    assert_eq!(answer.status, 200, "initialize: {}", answer.body);
    assert!(raw.session.is_some(), "a session id: {answer:?}");
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_frees_the_session_and_the_bridges_state_for_it() {
    let bridge = start_bridge(demo).await;
    let raw = opened(&bridge, None).await;
    let other = opened(&bridge, None).await;
    wait_sessions(&bridge, None, 2.0, "two sessions held").await;
    let (status, body) = raw.delete().await;
    assert_eq!(status, 200, "{body}");
    wait_sessions(&bridge, None, 1.0, "the closed session freed").await;
    let after = raw.post(TOOLS_LIST, &[]).await;
    assert_eq!(
        after.status, 404,
        "a closed session is unknown: {}",
        after.body
    );
    assert_eq!(raw.delete().await.0, 404, "closing it again");
    let still = other.post(TOOLS_LIST, &[]).await;
    assert_eq!(still.status, 200, "the other session: {}", still.body);
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_freed_and_its_sync_call_job_runs_on() {
    let bridge = start_bridge(|c| {
        demo(c);
        c.server.session_idle_secs = 1;
    })
    .await;
    let raw = opened(&bridge, None).await;
    // A sync call that stays silent past the idle time: the session goes, the job does not.
    let url = bridge.mcp_url();
    let session = raw.session.clone();
    let call = tokio::spawn(async move {
        let mut caller = RawMcp::new(&url, None);
        caller.session = session;
        caller.post(SILENT_SYNC_CALL, &[]).await
    });
    wait_sessions(&bridge, None, 0.0, "the idle session freed").await;
    let _ = within("the cut-off call", call).await;
    let again = raw.post(TOOLS_LIST, &[]).await;
    assert_eq!(again.status, 404, "an expired session: {}", again.body);
    eventually("the job completed after its session ended", || async {
        finished(&bridge, "completed").await == 1.0
    })
    .await;
    assert_eq!(finished(&bridge, "cancelled").await, 0.0);
    // The client initializes again and carries on.
    let fresh = opened(&bridge, None).await;
    assert_eq!(fresh.post(TOOLS_LIST, &[]).await.status, 200);
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_during_a_sync_call_leaves_its_job_running() {
    let bridge = start_bridge(demo).await;
    let raw = opened(&bridge, None).await;
    let url = bridge.mcp_url();
    let session = raw.session.clone();
    let call = tokio::spawn(async move {
        let mut caller = RawMcp::new(&url, None);
        caller.session = session;
        caller.post(SILENT_SYNC_CALL, &[]).await
    });
    eventually("the sync call's job running", || async {
        value(&metrics(&bridge, None).await, "bridge_jobs_running") == 1.0
    })
    .await;
    assert_eq!(raw.delete().await.0, 200);
    let _ = within("the cut-off call", call).await;
    wait_sessions(&bridge, None, 0.0, "the closed session freed").await;
    eventually("the job completed after its session closed", || async {
        finished(&bridge, "completed").await == 1.0
    })
    .await;
    assert_eq!(finished(&bridge, "cancelled").await, 0.0);
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_sessions_refuses_the_next_initialize_and_a_closed_session_makes_room() {
    let bridge = start_bridge(|c| {
        demo(c);
        c.limits.max_sessions = 2;
    })
    .await;
    let first = opened(&bridge, None).await;
    let second = opened(&bridge, None).await;
    let mut third = RawMcp::new(&bridge.mcp_url(), None);
    let refused_answer = third.initialize_only().await;
    assert_eq!(refused_answer.status, 503, "{}", refused_answer.body);
    let message = refused_answer.message.clone().unwrap_or(Value::Null);
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("limits.max_sessions")),
        "a JSON-RPC error naming the key: {}",
        refused_answer.body
    );
    assert!(refused_answer.headers.contains_key("retry-after"));
    assert!(refused_answer.headers.get("mcp-session-id").is_none());
    assert_eq!(refused(&metrics(&bridge, None).await, "session_limit"), 1.0);
    // The open ones keep working.
    assert_eq!(first.post(TOOLS_LIST, &[]).await.status, 200);
    assert_eq!(second.post(TOOLS_LIST, &[]).await.status, 200);
    assert_eq!(first.delete().await.0, 200);
    wait_sessions(&bridge, None, 1.0, "the closed session freed").await;
    let mut third = RawMcp::new(&bridge.mcp_url(), None);
    let admitted = third.initialize().await;
    assert_eq!(admitted.status, 200, "room again: {}", admitted.body);
    assert_eq!(third.post(TOOLS_LIST, &[]).await.status, 200);
    bridge.shutdown(Duration::from_secs(2)).await;
}

/// Sessions opened all at once fill the bounds exactly: with `max_sessions = 32` and a share of
/// 16, alice's 16 and bob's 16 concurrent `initialize`s are all admitted, and only the next one
/// is refused. A session whose `initialize` is still being answered is counted once (in the map),
/// not also as an admission in flight; before, it was counted twice, and the last places of a
/// concurrent burst were refused "this bridge holds 32 MCP sessions" with fewer open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_initializes_fills_the_session_bounds_exactly() {
    let bridge = start_bridge(|c| {
        two_principals(c);
        c.limits.max_sessions = 32;
        c.limits.max_sessions_per_principal = Some(16);
    })
    .await;
    for round in 0..2 {
        let burst = (0..32).map(|i| {
            let mut raw = RawMcp::new(
                &bridge.mcp_url(),
                Some(if i % 2 == 0 { ALICE } else { BOB }),
            );
            async move {
                let answer = raw.initialize_only().await;
                (raw, answer)
            }
        });
        let opened = futures::future::join_all(burst).await;
        for (i, (_, answer)) in opened.iter().enumerate() {
            assert_eq!(
                answer.status, 200,
                "round {round}, session {i}: {}",
                answer.body
            );
        }
        assert_eq!(sessions_held(&bridge, Some(ALICE)).await.0, 32.0);
        let mut one_more = RawMcp::new(&bridge.mcp_url(), Some(ALICE));
        let refused_answer = one_more.initialize_only().await;
        assert_eq!(refused_answer.status, 503, "{}", refused_answer.body);
        for (raw, _) in &opened {
            assert_eq!(raw.delete().await.0, 200);
        }
        eventually("the burst's sessions closed", || async {
            sessions_held(&bridge, Some(ALICE)).await.0 == 0.0
        })
        .await;
    }
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_over_max_initialize_bytes_is_refused() {
    let bridge = start_bridge(|c| {
        demo(c);
        c.limits.max_initialize_bytes = 2048;
    })
    .await;
    let raw = RawMcp::new(&bridge.mcp_url(), None);
    let name = "x".repeat(4096);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"{name}","version":"1"}}}}}}"#
    );
    let answer = raw.post(big, &[]).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(
        answer.body.contains("limits.max_initialize_bytes"),
        "{}",
        answer.body
    );
    assert!(answer.headers.get("mcp-session-id").is_none());
    assert_eq!(sessions_held(&bridge, None).await, (0.0, 0.0));
    // A usual one is fine.
    opened(&bridge, None).await;
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_serves_only_the_principal_that_opened_it() {
    let bridge = start_bridge(two_principals).await;
    let alice = opened(&bridge, Some(ALICE)).await;
    let mut bob = RawMcp::new(&bridge.mcp_url(), Some(BOB));
    bob.session = alice.session.clone();
    let before = refused(&metrics(&bridge, Some(ALICE)).await, "auth");

    let call = bob
        .post(
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi"}}}"#,
            &[],
        )
        .await;
    assert_eq!(
        call.status, 404,
        "tools/call on another's session: {}",
        call.body
    );
    assert_eq!(
        call.rpc_error_code(),
        Some(-32600),
        "answered as an unknown session: {}",
        call.body
    );
    let stream = within(
        "GET /mcp",
        reqwest::Client::new()
            .get(bridge.mcp_url())
            .bearer_auth(BOB)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", alice.session.as_deref().unwrap())
            .send(),
    )
    .await
    .expect("GET /mcp");
    assert_eq!(
        stream.status().as_u16(),
        404,
        "GET stream of another's session"
    );
    assert_eq!(bob.delete().await.0, 404, "DELETE of another's session");
    let after = refused(&metrics(&bridge, Some(ALICE)).await, "auth");
    assert_eq!(after - before, 3.0, "each counted as a refusal");

    // Alice's session is untouched, and works for her alone.
    let hers = alice.post(TOOLS_LIST, &[]).await;
    assert_eq!(hers.status, 200, "{}", hers.body);
    let own = within(
        "GET /mcp",
        reqwest::Client::new()
            .get(bridge.mcp_url())
            .bearer_auth(ALICE)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", alice.session.as_deref().unwrap())
            .send(),
    )
    .await
    .expect("GET /mcp");
    assert_eq!(own.status().as_u16(), 200, "her own GET stream");
    drop(own);
    // Bob's own session is his.
    let bobs = opened(&bridge, Some(BOB)).await;
    assert_eq!(bobs.post(TOOLS_LIST, &[]).await.status, 200);
    assert_ne!(bobs.session, alice.session);
    assert_eq!(alice.delete().await.0, 200, "she closes her own");
    bridge.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_another_replica_serves_a_session_to_its_principal_only() {
    let Some(url) = test_redis("sessions::redis_principal").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "session-principal");
    let shared = |c: &mut Config| {
        two_principals(c);
        c.store.backend = StoreBackend::Redis;
        c.store.redis_url = url.clone();
        c.store.key_prefix = prefix.to_string();
    };
    let a = start_bridge(shared).await;
    let b = start_bridge(shared).await;
    let alice = opened(&a, Some(ALICE)).await;
    // Bob, on the replica that never saw the session: unknown to him, not restored for him.
    let mut bob = RawMcp::new(&b.mcp_url(), Some(BOB));
    bob.session = alice.session.clone();
    let refused_call = bob.post(TOOLS_LIST, &[]).await;
    assert_eq!(refused_call.status, 404, "{}", refused_call.body);
    assert_eq!(
        sessions_held(&b, Some(BOB)).await.0,
        0.0,
        "nothing restored for him"
    );
    assert_eq!(bob.delete().await.0, 404);
    // Alice, on that replica: restored from the shared record, served.
    let mut on_b = RawMcp::new(&b.mcp_url(), Some(ALICE));
    on_b.session = alice.session.clone();
    let served = on_b.post(TOOLS_LIST, &[]).await;
    assert_eq!(served.status, 200, "{}", served.body);
    b.shutdown(Duration::from_secs(2)).await;
    a.shutdown(Duration::from_secs(2)).await;
}
