//! OAuth 2.1 on `/mcp` against a real identity provider (npm `oidc-provider`, started by each
//! test from tests/oidc/idp.mjs): JWT access tokens verified with the issuer's published keys,
//! every kind of bad token refused with its reason, key rotation and an unreachable issuer,
//! the Protected Resource Metadata and the Python SDK's own OAuth flow through it; and what
//! identities are for: each caller sees only its own jobs by every entry point, an admin sees
//! all, and tool policies hide tools per caller.

use std::time::Duration;

use crate::common::*;
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use mcp_progress_bridge::config::{
    CallMode, Callers, Config, IssuerConfig, McpToken, PolicyConfig, Secret,
};
use serde_json::{Value, json};

/// A static token beside the JWTs: the operator's, for `/metrics`.
const OPS_TOKEN: &str = "oauth-test-operator-token-0123456789";
const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn issuer(idp: &TestIdp) -> IssuerConfig {
    issuer_for_tests(&idp.issuer)
}

fn issuer_for_tests(iss: &str) -> IssuerConfig {
    IssuerConfig {
        issuer: iss.to_string(),
        // Found by OpenID Connect discovery.
        jwks_url: None,
        // Set once the bridge's address is known (see `start`).
        audiences: Vec::new(),
        algorithms: vec!["RS256".into()],
        // No clock skew, so a one-second token is refused a second later.
        leeway_secs: 0,
        subject_claim: "sub".into(),
        role_claims: vec!["roles".into()],
        check_token_type: true,
    }
}

/// The demo tools (slow_count answering with a job handle) behind JWTs of `idp` for the
/// bridge's own `/mcp` URL, the `Bridge.Admin` role as admin, and the operator's static token.
async fn start(idp: &TestIdp, configure: impl FnOnce(&mut Config)) -> TestBridge {
    let config = demo_config(|c| {
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "slow_count",
            CallMode::Async,
        )];
        c.auth.mcp_tokens = vec![McpToken::named("ops", Secret::literal(OPS_TOKEN))];
        c.auth.issuers = vec![issuer(idp)];
        c.auth.admin = Callers {
            roles: vec!["Bridge.Admin".into()],
            ..Callers::default()
        };
        c.auth.jwt.jwks_refresh_min_secs = 3600;
        configure(c);
    });
    start_config_then(config, None, |c| {
        let resource = format!("{}/mcp", c.server.public_url);
        for issuer in &mut c.auth.issuers {
            issuer.audiences = vec![resource.clone()];
        }
    })
    .await
}

/// An `initialize` with `Authorization: Bearer <token>` (or none): the status, the
/// `WWW-Authenticate` header, the JSON body.
async fn initialize(bridge: &TestBridge, token: Option<&str>) -> (u16, String, Value) {
    let answer = RawMcp::new(&bridge.mcp_url(), token).post(INIT, &[]).await;
    let challenge = answer
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, challenge, body)
}

