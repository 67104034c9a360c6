//! SIGTERM with a job running: the job is cancelled upstream after the grace period, its
//! subscriber gets the terminal event, the process exits 0, and no child process is left.

mod common;

use std::{process::Stdio, time::Duration};

use common::*;
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bridge.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
             [jobs]\nmode = \"async\"\nshutdown_grace_secs = 1\n\
             [[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"{BIN}\"\nargs = [\"demo-tools\"]\n"
        ),
    )
    .unwrap();
    let mut bridge = tokio::process::Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = bridge.id().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    within("the bridge is ready", async {
        while try_get_json(&format!("{base}/readyz")).await.map(|r| r.0) != Some(200) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let kids = children(pid);
    assert_eq!(kids.len(), 1, "one demo child: {kids:?}");

    let client = connect_url(&format!("{base}/mcp")).await;
    let handle = structured(&call(&client, "demo__hang", json!({})).await);
    let events_url = handle["events_url"].as_str().unwrap().to_string();
    let reader = tokio::spawn(async move { read_job_events(&events_url).await });
    // The reader is subscribed once it has the status event; give it that chance by waiting
    // for the subscriber gauge.
    within("the reader subscribes", async {
        loop {
            let metrics = reqwest::get(format!("{base}/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if metrics
                .lines()
                .any(|l| l.starts_with("bridge_sse_subscribers 1"))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
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
        let done = structured(
            &call(
                &client,
                "demo__slow_count",
                json!({"to": 2, "delay_ms": 10}),
            )
            .await,
        );
        let events = read_job_events(done["events_url"].as_str().unwrap()).await;
        assert_eq!(events.last().unwrap().event, "completed", "{events:?}");
        let hang = structured(&call(&client, "demo__hang", json!({})).await);
        let url = hang["events_url"].as_str().unwrap().to_string();
        read_sse(&url, None, |e| e.event == "status").await;
        let reader = tokio::spawn(async move { read_job_events(&url).await });
        (client, reader)
    })
}

/// After `shutdown` returns, nothing the bridge started still runs: the runtime it ran on has
/// no task left (dependencies' own tasks, such as a connection's, end with what they serve).
fn assert_no_task_left(rt: &Runtimes) {
    let left = rt.bridge.block_on(async {
        // Tasks a dependency spawned end at their next poll once what they serve is gone (an
        // aborted task is dropped by a worker thread): give them that moment, no more.
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        while rt.bridge.metrics().num_alive_tasks() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        rt.bridge.metrics().num_alive_tasks()
    });
    assert_eq!(
        left, 0,
        "tasks still alive on the bridge's runtime after shutdown"
    );
}

#[test]
fn after_shutdown_no_task_of_the_bridge_is_left() {
    let rt = runtimes();
    let bridge = rt.bridge.block_on(start_bridge(|c| {
        c.jobs.mode = mcp_progress_bridge::config::CallMode::Async;
    }));
    let (_session, reader) = exercise(&rt, &bridge);
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
    assert_no_task_left(&rt);
    let events = rt
        .client
        .block_on(within("the reader's stream", reader))
        .unwrap();
    assert_eq!(events.last().unwrap().event, "cancelled", "{events:?}");
}

/// The replica's Redis connections, by the names it gives them (`CLIENT SETNAME`
/// `<prefix>:<replica>:<role>`).
async fn connections_named(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
) -> Vec<String> {
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
        .map(str::to_string)
        .collect()
}

#[test]
fn after_shutdown_the_redis_store_has_no_task_and_no_connection_left() {
    let rt = runtimes();
    let Some(url) = rt.client.block_on(test_redis(
        "after_shutdown_the_redis_store_has_no_task_and_no_connection_left",
    )) else {
        return;
    };
    let prefix = unique_prefix("shutdown");
    let bridge = rt.bridge.block_on(async {
        let bridge = start_bridge(|c| {
            c.jobs.mode = mcp_progress_bridge::config::CallMode::Async;
            c.store.backend = mcp_progress_bridge::config::StoreBackend::Redis;
            c.store.redis_url = url.clone();
            c.store.key_prefix = prefix.clone();
        })
        .await;
        let store = bridge.running().store.clone();
        within("the store connects", async {
            while store.ping().await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
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
    assert_eq!(open.len(), 2, "the replica's two connections: {open:?}");

    let (_session, reader) = exercise(&rt, &bridge);
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
    assert_no_task_left(&rt);
    // Redis notices a closed connection on its next turn of the event loop: ask until it has.
    let left = rt.client.block_on(async {
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            let left = connections_named(&mut redis, &name).await;
            if left.is_empty() || tokio::time::Instant::now() >= until {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(
        left.is_empty(),
        "connections left open after shutdown: {left:?}"
    );
    let events = rt
        .client
        .block_on(within("the reader's stream", reader))
        .unwrap();
    assert_eq!(events.last().unwrap().event, "cancelled", "{events:?}");
}
