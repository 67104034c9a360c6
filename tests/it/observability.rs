//! What operators watch: `/metrics` read with a Prometheus text parser after a run that hit
//! every refusal the bridge counts (its series bounded: fixed label sets, no job or correlation
//! IDs as labels), and JSON logs in which every line about a job names the job, its tool and
//! upstream, the MCP request and the correlation ID.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, McpToken, Secret};
use serde_json::{Value, json};

const TOKEN: &str = "observability-ops-token-0123456789";
const FLOOD_TOKEN: &str = "observability-flood-token-0123456789";
const CORRELATION: &str = "turn-7c1e";

/// Every metric the bridge exports and the label names it may carry: a new label is a decision
/// (is its set of values bounded?), so it is added here on purpose.
const LABELS: &[(&str, &[&str])] = &[
    ("bridge_jobs_started_total", &["upstream"]),
    ("bridge_jobs_finished_total", &["upstream", "status"]),
    ("bridge_jobs_running", &[]),
    ("bridge_draining", &[]),
    ("bridge_store_up", &[]),
    ("bridge_calls_refused_draining_total", &[]),
    ("bridge_config_reloads_total", &["result"]),
    ("bridge_wait_bounds_learned_total", &[]),
    ("bridge_progress_events_total", &["upstream"]),
    ("bridge_progress_dropped_total", &["reason"]),
    ("bridge_log_dropped_total", &["reason"]),
    ("bridge_sse_subscribers", &[]),
    ("bridge_sse_readers_dropped_total", &["reason"]),
    ("bridge_sse_handbacks_total", &["reason"]),
    ("bridge_sse_shared_deliveries_total", &[]),
    ("bridge_upstream_up", &["upstream"]),
    ("bridge_upstream_restarts_total", &["upstream"]),
    ("bridge_limit_hits_total", &["limit"]),
    (
        "bridge_upstream_task_requests_total",
        &["method", "outcome"],
    ),
    ("bridge_input_relays_total", &["outcome"]),
    ("bridge_job_adoptions_total", &["event"]),
    ("bridge_auth_rejections_total", &["reason"]),
    ("bridge_jwks_fetches_total", &["outcome"]),
    ("bridge_requests_refused_total", &["reason"]),
    ("bridge_mcp_sessions_open", &[]),
    ("bridge_mcp_session_states", &[]),
    ("bridge_connections_open", &["listener"]),
    ("bridge_connections_refused_total", &["reason"]),
    ("bridge_connections_closed_total", &["reason"]),
    ("bridge_build_info", &["version", "profile"]),
    // Histograms (their `_sum` and `_count` carry the same labels; `le` is the bucket's).
    (
        "bridge_job_duration_seconds",
        &["upstream", "tool", "status"],
    ),
    ("bridge_mcp_request_duration_seconds", &["method"]),
    ("bridge_sse_delivery_lag_seconds", &[]),
    ("bridge_store_call_duration_seconds", &["operation"]),
    (
        "bridge_upstream_call_duration_seconds",
        &["upstream", "outcome"],
    ),
];

