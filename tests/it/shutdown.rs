//! SIGTERM with a job running: the job is cancelled upstream after the drain time, its
//! subscriber gets the terminal event, the process exits 0, and no child process is left; every
//! task and connection of the bridge ends, and every stream ends with a whole body. The drain
//! itself (what goes on working, a second signal): `drain.rs`.

use std::{sync::Arc, time::Duration};

use crate::common::*;
use serde_json::json;

/// The PIDs of a process's children (Linux): each thread lists the children it spawned.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive: its reaper is the one who must wait for it.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_running_jobs_with_a_terminal_event_and_leaves_no_child() {
    let mut bridge = spawn_bridge(
        &format!(
            "[jobs]\nmode = \"async\"\ndrain_secs = 1\n{}",
            demo_upstream_toml("{}")
        ),
        &[],
    )
    .await;
    let kids = children(bridge.pid);
    assert_eq!(kids.len(), 1, "one demo child: {kids:?}");

    let client = connect_url(&bridge.mcp_url()).await;
    let handle = running_job(&client, "demo__hang", json!({})).await;
    let events_url = handle.events_url.clone();
    let reader = tokio::spawn(async move { read_job_events(&events_url).await });
    // The reader is subscribed once it has the status event; give it that chance by waiting
    // for the subscriber gauge.
    let base = bridge.base();
    eventually("the reader subscribes", || async {
        metrics_text(&base)
            .await
            .lines()
            .any(|l| l.starts_with("bridge_sse_subscribers 1"))
    })
    .await;

    bridge.terminate();
    let events = within("the reader's stream", reader).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event, "cancelled", "{events:?}");
    assert!(last["reason"].as_str().unwrap().contains("shutting down"));
    let status = within("the bridge exits", bridge.wait()).await.unwrap();
    assert!(status.success(), "exit status {status}");
    for kid in kids {
        assert!(!alive(kid), "the demo child {kid} outlived the bridge");
    }
}

/// The bridge runs on a runtime of its own here, so that every task alive on that runtime is
/// the bridge's (or one a dependency spawned for it); the test's clients run on another.
struct Runtimes {
    bridge: tokio::runtime::Runtime,
    client: tokio::runtime::Runtime,
}

fn runtimes() -> Runtimes {
    let build = |threads| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    Runtimes {
        bridge: build(2),
        client: build(1),
    }
}

/// Work every kind of background task: an MCP session (the tool-change announcer), a job that
/// ends, and a job still running at shutdown with an SSE reader on it (a job runner, the
/// cancel routing, a live stream). Returns the MCP client, its session still open, and the
/// reader, which ends when the bridge closes its stream.
fn exercise(
    rt: &Runtimes,
    bridge: &TestBridge,
) -> (McpClient, tokio::task::JoinHandle<Vec<SseEvent>>) {
    let mcp = bridge.mcp_url();
    rt.client.block_on(async {
        let client = connect_url(&mcp).await;
        let done = running_job(
            &client,
            "demo__slow_count",
            json!({"to": 2, "delay_ms": 10}),
        )
        .await;
        let events = read_job_events(&done.events_url).await;
        assert_eq!(events.last().unwrap().event, "completed", "{events:?}");
        let hang = running_job(&client, "demo__hang", json!({})).await;
        read_sse(&hang.events_url, None, |e| e.event == "status").await;
        let reader = tokio::spawn(async move { read_job_events(&hang.events_url).await });
        (client, reader)
    })
}

/// Stop the bridge, and check that its own count of tasks is zero once `shutdown` returns, and
/// that nothing else is left on the runtime it ran on either.
fn shut_down_and_count(rt: &Runtimes, bridge: TestBridge) {
    let tasks = bridge.running().tasks();
    assert!(tasks.running() > 0, "the bridge runs background tasks");
    rt.bridge
        .block_on(bridge.shutdown(Duration::from_millis(200)));
    assert_eq!(
        tasks.running(),
        0,
        "tasks of the bridge left after shutdown"
    );
    assert!(tasks.all_stopped(), "every stage was stopped");
    assert!(!tasks.any_dropped(), "every stage stopped within its bound");
    // A dependency's task (a connection's, a session's) ends with what it serves, but may
    // still be finishing its last poll on another worker thread: give it that moment.
    rt.bridge.block_on(eventually_within(
        Duration::from_secs(1),
        "no task left on the bridge's runtime after shutdown",
        || async { rt.bridge.metrics().num_alive_tasks() == 0 },
    ));
}

