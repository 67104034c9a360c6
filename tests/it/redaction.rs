//! No configured secret reaches anything the bridge prints: canaries planted in every
//! secret-bearing config field (an upstream URL's userinfo and query, its headers, a stdio
//! upstream's env, the Redis URL of the store in use, the MCP token, the job secret) are
//! looked for in every output of a bridge process run through faults (its HTTP upstream goes
//! down under a running job, its Redis goes away and comes back): a tool's error, the failed
//! job's snapshot and events, `/upstreams`, `/readyz` (upstream down, store down), `/metrics`,
//! the exported traces, stdout and the whole debug log.

use std::time::Duration;

use crate::common::*;
use serde_json::json;

const TOKEN: &str = "canary-token-4-0123456789abcdef";
const REDIS_PASSWORD: &str = "canary-redis-6-0123456789";
const CANARIES: [&str; 9] = [
    "canary-user-1",
    "canary-pass-2",
    "canary-query-3",
    TOKEN,
    "canary-jobsecret-5",
    "canary-redis-6",
    "canary-header-7",
    "canary-env-8",
    "canary-bearer-9",
];

/// The bridge's config: the Redis store at `redis_port` (with the canary password), an HTTP
/// upstream at `upstream` with canaries in its URL and headers, a stdio one with one in its env.
fn config(upstream: &str, redis_port: u16) -> String {
    format!(
        "[auth]\nmcp_tokens = [{{ name = \"ops\", token = \"{TOKEN}\" }}]\n\
         job_secret = \"canary-jobsecret-5-0123456789abcdef\"\n\
         [jobs]\nsync_budget_ms = 200\n\
         [store]\nbackend = \"redis\"\nkey_prefix = \"redaction\"\nlease_secs = 5\n\
         redis_url = \"redis://default:{REDIS_PASSWORD}@127.0.0.1:{redis_port}/0\"\n\
         [[upstreams]]\nname = \"web\"\ntransport = \"http\"\nhealth_check_secs = 1\n\
         url = \"http://canary-user-1:canary-pass-2@{upstream}/mcp?api_key=canary-query-3&v=1\"\n\
         headers = {{ \"X-Api-Key\" = \"canary-header-7\", \"X-Other\" = \"Bearer canary-bearer-9\" }}\n\
         [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"{BIN}\"\n\
         args = [\"demo-tools\"]\nenv = {{ DEMO_SECRET = \"canary-env-8\" }}\n"
    )
}

/// Make `redis` ask for the canary password (`CONFIG SET`: a restart forgets it).
async fn require_password(redis: &PrivateRedis) {
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = within(
        "connect to redis",
        client.get_multiplexed_async_connection(),
    )
    .await
    .expect("connect to redis");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(REDIS_PASSWORD)
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET requirepass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_configured_secret_reaches_any_output_of_a_run_with_faults() {
    let Some(mut redis) = PrivateRedis::start("redaction").await else {
        return;
    };
    require_password(&redis).await;
    let receiver = OtlpReceiver::start().await;
    let port = HeldPort::new();
    let demo = start_http_demo_on(port.listener());
    let mut bridge = spawn_bridge(
        &config(&port.addr.to_string(), redis.port),
        &[
            ("RUST_LOG", "debug"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    )
    .await;
    let client = connect_with(&bridge.mcp_url(), Some(TOKEN), None).await;
    assert_eq!(
        first_text(&call(&client, "web__echo", json!({"text": "up"})).await),
        "up"
    );
    let get = |path: &'static str| {
        let request = bridge
            .http()
            .get(format!("{}{path}", bridge.base()))
            .bearer_auth(TOKEN);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let text_of = |url: String| {
        let request = bridge.http().get(url);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };

    // Fault 1: the HTTP upstream goes down under a running job, which fails.
    let handle = running_job(
        &client,
        "web__slow_count",
        json!({"to": 600, "delay_ms": 100}),
    )
    .await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    demo.stop().await;
    let events = read_sse(&handle.events_url, None, SseEvent::is_terminal).await;
    assert_eq!(events.last().unwrap().event, "failed", "{events:?}");
    let failed_events = text_of(handle.events_url.clone()).await;
    let failed_snapshot = text_of(handle.status_url.clone()).await;
    assert!(failed_snapshot.contains("\"failed\""), "{failed_snapshot}");
    let upstreams = eventually("/upstreams says web is down", || async {
        let body = get("/upstreams").await;
        body.contains("\"down\"").then_some(body)
    })
    .await;
    let refused = call(&client, "web__echo", json!({"text": "down"})).await;
    assert_eq!(refused.is_error, Some(true));
    let tool_error = first_text(&refused);
    let readyz_upstream_down = get("/readyz").await;

    // Fault 2: Redis goes away (the store cannot be reached), and comes back.
    redis.stop().await;
    let readyz_store_down = eventually("/readyz says the store is unreachable", || async {
        let body = get("/readyz").await;
        body.contains("store is unreachable").then_some(body)
    })
    .await;
    redis.restart().await;
    require_password(&redis).await;
    eventually("/readyz says the store is back", || async {
        !get("/readyz").await.contains("store is unreachable")
    })
    .await;

    let metrics = get("/metrics").await;
    client.cancel().await.ok();
    bridge.terminate();
    let status = tokio::time::timeout(Duration::from_secs(20), bridge.wait())
        .await
        .expect("the bridge stops on SIGTERM (and flushes its traces)")
        .expect("the bridge's exit status");
    assert!(status.success(), "{status:?}");
    let log = bridge.log();
    let stdout = bridge.stdout().await;
    let traces = receiver.text();
    assert!(
        receiver
            .spans()
            .iter()
            .any(|s| s.name == "tools/call slow_count"),
        "the traces were exported"
    );

    // The outputs do speak of the upstream's address: what is checked is that they say it
    // without its secrets.
    let address = format!("{}/mcp", port.addr);
    for (name, text) in [("/upstreams", &upstreams), ("the tool error", &tool_error)] {
        assert!(text.contains(&address), "{name} names the upstream: {text}");
    }
    assert!(log.contains(&address), "the log names the upstream");
    assert!(
        log.contains(&format!("***@127.0.0.1:{}/0", redis.port)),
        "the log names the Redis, its password masked"
    );
    let mut leaks = Vec::new();
    for (name, text) in [
        ("the tool error", &tool_error),
        ("the failed job's events", &failed_events),
        ("the failed job's snapshot", &failed_snapshot),
        ("/upstreams", &upstreams),
        ("/readyz with the upstream down", &readyz_upstream_down),
        ("/readyz with the store down", &readyz_store_down),
        ("/metrics", &metrics),
        ("the traces", &traces),
        ("the log", &log),
        ("stdout", &stdout),
    ] {
        for canary in CANARIES {
            if let Some(at) = text.find(canary) {
                leaks.push(format!("{canary} in {name}: …{}…", around(text, at)));
            }
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
    println!("tool error: {tool_error}\nfailed job: {failed_snapshot}");
}

/// Up to 200 bytes of `text` before `at` and 40 after, on character boundaries.
fn around(text: &str, at: usize) -> &str {
    let mut start = at.saturating_sub(200);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + 40).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[start..end]
}