/// Most series one metric may have after this run: label values come from fixed sets or
/// from the config (upstream names), never from what clients send.
const MAX_SERIES_PER_METRIC: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_refusals_sessions_and_the_build_with_bounded_series() {
    let bridge = start_bridge(|c| {
        c.auth.mcp_tokens = named_tokens(&[("ops", TOKEN), ("flood", FLOOD_TOKEN)]);
        c.limits.calls_per_minute = 20;
        c.limits.max_request_bytes = 64 * 1024;
        c.limits.max_subscribers_per_channel = 1;
        c.jobs.mode = CallMode::Async;
    })
    .await;
    let before = scrape(&bridge.base).await;
    for reason in [
        "auth",
        "rate_limit",
        "body_size",
        "subscriber_limit",
        "session_limit",
    ] {
        assert_eq!(
            value(
                &before,
                "bridge_requests_refused_total",
                &[("reason", reason)]
            ),
            Some(0.0),
            "every reason's series exists from the start"
        );
    }
    assert_eq!(value(&before, "bridge_mcp_sessions_open", &[]), Some(0.0));

    // A run: a session, a job followed on its channel, and a second reader refused.
    let client = connect_correlated_with_token(&bridge, TOKEN, CORRELATION).await;
    let job = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 300}),
    )
    .await;
    let reader = reqwest::get(&job.events_url).await.unwrap();
    assert_eq!(reader.status(), 200);
    let second = reqwest::get(&job.events_url).await.unwrap();
    assert_eq!(second.status(), 503, "one reader per channel in this test");
    drop(reader);
    // Its place on the channel is given back when the bridge sees the connection closed.
    eventually("the closed reader's place is free", || async {
        value(&scrape(&bridge.base).await, "bridge_sse_subscribers", &[]) == Some(0.0)
    })
    .await;
    read_job_events(&job.events_url).await;
    let sessions = value(&scrape(&bridge.base).await, "bridge_mcp_sessions_open", &[]);
    assert_eq!(sessions, Some(1.0), "the client's session is open");

    // The refusals: a wrong token, a job URL with a wrong token, a body too large, a flood.
    let wrong = RawMcp::new(&bridge.mcp_url(), Some("not-the-token-0123456789"))
        .post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[])
        .await;
    assert_eq!(wrong.status, 401);
    let forged = format!("{}/jobs/{}?token=forged", bridge.base, job.job_id);
    assert_eq!(status_of(&forged).await, Some(404));
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "x".repeat(100_000)
    );
    let too_big = RawMcp::new(&bridge.mcp_url(), Some(TOKEN))
        .post(big, &[])
        .await;
    assert_eq!(too_big.status, 413);
    let flood = RawMcp::new(&bridge.mcp_url(), Some(FLOOD_TOKEN));
    eventually("the flood token reaches its rate", || async {
        flood
            .post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[])
            .await
            .status
            == 429
    })
    .await;

    let after = scrape(&bridge.base).await;
    let refused = |reason| {
        value(
            &after,
            "bridge_requests_refused_total",
            &[("reason", reason)],
        )
        .unwrap_or(-1.0)
    };
    assert!(refused("auth") >= 2.0, "{}", refused("auth"));
    assert!(refused("rate_limit") >= 1.0);
    assert_eq!(refused("body_size"), 1.0);
    assert_eq!(refused("subscriber_limit"), 1.0);
    // A connection refused at accept is counted in bridge_connections_refused_total alone.
    assert_eq!(
        refused("connection_limit"),
        -1.0,
        "no connection_limit series"
    );
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        value(&after, "bridge_build_info", &[("version", version)]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &after,
            "bridge_jobs_finished_total",
            &[("upstream", "demo"), ("status", "completed")]
        ),
        Some(1.0)
    );
    assert_bounded(
        &after,
        &[job.job_id.as_str(), CORRELATION, TOKEN, FLOOD_TOKEN],
    );

    client.cancel().await.unwrap();
    eventually("the closed session is no longer counted", || async {
        let now = scrape(&bridge.base).await;
        value(&now, "bridge_mcp_sessions_open", &[]) == Some(0.0)
            && value(&now, "bridge_mcp_session_states", &[]) == Some(0.0)
    })
    .await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// The histograms after a run: a job of a tool the config names under its name, one of a tool
