//! An HTTP upstream that is down, restarted or lost mid-call: the bridge reports it, fails
//! what was running on it, and reconnects by itself. The demo tools are served over Streamable
//! HTTP in this process, on a port the test holds ([`HeldPort`]) so they can come back on it
//! and nothing else takes it meanwhile.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, UpstreamConfig};
use serde_json::json;

fn web(url: &str) -> UpstreamConfig {
    let mut upstream = http_upstream("web", url);
    upstream.health_check_secs = 1;
    upstream
}

async fn wait_ready(bridge: &TestBridge, name: &str) {
    let upstream = bridge.running().upstreams.get(name).unwrap().clone();
    assert!(
        upstream.ready(WAIT).await,
        "{name} came back: {:?}",
        upstream.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_that_is_down_at_start_is_picked_up_when_it_comes() {
    let port = HeldPort::new();
    let url = format!("http://{}/mcp", port.addr);
    let mut config = mcp_progress_bridge::config::Config::default_for_tests();
    config.upstreams = vec![web(&url)];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bridge_addr = listener.local_addr().unwrap();
    config.server.public_url = format!("http://{bridge_addr}");
    let running = mcp_progress_bridge::app::start_with_listener(config, listener)
        .await
        .unwrap();
    let readyz = format!("http://{bridge_addr}/readyz");
    // The reason is on /upstreams (open here: no bearer token is configured), not on /readyz.
    let upstreams = format!("http://{bridge_addr}/upstreams");
    let body = eventually("/upstreams says web is down", || async {
        let (_, body) = get_json(&upstreams).await;
        body["upstreams"][0]["last_error"]
            .is_string()
            .then_some(body)
    })
    .await;
    assert!(
        body["upstreams"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains(&url),
        "{body}"
    );
    // Ready all the same (no `server.ready_requires`): the upstream's state is reported.
    let (status, ready) = get_json(&readyz).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["upstreams"][0]["name"], "web");
    assert_eq!(ready["upstreams"][0]["state"], "down", "{ready}");
    assert!(
        ready["upstreams"][0].get("error").is_none(),
        "no error text on /readyz: {ready}"
    );

    let _demo = start_http_demo_on(port.listener());
    let mut bridge = TestBridge::at(&format!("http://{bridge_addr}"));
    bridge.bridge = Some(running);
    wait_ready(&bridge, "web").await;
    assert_eq!(get_json(&readyz).await.0, 200);
    let client = connect(&bridge).await;
    assert_eq!(
        first_text(&call(&client, "web__echo", json!({"text": "up"})).await),
        "up"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A replica is not ready before each upstream has been tried once (`reason: "starting"`), so
/// a load balancer does not send calls to a replica whose catalog is still empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_not_ready_before_its_upstreams_have_been_tried() {
    // Accepts connections (the kernel's backlog) and never answers: the first handshake hangs.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", silent.local_addr().unwrap());
    let mut config = mcp_progress_bridge::config::Config::default_for_tests();
    config.upstreams = vec![web(&url)];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bridge_addr = listener.local_addr().unwrap();
    config.server.public_url = format!("http://{bridge_addr}");
    let running = mcp_progress_bridge::app::start_with_listener(config, listener)
        .await
        .unwrap();
    let (status, ready) = get_json(&format!("http://{bridge_addr}/readyz")).await;
    let (_, upstreams) = get_json(&format!("http://{bridge_addr}/upstreams")).await;
    assert_eq!(
        upstreams["upstreams"][0]["state"], "connecting",
        "{upstreams}"
    );
    assert!(
        upstreams["upstreams"][0]["last_error"].is_null(),
        "{upstreams}"
    );
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["reason"], "starting", "{ready}");
    let mut bridge = TestBridge::at(&format!("http://{bridge_addr}"));
    bridge.bridge = Some(running);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_http_upstream_is_used_again_without_the_caller_noticing() {
    let port = HeldPort::new();
    let demo = start_http_demo_on(port.listener());
    let url = demo.url.clone();
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.upstreams = vec![web(&url)];
    })
    .await;
    let client = connect(&bridge).await;
    assert_eq!(
        first_text(&call(&client, "web__echo", json!({"text": "one"})).await),
        "one"
    );
    // The server restarts: its sessions are gone, the bridge's session ID now answers 404.
    demo.stop().await;
    let _demo = start_http_demo_on(port.listener());
    wait_ready(&bridge, "web").await;
    let again = call(&client, "web__echo", json!({"text": "two"})).await;
    assert_eq!(first_text(&again), "two");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_lost_mid_call_fails_the_job_and_reconnects() {
    let port = HeldPort::new();
    let demo = start_http_demo_on(port.listener());
    let url = demo.url.clone();
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![web(&url)];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "web__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    demo.stop().await;

    let events = read_job_events(&handle.events_url).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "failed", "{:?}", last.data);
    assert!(
        matches!(
            last["reason"].as_str(),
            Some("upstream_lost" | "upstream_error")
        ),
        "{:?}",
        last.data
    );
    let _demo = start_http_demo_on(port.listener());
    wait_ready(&bridge, "web").await;
    let handle = running_job(&client, "web__slow_count", json!({"to": 2, "delay_ms": 10})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(events.last().unwrap().event, "completed");
    bridge.shutdown(Duration::from_secs(1)).await;
}