/// A stream that no terminal event ends (a correlation's) ends at shutdown with a proper end
/// of its body, within the HTTP stage's bound: told to close while it waits for its next event,
/// it is woken, rather than cut mid-body when the stage overruns.
#[test]
fn a_stream_open_at_shutdown_ends_with_a_whole_body() {
    let rt = runtimes();
    let bridge = rt.bridge.block_on(start_bridge(|c| {
        c.jobs.mode = mcp_progress_bridge::config::CallMode::Async;
        // No keep-alive comes to wake the stream before the stage's bound.
        c.server.keep_alive_secs = 300;
    }));
    let url = bridge.correlation_events_url("turn-at-shutdown");
    let base = bridge.base.clone();
    let reader = rt.client.spawn({
        let url = url.clone();
        // Reads until the stream ends; a connection cut mid-body fails the read.
        async move { read_sse(&url, None, |_| false).await }
    });
    // The same stream's bytes, to see how it ends.
    let raw = rt.client.spawn(async move {
        let response = reqwest::get(&url).await.expect("GET the stream");
        response.bytes().await.expect("a whole body")
    });
    rt.client
        .block_on(eventually("the readers subscribe", || async {
            metrics_text(&base)
                .await
                .lines()
                .any(|l| l.starts_with("bridge_sse_subscribers 2"))
        }));
    let tasks = bridge.running().tasks();
    rt.bridge
        .block_on(bridge.shutdown(Duration::from_millis(200)));
    assert!(
        !tasks.any_dropped(),
        "the HTTP stage ended its streams within its bound"
    );
    let events = rt
        .client
        .block_on(within("the reader's stream", reader))
        .unwrap();
    assert!(events.is_empty(), "{events:?}");
    // It says goodbye with a `retry:`: the reader is to come back soon, to another replica.
    let body = rt.client.block_on(within("the raw stream", raw)).unwrap();
    assert!(
        body.ends_with(mcp_progress_bridge::events::sse_frame::CLOSING),
        "{:?}",
        String::from_utf8_lossy(&body)
    );
}

#[test]
fn after_shutdown_no_task_of_the_bridge_is_left() {
    let rt = runtimes();
    let bridge = rt.bridge.block_on(start_bridge(|c| {
        c.jobs.mode = mcp_progress_bridge::config::CallMode::Async;
    }));
    let (_session, reader) = exercise(&rt, &bridge);
    shut_down_and_count(&rt, bridge);
    let events = rt
        .client
        .block_on(within("the reader's stream", reader))
        .unwrap();
    assert_eq!(events.last().unwrap().event, "cancelled", "{events:?}");
}

/// How many connections are open on the Redis under a client name that starts with `name`
/// (the bridge names its own `<prefix>:<replica>:<role>` with `CLIENT SETNAME`).
async fn connections_named(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter(|line| {
            line.split(' ').any(|field| {
                field
                    .strip_prefix("name=")
                    .is_some_and(|n| n.starts_with(name))
            })
        })
        .count()
}

#[test]
fn after_shutdown_the_redis_store_has_no_task_and_no_connection_left() {
    let rt = runtimes();
    let test = "after_shutdown_the_redis_store_has_no_task_and_no_connection_left";
    let Some(url) = rt.client.block_on(test_redis(test)) else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "shutdown");
    let bridge = rt.bridge.block_on(async {
        let bridge = start_bridge(|c| {
            c.jobs.mode = mcp_progress_bridge::config::CallMode::Async;
            c.store.backend = mcp_progress_bridge::config::StoreBackend::Redis;
            c.store.redis_url = url.clone();
            c.store.key_prefix = prefix.to_string();
        })
        .await;
        let store = bridge.running().store.clone();
        eventually("the store connects", || async {
            store.ping().await.is_ok()
        })
        .await;
        bridge
    });
    let name = format!("{prefix}:{}:", bridge.running().jobs.replica());
    let mut redis = rt.client.block_on(async {
        redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    });
    let open = rt.client.block_on(connections_named(&mut redis, &name));
    assert_eq!(open, 2, "the replica's two connections are open");

    let (_session, reader) = exercise(&rt, &bridge);
    shut_down_and_count(&rt, bridge);
    // Redis drops a closed connection from its list on its next turn of the event loop.
    rt.client.block_on(eventually_within(
        Duration::from_secs(1),
        "the replica's Redis connections are closed after shutdown",
        || async { connections_named(&mut redis.clone(), &name).await == 0 },
    ));
    let events = rt
        .client
        .block_on(within("the reader's stream", reader))
        .unwrap();
    assert_eq!(events.last().unwrap().event, "cancelled", "{events:?}");
}