/// it does not under `other`; `/mcp` requests by method, an unknown method (a client's made-up
/// string) under `other`; each progress event's delivery to the reader; store and upstream calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_time_jobs_requests_deliveries_and_calls_with_bounded_labels() {
    let bridge = start_bridge(|c| {
        c.auth.mcp_tokens = vec![McpToken::named("ops", Secret::literal(TOKEN))];
        c.upstreams[0]
            .tools
            .insert("slow_count".into(), Default::default());
        c.jobs.mode = CallMode::Async;
    })
    .await;
    let client = connect_correlated_with_token(&bridge, TOKEN, CORRELATION).await;
    let job = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 100}),
    )
    .await;
    read_job_events(&job.events_url).await;
    let other = running_job(&client, "demo__echo_meta", json!({})).await;
    read_job_events(&other.events_url).await;
    let made_up = format!("x/{}", "f".repeat(40));
    let answer = RawMcp::new(&bridge.mcp_url(), Some(TOKEN))
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": made_up}).to_string(),
            &[],
        )
        .await;
    assert_ne!(answer.status, 0);
    let after = scrape(&bridge.base).await;
    let count = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, &format!("{metric}_count"), labels).unwrap_or(-1.0)
    };
    let job_duration = "bridge_job_duration_seconds";
    let named = [("upstream", "demo"), ("tool", "demo__slow_count")];
    assert_eq!(
        count(job_duration, &[named[0], named[1], ("status", "completed")]),
        1.0
    );
    let unnamed = [
        ("upstream", "demo"),
        ("tool", "other"),
        ("status", "completed"),
    ];
    assert_eq!(
        count(job_duration, &unnamed),
        1.0,
        "a tool the config does not name"
    );
    let requests = "bridge_mcp_request_duration_seconds";
    assert!(count(requests, &[("method", "tools/call")]) >= 2.0);
    assert!(count(requests, &[("method", "initialize")]) >= 1.0);
    assert_eq!(
        count(requests, &[("method", "other")]),
        1.0,
        "the made-up method"
    );
    // Three progress events and the terminal one of the first job, one reader.
    assert!(count("bridge_sse_delivery_lag_seconds", &[]) >= 3.0);
    let store = "bridge_store_call_duration_seconds";
    assert!(count(store, &[("operation", "create_job")]) >= 2.0);
    assert!(count(store, &[("operation", "append")]) >= 5.0);
    assert_eq!(
        count(store, &[("operation", "relay_answer")]),
        0.0,
        "every operation's series from the start"
    );
    let calls = "bridge_upstream_call_duration_seconds";
    assert_eq!(
        count(calls, &[("upstream", "demo"), ("outcome", "ok")]),
        2.0
    );
    assert_bounded(&after, &[job.job_id.as_str(), &made_up, TOKEN]);
    client.cancel().await.unwrap();
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Every line of the bridge's JSON log that is about a job (that names its ID anywhere) carries
/// the job's fields, from its creation to its terminal event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_about_a_job_carry_its_ids() {
    let config = format!(
        "[auth]\nmcp_tokens = [\"{TOKEN}\"]\n\n{}",
        demo_upstream_toml("{}")
    );
    let bridge = spawn_bridge(&config, &[("BRIDGE_LOG_JSON", "1")]).await;
    let mut raw = RawMcp::new(&bridge.mcp_url(), Some(TOKEN));
    raw.initialize().await;
    let call = json!({
        "jsonrpc": "2.0", "id": 4242, "method": "tools/call",
        "params": {
            "name": "demo__slow_count", "arguments": {"to": 3, "delay_ms": 50},
            "_meta": {"mcp-progress-bridge/mode": "async"},
        },
    });
    let answer = raw
        .post(call.to_string(), &[("x-correlation-id", CORRELATION)])
        .await;
    let handle = &answer.message.as_ref().expect("an answer")["result"]["structuredContent"];
    let job_id = handle["job_id"].as_str().expect("a job handle").to_string();
    let lines = eventually("the job's end is logged", || {
        let log = bridge.log();
        let job_id = job_id.clone();
        async move {
            let lines = job_lines(&log, &job_id);
            lines
                .iter()
                .any(|l| l["fields"]["message"] == "job ended")
                .then_some(lines)
        }
    })
    .await;
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    for expected in ["job created", "job started", "job ended"] {
        assert!(messages.contains(&expected), "{expected:?} in {messages:?}");
    }
    let want = [
        ("job_id", job_id.as_str()),
        ("tool", "demo__slow_count"),
        ("upstream", "demo"),
        ("jsonrpc.request.id", "4242"),
        ("correlation_id", CORRELATION),
    ];
    for line in &lines {
        let fields = span_fields(line);
        for (name, value) in want {
            assert_eq!(
                fields.get(name).map(String::as_str),
                Some(value),
                "{name} on every line about the job; this one: {line}"
            );
        }
    }
    bridge.stop().await;
}

/// The JSON lines of `log` that mention `job_id`.
fn job_lines(log: &str, job_id: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| l.contains(job_id))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The fields of every span a JSON log line was written in, merged (inner spans win).
fn span_fields(line: &Value) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for span in line["spans"].as_array().into_iter().flatten() {
        for (name, value) in span.as_object().into_iter().flatten() {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            fields.insert(name.clone(), text);
        }
    }
    fields
}

