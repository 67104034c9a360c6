//! Bridge processes that share one store and one Streamable HTTP upstream: the replicas of the
//! adoption tests, what each says of a job, a caller waiting on one of them, and a reader that
//! comes back on the survivor.

use serde_json::{Value, json};

use super::{BridgeProcess, TEST_JOB_SECRET, call, connect_url, first_text, get_json};
use super::{SseEvent, assert_consecutive, job_events_url, job_status_url, read_sse, spawn_bridge};

/// A replica with `store` (its `[store]` section), its calls in `mode`, and the upstream `name`
/// at `url` (Streamable HTTP).
pub async fn http_replica(mode: &str, store: &str, name: &str, url: &str) -> BridgeProcess {
    let config = format!(
        "[jobs]\nmode = \"{mode}\"\ndrain_secs = 600\n[auth]\njob_secret = \"{TEST_JOB_SECRET}\"\n\
         {store}\n[[upstreams]]\nname = \"{name}\"\ntransport = \"http\"\nurl = \"{url}\"\n"
    );
    spawn_bridge(&config, &[]).await
}

/// Two [`http_replica`]s in `async` mode, started together.
pub async fn two_replicas(store: &str, name: &str, url: &str) -> (BridgeProcess, BridgeProcess) {
    tokio::join!(
        http_replica("async", store, name, url),
        http_replica("async", store, name, url)
    )
}

/// The job's snapshot as `replica` serves it.
pub async fn job_snapshot(replica: &BridgeProcess, job_id: &str) -> Value {
    let (status, snapshot) = get_json(&job_status_url(&replica.base(), job_id)).await;
    assert_eq!(status, 200, "{snapshot}");
    snapshot
}

/// A caller on `replica` waiting for the job (`wait_for_job`, 45 s) in a task of its own: the
/// text of its answer.
pub async fn waiting_caller(
    replica: &BridgeProcess,
    job_id: &str,
) -> tokio::task::JoinHandle<String> {
    let client = connect_url(&replica.mcp_url()).await;
    let arguments = json!({"job_id": job_id, "timeout_seconds": 45});
    tokio::spawn(async move { first_text(&call(&client, "wait_for_job", arguments).await) })
}

/// A reader that had `first` (from seq 1) on a replica that is gone comes back on `survivor`
/// with `Last-Event-ID` and reads to the terminal event: the whole line, checked to resume
/// right after `first`, to start at 1 and to have no gap.
pub async fn reader_comes_back(
    survivor: &BridgeProcess,
    job_id: &str,
    first: Vec<SseEvent>,
) -> Vec<SseEvent> {
    let last_seen = first.last().expect("events before the owner went").seq();
    let rest = read_sse(
        &job_events_url(&survivor.base(), job_id),
        Some(last_seen),
        SseEvent::is_terminal,
    )
    .await;
    assert_eq!(rest[0].seq(), last_seen + 1, "no gap: {rest:#?}");
    let all: Vec<SseEvent> = first.into_iter().chain(rest).collect();
    assert_eq!(all[0].seq(), 1);
    assert_consecutive(&all);
    all
}
