//! Property tests ("fuzzing" on a stable toolchain) of every parser the bridge owns: the
//! config, the job API's path, query and Last-Event-ID handling (with the token check in
//! front), the first look at `/mcp` messages, the job handle JSON, and token verification.
//! (Progress notification handling is fuzzed inside the crate: `src/jobs/intake_fuzz.rs`.)
//!
//! Each runs proptest's default 256 cases, a few seconds in all. For a longer run by hand:
//! `PROPTEST_CASES=100000 cargo test --release --test it fuzz::` (and `--lib intake_fuzz`).

use std::{path::Path, sync::Arc, time::Duration};

use axum::{body::Body, http::Request};
use mcp_progress_bridge::{
    auth::{Authenticator, JobTokens, TokenScope},
    config::{Config, Overrides, Secret},
    front::{Links, handle::JobHandleBody},
    http::{self, ApiState, Readiness, auth::Guard, mcp_layer},
    metrics::Metrics,
    model::{EventBody, JobId, NewJob},
    store::{MemoryStore, Store},
};
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;

const SECRET: &str = "fuzz-job-secret-0123456789abcdef0123";

fn config_strategy() -> impl Strategy<Value = String> {
    // Lines built from the real keys, with values of every type, plus raw noise.
    let key = prop::sample::select(vec![
        "listen",
        "public_url",
        "allowed_hosts",
        "allowed_origins",
        "cors_origins",
        "admin_listen",
        "keep_alive_secs",
        "mode",
        "history",
        "sync_budget_ms",
        "mcp_tokens",
        "allow_open",
        "job_secret",
        "require_job_tokens",
        "max_request_bytes",
        "calls_per_minute",
        "max_subscribers",
        "name",
        "transport",
        "command",
        "url",
        "tools",
        "nonsense",
    ]);
    let value = prop_oneof![
        Just("\"127.0.0.1:0\"".to_string()),
        Just("\"0.0.0.0:8080\"".to_string()),
        Just("\"http://127.0.0.1:8080\"".to_string()),
        Just("[\"https://a.example\", \"*\"]".to_string()),
        Just("[\"env:FUZZ_SURELY_UNSET\"]".to_string()),
        Just("[\"file:/nonexistent/secret\"]".to_string()),
        Just("\"0123456789abcdef0123456789abcdef01\"".to_string()),
        Just("true".to_string()),
        Just("{ x = { mode = \"async\" } }".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z:/.*\\[\\]\" ]{0,20}".prop_map(|s| format!("{s:?}")),
        "\\PC{0,12}",
    ];
    let section = prop::sample::select(vec![
        "[server]",
        "[jobs]",
        "[auth]",
        "[limits]",
        "[[upstreams]]",
        "[bogus]",
        "",
    ]);
    prop::collection::vec((section, prop::collection::vec((key, value), 0..4)), 0..5).prop_map(
        |sections| {
            sections
                .into_iter()
                .map(|(section, lines)| {
                    let body: String = lines.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
                    format!("{section}\n{body}")
                })
                .collect()
        },
    )
}

proptest! {
    #[test]
    fn config_never_panics_and_every_error_names_file_and_says_what(text in prop_oneof![config_strategy(), "\\PC{0,200}"]) {
        match Config::from_toml(&text, Path::new("fuzz.toml"), &Overrides::default()) {
            Ok(config) => {
                // A config that loads is one the bridge can run: its secrets are resolved.
                for entry in &config.auth.mcp_tokens {
                    prop_assert!(entry.token.value().len() >= 16);
                    prop_assert!(!entry.name.is_empty());
                }
            }
            Err(error) => {
                prop_assert_eq!(&error.file, "fuzz.toml");
                prop_assert!(!error.message.is_empty());
                prop_assert!(!error.to_string().contains('\n'), "one line: {}", error);
            }
        }
    }

    #[test]
    fn mcp_first_look_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = mcp_layer::check(&bytes);
    }

    #[test]
    fn mcp_first_look_accepts_every_well_formed_request(
        id in prop_oneof![any::<i64>().prop_map(Value::from), "\\PC{0,16}".prop_map(Value::from)],
        method in "[a-z/_]{1,24}",
        params in json_value(),
    ) {
        let params = match params {
            Value::Object(map) => Value::Object(map),
            _ => Value::Object(Default::default()),
        };
        let method = if method == "tools/call" { "tools/list".to_string() } else { method };
        let message = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let bytes = serde_json::to_vec(&message).unwrap();
        prop_assert!(mcp_layer::check(&bytes).is_ok(), "{}", message);
        // Anything that is not an object is refused, never passed on.
        let batch = serde_json::to_vec(&serde_json::json!([message])).unwrap();
        prop_assert!(mcp_layer::check(&batch).is_err());
    }

    #[test]
    fn job_tokens_verify_only_what_they_were_minted_for(
        secret in prop::collection::vec(any::<u8>(), 1..64),
        id in "\\PC{0,40}",
        other in "\\PC{0,40}",
        junk in "\\PC{0,60}",
        flip in 0usize..54,
        expires in 1u64..u64::MAX,
        now in any::<u64>(),
    ) {
        let tokens = JobTokens::new(&secret);
        for scope in [TokenScope::JobRead, TokenScope::JobCancel, TokenScope::JobInput, TokenScope::Correlation] {
            let token = tokens.mint_until(scope, &id, expires);
            prop_assert_eq!(token.len(), expires.to_string().len() + 1 + 43);
            // Good exactly until its expiry, refused from then on.
            prop_assert_eq!(tokens.verify_at(scope, &id, &token, now), now < expires);
            prop_assert!(tokens.verify_at(scope, &id, &token, expires - 1));
            prop_assert!(!tokens.verify_at(scope, &id, &token, expires));
            if other != id {
                prop_assert!(!tokens.verify_at(scope, &other, &token, 0));
            }
            if junk != token {
                prop_assert!(!tokens.verify_at(scope, &id, &junk, 0));
            }
            // Any one character changed, the expiry's included: refused.
            let mut bytes = token.clone().into_bytes();
            let at = flip % bytes.len();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            if changed != token {
                prop_assert!(!tokens.verify_at(scope, &id, &changed, 0));
            }
        }
    }

    #[test]
    fn bearer_check_admits_only_configured_tokens(header in prop::collection::vec(any::<u8>(), 0..80)) {
        let mut config = Config::default_for_tests();
        config.auth.mcp_tokens = vec![Secret::literal("the-one-and-only-token-0123").into()];
        let authn = Authenticator::new(&config, &Metrics::new()).unwrap();
        let admitted = futures::executor::block_on(authn.authenticate(Some(&header))).is_ok();
        let expected = std::str::from_utf8(&header)
            .ok()
            .map(str::trim)
            .and_then(|h| h.split_once(' '))
            .is_some_and(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && token.trim() == "the-one-and-only-token-0123");
        prop_assert_eq!(admitted, expected);
    }

    #[test]
    fn the_job_handle_is_json_whose_urls_carry_working_tokens(tool in "\\PC{0,64}", base in "(http|https)://[a-z]{1,10}(\\.[a-z]{2,5})?(:[1-9][0-9]{0,3})?") {
        let tokens = JobTokens::new(SECRET.as_bytes());
        let links = Links::new(&base, tokens.clone());
        let id = JobId::random();
        let handle = JobHandleBody::new(&links, id, &tool);
        let result = handle.into_result(&links);
        let text = serde_json::to_string(&result).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        let structured = &back["structuredContent"];
        let from_text: Value = serde_json::from_str(back["content"][0]["text"].as_str().unwrap()).unwrap();
        prop_assert_eq!(structured, &from_text);
        prop_assert_eq!(structured["tool"].as_str(), Some(tool.as_str()));
        let id_text = id.to_string();
        prop_assert_eq!(structured["job_id"].as_str(), Some(id_text.as_str()));
        for (key, scope, path) in [
            ("status_url", TokenScope::JobRead, format!("/jobs/{id}")),
            ("events_url", TokenScope::JobRead, format!("/jobs/{id}/events")),
            ("cancel_url", TokenScope::JobCancel, format!("/jobs/{id}/cancel")),
        ] {
            let url = url::Url::parse(structured[key].as_str().unwrap()).unwrap();
            prop_assert_eq!(url.path(), path.as_str());
            let token = url.query_pairs().find(|(k, _)| k == "token").map(|(_, v)| v.into_owned()).unwrap();
            prop_assert!(tokens.verify(scope, &id.to_string(), &token));
        }
    }
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

struct AlwaysReady;

impl Readiness for AlwaysReady {
    fn report(&self) -> (Option<&'static str>, Value) {
        (None, Value::Array(Vec::new()))
    }

    fn draining(&self) -> bool {
        false
    }
}

/// The job API on a memory store with one ended job, without a listener.
fn api() -> (axum::Router, JobId, String) {
    let runtime = runtime();
    runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(100, 3600));
        let id = JobId::random();
        store
            .create_job(NewJob {
                id,
                tool: "demo__echo".into(),
                upstream: "demo".into(),
                upstream_tool: "echo".into(),
                correlation_id: Some("turn-1".parse().unwrap()),
                owner: "fuzz".into(),
                principal: None,
            })
            .await
            .unwrap();
        store
            .append(
                id,
                EventBody::Completed {
                    result: serde_json::json!({"content": []}),
                },
            )
            .await
            .unwrap();
        let mut config = Config::default_for_tests();
        config.auth.job_secret = Some(Secret::literal(SECRET).into());
        let tokens = JobTokens::new(SECRET.as_bytes());
        let token = tokens.job(id);
        let metrics = Arc::new(Metrics::new());
        let router = http::router(ApiState {
            broker: store.clone(),
            bus: store,
            guard: Guard::new(&config, tokens, &metrics).unwrap(),
            metrics,
            readiness: Arc::new(AlwaysReady),
            keep_alive: Duration::from_secs(15),
            max_sse_buffer_bytes: 4 << 20,
            shutdown: Default::default(),
            inputs: None,
        });
        (router, id, token)
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Runtime::new().unwrap())
}

