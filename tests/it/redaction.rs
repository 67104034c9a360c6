//! No configured secret reaches anything the bridge prints: canaries planted in every
//! secret-bearing config field (an upstream URL's userinfo and query, its headers, a stdio
//! upstream's env, the Redis URL, the MCP token, the job secret) are looked for in a tool's
//! error, `/upstreams`, `/metrics` and the whole debug log of a bridge process whose HTTP
//! upstream went down.

use std::time::Duration;

use crate::common::*;
use serde_json::json;

const TOKEN: &str = "canary-token-4-0123456789abcdef";
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

fn config(upstream: &str) -> String {
    format!(
        "[auth]\nmcp_tokens = [{{ name = \"ops\", token = \"{TOKEN}\" }}]\n\
         job_secret = \"canary-jobsecret-5-0123456789abcdef\"\n\
         [store]\nredis_url = \"redis://user:canary-redis-6@127.0.0.1:1/0\"\n\
         [[upstreams]]\nname = \"web\"\ntransport = \"http\"\nhealth_check_secs = 1\n\
         url = \"http://canary-user-1:canary-pass-2@{upstream}/mcp?api_key=canary-query-3&v=1\"\n\
         headers = {{ \"X-Api-Key\" = \"canary-header-7\", \"X-Other\" = \"Bearer canary-bearer-9\" }}\n\
         [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"{BIN}\"\n\
         args = [\"demo-tools\"]\nenv = {{ DEMO_SECRET = \"canary-env-8\" }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_configured_secret_reaches_any_output_of_a_run_with_a_down_upstream() {
    let port = HeldPort::new();
    let demo = start_http_demo_on(port.listener());
    let bridge = spawn_bridge(&config(&port.addr.to_string()), &[("RUST_LOG", "debug")]).await;
    let client = connect_with(&bridge.mcp_url(), Some(TOKEN), None).await;
    assert_eq!(
        first_text(&call(&client, "web__echo", json!({"text": "up"})).await),
        "up"
    );
    demo.stop().await;
    let get = |path: &'static str| {
        let request = bridge
            .http()
            .get(format!("{}{path}", bridge.base()))
            .bearer_auth(TOKEN);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let upstreams = eventually("/upstreams says web is down", || async {
        let body = get("/upstreams").await;
        body.contains("\"down\"").then_some(body)
    })
    .await;
    let refused = call(&client, "web__echo", json!({"text": "down"})).await;
    assert_eq!(refused.is_error, Some(true));
    let tool_error = first_text(&refused);
    let metrics = get("/metrics").await;
    let log = bridge.log();
    // The outputs do speak of the upstream's address: what is checked is that they say it
    // without its secrets.
    let address = format!("{}/mcp", port.addr);
    for (name, text) in [("/upstreams", &upstreams), ("the tool error", &tool_error)] {
        assert!(text.contains(&address), "{name} names the upstream: {text}");
    }
    assert!(log.contains(&address), "the log names the upstream");
    for (name, text) in [
        ("the tool error", &tool_error),
        ("/upstreams", &upstreams),
        ("/metrics", &metrics),
        ("the log", &log),
    ] {
        for canary in CANARIES {
            let at = text
                .find(canary)
                .map(|i| &text[i.saturating_sub(200)..i + 40]);
            assert!(at.is_none(), "{canary} in {name}: …{}…", at.unwrap());
        }
    }
    println!("tool error: {tool_error}");
    client.cancel().await.ok();
    tokio::time::timeout(Duration::from_secs(20), bridge.stop())
        .await
        .expect("the bridge stops");
}
