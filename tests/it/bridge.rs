//! The bridge end to end: rmcp's client calls demo tools through `/mcp`; the job channel is
//! read over SSE with reqwest-eventsource. The demo server is a real child process (or, where
//! said, served over Streamable HTTP).

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::{CallMode, LogAttribution};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_call_returns_a_handle_and_the_channel_shows_every_step_then_the_result() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let result = call(
        &client,
        "demo__slow_count",
        json!({"to": 5, "delay_ms": 50}),
    )
    .await;
    assert_eq!(result.is_error, Some(false));
    let handle = JobHandle::from_value(structured(&result));
    let job_id = &handle.job_id;
    assert_eq!(handle.status, "running");
    assert_eq!(handle.tool, "demo__slow_count");
    let base = &bridge.base;
    assert!(
        handle
            .events_url
            .starts_with(&format!("{base}/jobs/{job_id}/events?token="))
    );
    assert!(
        handle
            .status_url
            .starts_with(&format!("{base}/jobs/{job_id}?token="))
    );
    assert!(
        handle
            .cancel_url
            .starts_with(&format!("{base}/jobs/{job_id}/cancel?token="))
    );
    assert!(handle.instructions.contains("wait_for_job"));
    // Foundry hands the application only the text: it must be the same object.
    let text: Value = serde_json::from_str(&first_text(&result)).expect("text is JSON");
    assert_eq!(text, handle.raw);

    let events = read_job_events(&handle.events_url).await;
    assert_eq!(
        events[0].event, "status",
        "the stream starts with the snapshot"
    );
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let progress: Vec<_> = events.iter().filter(|e| e.event == "progress").collect();
    assert_eq!(progress[2].data["total"], 5.0);
    assert_eq!(progress[2].data["message"], "step 3 of 5");
    assert_eq!(progress[2].data["job_id"], *job_id);
    assert!(progress[2].data["ts"].as_u64().is_some());
    let seqs: Vec<u64> = events[1..].iter().map(SseEvent::seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "ids are consecutive: {seqs:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last.event, "completed");
    assert_eq!(last.data["result"]["structuredContent"]["counted"], 5);

    let (status, snapshot) = get_json(&handle.status_url).await;
    assert_eq!(status, 200);
    assert_eq!(snapshot["status"], "completed");
    assert_eq!(snapshot["progress"], 5.0);
    assert_eq!(snapshot["result"]["structuredContent"]["counted"], 5);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_call_answers_with_the_result_and_forwards_progress_on_the_callers_token() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let client = connect(&bridge).await;
    // rmcp's client always sends a progress token, like an IDE would.
    let result = call(
        &client,
        "demo__slow_count",
        json!({"to": 4, "delay_ms": 20}),
    )
    .await;
    assert_eq!(structured(&result)["counted"], 4);
    assert_eq!(first_text(&result), "counted to 4");
    let meta = &result.meta.as_ref().expect("_meta")["mcp-progress-bridge/job"];
    let job_id = meta["job_id"].as_str().expect("job id in _meta");
    assert!(
        meta["events_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/jobs/{job_id}/events?token=", bridge.base))
    );
    let seen = caller_progress(&client, 4).await;
    assert_eq!(
        seen,
        vec![1.0, 2.0, 3.0, 4.0],
        "progress on the caller's own request"
    );

    // The job channel has the same story, replayed to a reader that comes after the end.
    let events = read_job_events(meta["events_url"].as_str().unwrap()).await;
    assert_eq!(events[0].event, "status");
    assert_eq!(events[0].data["status"], "completed");
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(events.last().unwrap().seq(), 5);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_answers_fast_tools_directly_and_slow_ones_with_a_handle() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Auto;
        c.jobs.sync_budget_ms = 500;
    })
    .await;
    let client = connect(&bridge).await;
    let fast = call(&client, "demo__echo", json!({"text": "hi"})).await;
    assert_eq!(first_text(&fast), "hi");
    assert!(
        fast.meta
            .as_ref()
            .unwrap()
            .contains_key("mcp-progress-bridge/job")
    );

    // A slow call is answered with its handle.
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 20, "delay_ms": 100}),
    )
    .await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(events.last().unwrap().event, "completed");
    assert_eq!(progress_values(&events).len(), 20);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_job_returns_what_a_sync_call_returns() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 50}),
    )
    .await;
    let job_id = handle.job_id.as_str();

    let waited = call(
        &client,
        "wait_for_job",
        json!({"job_id": job_id, "timeout_seconds": 15}),
    )
    .await;
    assert_eq!(first_text(&waited), "counted to 3");
    assert_eq!(structured(&waited)["counted"], 3);
    assert_eq!(waited.is_error, Some(false));
    assert_eq!(
        waited.meta.as_ref().unwrap()["mcp-progress-bridge/job"]["job_id"],
        job_id
    );

    let sync_bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let sync_client = connect(&sync_bridge).await;
    let direct = call(
        &sync_client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 50}),
    )
    .await;
    assert_eq!(direct.content, waited.content);
    assert_eq!(direct.structured_content, waited.structured_content);

    let status = call_json(&client, "get_job_status", json!({"job_id": job_id})).await;
    assert_eq!(status["status"], "completed");
    bridge.shutdown(Duration::from_secs(1)).await;
    sync_bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_job_on_a_running_job_says_to_call_again() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 50, "delay_ms": 100}),
    )
    .await;
    let job_id = handle.job_id.as_str();
    let body = call_json(
        &client,
        "wait_for_job",
        json!({"job_id": job_id, "timeout_seconds": 0.3}),
    )
    .await;
    assert_eq!(body["status"], "running");
    assert!(
        body["instructions"]
            .as_str()
            .unwrap()
            .contains("wait_for_job again")
    );
    call(&client, "cancel_job", json!({"job_id": job_id})).await;
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_replays_exactly_the_missed_events() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 8, "delay_ms": 20}),
    )
    .await;
    let url = handle.events_url;
    let all = read_job_events(&url).await;
    let full: Vec<u64> = all[1..].iter().map(SseEvent::seq).collect();
    assert_eq!(full, (1..=9).collect::<Vec<_>>());

    // Resume from the middle, by header and by query parameter.
    let resumed = read_sse(&url, Some(4), SseEvent::is_terminal).await;
    assert_eq!(
        resumed.iter().map(SseEvent::seq).collect::<Vec<_>>(),
        (5..=9).collect::<Vec<_>>()
    );
    assert_eq!(resumed[0].event, "progress", "no status event on resume");
    let by_query = read_sse(
        &format!("{url}&last_event_id=7"),
        None,
        SseEvent::is_terminal,
    )
    .await;
    assert_eq!(
        by_query.iter().map(SseEvent::seq).collect::<Vec<_>>(),
        vec![8, 9]
    );

    // A reader that already saw the end gets the terminal event again, so it stops.
    let after_end = read_sse(&url, Some(9), |_| false).await;
    // (read to the end of the stream: the terminal event comes once, then the stream closes)
    assert_eq!(after_end.len(), 1);
    assert_eq!(after_end[0].event, "completed");

    // A position ahead of the stream is a client error.
    let ahead = reqwest::Client::new()
        .get(&url)
        .header("Last-Event-ID", "99")
        .send()
        .await
        .unwrap();
    assert_eq!(ahead.status(), 400);
    let bad = reqwest::Client::new()
        .get(&url)
        .header("Last-Event-ID", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_older_than_history_gets_a_reset_with_the_snapshot() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.jobs.history = 3;
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 6, "delay_ms": 10}),
    )
    .await;
    let url = handle.events_url;
    let all = read_job_events(&url).await;
    assert_eq!(all.last().unwrap().seq(), 7);

    let resumed = read_sse(&url, Some(1), SseEvent::is_terminal).await;
    assert_eq!(
        resumed[0].event, "reset",
        "history keeps only 5..7: {resumed:?}"
    );
    // No two frames share an id: the reset holds the position before the terminal event,
    // which follows it with its own.
    let seen: Vec<(u64, &str)> = resumed
        .iter()
        .map(|e| (e.seq(), e.event.as_str()))
        .collect();
    assert_eq!(seen, [(6, "reset"), (7, "completed")]);
    assert_eq!(resumed[0].data["status"], "completed");
    assert_eq!(resumed[0].data["progress"], 6.0);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_sent_before_anything_else_is_not_lost() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    let client = connect(&bridge).await;
    for _ in 0..5 {
        let handle = running_job(&client, "demo__instant_progress", json!({"steps": 50})).await;
        let events = read_job_events(&handle.events_url).await;
        assert_eq!(
            progress_values(&events),
            (1..=50).map(f64::from).collect::<Vec<_>>()
        );
        assert_eq!(events.last().unwrap().event, "completed");
    }
    let metrics = metrics_text(&bridge.base).await;
    assert_eq!(
        series_value(
            &metrics,
            "bridge_progress_dropped_total{reason=\"unknown_token\"}"
        ),
        Some(0.0),
        "no progress went unrouted:\n{metrics}"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_ends_the_job_failed_and_sync_passes_it_on_unchanged() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let client = connect(&bridge).await;
    let result = call(
        &client,
        "demo__fail_after",
        json!({"steps": 2, "delay_ms": 10}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(first_text(&result), "failed after 2 steps as asked");
    let events_url = result.meta.as_ref().unwrap()["mcp-progress-bridge/job"]["events_url"]
        .as_str()
        .unwrap()
        .to_string();
    let events = read_job_events(&events_url).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "failed");
    assert_eq!(last.data["reason"], "tool_error");
    assert_eq!(last.data["message"], "failed after 2 steps as asked");
    assert_eq!(last.data["result"]["isError"], true);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_become_log_events_when_the_upstream_opts_in() {
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams[0].logs = LogAttribution::AttributeWhenSingle;
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__log_and_count",
        json!({"to": 3, "delay_ms": 20}),
    )
    .await;
    let events = read_job_events(&handle.events_url).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "status",
            "log",
            "progress",
            "log",
            "progress",
            "log",
            "progress",
            "completed"
        ]
    );
    assert_eq!(events[1].data["level"], "info");
    assert_eq!(events[1].data["logger"], "demo");
    assert_eq!(events[1].data["data"], "working on step 1");
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_works_like_a_stdio_one() {
    let demo = start_http_demo().await;
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![http_upstream("web", &demo.url)];
    })
    .await;
    let client = connect(&bridge).await;
    let tools = within("list tools", client.list_all_tools()).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "web__slow_count"));
    let handle = running_job(&client, "web__slow_count", json!({"to": 4, "delay_ms": 20})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        events.last().unwrap().data["result"]["structuredContent"]["counted"],
        4
    );
    let handle = running_job(&client, "web__instant_progress", json!({"steps": 30})).await;
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(progress_values(&events).len(), 30);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_has_every_upstream_tool_namespaced_plus_the_job_tools() {
    let bridge = start_bridge(|c| c.upstreams.push(demo_stdio_upstream("second"))).await;
    let client = connect(&bridge).await;
    let tools = within("list tools", client.list_all_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "demo__slow_count",
        "demo__echo",
        "second__slow_count",
        "get_job_status",
        "wait_for_job",
        "cancel_job",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let slow = tools.iter().find(|t| t.name == "demo__slow_count").unwrap();
    assert!(
        slow.description
            .as_deref()
            .unwrap_or_default()
            .contains("progress")
    );
    assert!(
        slow.input_schema.get("properties").is_some(),
        "schema unchanged"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_jobs_and_tools_get_clear_errors() {
    let bridge = start_bridge(|_| {}).await;
    let client = connect(&bridge).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    for tool in ["get_job_status", "wait_for_job", "cancel_job"] {
        let result = call(&client, tool, json!({"job_id": unknown})).await;
        assert_eq!(result.is_error, Some(true), "{tool}");
        assert!(
            first_text(&result).contains("no job"),
            "{tool}: {}",
            first_text(&result)
        );
        let result = call(&client, tool, json!({"job_id": "../etc"})).await;
        assert!(first_text(&result).contains("not a job ID"), "{tool}");
        let result = call(&client, tool, json!({})).await;
        assert!(first_text(&result).contains("invalid arguments"), "{tool}");
    }
    let error = within(
        "unknown tool",
        client.call_tool(CallToolRequestParams::new("demo__nope")),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("unknown tool"), "{error}");
    let error = within(
        "unknown upstream",
        client.call_tool(CallToolRequestParams::new("nope")),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("unknown tool"), "{error}");

    for path in [
        format!("/jobs/{unknown}"),
        "/jobs/NOT-AN-ID".into(),
        format!("/jobs/{unknown}/events"),
    ] {
        let (status, body) = get_json(&format!("{}{path}", bridge.base)).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    // Still serves a normal call afterwards.
    assert_eq!(
        first_text(&call(&client, "demo__echo", json!({"text": "ok"})).await),
        "ok"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_the_api_reaches_the_upstream_and_ends_the_job_cancelled() {
    // `cancellations` answers in sync mode (a per-tool override), so its result comes back.
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Async;
        c.upstreams = vec![with_tool_mode(
            demo_stdio_upstream("demo"),
            "cancellations",
            CallMode::Sync,
        )];
    })
    .await;
    let client = connect(&bridge).await;
    let handle = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 1000, "delay_ms": 50}),
    )
    .await;
    // Wait until it is working, then cancel.
    read_sse(&handle.events_url, None, |e| e.event == "progress").await;
    let (status, snapshot) = post_json(&handle.cancel_url).await;
    assert_eq!(status, 202);
    assert_eq!(snapshot["job_id"], handle.job_id);
    let events = read_job_events(&handle.events_url).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled");
    assert!(last.data["reason"].as_str().unwrap().contains("POST"));
    let (status, _) = post_json(&handle.cancel_url).await;
    assert_eq!(status, 409, "cancelling an ended job");

    let cancellations = cancels_seen(&client, "demo", 1).await;
    assert_eq!(cancellations[0]["tool"], "slow_count");
    assert_eq!(cancellations.len(), 1);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correlation_stream_shows_every_job_of_a_request_header() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Async).await;
    // rmcp's HTTP client sends custom headers on every request.
    let client = connect_correlated(&bridge, "turn-42").await;
    let a = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 2, "delay_ms": 10}),
    )
    .await;
    let b = running_job(
        &client,
        "demo__slow_count",
        json!({"to": 3, "delay_ms": 10}),
    )
    .await;
    let url = bridge.correlation_events_url("turn-42");
    let mut ended = 0;
    let events = read_sse(&url, None, |e| {
        if e.is_terminal() {
            ended += 1;
        }
        ended == 2
    })
    .await;
    // The correlation stream does not end with one job: the reader stopped after two ends.
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "job_started")
        .map(|e| &e.data["job_id"])
        .collect();
    assert_eq!(started, vec![&a.job_id, &b.job_id]);
    let ids: Vec<u64> = events.iter().map(SseEvent::seq).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "its own consecutive numbering"
    );
    assert_eq!(
        events.iter().filter(|e| e.event == "progress").count(),
        5,
        "{events:#?}"
    );
    let (status, _) = get_json(&format!("{}/correlations/bad%20id/events", bridge.base)).await;
    assert_eq!(status, 404);
    bridge.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_request_with_a_string_progress_token_is_served() {
    // A token type rmcp's client never sends (a string), read on the wire: the progress must
    // reach the caller on its POST stream under that very token, before the result.
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let mut raw = RawMcp::new(&bridge.mcp_url(), None);
    let init = raw.initialize().await;
    assert_eq!(init.status, 200, "{}", init.body);
    let request = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {
            "name": "demo__slow_count", "arguments": {"to": 2, "delay_ms": 5},
            "_meta": {"progressToken": "abc"}
        }
    });
    let answer = raw.post(request.to_string(), &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result_at = answer
        .messages
        .iter()
        .position(|m| m["id"] == 2)
        .unwrap_or_else(|| panic!("no result: {}", answer.body));
    assert_eq!(
        answer.messages[result_at]["result"]["structuredContent"]["counted"], 2,
        "{}",
        answer.body
    );
    let progress = |messages: &[Value]| -> Vec<(Value, Value)> {
        messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| {
                (
                    m["params"]["progressToken"].clone(),
                    m["params"]["progress"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        progress(&answer.messages[..result_at]),
        [(json!("abc"), json!(1.0)), (json!("abc"), json!(2.0))],
        "each step, under the caller's string token, before the result: {}",
        answer.body
    );
    assert_eq!(
        progress(&answer.messages).len(),
        2,
        "nothing after the result: {}",
        answer.body
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}

/// Readiness means "can serve": a broken upstream is reported on `/readyz` (state only) and
/// `/upstreams` (the reason), its calls get a tool error saying so, and the replica stays ready
/// unless `server.ready_requires` names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_a_down_upstream_and_fails_only_when_it_is_required() {
    for requires in [vec![], vec!["broken".to_string()], vec!["*".to_string()]] {
        let mut config = mcp_progress_bridge::config::Config::default_for_tests();
        let mut broken = demo_stdio_upstream("broken");
        broken.command = Some("/nonexistent/mcp-server".into());
        config.upstreams = vec![demo_stdio_upstream("demo"), broken];
        config.server.ready_requires = requires.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        config.server.public_url = format!("http://{addr}");
        let bridge = mcp_progress_bridge::app::start_with_listener(config, listener)
            .await
            .unwrap();
        assert!(bridge.upstreams.get("demo").unwrap().ready(WAIT).await);
        // The reason is on /upstreams (behind the bearer token when one is set), not on /readyz.
        let upstreams = eventually("/upstreams reports the broken upstream", || async {
            let (_, body) = get_json(&format!("http://{addr}/upstreams")).await;
            body["upstreams"][1]["last_error"]
                .is_string()
                .then_some(body)
        })
        .await;
        assert!(
            upstreams["upstreams"][1]["last_error"]
                .as_str()
                .unwrap()
                .contains("/nonexistent/mcp-server")
        );
        let (status, body) = get_json(&format!("http://{addr}/readyz")).await;
        assert_eq!(body["upstreams"][1]["name"], "broken");
        assert_ne!(body["upstreams"][1]["state"], "ready");
        assert_eq!(body["upstreams"][1]["required"], !requires.is_empty());
        assert_eq!(body["upstreams"][0]["state"], "ready");
        if requires.is_empty() {
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["ready"], true, "{body}");
        } else {
            assert_eq!(status, 503, "{body}");
            assert_eq!(body["reason"], "required_upstream_down", "{body}");
        }
        assert!(
            !body.to_string().contains("/nonexistent"),
            "/readyz names no internals: {body}"
        );
        // The healthy upstream's tools still work; the broken one's get a clear tool error.
        let client = connect_url(&format!("http://{addr}/mcp")).await;
        let tools = within("list", client.list_all_tools()).await.unwrap();
        assert!(tools.iter().any(|t| t.name == "demo__echo"));
        assert!(!tools.iter().any(|t| t.name.starts_with("broken__")));
        let down = call(&client, "broken__echo", json!({"text": "x"})).await;
        assert_eq!(down.is_error, Some(true), "{down:?}");
        let text = first_text(&down);
        assert!(
            text.contains("upstream broken is down") && text.contains("try again"),
            "{text}"
        );
        bridge.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_in_meta_overrides_the_configured_one_for_one_call() {
    let bridge = start_bridge(|c| c.jobs.mode = CallMode::Sync).await;
    let client = connect(&bridge).await;
    let with_mode = |mode: Value| {
        let mut params = CallToolRequestParams::new("demo__slow_count")
            .with_arguments(args(json!({"to": 3, "delay_ms": 20})).unwrap());
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.insert("mcp-progress-bridge/mode".into(), mode);
        params.meta = Some(meta);
        params
    };
    let answer = within("async call", client.call_tool(with_mode(json!("async"))))
        .await
        .unwrap();
    let handle = structured(&answer);
    assert_eq!(
        handle["status"], "running",
        "a handle, not the result: {handle}"
    );
    let handle = JobHandle::from_value(handle);
    let events = read_job_events(&handle.events_url).await;
    assert_eq!(progress_values(&events), vec![1.0, 2.0, 3.0]);

    // Without the key the configured mode (sync) applies.
    let direct = call(&client, "demo__slow_count", json!({"to": 2, "delay_ms": 5})).await;
    assert_eq!(first_text(&direct), "counted to 2");

    for bad in [json!("later"), json!(1), json!(null)] {
        let error = within("bad mode", client.call_tool(with_mode(bad.clone())))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(r#"must be "async", "sync" or "auto""#),
            "{bad}: {error}"
        );
    }
    bridge.shutdown(Duration::from_secs(1)).await;
}
