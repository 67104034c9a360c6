//! SIGTERM with a job running: the job is cancelled upstream after the grace period, its
//! subscriber gets the terminal event, the process exits 0, and no child process is left.

#[allow(dead_code)]
mod common;

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
    let mut bridge = spawn_bridge(
        &format!(
            "[jobs]\nmode = \"async\"\nshutdown_grace_secs = 1\n{}",
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