/// A sync caller waiting when SIGTERM comes gets its answer on its POST stream before the
/// connection closes: the result of a job that finishes within the drain, or (past it) the
/// cancelled job's handle saying the bridge is shutting down. It used to get the SSE
/// priming event and nothing else in 2 runs of 3 (the HTTP stage ended the MCP sessions, and
/// their streams, a moment before the answers were written): ten runs here, each must answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_caller_waiting_through_sigterm_gets_its_answer_every_time() {
    let mut missed = Vec::new();
    for run in 0..10 {
        let finishes = run % 2 == 0;
        let mut bridge = spawn_bridge(
            &format!(
                "[jobs]\nmode = \"sync\"\ndrain_secs = 1\n{}",
                demo_upstream_toml("{}")
            ),
            &[],
        )
        .await;
        let mut raw = RawMcp::new(&bridge.mcp_url(), None);
        assert_eq!(raw.initialize().await.status, 200);
        let (tool, arguments) = if finishes {
            ("demo__slow_count", json!({"to": 3, "delay_ms": 150}))
        } else {
            ("demo__hang", json!({}))
        };
        let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let caller = tokio::spawn(async move { raw.post(request.to_string(), &[]).await });
        let base = bridge.base();
        eventually("the call is running", || async {
            metrics_text(&base)
                .await
                .lines()
                .any(|l| l == "bridge_jobs_running 1")
        })
        .await;
        bridge.terminate();
        let answer = within("the caller's answer", caller).await.unwrap();
        let result = answer
            .message
            .as_ref()
            .and_then(|m| m.get("result"))
            .cloned();
        let text = result
            .as_ref()
            .and_then(|r| r["content"][0]["text"].as_str())
            .unwrap_or_default()
            .to_string();
        let answered = match (finishes, &result) {
            (true, Some(r)) => text == "counted to 3" && r["isError"] != true,
            (false, Some(r)) => r["isError"] == true && text.contains("shutting down"),
            _ => false,
        };
        if !answered {
            missed.push(format!("run {run}: {}", answer.body));
        }
        let status = within("the bridge exits", bridge.wait()).await.unwrap();
        assert!(status.success(), "exit status {status}");
    }
    assert!(
        missed.is_empty(),
        "callers left without an answer: {missed:#?}"
    );
}

/// Always ready: the job API alone, without upstreams.
struct AlwaysReady;

impl mcp_progress_bridge::http::Readiness for AlwaysReady {
    fn report(&self) -> (Option<&'static str>, serde_json::Value) {
        (None, serde_json::Value::Array(Vec::new()))
    }

    fn draining(&self) -> bool {
        false
    }
}

