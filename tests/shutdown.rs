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