fn status_of(router: &axum::Router, request: Request<Body>) -> u16 {
    runtime().block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        response.status().as_u16()
    })
}

proptest! {
    #[test]
    fn job_api_paths_queries_and_last_event_ids_never_fail_on_the_server(
        segment in prop_oneof!["\\PC{0,40}", "[0-9a-f]{32}", Just("".to_string())],
        query in prop_oneof!["[a-z_=&%0-9A-Z.+-]{0,60}", "\\PC{0,40}"],
        last_event_id in prop::option::of(prop::collection::vec(any::<u8>(), 0..24)),
        which in 0usize..4,
        with_token in any::<bool>(),
    ) {
        let (router, id, token) = api();
        let id_part = if segment.is_empty() { id.to_string() } else { utf8_percent(&segment) };
        let path = match which {
            0 => format!("/jobs/{id_part}"),
            1 => format!("/jobs/{id_part}/events"),
            2 => format!("/jobs/{id_part}/cancel"),
            _ => format!("/correlations/{id_part}/events"),
        };
        let mut query = utf8_percent(&query).replace("%3D", "=").replace("%26", "&");
        if with_token {
            query = format!("token={token}&{query}");
        }
        let uri = format!("{path}?{query}");
        let mut request = Request::builder().method(if which == 2 { "POST" } else { "GET" }).uri(&uri);
        if let Some(raw) = &last_event_id
            && let Ok(value) = axum::http::HeaderValue::from_bytes(raw)
        {
            request = request.header("last-event-id", value);
        }
        let Ok(request) = request.body(Body::empty()) else {
            // Not a request at all (the URI does not parse): nothing reaches the bridge.
            return Ok(());
        };
        let status = status_of(&router, request);
        prop_assert!(
            matches!(status, 200 | 400 | 404 | 405 | 409),
            "{} {} -> {}", which, uri, status
        );
        // The only 200s: the real job with its own token, read-only routes.
        if status == 200 {
            prop_assert!(with_token && segment.is_empty() && which < 2, "{}", uri);
        }
    }
}

/// Percent-encode everything outside the unreserved set, so any text becomes a URI part.
fn utf8_percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
