//! An https upstream: the bridge reaches a Streamable HTTP server behind TLS, trusting a
//! private CA named by `ca_file`; without it, the upstream is reported down with the
//! certificate error, and a call gets that error at once rather than hanging.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, Config, UpstreamConfig};
use serde_json::json;

fn web(url: &str) -> UpstreamConfig {
    let mut upstream = http_upstream("web", url);
    upstream.health_check_secs = 1;
    upstream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_with_an_unknown_ca_is_down_with_the_certificate_error() {
    let demo = start_http_demo().await;
    let Some(front) = TlsFront::start("https_unknown_ca", &demo.authority()).await else {
        return;
    };
    let mut config = Config::default_for_tests();
    config.upstreams = vec![web(&front.url)];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bridge_addr = listener.local_addr().unwrap();
    config.server.listen = bridge_addr;
    config.server.public_url = format!("http://{bridge_addr}");
    let running = mcp_progress_bridge::app::start_with_listener(config, listener)
        .await
        .unwrap();
    let mut bridge = TestBridge::at(&format!("http://{bridge_addr}"));
    bridge.bridge = Some(running);

    let upstreams = format!("http://{bridge_addr}/upstreams");
    let error = eventually("/upstreams says why web is down", || async {
        let (_, body) = get_json(&upstreams).await;
        body["upstreams"][0]["last_error"]
            .as_str()
            .map(str::to_string)
    })
    .await;
    println!("/upstreams: {error}");
    assert!(
        error.contains(&front.url)
            && error.contains("certificate")
            && error.contains("UnknownIssuer"),
        "the reason names the URL and the certificate problem: {error}"
    );

    let client = connect(&bridge).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        call(&client, "web__echo", json!({"text": "hi"})),
    )
    .await
    .expect("the call is answered at once, not held");
    assert_eq!(answer.is_error, Some(true), "{answer:?}");
    let text = first_text(&answer);
    println!("tools/call: {text}");
    assert!(
        text.contains("upstream web is down") && text.contains("certificate"),
        "{text}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_behind_a_private_ca_serves_calls_with_progress() {
    let demo = start_http_demo().await;
    let Some(front) = TlsFront::start("https_private_ca", &demo.authority()).await else {
        return;
    };
    let mut upstream = web(&front.url);
    upstream.ca_file = Some(front.ca_file.clone());
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![upstream];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(&client, "web__slow_count", json!({"to": 3, "delay_ms": 20})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(
        progress_values(&events),
        vec![1.0, 2.0, 3.0],
        "progress came over https: {events:?}"
    );
    assert_eq!(events.last().unwrap().event, "completed", "{events:?}");
    bridge.shutdown(Duration::from_secs(1)).await;
}