/// The race behind the Redis store's cut streams at shutdown, made to happen every run: a job's
/// terminal event is in history before the HTTP stage stops, but its live copy is still on its
/// way (on Redis it comes through pub/sub; here `FaultyStore::lose` holds it back for good). The
/// stream, waiting for that live event on the bridge's own serve loop (alone, and parked at a
/// shared writer), must be woken by its connection's close, read history once, send the
/// terminal event and end its body whole, within the stage's bound. Without the wake it waited
/// until the stage dropped its connection mid-body ("unexpected EOF during chunk size line").
#[test]
fn a_terminal_event_still_on_its_way_live_at_shutdown_ends_its_stream_whole() {
    use mcp_progress_bridge::{
        config::{Config, Secret},
        events::Broker,
        http::{self, ApiState, auth::Guard, serve},
        metrics::Metrics,
        model::{EventBody, JobId, NewJob},
        shutdown::{Shutdown, Stage},
    };
    let rt = runtimes();
    for sse_writers in [0, 1] {
        let store = FaultyStore::new();
        let shutdown = Shutdown::new();
        let http_tasks = shutdown.tasks(Stage::Http);
        let base = rt.bridge.block_on(async {
            let mut config = Config::default_for_tests();
            config.auth.job_secret = Some(Secret::literal(TEST_JOB_SECRET).into());
            let metrics = Arc::new(Metrics::new());
            let routes = http::router(ApiState {
                broker: store.clone(),
                bus: store.clone(),
                guard: Guard::new(&config, job_tokens(), &metrics).unwrap(),
                metrics: metrics.clone(),
                readiness: Arc::new(AlwaysReady),
                // No keep-alive comes to wake the stream before the stage's bound.
                keep_alive: Duration::from_secs(300),
                max_sse_buffer_bytes: 4 << 20,
                shutdown: http_tasks.stopping().clone(),
                inputs: None,
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let options = serve::Options {
                header_read_timeout: Duration::from_secs(10),
                keep_alive_idle: Duration::from_secs(10),
                clients: Default::default(),
                body_read_timeout: Duration::from_secs(10),
                max_connections: 100,
                max_connections_per_address: 100,
                sse_writers,
            };
            let counters = serve::Counters {
                open: metrics.connections_open.with_label_values(&["main"]),
                refused: metrics.connections_refused.clone(),
                closed: metrics.connections_closed.clone(),
                handbacks: metrics.sse_handbacks.clone(),
                shared_deliveries: metrics.sse_shared_deliveries.clone(),
                delivery_lag: metrics.delivery_lag.clone(),
            };
            serve::spawn(
                &http_tasks,
                listener,
                routes.with_state(()),
                options,
                counters,
            );
            base
        });
        let job = JobId::random();
        rt.client.block_on(async {
            store
                .create_job(NewJob {
                    id: job,
                    tool: "demo__t".into(),
                    upstream: "demo".into(),
                    upstream_tool: "t".into(),
                    correlation_id: None,
                    owner: "test".into(),
                    principal: None,
                })
                .await
                .unwrap()
        });
        // The terminal event will be number 1: history gets it, no live stream does.
        store.lose(1);
        let url = job_events_url(&base, &job.to_string());
        let mut response = rt.client.block_on(async {
            let mut response = reqwest::get(&url).await.expect("GET the stream");
            let mut seen = Vec::new();
            while !String::from_utf8_lossy(&seen).contains("event: status") {
                let chunk = within("the status event", response.chunk()).await;
                seen.extend_from_slice(&chunk.expect("a chunk").expect("more of the stream"));
            }
            response
        });
        let tasks = shutdown.count();
        rt.bridge.block_on(async {
            store
                .append(
                    job,
                    EventBody::Cancelled {
                        reason: "the bridge is shutting down".into(),
                    },
                )
                .await
                .unwrap();
            // The jobs stage has ended: the HTTP stage stops with its bound, as in `app`.
            shutdown.stop(Stage::Http, Duration::from_secs(5)).await;
        });
        assert!(
            !tasks.any_dropped(),
            "sse_writers = {sse_writers}: the HTTP stage ended its stream within its bound"
        );
        let rest = rt.client.block_on(async {
            let mut rest = Vec::new();
            loop {
                match within("the rest of the stream", response.chunk()).await {
                    Ok(Some(chunk)) => rest.extend_from_slice(&chunk),
                    Ok(None) => break rest,
                    Err(e) => panic!("sse_writers = {sse_writers}: the stream was cut: {e:?}"),
                }
            }
        });
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            rest.contains("\nid: 1\nevent: cancelled\n")
                && rest.ends_with("\"reason\":\"the bridge is shutting down\"}\n\n"),
            "sse_writers = {sse_writers}: the terminal event, then the end: {rest:?}"
        );
        assert!(
            !rest.contains("retry:"),
            "ended by its job, not for shutdown: {rest:?}"
        );
    }
}
