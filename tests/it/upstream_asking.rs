//! `prompts/get` and `resources/read` that a 2026-07-28 upstream answers with `input_required`
//! (SEP-2322): the demo server with `--asking` (a prompt and a resource that ask for a name),
//! a real child the bridge speaks 2026-07-28 to. A 2026-07-28 caller gets the rounds passed on
//! (its rmcp client answers and retries through the bridge); a caller below 2026-07-28 has
//! them driven by the bridge, its questions sent on its session. Bounded like a tool call's
//! rounds.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{Config, UpstreamProtocol};
use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::json;

const PROMPT: &str = "demo__introduce";

/// The demo server, asking, spoken to at 2026-07-28.
fn asking(c: &mut Config) {
    let mut upstream = demo_stdio_upstream("demo");
    upstream.args = vec!["demo-tools".into(), "--asking".into()];
    upstream.protocol = UpstreamProtocol::V2026_07_28;
    c.upstreams = vec![upstream];
}

fn prompt(arguments: serde_json::Value) -> GetPromptRequestParams {
    let mut params = GetPromptRequestParams::new(PROMPT);
    params.arguments = args(arguments);
    params
}

async fn introduced(client: &McpClient, arguments: serde_json::Value) -> Result<String, String> {
    let result = within("prompts/get", client.get_prompt(prompt(arguments)))
        .await
        .map_err(|e| e.to_string())?;
    let content = &result.messages[0].content;
    match content.as_text() {
        Some(text) => Ok(text.text.clone()),
        None => panic!("a text message, not {content:?}"),
    }
}

/// The bridge's URI for the demo's asking resource.
async fn greeting_uri(client: &McpClient) -> String {
    let resources = within("resources/list", client.list_all_resources())
        .await
        .expect("resources/list");
    resources
        .iter()
        .find(|r| r.uri.contains("asking/greeting"))
        .unwrap_or_else(|| panic!("the asking resource is listed: {resources:?}"))
        .uri
        .clone()
}

async fn greeted(client: &McpClient) -> String {
    let uri = greeting_uri(client).await;
    let result = within(
        "resources/read",
        client.read_resource(ReadResourceRequestParams::new(uri)),
    )
    .await
    .expect("resources/read");
    match &result.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("text contents, not {other:?}"),
    }
}

/// A caller at 2026-07-28: its own client answers the rounds (rmcp's `get_prompt` and
/// `read_resource` drive them), the bridge routes each retry to the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_caller_answers_the_rounds_itself() {
    let bridge = start_bridge(asking).await;
    let caller = connect_answering_everything(&bridge.mcp_url(), "Ada", "-", &[], true).await;
    assert_eq!(
        introduced(&caller, json!({})).await.unwrap(),
        "Please introduce Ada."
    );
    assert_eq!(greeted(&caller).await, "Hello, Ada!");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// A caller on a handshake revision: the bridge asks it on its session (it declared
/// elicitation) and retries the upstream with its answer; one that did not declare elicitation
/// has its question declined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_drives_the_rounds_for_a_handshake_caller() {
    let bridge = start_bridge(asking).await;
    let caller = connect_answering_everything(&bridge.mcp_url(), "Grace", "-", &[], false).await;
    assert_eq!(
        introduced(&caller, json!({})).await.unwrap(),
        "Please introduce Grace."
    );
    assert_eq!(greeted(&caller).await, "Hello, Grace!");

    let plain = connect(&bridge).await;
    assert_eq!(
        introduced(&plain, json!({})).await.unwrap(),
        "Please introduce someone."
    );
    assert_eq!(greeted(&plain).await, "Hello, someone!");
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// An upstream that asks forever stops at `limits.max_input_rounds` for a handshake caller; a
/// `requestState` over `limits.max_request_state_bytes` is refused to either caller; each hit
/// is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rounds_are_bounded() {
    let bridge = start_bridge(|c| {
        asking(c);
        c.limits.max_input_rounds = 3;
        c.limits.max_request_state_bytes = 1024;
    })
    .await;
    let caller = connect_answering_everything(&bridge.mcp_url(), "Ada", "-", &[], false).await;
    let error = introduced(&caller, json!({"forever": "true"}))
        .await
        .unwrap_err();
    assert!(
        error.contains("max_input_rounds") && error.contains("4 times"),
        "{error}"
    );
    let error = introduced(&caller, json!({"state_padding": "4096"}))
        .await
        .unwrap_err();
    assert!(error.contains("max_request_state_bytes"), "{error}");

    let at_2026 = connect_answering_everything(&bridge.mcp_url(), "Ada", "-", &[], true).await;
    let error = introduced(&at_2026, json!({"state_padding": "4096"}))
        .await
        .unwrap_err();
    assert!(error.contains("max_request_state_bytes"), "{error}");

    let metrics = metrics_text(&bridge.base).await;
    for limit in ["max_input_rounds", "max_request_state_bytes"] {
        assert!(
            metrics.contains(&format!("bridge_limit_hits_total{{limit=\"{limit}\"}}")),
            "{limit} counted"
        );
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}
