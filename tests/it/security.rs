//! Who may do what: bearer tokens on /mcp (literal, from the environment, from a file), job
//! and correlation capability tokens, the cancel token, operational endpoints, Origin and
//! CORS, the limits, the start-up refusals, the token command, and that no token ever reaches
//! the log.

use std::{process::Command, time::Duration};

use crate::common::*;
use mcp_progress_bridge::{
    auth::{JobTokens, TokenScope, claimed_expiry},
    config::{CallMode, Config, JobSecrets, Overrides, PolicyConfig, Secret},
};
use serde_json::{Value, json};

const TOKEN: &str = "security-test-token-0123456789";
const OTHER_TOKEN: &str = "second-security-token-0123456789";

fn secured(c: &mut Config) {
    c.auth.mcp_tokens = vec![
        Secret::literal(TOKEN).into(),
        Secret::literal(OTHER_TOKEN).into(),
    ];
    c.upstreams = vec![with_tool_mode(
        demo_stdio_upstream("demo"),
        "slow_count",
        CallMode::Async,
    )];
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

async fn post_init(
    url: &str,
    authorization: Option<&str>,
    origin: Option<&str>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INIT);
    if let Some(a) = authorization {
        request = request.header("authorization", a);
    }
    if let Some(o) = origin {
        request = request.header("origin", o);
    }
    within("POST /mcp", request.send()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_needs_a_configured_bearer_token() {
    let bridge = start_bridge(secured).await;
    let url = bridge.mcp_url();

    let none = post_init(&url, None, None).await;
    assert_eq!(none.status(), 401);
    assert_eq!(
        none.headers()["www-authenticate"],
        "Bearer realm=\"mcp-progress-bridge\""
    );
    let body: Value = none.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer")
    );

    for wrong in [
        "Bearer not-the-token-0123456789",
        "Bearer security-test-token-012345678",
        "Basic c2VjdXJpdHk6dGVzdA==",
        TOKEN,
    ] {
        let response = post_init(&url, Some(wrong), None).await;
        assert_eq!(response.status(), 401, "{wrong}");
        assert!(
            response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .contains("invalid_token"),
            "{wrong}"
        );
    }
    for right in [format!("Bearer {TOKEN}"), format!("bearer {OTHER_TOKEN}")] {
        assert_eq!(
            post_init(&url, Some(&right), None).await.status(),
            200,
            "{right}"
        );
    }
    // rmcp's own client with the token does everything as usual.
    let client = connect_with_token(&bridge, TOKEN).await;
    assert_eq!(
        first_text(&call(&client, "demo__echo", json!({"text": "hi"})).await),
        "hi"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_token_opens_its_own_job_read_only_and_nothing_else() {
    let bridge = start_bridge(secured).await;
    let client = connect_with_token(&bridge, TOKEN).await;
    let a = running_job(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
    let b = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 400, "delay_ms": 50}),
    )
    .await;
    let (a_read, a_cancel) = (token_of(&a.status_url), a.cancel_token());
    assert_eq!(a_read, a.read_token());
    assert_ne!(a_read, a_cancel);
    let (a_id, b_id) = (a.job_id.as_str(), b.job_id.as_str());
    let base = &bridge.base;

    // A's URLs work.
    assert_eq!(
        read_job_events(&a.events_url).await.last().unwrap().event,
        "completed"
    );
    assert_eq!(get_json(&a.status_url).await.0, 200);

    // A's tokens open nothing of B's; no token, a wrong token, a token of the wrong kind: 404,
    // the very answer an unknown job gets.
    let (_, unknown) = get_json(&format!("{base}/jobs/0123456789abcdef0123456789abcdef")).await;
    for url in [
        format!("{base}/jobs/{b_id}?token={a_read}"),
        format!("{base}/jobs/{b_id}/events?token={a_read}"),
        format!("{base}/jobs/{b_id}"),
        format!("{base}/jobs/{b_id}/events"),
        format!("{base}/jobs/{b_id}?token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        format!("{base}/jobs/{a_id}?token={a_cancel}"),
        format!("{base}/correlations/{a_id}/events?token={a_read}"),
    ] {
        let (status, body) = get_json(&url).await;
        assert_eq!((status, &body), (404, &unknown), "{url}");
    }
    // The read token cannot cancel; A's cancel token cannot cancel B.
    for url in [
        format!("{base}/jobs/{b_id}/cancel?token={a_cancel}"),
        format!("{base}/jobs/{a_id}/cancel?token={a_read}"),
        format!("{base}/jobs/{b_id}/cancel"),
    ] {
        assert_eq!(post_json(&url).await.0, 404, "{url}");
    }
    // The bearer token that started a job opens it; another caller's token gets the answer an
    // unknown job gets (the jobs are token-1's).
    let http = reqwest::Client::new();
    let snapshot = http
        .get(format!("{base}/jobs/{b_id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(snapshot.status(), 200);
    let other = http
        .get(format!("{base}/jobs/{b_id}"))
        .bearer_auth(OTHER_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(other.json::<Value>().await.unwrap(), unknown);
    // B's own cancel URL cancels it.
    assert_eq!(post_json(&b.cancel_url).await.0, 202);
    let events = read_job_events(&b.events_url).await;
    assert_eq!(events.last().unwrap().event, "cancelled");
    let cancel_again = http
        .post(format!("{base}/jobs/{a_id}/cancel"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel_again.status(), 409, "A had already ended");

    // The tokens follow the documented formula, with the default lifetime (a day).
    let tokens = job_tokens();
    let expires = claimed_expiry(a_read).expect("the token names its expiry");
    assert_within_a_minute(expires, unix_now() + 86_400);
    assert_eq!(
        a_read,
        tokens.mint_until(TokenScope::JobRead, a_id, expires)
    );
    assert_eq!(
        a_cancel,
        tokens.mint_until(TokenScope::JobCancel, a_id, expires)
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_streams_need_their_own_token() {
    let bridge = start_bridge(secured).await;
    let client = connect_with(&bridge.mcp_url(), Some(TOKEN), Some("turn-7")).await;
    call(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
    let events = read_sse(
        &bridge.correlation_events_url("turn-7"),
        None,
        SseEvent::is_terminal,
    )
    .await;
    assert_eq!(events[0].event, "job_started");
    let base = &bridge.base;
    let other = job_tokens().correlation(&"turn-8".parse().unwrap());
    for url in [
        format!("{base}/correlations/turn-7/events"),
        format!("{base}/correlations/turn-7/events?token={other}"),
    ] {
        assert_eq!(get_json(&url).await.0, 404, "{url}");
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A capability URL's answer: status, and the body unless it is a stream.
async fn capability_answer(method: &str, url: &str) -> (u16, String) {
    let http = reqwest::Client::new();
    let request = match method {
        "POST" => http
            .post(url)
            .header("content-type", "application/json")
            .body(r#"{"action":"decline"}"#),
        _ => http.get(url),
    };
    let response = within(method, request.send()).await.unwrap();
    let status = response.status().as_u16();
    let stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if stream {
        return (status, "<a stream>".into());
    }
    (status, response.text().await.unwrap())
}

/// Issue 11: an expired token, a token whose expiry was edited and a token of the first format
/// (no expiry) each get exactly the answer a wrong token gets (404 and the unknown-job body) on
/// every capability URL, while a good token opens each of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_edited_token_is_refused_like_a_wrong_one_on_every_capability_url() {
    let bridge = start_bridge(|c| {
        secured(c);
        c.auth.job_token_ttl_secs = 7_200;
    })
    .await;
    let client = connect_with(&bridge.mcp_url(), Some(TOKEN), Some("turn-9")).await;
    let job = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 400, "delay_ms": 50}),
    )
    .await;
    // The handle's tokens live for the configured time, all four with one expiry.
    let expires = claimed_expiry(job.read_token()).unwrap();
    assert_within_a_minute(expires, unix_now() + 7_200);
    assert_eq!(claimed_expiry(job.cancel_token()), Some(expires));
    let id = job.job_id.as_str();
    let base = &bridge.base;
    let tokens = job_tokens();
    let stranger = JobTokens::new(b"not the secret of this bridge, not at all");
    let mut refused = Vec::new();
    // Cancel last: a good cancel token ends the job.
    for (method, path, scope, key, opened) in [
        ("GET", format!("/jobs/{id}"), TokenScope::JobRead, id, 200),
        (
            "GET",
            format!("/jobs/{id}/events"),
            TokenScope::JobRead,
            id,
            200,
        ),
        (
            "POST",
            format!("/jobs/{id}/input"),
            TokenScope::JobInput,
            id,
            409,
        ),
        (
            "GET",
            "/correlations/turn-9/events".into(),
            TokenScope::Correlation,
            "turn-9",
            200,
        ),
        (
            "POST",
            format!("/jobs/{id}/cancel"),
            TokenScope::JobCancel,
            id,
            202,
        ),
    ] {
        let url = |token: &str| format!("{base}{path}?token={token}");
        let wrong = capability_answer(method, &url(&stranger.mint(scope, key))).await;
        assert_eq!(wrong.0, 404, "{path}: {wrong:?}");
        refused.push(wrong.1.clone());
        let good = tokens.mint(scope, key);
        let (expiry, mac) = good.split_once('.').unwrap();
        let later = expiry.parse::<u64>().unwrap() + 1_000;
        for (what, token) in [
            (
                "expired a second ago",
                tokens.mint_until(scope, key, unix_now() - 1),
            ),
            ("with its expiry moved", format!("{later}.{mac}")),
            ("without its expiry", mac.to_string()),
            (
                "with a signed expiry of 0",
                tokens.mint_until(scope, key, 0),
            ),
        ] {
            assert_eq!(
                capability_answer(method, &url(&token)).await,
                wrong,
                "{path}: a token {what}"
            );
        }
        assert_eq!(
            capability_answer(method, &url(&good)).await.0,
            opened,
            "{path}: a good token"
        );
    }
    // And that answer is the one an unknown job gets: nothing tells a stale token from a made-up
    // one or a made-up job.
    let (_, unknown) = capability_answer(
        "GET",
        &format!("{base}/jobs/0123456789abcdef0123456789abcdef"),
    )
    .await;
    for body in refused {
        assert_eq!(body, unknown);
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Issue 11: `auth.job_secret` as a list: new URLs are signed with the first secret; URLs
/// signed with the second (handed out before the rotation) keep working, and stop once it is
/// removed from the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_job_secret_keeps_old_urls_working_until_it_is_removed() {
    const OLD: &str = "the-job-secret-before-rotation-0123456789";
    const NEW: &str = "the-job-secret-after-rotation-0123456789a";
    let old = JobTokens::new(OLD.as_bytes());
    let new = JobTokens::new(NEW.as_bytes());
    for (secrets, old_opens) in [(vec![NEW, OLD], true), (vec![NEW], false)] {
        let bridge = start_bridge(|c| {
            secured(c);
            let secrets = secrets.iter().map(|s| Secret::literal(*s)).collect();
            c.auth.job_secret = Some(JobSecrets::new(secrets));
        })
        .await;
        let client = connect_with_token(&bridge, TOKEN).await;
        let job = running_job(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
        let id = job.job_id.as_str();
        assert!(new.verify(TokenScope::JobRead, id, job.read_token()));
        assert!(!old.verify(TokenScope::JobRead, id, job.read_token()));
        assert_eq!(
            read_job_events(&job.events_url).await.last().unwrap().event,
            "completed"
        );
        let base = &bridge.base;
        let expected = if old_opens { 200 } else { 404 };
        let before = old.job(id.parse().unwrap());
        let (status, _) = get_json(&format!("{base}/jobs/{id}?token={before}")).await;
        assert_eq!(status, expected, "old-secret job URL, secrets {secrets:?}");
        let correlation = old.correlation(&"turn-1".parse().unwrap());
        let (status, _) = capability_answer(
            "GET",
            &format!("{base}/correlations/turn-1/events?token={correlation}"),
        )
        .await;
        assert_eq!(
            status, expected,
            "old-secret correlation URL, secrets {secrets:?}"
        );
        bridge.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_tokens_can_be_turned_off() {
    let bridge = start_bridge(|c| {
        secured(c);
        c.auth.require_job_tokens = false;
    })
    .await;
    let client = connect_with_token(&bridge, TOKEN).await;
    let handle = running_job(&client, "demo__slow_count", json!({"to": 1, "delay_ms": 1})).await;
    let id = &handle.job_id;
    read_job_events(&handle.events_url).await;
    assert_eq!(get_json(&format!("{}/jobs/{id}", bridge.base)).await.0, 200);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_endpoints_need_the_token_or_the_admin_listener() {
    let bridge = start_bridge(secured).await;
    let base = &bridge.base;
    for path in ["/upstreams", "/metrics"] {
        let response = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        let response = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let upstreams: Value = reqwest::Client::new()
        .get(format!("{base}/upstreams"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let demo = &upstreams["upstreams"][0];
    assert_eq!(demo["name"], "demo");
    assert_eq!(demo["transport"], "stdio");
    assert_eq!(demo["state"], "ready");
    assert_eq!(demo["restarts"], 0);
    assert!(
        demo["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "echo")
    );
    assert!(demo.get("last_error").is_some());
    for path in ["/healthz", "/readyz"] {
        let (status, body) = get_json(&format!("{base}{path}")).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.to_string().contains("command"), "{path}: {body}");
    }
    bridge.shutdown(Duration::from_secs(1)).await;

    let bridge = start_bridge(|c| {
        secured(c);
        c.server.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = bridge.running().admin_addr.expect("admin listener");
    for path in ["/upstreams", "/metrics"] {
        let main = reqwest::Client::new()
            .get(format!("{}{path}", bridge.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(main.status(), 404, "{path} is not on the main listener");
        let on_admin = reqwest::get(format!("http://{admin}{path}")).await.unwrap();
        assert_eq!(on_admin.status(), 200, "{path} on the admin listener");
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// `/upstreams` shows a static token the tools its policies let it use, as `tools/list` does:
/// the first token may use `demo__echo` only and is shown `echo` only; the second, allowed
/// every demo tool, is shown them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_lists_a_caller_only_the_tools_its_policies_allow() {
    let bridge = start_bridge(|c| {
        secured(c);
        let policy = |token: &str, tools: &str| PolicyConfig {
            everyone: false,
            tokens: vec![token.into()],
            subjects: Vec::new(),
            roles: Vec::new(),
            scopes: Vec::new(),
            issuer: None,
            tools: vec![tools.into()],
        };
        c.auth.policies = vec![
            policy("token-1", "demo__echo"),
            policy("token-2", "demo__*"),
        ];
    })
    .await;
    let tools = |token: &'static str| {
        let url = format!("{}/upstreams", bridge.base);
        async move {
            let body: Value = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            body["upstreams"][0]["tools"].as_array().unwrap().clone()
        }
    };
    assert_eq!(
        tools(TOKEN).await,
        vec![json!("echo")],
        "the first token's tools"
    );
    let all = tools(OTHER_TOKEN).await;
    assert!(
        all.len() > 1 && all.contains(&json!("slow_count")),
        "{all:?}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// With `/mcp` open there is no credential to ask for: `/upstreams` and `/metrics` answer
/// loopback clients only. The bridge listens on every address and is asked through the
/// machine's own non-loopback address (a stranger's view) and through 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_serves_operational_endpoints_to_loopback_only() {
    let Some(ip) = non_loopback_ip() else {
        return skip_or_fail(
            "open_mode_serves_operational_endpoints_to_loopback_only",
            "this machine has no non-loopback IPv4 address to connect through",
        );
    };
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = demo_config(|c| {
        c.auth.allow_open = true;
        c.server.listen = ([0, 0, 0, 0], port).into();
        c.server.public_url = format!("http://127.0.0.1:{port}");
    });
    let bridge = mcp_progress_bridge::app::start_with_listener(config, listener)
        .await
        .expect("bridge starts");
    for path in ["/upstreams", "/metrics"] {
        let stranger = within("GET", reqwest::get(format!("http://{ip}:{port}{path}")))
            .await
            .unwrap();
        assert_eq!(stranger.status(), 403, "{path} through {ip}");
        let body = stranger.text().await.unwrap();
        assert!(body.contains("loopback clients only"), "{path}: {body}");
        let local = within(
            "GET",
            reqwest::get(format!("http://127.0.0.1:{port}{path}")),
        )
        .await
        .unwrap();
        assert_eq!(local.status(), 200, "{path} through 127.0.0.1");
    }
    let (status, _) = get_json(&format!("http://{ip}:{port}/healthz")).await;
    assert_eq!(status, 200, "/healthz answers everyone");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_on_mcp_and_cors_on_the_job_endpoints() {
    let bridge = start_bridge(|c| {
        secured(c);
        c.server.allowed_origins = vec!["https://studio.example".into()];
        c.server.cors_origins = vec!["https://app.example".into()];
    })
    .await;
    let url = bridge.mcp_url();
    let bearer = format!("Bearer {TOKEN}");
    let port = bridge.running().addr.port();
    // The bridge's own origin (its jobs page), its loopback aliases, and the configured one.
    for origin in [
        bridge.base.clone(),
        format!("http://localhost:{port}"),
        "https://studio.example".into(),
    ] {
        assert_eq!(
            post_init(&url, Some(&bearer), Some(&origin)).await.status(),
            200,
            "{origin}"
        );
    }
    for origin in [
        "https://evil.example",
        "null",
        &format!("http://localhost:{}", port + 1),
    ] {
        assert_eq!(
            post_init(&url, Some(&bearer), Some(origin)).await.status(),
            403,
            "{origin}"
        );
    }

    let job = format!(
        "{}/jobs/0123456789abcdef0123456789abcdef/events",
        bridge.base
    );
    let http = reqwest::Client::new();
    let preflight = http
        .request(reqwest::Method::OPTIONS, &job)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "last-event-id")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let allowed = http
        .get(&job)
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = http
        .get(&job)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    bridge.shutdown(Duration::from_secs(1)).await;

    // No CORS by default.
    let bridge = start_bridge(secured).await;
    let job = format!("{}/jobs/0123456789abcdef0123456789abcdef", bridge.base);
    let response = http
        .get(&job)
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_429_503_and_a_tool_error_and_say_when_to_retry() {
    let bridge = start_bridge(|c| {
        secured(c);
        c.limits.calls_per_minute = 12;
        c.limits.max_jobs_per_token = 1;
        c.limits.max_subscribers_per_channel = 1;
    })
    .await;
    let client = connect_with_token(&bridge, TOKEN).await;
    // One job at a time for this token; another token is not affected.
    let running = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 400, "delay_ms": 50}),
    )
    .await;
    let refused = call(&client, "demo__slow_count", json!({"to": 1, "delay_ms": 1})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        first_text(&refused).contains("limits.max_jobs_per_token"),
        "{}",
        first_text(&refused)
    );
    let other = connect_with_token(&bridge, OTHER_TOKEN).await;
    assert_eq!(
        first_text(&call(&other, "demo__echo", json!({"text": "x"})).await),
        "x"
    );

    // One stream per job.
    let events_url = &running.events_url;
    let first = reqwest::get(events_url).await.unwrap();
    assert_eq!(first.status(), 200);
    let second = reqwest::get(events_url).await.unwrap();
    assert_eq!(second.status(), 503);
    assert!(second.headers().contains_key("retry-after"));
    drop(first);
    eventually("the place comes back when the stream closes", || async {
        reqwest::get(events_url).await.unwrap().status() == 200
    })
    .await;
    // The job's end gives the job place back.
    assert_eq!(post_json(&running.cancel_url).await.0, 202);
    read_job_events(events_url).await;
    eventually("the job place comes back", || async {
        let result = call(&client, "demo__echo", json!({"text": "again"})).await;
        result.is_error != Some(true)
    })
    .await;

    // The rate: 12 requests a minute per token, then 429 with Retry-After.
    let mut raw = RawMcp::new(&bridge.mcp_url(), Some(OTHER_TOKEN));
    let limited = eventually("reach the rate limit", || async {
        let answer = raw
            .post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[])
            .await;
        (answer.status == 429).then_some(answer)
    })
    .await;
    let retry: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(limited.body.contains("limits.calls_per_minute"));
    raw.token = Some(TOKEN.into());
    let _ = raw.initialize().await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[test]
fn an_open_mcp_is_refused_on_a_public_address_unless_allowed() {
    let load =
        |toml: &str| Config::from_toml(toml, std::path::Path::new("t.toml"), &Overrides::default());
    let error = load("[server]\nlisten = \"0.0.0.0:8080\"\n").unwrap_err();
    assert_eq!(error.key, "auth.mcp_tokens");
    assert!(error.message.contains("allow_open"), "{error}");
    load("[server]\nlisten = \"0.0.0.0:8080\"\n[auth]\nallow_open = true\n").unwrap();
    load("[server]\nlisten = \"0.0.0.0:8080\"\n[auth]\nmcp_tokens = [\"0123456789abcdef0123\"]\n")
        .unwrap();
    load("[server]\nlisten = \"127.0.0.1:8080\"\n").unwrap();
    load("[server]\nlisten = \"[::1]:8080\"\n").unwrap();

    let cases = [
        (
            "[auth]\nmcp_tokens = [\"short\"]\n",
            "auth.mcp_tokens[0]",
            "at least 16",
        ),
        (
            "[auth]\nmcp_tokens = [\"has a space in it 0123456789\"]\n",
            "auth.mcp_tokens[0]",
            "printable",
        ),
        (
            "[auth]\nmcp_tokens = [\"env:BRIDGE_TEST_SURELY_UNSET_VAR\"]\n",
            "auth.mcp_tokens[0]",
            "BRIDGE_TEST_SURELY_UNSET_VAR is not set",
        ),
        (
            "[auth]\nmcp_tokens = [\"file:/nonexistent/token\"]\n",
            "auth.mcp_tokens[0]",
            "/nonexistent/token",
        ),
        (
            "[auth]\njob_secret = \"too short\"\n",
            "auth.job_secret",
            "at least 32",
        ),
        (
            "[auth]\njob_secret = [\"0123456789abcdef0123456789abcdef\", \"too short\"]\n",
            "auth.job_secret[1]",
            "at least 32",
        ),
        ("[auth]\njob_secret = []\n", "auth.job_secret", "empty list"),
        (
            "[auth]\njob_secret = [\"0123456789abcdef0123456789abcdef\", \"env:BRIDGE_TEST_SURELY_UNSET_VAR\"]\n",
            "auth.job_secret[1]",
            "BRIDGE_TEST_SURELY_UNSET_VAR is not set",
        ),
        (
            "[auth]\njob_token_ttl_secs = 0\n",
            "auth.job_token_ttl_secs",
            "1 to",
        ),
        (
            "[jobs]\nretention_secs = 7200\n[auth]\njob_token_ttl_secs = 3600\n",
            "auth.job_token_ttl_secs",
            "shorter than jobs.retention_secs",
        ),
        ("[auth]\nbogus = 1\n", "auth", "bogus"),
        (
            "[server]\nallowed_origins = [\"app.example\"]\n",
            "server.allowed_origins[0]",
            "scheme://host",
        ),
        (
            "[server]\ncors_origins = [\"https://a.example/path\"]\n",
            "server.cors_origins[0]",
            "no path",
        ),
        (
            "[limits]\ncalls_per_minute = 0\n",
            "limits.calls_per_minute",
            "between",
        ),
        (
            "[limits]\nmax_request_bytes = 10\n",
            "limits.max_request_bytes",
            "between",
        ),
    ];
    for (toml, key, says) in cases {
        let error = load(toml).unwrap_err();
        assert!(error.key.starts_with(key), "{toml}: {error}");
        assert!(error.to_string().contains(says), "{toml}: {error}");
    }
    // `auth.job_secret` is one secret or a list of them (the first signs).
    for (toml, count) in [
        (
            "[auth]\njob_secret = \"0123456789abcdef0123456789abcdef\"\n",
            1,
        ),
        (
            "[auth]\njob_secret = [\"0123456789abcdef0123456789abcdef\", \"fedcba9876543210fedcba9876543210\"]\n",
            2,
        ),
    ] {
        let config = load(toml).unwrap();
        assert_eq!(
            config.auth.job_secret.unwrap().iter().count(),
            count,
            "{toml}"
        );
    }
}

/// Run the `token` command on a config with this job secret.
fn token_command(args: &[&str], job_secret: Option<&str>) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.toml");
    let mut toml = String::from("[server]\npublic_url = \"https://bridge.example\"\n");
    if let Some(secret) = job_secret {
        toml.push_str(&format!("[auth]\njob_secret = \"{secret}\"\n"));
    }
    std::fs::write(&path, toml).unwrap();
    let output = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .arg("token")
        .args(args)
        .env_remove("BRIDGE_LISTEN")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_token_command_follows_the_documented_formula() {
    let secret = "an-application-shared-secret-0123456789";
    let (code, token, stderr) = token_command(&["correlation", "turn-42"], Some(secret));
    assert_eq!(code, 0, "{stderr}");
    // Good for the config's auth.job_token_ttl_secs (default: a day) from now.
    let expires = claimed_expiry(&token).expect("the token names its expiry");
    assert_within_a_minute(expires, unix_now() + 86_400);
    assert_eq!(
        token,
        job_tokens_with(secret).mint_until(TokenScope::Correlation, "turn-42", expires)
    );
    // The documented formula, computed by another implementation.
    if let Some(python) = python() {
        let output = Command::new(python)
            .args([
                "-c",
                "import base64,hashlib,hmac,sys; e=sys.argv[3]; print(e + '.' + base64.urlsafe_b64encode(hmac.new(sys.argv[1].encode(), f'v2:correlation:{e}:{sys.argv[2]}'.encode(), hashlib.sha256).digest()).rstrip(b'=').decode())",
                secret,
                "turn-42",
                &expires.to_string(),
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), token);
    }
    let id = "0123456789abcdef0123456789abcdef";
    for (flag, path, scope) in [
        ("--cancel", "cancel", TokenScope::JobCancel),
        ("--input", "input", TokenScope::JobInput),
    ] {
        let (code, url, stderr) =
            token_command(&["job", id, flag, "--url", "--ttl", "60"], Some(secret));
        assert_eq!(code, 0, "{stderr}");
        let token = url.split("token=").nth(1).unwrap();
        let expires = claimed_expiry(token).unwrap();
        assert_within_a_minute(expires, unix_now() + 60);
        assert_eq!(
            url,
            format!(
                "https://bridge.example/jobs/{id}/{path}?token={}",
                job_tokens_with(secret).mint_until(scope, id, expires)
            )
        );
    }
    let (code, _, stderr) = token_command(&["correlation", "turn-42"], None);
    assert_eq!(code, 2);
    assert!(stderr.contains("auth.job_secret"), "{stderr}");
    let (code, _, stderr) = token_command(&["correlation", "bad id"], Some(secret));
    assert_ne!(code, 0);
    assert!(stderr.contains("not a correlation ID"), "{stderr}");
    let (code, _, stderr) = token_command(&["correlation", "turn-42", "--ttl", "0"], Some(secret));
    assert_ne!(code, 0);
    assert!(stderr.contains("--ttl"), "{stderr}");
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A minted expiry is now + the TTL; a test runs well within a minute of minting.
fn assert_within_a_minute(expires: u64, expected: u64) {
    assert!(
        expires.abs_diff(expected) <= 60,
        "expires at {expires}, expected about {expected}"
    );
}

fn job_tokens_with(secret: &str) -> mcp_progress_bridge::auth::JobTokens {
    mcp_progress_bridge::auth::JobTokens::new(secret.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_env_and_file_work_and_no_token_ever_reaches_the_log() {
    let env_token = "token-from-the-environment-0123456789";
    let file_token = "token-from-a-file-0123456789abcdef";
    let job_secret = "job-secret-from-a-file-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{file_token}\n")).unwrap();
    let secret_file = dir.path().join("job_secret");
    std::fs::write(&secret_file, job_secret).unwrap();
    let python = python();
    let bad_upstream = python.as_ref().map_or(String::new(), |python| {
        format!(
            "[[upstreams]]\nname = \"bad\"\ntransport = \"stdio\"\ncommand = {python:?}\nargs = [{:?}]\n",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/misbehaving_upstream.py")
        )
    });
    // (`mcp-progress-bridge` as a command is the bridge itself: the demo tools.)
    let bridge = spawn_bridge(
        &format!(
            "[auth]\nmcp_tokens = [\"env:SECURITY_TEST_MCP_TOKEN\", \"file:{}\"]\njob_secret = \"file:{}\"\n\
             [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"mcp-progress-bridge\"\n\
             args = [\"demo-tools\"]\ntools = {{ \"slow_count\" = {{ mode = \"async\" }} }}\n{bad_upstream}",
            token_file.display(),
            secret_file.display()
        ),
        // Every log line there is, from every module.
        &[
            ("SECURITY_TEST_MCP_TOKEN", env_token),
            ("RUST_LOG", "trace"),
        ],
    )
    .await;
    let url = bridge.mcp_url();
    let base = bridge.base();

    // Both tokens open /mcp; others do not.
    assert_eq!(
        post_init(&url, Some(&format!("Bearer {env_token}")), None)
            .await
            .status(),
        200
    );
    assert_eq!(
        post_init(&url, Some(&format!("Bearer {file_token}")), None)
            .await
            .status(),
        200
    );
    let wrong = "wrong-token-that-must-not-be-logged-0123";
    assert_eq!(
        post_init(&url, Some(&format!("Bearer {wrong}")), None)
            .await
            .status(),
        401
    );
    assert_eq!(post_init(&url, None, None).await.status(), 401);

    // A job, read through its URLs, with and without the right token, and cancelled.
    let client = connect_with(&url, Some(file_token), None).await;
    let handle = running_job(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(events.last().unwrap().event, "completed");
    let long = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 400, "delay_ms": 50}),
    )
    .await;
    assert_eq!(post_json(&long.cancel_url).await.0, 202);
    let job_id = &handle.job_id;
    let wrong_job_token = "x".repeat(43);
    assert_eq!(
        get_json(&format!("{base}/jobs/{job_id}?token={wrong_job_token}"))
            .await
            .0,
        404
    );
    let correlation = job_tokens_with(job_secret).correlation(&"turn-1".parse().unwrap());
    let response = reqwest::get(format!(
        "{base}/correlations/turn-1/events?token={correlation}"
    ))
    .await
    .unwrap();
    // The token opens the stream, which waits for the correlation's first job.
    assert_eq!(
        response.status(),
        200,
        "a correlation stream opens before its jobs"
    );
    drop(response);
    let metrics = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .bearer_auth(env_token)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    // A stdio upstream does not inherit the variables the bridge's secrets come from.
    if python.is_some() {
        let seen = call(
            &client,
            "bad__misbehave",
            json!({"case": "environment", "name": "SECURITY_TEST_MCP_TOKEN"}),
        )
        .await;
        assert_eq!(first_text(&seen), "", "the child sees the variable blanked");
        let seen = call(
            &client,
            "bad__misbehave",
            json!({"case": "environment", "name": "PATH"}),
        )
        .await;
        assert_ne!(
            first_text(&seen),
            "",
            "the rest of the environment is passed on"
        );
    }
    drop(client);

    let log = eventually("the request log line for the events URL", || async {
        let log = bridge.log();
        log.contains(&format!("/jobs/{job_id}/events?…"))
            .then_some(log)
    })
    .await;
    assert!(log.contains("DEBUG"), "debug logging was on");
    for (what, secret) in [
        ("the env token", env_token.to_string()),
        ("the file token", file_token.to_string()),
        ("a wrong bearer token", wrong.to_string()),
        ("the job secret", job_secret.to_string()),
        ("a job read token", handle.read_token().to_string()),
        ("a job cancel token", long.cancel_token().to_string()),
        ("a wrong job token", wrong_job_token),
        ("a correlation token", correlation),
    ] {
        assert!(!log.contains(&secret), "{what} is in the log:\n{log}");
    }
}

/// Clients cannot fill the disk through the log: twenty 1 MB notifications of every kind and a
/// call naming a 1 MB tool, sent to a bridge process, write a few KiB of log, with
/// `RUST_LOG=warn` (it is obeyed) and with `RUST_LOG=info` (rmcp's "received notification",
/// which quotes each one whole at info, is capped; a line quoting a client is cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_fill_the_disk_through_the_log() {
    let big = "x".repeat(1_000_000);
    for level in ["warn", "info"] {
        let bridge = spawn_bridge(&demo_upstream_toml("{}"), &[("RUST_LOG", level)]).await;
        let mut raw = RawMcp::new(&bridge.mcp_url(), None);
        assert_eq!(raw.initialize().await.status, 200);
        let before = bridge.log().len();
        let kinds = [
            "notifications/progress",
            "notifications/cancelled",
            "notifications/message",
            "notifications/no_such_thing",
        ];
        for (i, kind) in kinds.iter().cycle().take(20).enumerate() {
            let body = json!({"jsonrpc": "2.0", "method": kind, "params": {
                "progressToken": i, "progress": 1, "message": big, "requestId": i,
                "reason": big, "level": "info", "data": big}});
            let answer = raw.post(body.to_string(), &[]).await;
            assert!(answer.status < 500, "{kind}: {}", answer.status);
        }
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": big, "arguments": {}}});
        let answer = raw.post(call.to_string(), &[]).await;
        assert_eq!(
            answer.rpc_error_code(),
            Some(-32602),
            "{:.200}",
            answer.body
        );
        // Messages of a session are handled in order: once this is answered, the ones before
        // have been (and logged, if they were going to be).
        let list = raw
            .post(r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#, &[])
            .await;
        assert_eq!(list.status, 200, "{:.200}", list.body);
        let log = bridge.log();
        let written = log.len() - before;
        assert!(
            written < 64 * 1024,
            "RUST_LOG={level}: {written} bytes of log for 21 MB sent: {:.2000}",
            &log[before..]
        );
        bridge.stop().await;
    }
}
