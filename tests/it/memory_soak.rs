//! Memory over many short jobs: after a warm-up, 1,200 more jobs leave the process's resident
//! memory where it was, and every finished job expires. It reads this whole process's RSS, so
//! it runs alone in a process of its own (`in_own_process`): no other test's allocations can
//! move the figure. The bridge runs in that process, as in the other end-to-end tests, with the
//! demo tools as a real stdio child.

use std::time::Duration;

use crate::common::*;
use mcp_progress_bridge::config::CallMode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_flat_over_many_short_jobs() {
    if !in_own_process(
        module_path!(),
        "memory_stays_flat_over_many_short_jobs",
        &[],
    ) {
        return;
    }
    let bridge = start_bridge(|c| {
        c.jobs.mode = CallMode::Sync;
        c.jobs.retention_secs = 1;
        c.jobs.history = 100;
    })
    .await;
    let client = connect(&bridge).await;
    let rss = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .unwrap()
            .to_string();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let mut last_job = None;
    let run = |n: usize| {
        let client = &client;
        async move {
            let mut last = None;
            for i in 0..n {
                let result =
                    call(client, "demo__slow_count", json!({"to": 3, "delay_ms": 0})).await;
                assert_eq!(structured(&result)["counted"], 3, "call {i}");
                last = result.meta.unwrap()["mcp-progress-bridge/job"]["job_id"]
                    .as_str()
                    .map(str::to_string);
            }
            last
        }
    };
    run(300).await;
    let warm = rss();
    for _ in 0..4 {
        last_job = run(300).await;
    }
    // Everything finished expires; nothing is left behind per job.
    let status_url = job_status_url(&bridge.base, &last_job.unwrap());
    eventually("the last job expires", || async {
        get_json(&status_url).await.0 == 404
    })
    .await;
    assert_eq!(bridge.running().jobs.running_here(), 0);
    let grown_kib = rss().saturating_sub(warm);
    // 1,200 more jobs: a leak of even 10 KiB a job would show as 12 MiB.
    assert!(
        grown_kib < 8 * 1024,
        "RSS grew {grown_kib} KiB over 1,200 short jobs"
    );
    bridge.shutdown(Duration::from_secs(1)).await;
}