async fn metrics(bridge: &TestBridge) -> String {
    let response = reqwest::Client::new()
        .get(format!("{}/metrics", bridge.base))
        .bearer_auth(OPS_TOKEN)
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The value of one sample of the metrics text (0 when absent).
fn sample(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A compact JWS from a header, claims and signature bytes (for tokens no key holder signs).
fn compact(header: &Value, claims: &Value, signature: &[u8]) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    format!(
        "{}.{}.{}",
        part(header),
        part(claims),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_lists_and_calls_tools_and_the_metadata_says_where_to_get_one() {
    let Some(idp) = TestIdp::start("a_valid_token_lists_and_calls_tools").await else {
        return;
    };
    let bridge = start(&idp, |_| {}).await;
    let token = idp.token("team-a", &bridge.mcp_url()).await;
    let client = connect_with_token(&bridge, &token).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in [
        "demo__echo",
        "demo__slow_count",
        "get_job_status",
        "cancel_job",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let echoed = call(&client, "demo__echo", json!({"text": "hi"})).await;
    assert_eq!(first_text(&echoed), "hi");

    // No token: a challenge without an error, naming the metadata (RFC 6750, RFC 9728).
    let (status, challenge, _) = initialize(&bridge, None).await;
    assert_eq!(status, 401);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", bridge.base);
    assert_eq!(
        challenge,
        format!("Bearer realm=\"mcp-progress-bridge\", resource_metadata=\"{metadata_url}\"")
    );
    for url in [
        metadata_url.clone(),
        format!("{}/.well-known/oauth-protected-resource", bridge.base),
    ] {
        let (status, document) = get_json(&url).await;
        assert_eq!(status, 200, "{url}");
        assert_eq!(document["resource"], bridge.mcp_url().as_str());
        assert_eq!(document["authorization_servers"], json!([idp.issuer]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    // The static token goes on working beside the JWTs.
    assert_eq!(initialize(&bridge, Some(OPS_TOKEN)).await.0, 200);
    bridge.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_token_is_refused_with_its_reason() {
    let test = "every_kind_of_bad_token_is_refused_with_its_reason";
    let Some(idp) = TestIdp::start(test).await else {
        return;
    };
    let bridge = start(&idp, |_| {}).await;
    let resource = bridge.mcp_url();
    let valid = idp.token("team-a", &resource).await;
    assert_eq!(initialize(&bridge, Some(&valid)).await.0, 200);
    let claims = |extra: Value| {
        let mut c = json!({
            "iss": idp.issuer, "sub": "crafted", "aud": resource,
            "iat": now(), "exp": now() + 600,
        });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    };
    let (header, payload, signature) = {
        let mut parts = valid.split('.');
        (
            parts.next().unwrap().to_string(),
            parts.next().unwrap().to_string(),
            parts.next().unwrap().to_string(),
        )
    };
    // The signature with one character changed.
    let flipped = {
        let mut sig = signature.into_bytes();
        sig[10] = if sig[10] == b'A' { b'B' } else { b'A' };
        format!("{header}.{payload}.{}", String::from_utf8(sig).unwrap())
    };
    // HS256 "signed" with the issuer's public key as the secret: the algorithm-confusion
    // attack (anyone can read the key from the JWKS).
    let confused = {
        let jwks: Value = reqwest::get(format!("{}/jwks", idp.issuer))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = &jwks["keys"][0];
        let header = json!({"alg": "HS256", "kid": key["kid"], "typ": "at+jwt"});
        let body = claims(json!({}));
        let part = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
        let input = format!("{}.{}", part(&header), part(&body));
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.to_string().as_bytes()).unwrap();
        mac.update(input.as_bytes());
        compact(&header, &body, &mac.finalize().into_bytes())
    };
    let cases: Vec<(&str, String)> = vec![
        ("expired", {
            let short = idp.token("short-lived", &resource).await;
            // Wait for the one-second token to pass its `exp` (the bridge allows no skew).
            eventually("the one-second token expires", || {
                let bridge = &bridge;
                let short = short.clone();
                async move { initialize(bridge, Some(&short)).await.0 == 401 }
            })
            .await;
            short
        }),
        (
            "not_yet_valid",
            idp.sign(claims(json!({"nbf": now() + 3600})), json!({}))
                .await,
        ),
        (
            "wrong_audience",
            idp.token("team-a", "https://another-resource.example/mcp")
                .await,
        ),
        (
            "wrong_issuer",
            idp.sign(
                claims(json!({"iss": "https://not-configured.example"})),
                json!({}),
            )
            .await,
        ),
        ("bad_signature", flipped),
        (
            "unknown_kid",
            idp.sign(claims(json!({})), json!({"kid": "no-such-key"}))
                .await,
        ),
        (
            "missing_claim",
            idp.sign(claims(json!({"exp": null})), json!({})).await,
        ),
        ("malformed", "not.a.jwt".into()),
        (
            "algorithm",
            compact(
                &json!({"alg": "none", "typ": "JWT"}),
                &claims(json!({})),
                b"",
            ),
        ),
        ("algorithm", confused),
        ("too_large", format!("{}.{}.x", "a".repeat(20_000), "b")),
        ("unknown_token", "not-a-configured-static-token".into()),
    ];
    let before = metrics(&bridge).await;
    for (reason, token) in &cases {
        let (status, challenge, body) = initialize(&bridge, Some(token)).await;
        assert_eq!(status, 401, "{reason}: {body}");
        assert_eq!(body["error"]["reason"], *reason, "{body}");
        assert!(
            challenge.contains("error=\"invalid_token\", error_description=\""),
            "{reason}: {challenge}"
        );
        assert!(challenge.contains("resource_metadata=\""), "{challenge}");
    }
    let after = metrics(&bridge).await;
    for (reason, _) in &cases {
        let series = format!("bridge_auth_rejections_total{{reason=\"{reason}\"}}");
        let expected = cases.iter().filter(|(r, _)| r == reason).count() as u64;
        assert!(
            sample(&after, &series) >= sample(&before, &series) + expected,
            "{series}: {after}"
        );
    }
    bridge.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

/// An ID token (or another kind of JWT) its issuer gave the bridge's audience is not an access
/// token: refused with `not_access_token`, unless the issuer's `check_token_type` is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_access_tokens_open_mcp_not_id_tokens_of_the_same_audience() {
    let test = "only_access_tokens_open_mcp_not_id_tokens_of_the_same_audience";
    let Some(idp) = TestIdp::start(test).await else {
        return;
    };
    let bridge = start(&idp, |_| {}).await;
    let resource = bridge.mcp_url();
    let claims = |extra: Value| {
        let mut c = json!({
            "iss": idp.issuer, "sub": "user-1", "aud": resource,
            "iat": now(), "exp": now() + 600,
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let valid = idp.token("team-a", &resource).await;
    assert_eq!(initialize(&bridge, Some(&valid)).await.0, 200, "at+jwt");
    let plain = idp.sign(claims(json!({})), json!({"typ": "JWT"})).await;
    assert_eq!(
        initialize(&bridge, Some(&plain)).await.0,
        200,
        "a plain JWT"
    );
    let id_token = idp
        .sign(claims(json!({"nonce": "n-1"})), json!({"typ": "JWT"}))
        .await;
    let refused = [
        ("an ID token", id_token.clone()),
        (
            "an ID token of the code flow",
            idp.sign(claims(json!({"at_hash": "h"})), json!({})).await,
        ),
        (
            "a logout token",
            idp.sign(
                claims(
                    json!({"events": {"http://schemas.openid.net/event/backchannel-logout": {}}}),
                ),
                json!({"typ": "logout+jwt"}),
            )
            .await,
        ),
    ];
    for (what, token) in &refused {
        let (status, _, body) = initialize(&bridge, Some(token)).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(
            body["error"]["reason"], "not_access_token",
            "{what}: {body}"
        );
    }
    bridge.shutdown(Duration::from_secs(1)).await;
    let relaxed = start(&idp, |c| c.auth.issuers[0].check_token_type = false).await;
    let id_token = idp
        .sign(
            json!({"iss": idp.issuer, "sub": "user-1", "aud": relaxed.mcp_url(),
                   "iat": now(), "exp": now() + 600, "nonce": "n-1"}),
            json!({"typ": "JWT"}),
        )
        .await;
    assert_eq!(
        initialize(&relaxed, Some(&id_token)).await.0,
        200,
        "check_token_type = false"
    );
    relaxed.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

/// The JWKS URL an issuer's discovery document names is held to the configured one's rule
/// (https, or http on a loopback host): a document that names http:// elsewhere gets no key
/// fetched from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_jwks_uri_in_the_clear_is_not_fetched() {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };
    let Some(ip) = non_loopback_ip() else {
        skip::<()>(
            "a_discovered_jwks_uri_in_the_clear_is_not_fetched",
            "this machine has no IPv4 address but loopback",
        );
        return;
    };
    let serve = |listener: tokio::net::TcpListener, router: axum::Router| {
        tokio::spawn(async move { axum::serve(listener, router).await })
    };
    // Where the keys would come from, in the clear: it counts what asks.
    let fetched = Arc::new(AtomicUsize::new(0));
    let keys = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let jwks_uri = format!("http://{}/jwks", keys.local_addr().unwrap());
    let counter = fetched.clone();
    serve(
        keys,
        axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { axum::Json(json!({"keys": []})) }
            }),
        ),
    );
    // The issuer (on loopback, so its own URL passes), whose discovery names that URL.
    let discovery = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", discovery.local_addr().unwrap());
    let document = json!({"issuer": issuer, "jwks_uri": jwks_uri});
    serve(
        discovery,
        axum::Router::new().route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(document) }),
        ),
    );
    let bridge = start_bridge(|c| {
        c.auth.mcp_tokens = vec![McpToken::named("ops", Secret::literal(OPS_TOKEN))];
        c.auth.issuers = vec![IssuerConfig {
            issuer: issuer.clone(),
            audiences: vec!["api://bridge".into()],
            ..issuer_for_tests(&issuer)
        }];
    })
    .await;
    let token = compact(
        &json!({"alg": "RS256", "kid": "k1", "typ": "at+jwt"}),
        &json!({"iss": issuer, "sub": "s", "aud": "api://bridge", "exp": now() + 600}),
        b"not-a-signature",
    );
    let (status, _, body) = initialize(&bridge, Some(&token)).await;
    assert_eq!(status, 503, "no keys: {body}");
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        0,
        "keys fetched over http from {jwks_uri}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_picked_up_and_unknown_keys_do_not_flood_the_issuer() {
    let test = "a_rotated_key_is_picked_up";
    let Some(idp) = TestIdp::start(test).await else {
        return;
    };
    // Fetches allowed at any time: the rotation is seen at once.
    let eager = start(&idp, |c| c.auth.jwt.jwks_refresh_min_secs = 0).await;
    // At most one fetch an hour, as by default more or less.
    let guarded = start(&idp, |_| {}).await;
    let old = idp.token("team-a", &eager.mcp_url()).await;
    assert_eq!(initialize(&eager, Some(&old)).await.0, 200);
    let old_for_guarded = idp.token("team-a", &guarded.mcp_url()).await;
    assert_eq!(initialize(&guarded, Some(&old_for_guarded)).await.0, 200);

    let kid = idp.rotate().await;
    let new = idp.token("team-a", &eager.mcp_url()).await;
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(new.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        header["kid"],
        kid.as_str(),
        "the provider signs with the new key"
    );
    assert_eq!(initialize(&eager, Some(&new)).await.0, 200, "the new key");
    assert_eq!(
        initialize(&eager, Some(&old)).await.0,
        200,
        "the old key is still published"
    );

    // A flood of tokens with made-up key IDs: refused, and the issuer asked at most once.
    let fetched = idp.jwks_requests().await;
    for i in 0..20 {
        let claims = json!({
            "iss": idp.issuer, "sub": "flood", "aud": guarded.mcp_url(),
            "exp": now() + 600,
        });
        let token = idp
            .sign(claims, json!({"kid": format!("made-up-{i}")}))
            .await;
        let (status, _, body) = initialize(&guarded, Some(&token)).await;
        assert_eq!(
            (status, &body["error"]["reason"]),
            (401, &json!("unknown_kid"))
        );
    }
    let flood = idp.jwks_requests().await - fetched;
    assert!(flood <= 1, "{flood} key fetches for 20 unknown key IDs");
    eager.shutdown(Duration::from_secs(1)).await;
    guarded.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_keys_go_on_verifying_while_the_issuer_is_down() {
    let Some(idp) = TestIdp::start("cached_keys_go_on_verifying").await else {
        return;
    };
    // Keys go stale after a second and may be fetched again at any time: with the issuer
    // down, every request past the first second tries, fails, and verifies from the cache.
    let bridge = start(&idp, |c| {
        c.auth.jwt.jwks_refresh_min_secs = 0;
        c.auth.jwt.jwks_max_age_secs = 1;
        c.auth.jwt.jwks_timeout_ms = 500;
    })
    .await;
    let token = idp.token("team-a", &bridge.mcp_url()).await;
    assert_eq!(initialize(&bridge, Some(&token)).await.0, 200);
    idp.stop().await;
    eventually(
        "a key fetch has failed, every request meanwhile verified",
        || {
            let bridge = &bridge;
            let token = token.clone();
            async move {
                let (status, _, body) = initialize(bridge, Some(&token)).await;
                assert_eq!(status, 200, "verified from the cache: {body}");
                let text = metrics(bridge).await;
                sample(&text, "bridge_jwks_fetches_total{outcome=\"error\"}") >= 1
            }
        },
    )
    .await;
    let client = connect_with_token(&bridge, &token).await;
    assert_eq!(
        first_text(&call(&client, "demo__echo", json!({"text": "still here"})).await),
        "still here"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The answer to a job the caller may not see: what it would be for an unknown job ID.
fn as_if_unknown(text: &str, job_id: &str, unknown_id: &str) -> String {
    text.replace(job_id, unknown_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_sees_only_its_own_jobs_by_every_entry_point_and_an_admin_sees_all() {
    let Some(idp) = TestIdp::start("a_caller_sees_only_its_own_jobs").await else {
        return;
    };
    let bridge = start(&idp, |_| {}).await;
    let url = bridge.mcp_url();
    let (token_a, token_b, token_admin) = (
        idp.token("team-a", &url).await,
        idp.token("team-b", &url).await,
        idp.token("admin", &url).await,
    );
    // Both use the same correlation ID: it is each one's own.
    let a = connect_with(&url, Some(&token_a), Some("turn-shared")).await;
    let b = connect_with(&url, Some(&token_b), Some("turn-shared")).await;
    let admin = connect_with(&url, Some(&token_admin), None).await;
    let slow = json!({"to": 600, "delay_ms": 50});
    let job_a = running_job(&a, "demo__slow_count", slow.clone()).await;
    let job_b = running_job(&b, "demo__slow_count", slow.clone()).await;
    let (id_a, id_b) = (job_a.job_id.as_str(), job_b.job_id.as_str());
    let unknown = "0123456789abcdef0123456789abcdef";

    // MCP job tools: B gets for A's job exactly what an unknown job gets.
    for (tool, args) in [
        ("get_job_status", json!({"job_id": id_a})),
        (
            "wait_for_job",
            json!({"job_id": id_a, "timeout_seconds": 0}),
        ),
        ("cancel_job", json!({"job_id": id_a})),
    ] {
        let mut unknown_args = args.clone();
        unknown_args["job_id"] = unknown.into();
        let refused = call(&b, tool, args).await;
        let expected = call(&b, tool, unknown_args).await;
        assert_eq!(refused.is_error, Some(true), "{tool}");
        assert_eq!(
            as_if_unknown(&first_text(&refused), id_a, unknown),
            first_text(&expected),
            "{tool}"
        );
    }
    let status = call_json(&a, "get_job_status", json!({"job_id": id_a})).await;
    assert_eq!(status["status"], "running", "B's cancel_job did nothing");
    assert!(
        status.get("principal").is_none(),
        "no principal in the snapshot: {status}"
    );

    // Job URLs with a bearer token: B gets 404 with the unknown job's body; A and the admin
    // get the job; the capability URL works for anyone who has it.
    let http = reqwest::Client::new();
    let get = |path: String, token: String| {
        let http = http.clone();
        let base = bridge.base.clone();
        async move {
            let response = http
                .get(format!("{base}{path}"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    let (_, unknown_body) = get(format!("/jobs/{unknown}"), token_b.clone()).await;
    for path in [format!("/jobs/{id_a}"), format!("/jobs/{id_a}/events")] {
        assert_eq!(
            get(path.clone(), token_b.clone()).await,
            (404, unknown_body.clone()),
            "{path}"
        );
    }
    let cancel = http
        .post(format!("{}/jobs/{id_a}/cancel", bridge.base))
        .bearer_auth(&token_b)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 404);
    assert_eq!(get(format!("/jobs/{id_a}"), token_a.clone()).await.0, 200);
    assert_eq!(
        get(format!("/jobs/{id_a}"), token_admin.clone()).await.0,
        200
    );
    let (status, snapshot) = get_json(&job_a.status_url).await;
    assert_eq!((status, &snapshot["status"]), (200, &json!("running")));

    // The correlation stream, opened with a bearer token, holds the caller's jobs only;
    // the capability URL (minted with the job secret) holds every job of that ID.
    let follow = |token: Option<String>, want: usize| {
        let request = match &token {
            Some(t) => http
                .get(format!("{}/correlations/turn-shared/events", bridge.base))
                .bearer_auth(t),
            None => http.get(bridge.correlation_events_url("turn-shared")),
        };
        async move {
            let mut seen = std::collections::BTreeSet::new();
            read_sse_request(request, |e| {
                if e.event == "progress" {
                    seen.insert(e.data["job_id"].as_str().unwrap().to_string());
                }
                seen.len() >= want && e.event == "progress"
            })
            .await
        }
    };
    let jobs_in = |events: &[SseEvent]| {
        let mut ids = std::collections::BTreeSet::new();
        for e in events {
            if let Some(id) = e.data["job_id"].as_str() {
                ids.insert(id.to_string());
            }
            for job in e.data["jobs"].as_array().into_iter().flatten() {
                ids.insert(job["job_id"].as_str().unwrap().to_string());
            }
        }
        ids.into_iter().collect::<Vec<_>>()
    };
    // Enough progress for both jobs to have interleaved events in the channel.
    let of_b = follow(Some(token_b.clone()), 1).await;
    let of_b_later = follow(Some(token_b.clone()), 1).await;
    assert_eq!(jobs_in(&of_b), vec![id_b.to_string()], "B's stream");
    assert_eq!(jobs_in(&of_b_later), vec![id_b.to_string()]);
    let of_a = follow(Some(token_a.clone()), 1).await;
    assert_eq!(jobs_in(&of_a), vec![id_a.to_string()], "A's stream");
    let mut both = vec![id_a.to_string(), id_b.to_string()];
    both.sort();
    assert_eq!(jobs_in(&follow(None, 2).await), both, "the capability URL");
    assert_eq!(
        jobs_in(&follow(Some(token_admin.clone()), 2).await),
        both,
        "the admin"
    );

    // The admin sees and cancels A's job.
    let seen = call_json(&admin, "get_job_status", json!({"job_id": id_a})).await;
    assert_eq!(seen["job_id"], id_a);
    let cancelled = call_json(&admin, "cancel_job", json!({"job_id": id_a})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let own = call_json(&b, "cancel_job", json!({"job_id": id_b})).await;
    assert_eq!(own["status"], "cancelled", "B cancels its own: {own}");
    bridge.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_hides_a_tool_from_one_caller_and_not_another() {
    let Some(idp) = TestIdp::start("a_policy_hides_a_tool").await else {
        return;
    };
    let policy = |everyone: bool, roles: &[&str], tools: &[&str]| PolicyConfig {
        everyone,
        tokens: Vec::new(),
        subjects: Vec::new(),
        roles: roles.iter().map(|s| s.to_string()).collect(),
        scopes: Vec::new(),
        issuer: None,
        tools: tools.iter().map(|s| s.to_string()).collect(),
    };
    let bridge = start(&idp, |c| {
        c.auth.policies = vec![
            policy(true, &[], &["demo__slow_*"]),
            policy(false, &["Research"], &["demo__echo"]),
        ];
    })
    .await;
    let url = bridge.mcp_url();
    let team = connect_with_token(&bridge, &idp.token("team-a", &url).await).await;
    let research = connect_with_token(&bridge, &idp.token("research", &url).await).await;
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let of_team = names(team.list_all_tools().await.unwrap());
    let of_research = names(research.list_all_tools().await.unwrap());
    assert!(!of_team.contains(&"demo__echo".to_string()), "{of_team:?}");
    assert!(of_team.contains(&"demo__slow_count".to_string()));
    assert!(
        !of_team.contains(&"demo__fail_after".to_string()),
        "no policy grants it"
    );
    assert!(
        of_research.contains(&"demo__echo".to_string()),
        "{of_research:?}"
    );
    for job_tool in ["get_job_status", "wait_for_job", "cancel_job"] {
        assert!(of_team.contains(&job_tool.to_string()), "{job_tool}");
    }
    // Refused exactly like a tool that does not exist.
    let refused = team
        .call_tool(call_params("demo__echo", json!({"text": "x"})))
        .await
        .expect_err("refused");
    let missing = team
        .call_tool(call_params("demo__no_such_tool", json!({})))
        .await
        .expect_err("unknown");
    assert_eq!(
        refused.to_string().replace("demo__echo", "NAME"),
        missing.to_string().replace("demo__no_such_tool", "NAME")
    );
    assert_eq!(
        first_text(&call(&research, "demo__echo", json!({"text": "ok"})).await),
        "ok"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_gets_a_token_through_the_metadata_and_calls_tools() {
    let test = "the_python_sdk_gets_a_token_through_the_metadata";
    let python = python_with_mcp();
    if !prerequisite(
        python.is_some(),
        "a Python with the `mcp` package (BRIDGE_TEST_PYTHON or .venv)",
    ) {
        return;
    }
    let Some(idp) = TestIdp::start(test).await else {
        return;
    };
    let bridge = start(&idp, |_| {}).await;
    let mut command = tokio::process::Command::new(python.unwrap());
    command
        .arg(repo_root().join("tests/oidc/python_oauth_client.py"))
        .arg(bridge.mcp_url())
        .arg(&idp.issuer)
        .arg("team-a");
    let output = run_to_end(command, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "the Python SDK's OAuth flow failed (output above)"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
    idp.stop().await;
}

/// The `[auth]` settings of this issue, refused at load with the key and what to do; the
/// token forms accepted, and named.
#[test]
fn auth_config_names_tokens_and_refuses_unsafe_issuers_and_dangling_names() {
    use mcp_progress_bridge::config::Overrides;
    let load = |text: &str| {
        Config::from_toml(
            text,
            std::path::Path::new("auth.toml"),
            &Overrides::default(),
        )
    };
    let tokens = "mcp_tokens = [\"plain-token-0123456789\", { name = \"ci\", token = \"named-token-0123456789\" }]";
    let config = load(&format!("[auth]\n{tokens}\n")).expect("both token forms load");
    let names: Vec<&str> = config
        .auth
        .mcp_tokens
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["token-1", "ci"]);
    let issuer = |extra: &str| {
        format!(
            "[auth]\n{tokens}\n[[auth.issuers]]\nissuer = \"https://idp.example/\"\naudiences = [\"api://b\"]\n{extra}\n"
        )
    };
    assert!(load(&issuer("")).is_ok());
    // A second issuer: entries that trust JWT claims must say from which one (fail closed).
    let two = |extra: &str| {
        issuer(&format!(
            "[[auth.issuers]]\nissuer = \"https://other.example/\"\naudiences = [\"api://b\"]\n{extra}"
        ))
    };
    let admin_of_one =
        two("[auth.admin]\nroles = [\"Bridge.Admin\"]\nissuer = \"https://idp.example/\"\n");
    assert!(
        load(&admin_of_one).is_ok(),
        "an admin role of one named issuer"
    );
    assert!(
        load(&two("[auth.admin]\ntokens = [\"ci\"]\n")).is_ok(),
        "static tokens only"
    );
    for (text, key, says) in [
        (
            two("[auth.admin]\nroles = [\"Bridge.Admin\"]\n"),
            "auth.admin.issuer",
            "2 issuers",
        ),
        (
            two("[[auth.policies]]\nscopes = [\"mcp\"]\ntools = [\"demo__*\"]\n"),
            "auth.policies[0].issuer",
            "2 issuers",
        ),
        (issuer("algorithms = [\"HS256\"]"), "auth.issuers[0].algorithms", "symmetric"),
        (issuer("algorithms = [\"none\"]"), "auth.issuers[0].algorithms", "unsigned"),
        (
            issuer("jwks_url = \"http://keys.example/jwks\""),
            "auth.issuers[0].jwks_url",
            "https://",
        ),
        (
            issuer("audiences = []").replace("audiences = [\"api://b\"]\n", ""),
            "auth.issuers[0].audiences",
            "aud",
        ),
        (
            format!("[auth]\n{tokens}\n[auth.admin]\ntokens = [\"nobody\"]\n"),
            "auth.admin.tokens",
            "token-1",
        ),
        (
            format!("[auth]\n{tokens}\n[[auth.policies]]\ntools = [\"demo__*\"]\n"),
            "auth.policies[0]",
            "everyone = true",
        ),
        (
            format!("[auth]\n{tokens}\n[[auth.policies]]\neveryone = true\ntools = [\"demo__[\"]\n"),
            "auth.policies[0].tools",
            "demo__[",
        ),
        (
            format!("[auth]\n{tokens}\n[[auth.policies]]\neveryone = true\ntools = []\n"),
            "auth.policies[0].tools",
            "list the tools",
        ),
        (
            format!("[auth]\n{tokens}\n[auth.admin]\ntokens = [\"token-1\"]\nissuer = \"https://nowhere/\"\n"),
            "auth.admin.issuer",
            "not one of the auth.issuers",
        ),
        (
            "[auth]\nmcp_tokens = [{ name = \"x\", token = \"a-token-0123456789abc\" }, { name = \"x\", token = \"b-token-0123456789abc\" }]\n".into(),
            "auth.mcp_tokens[1].name",
            "two tokens",
        ),
    ] {
        let error = load(&text).expect_err(&text);
        assert_eq!(error.key, key, "{text}");
        assert!(error.message.contains(says), "{key}: {}", error.message);
    }
}