/// The alerts and the dashboard of deploy/monitoring/ name only metrics the bridge serves
/// (a renamed metric would leave an alert that never fires and a panel that stays empty), read
/// after a run that makes each of them appear: a job followed to its end, a refused
/// credential; the rest exist from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_shipped_alerts_and_dashboard_name_is_served() {
    let bridge = start_bridge(|c| {
        c.auth.mcp_tokens = vec![McpToken::named("ops", Secret::literal(TOKEN))];
        c.jobs.mode = CallMode::Async;
    })
    .await;
    let client = connect_correlated_with_token(&bridge, TOKEN, CORRELATION).await;
    let job = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 100}),
    )
    .await;
    read_job_events(&job.events_url).await;
    let wrong = RawMcp::new(&bridge.mcp_url(), Some("not-the-token-0123456789"))
        .post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, &[])
        .await;
    assert_eq!(wrong.status, 401);
    let scrape = scrape(&bridge.base).await;
    let served: BTreeSet<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring");
    let mut named = 0;
    for file in ["prometheusrule.yaml", "grafana-dashboard.json"] {
        let text = std::fs::read_to_string(root.join(file)).expect("deploy/monitoring/");
        for metric in bridge_metric_names(&text) {
            named += 1;
            // The text format's parser gives a histogram's samples the family's name.
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| metric.strip_suffix(suffix))
                .filter(|base| base.ends_with("_seconds"))
                .unwrap_or(metric);
            assert!(
                served.contains(family),
                "deploy/monitoring/{file} names {metric}, which the bridge does not serve; \
                 it serves {served:?}"
            );
        }
    }
    assert!(named >= 20, "the names were found: {named}");
    assert_eq!(value(&scrape, "bridge_store_up", &[]), Some(1.0));
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Every `bridge_…` metric name in `text` (a word of its own, not the end of another).
fn bridge_metric_names(text: &str) -> BTreeSet<&str> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices("bridge_")
        .filter(|(at, _)| !text[..*at].ends_with(is_name))
        .map(|(at, _)| {
            let rest = &text[at..];
            &rest[..rest.find(|c: char| !is_name(c)).unwrap_or(rest.len())]
        })
        .filter(|name| name.len() > "bridge_".len())
        .collect()
}

async fn connect_correlated_with_token(bridge: &TestBridge, token: &str, cid: &str) -> McpClient {
    connect_with(&bridge.mcp_url(), Some(token), Some(cid)).await
}

async fn scrape(base: &str) -> prometheus_parse::Scrape {
    let response = within(
        "GET /metrics",
        reqwest::Client::new()
            .get(format!("{base}/metrics"))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await
    .expect("GET /metrics");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("the metrics text");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text format")
}

/// The value of the series of `metric` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// Each metric is a known one with its known label names, has few series, and no label value
/// is an ID or a secret a client brought.
fn assert_bounded(scrape: &prometheus_parse::Scrape, never: &[&str]) {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = LABELS
        .iter()
        .map(|(metric, labels)| (*metric, labels.iter().copied().collect()))
        .collect();
    let mut series: BTreeMap<&str, usize> = BTreeMap::new();
    for sample in &scrape.samples {
        let metric = sample.metric.as_str();
        let family = [metric.strip_suffix("_sum"), metric.strip_suffix("_count")]
            .into_iter()
            .flatten()
            .find(|base| base.ends_with("_seconds") && allowed.contains_key(base))
            .unwrap_or(metric);
        let Some(names) = allowed.get(family) else {
            panic!(
                "{metric} is not in LABELS (tests/it/observability.rs): add it with its label \
                 names once its label values are known to be bounded, and give it a row in \
                 docs/deployment.md#metrics"
            );
        };
        for (name, value) in sample.labels.iter() {
            assert!(names.contains(name.as_str()), "{metric} has label {name}");
            assert!(
                !never.iter().any(|n| value.contains(n)) && !looks_like_an_id(value),
                "{metric}{{{name}={value:?}}}: a label value from a client or a job"
            );
        }
        *series.entry(metric).or_default() += 1;
    }
    for (metric, n) in series {
        assert!(n <= MAX_SERIES_PER_METRIC, "{metric} has {n} series");
    }
}

/// 32 hex digits: the shape of job IDs (and of most generated IDs).
fn looks_like_an_id(value: &str) -> bool {
    value.len() >= 32 && value.bytes().all(|b| b.is_ascii_hexdigit())
}
