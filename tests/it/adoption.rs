//! A job outlives the replica that runs it when its upstream call can be re-attached: two
//! bridge processes on one Redis, a Streamable HTTP upstream whose tool runs as an upstream
//! task (tests/interop/task_http_server.mjs, each task known only to the session that made it),
//! and the owner killed (`kill -9`) or paused past its lease (SIGSTOP) in the middle of a job.
//! The other replica adopts the job, follows the task on its session and ends it; readers see
//! one `seq` line. A plain HTTP call still fails `owner_lost`. A draining owner (SIGTERM)
//! hands such a job over at once and exits long before the job ends.

use crate::common::*;
use serde_json::json;

/// The lease the replicas hold (seconds): short, so a lost owner is noticed in a few seconds.
const LEASE_SECS: u64 = 2;
/// The task's stages, and the time between them: long enough (9 s) for the owner to be lost
/// and the job adopted while it runs.
const STEPS: u64 = 30;
const STEP_MS: u64 = 300;

/// The status messages of the progress events, in order.
fn stages(events: &[SseEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.event == "progress")
        .filter_map(|e| e.data["message"].as_str().map(str::to_string))
        .collect()
}

/// What every reader of an adopted job must have seen: progress steps 1, 2, 3… each once,
/// stages each once and in the task's order up to the last, then the task's result.
fn assert_one_line(events: &[SseEvent], topic: &str) {
    assert_one_line_of(events, topic, STEPS);
}

/// [`assert_one_line`] for a task of `steps` stages.
fn assert_one_line_of(events: &[SseEvent], topic: &str, steps: u64) {
    let progress = progress_values(events);
    let expected: Vec<f64> = (1..=progress.len()).map(|p| p as f64).collect();
    assert_eq!(progress, expected, "every step once, in order: {events:#?}");
    let stage_numbers: Vec<u64> = stages(events)
        .iter()
        .map(|m| {
            let n = m.strip_prefix("stage ").and_then(|m| m.split('/').next());
            n.and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a stage message: {m:?}"))
        })
        .collect();
    assert!(
        stage_numbers.windows(2).all(|w| w[1] > w[0]),
        "each stage once, in order: {stage_numbers:?}"
    );
    assert_eq!(stage_numbers.last(), Some(&steps), "{stage_numbers:?}");
    let done = events.last().unwrap();
    assert_eq!(done.event, "completed", "{events:#?}");
    assert_eq!(
        done.data["result"]["content"][0]["text"],
        format!("done: {topic}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_backed_job_whose_owner_is_killed_completes_on_the_other_replica() {
    let Some(url) = test_redis("adoption::kill").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-kill");
    owner_killed_mid_task(&redis_store_toml(&url, &prefix, LEASE_SECS)).await;
}

/// The same on a Redis Cluster of three primaries: the job's keys, the replicas' leases and
/// running sets and the offers live in different slots (different nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_task_backed_job_whose_owner_is_killed_completes_on_the_other_replica()
{
    let Some(cluster) = RedisCluster::start("adoption::kill_on_cluster").await else {
        return;
    };
    let store = format!(
        "{}redis_cluster = true\n",
        redis_store_toml(&cluster.url(), "adopt-kill", LEASE_SECS)
    );
    owner_killed_mid_task(&store).await;
}

/// Two replicas on `store`, a task job on the first, the first killed mid-task: the second
/// adopts it and ends it, its readers see one line.
async fn owner_killed_mid_task(store: &str) {
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    let (mut a, b) = two_replicas(store, "ts", &upstream).await;
    let (_, upstreams) = get_json(&format!("{}/upstreams", a.base())).await;
    assert_eq!(upstreams["upstreams"][0]["durable"], "auto", "{upstreams}");

    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "adopted", "steps": STEPS, "step_ms": STEP_MS});
    let handle = running_job(&on_a, "ts__staged", arguments).await;
    let job_id = handle.job_id.clone();
    // A reader on the owner, from the first event until the third stage.
    let first = read_sse(&handle.events_url, Some(0), |e| {
        e.event == "progress" && e.data["progress"] == 3.0
    })
    .await;
    let before = job_snapshot(&b, &job_id).await;
    assert_eq!(before["durability"], "upstream_task", "{before}");
    assert_eq!(before["status"], "running", "{before}");

    // A caller waits on the other replica while the owner dies.
    let waiter = waiting_caller(&b, &job_id).await;
    a.kill();

    // The reader comes back on the survivor with Last-Event-ID.
    let all = reader_comes_back(&b, &job_id, first).await;
    assert_one_line(&all, "adopted");

    assert_eq!(waiter.await.unwrap(), "done: adopted");
    let after = job_snapshot(&b, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(after["owner"], before["owner"], "adopted: {after}");
    assert!(
        b.log().contains("adopted a job whose owner's lease lapsed"),
        "{}",
        b.log_tail()
    );
    let metrics = metrics_text(&b.base()).await;
    assert!(
        metrics.contains("bridge_job_adoptions_total{event=\"adopted_lease_lapsed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_writes_nothing_over_the_replica_that_adopted_its_job() {
    let Some(url) = test_redis("adoption::pause").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-pause");
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (a, b) = two_replicas(&store, "ts", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "paused", "steps": STEPS, "step_ms": STEP_MS});
    let handle = running_job(&on_a, "ts__staged", arguments).await;
    let job_id = handle.job_id.clone();
    read_sse(&handle.events_url, None, |e| {
        e.event == "progress" && e.data["progress"] == 2.0
    })
    .await;
    let owner = job_snapshot(&b, &job_id).await["owner"].clone();

    // Paused past its lease: the other replica adopts the job; then the owner goes on.
    a.signal(libc::SIGSTOP);
    eventually("the job adopted", || async {
        job_snapshot(&b, &job_id).await["owner"] != owner
    })
    .await;
    a.signal(libc::SIGCONT);

    let events = read_sse(
        &job_events_url(&b.base(), &job_id),
        Some(0),
        SseEvent::is_terminal,
    )
    .await;
    assert_eq!(events[0].seq(), 1);
    assert_consecutive(&events);
    assert_one_line(&events, "paused");
    let after = job_snapshot(&b, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(
        after["owner"], owner,
        "the adopter's result stands: {after}"
    );
    // The old owner learnt it at its first write after the pause, and stopped.
    eventually("the old owner says it stopped", || async {
        a.log().contains("another replica adopted this job")
    })
    .await;
    assert!(
        !a.log().contains("job ended"),
        "the old owner wrote no end of its own: {}",
        a.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_job_still_fails_owner_lost_when_its_owner_is_killed() {
    let Some(url) = test_redis("adoption::plain").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-plain");
    // The Python SDK server without an event store: its SSE events carry no ids, so its calls
    // cannot be resumed (rmcp's own server, the demo's, puts ids on them).
    let Some((_server, upstream)) = resumable_http_server(&["--no-store"]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "py", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let handle = running_job(
        &on_a,
        "py__counted",
        json!({"topic": "plain", "steps": 1000, "step_ms": 50}),
    )
    .await;
    let url_b = job_events_url(&b.base(), &handle.job_id);
    let seen = read_sse(&url_b, None, |e| e.event == "progress").await;
    let before = job_snapshot(&b, &handle.job_id).await;
    assert_eq!(before["durability"], "none", "{before}");

    a.kill();
    let last_seen = seen.last().unwrap().seq();
    let events = read_sse(&url_b, Some(last_seen), SseEvent::is_terminal).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "failed", "{events:?}");
    assert_eq!(last.data["reason"], "owner_lost");
    assert_consecutive(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_owner_hands_its_task_job_over_and_exits_long_before_the_job_ends() {
    let Some(url) = test_redis("adoption::handover").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-handover");
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    // 40 stages of 300 ms: the job has about 11 s to go when its owner is told to stop, and
    // the owner's drain time (600 s) would let it run to its end there.
    let steps = 40;
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = two_replicas(&store, "ts", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "handed", "steps": steps, "step_ms": STEP_MS});
    let handle = running_job(&on_a, "ts__staged", arguments).await;
    let job_id = handle.job_id.clone();
    // A reader on the owner from the first event, until the owner closes its stream.
    let events_url = handle.events_url.clone();
    let reader =
        tokio::spawn(async move { read_sse(&events_url, Some(0), SseEvent::is_terminal).await });
    let before = eventually(
        "the job is re-attachable and past its second stage",
        || async {
            let s = job_snapshot(&b, &job_id).await;
            (s["durability"] == "upstream_task" && s["progress"].as_f64() >= Some(2.0)).then_some(s)
        },
    )
    .await;
    let waiter = waiting_caller(&b, &job_id).await;

    // Junk among the offers (a key shared by every replica): taken off, harmlessly.
    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let offers = format!("{prefix}:v3:handover");
    let unknown = "0123456789abcdef0123456789abcdef";
    let _: () = redis::cmd("SADD")
        .arg(&offers)
        .arg("not a job")
        .arg(unknown)
        .query_async(&mut redis)
        .await
        .unwrap();

    let signalled = std::time::Instant::now();
    a.terminate();
    let exit = within("the draining owner exits", a.wait()).await.unwrap();
    let took = signalled.elapsed();
    assert!(exit.success(), "{exit:?}: {}", a.log_tail());
    let at_exit = job_snapshot(&b, &job_id).await;
    assert_eq!(
        at_exit["status"], "running",
        "the job outlived its owner: {at_exit}"
    );
    assert!(
        took < std::time::Duration::from_secs(6),
        "exited {took:?} after SIGTERM, with the job still running elsewhere: {}",
        a.log_tail()
    );
    assert!(a.log().contains("handed over"), "{}", a.log_tail());
    // Its connection to the upstream closed without ending the session the task lives in.
    assert!(
        a.log().contains("upstream session left open"),
        "{}",
        a.log_tail()
    );

    // The reader on the owner was closed, not cut: it comes back on the survivor.
    let all = reader_comes_back(&b, &job_id, reader.await.unwrap()).await;
    assert_one_line_of(&all, "handed", steps);

    assert_eq!(waiter.await.unwrap(), "done: handed");
    let after = job_snapshot(&b, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(after["owner"], before["owner"], "handed over: {after}");
    assert!(
        b.log()
            .contains("adopted a job its draining owner handed over"),
        "{}",
        b.log_tail()
    );
    eventually("every offer is taken off", || async {
        let left: i64 = redis::cmd("SCARD")
            .arg(&offers)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        left == 0
    })
    .await;
    let metrics = metrics_text(&b.base()).await;
    for (event, n) in [
        ("adopted_handed_over", 1),
        ("adopted_lease_lapsed", 0),
        ("claim_lost", 0),
    ] {
        assert!(
            metrics.contains(&format!(
                "bridge_job_adoptions_total{{event=\"{event}\"}} {n}"
            )),
            "{event}: {metrics}"
        );
    }
}

/// An offer seen after the job changed hands (what a replica finds when another claimed the
/// job a moment before it) names a job its live owner never offered: it is taken off, and the
/// job stays where it runs. Two replicas each adopting one offer made jobs change hands again
/// and again, and a replica that had lost a job once and took it back wrote nothing more to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_offer_of_a_job_its_live_owner_runs_is_taken_off_not_claimed() {
    let Some(url) = test_redis("adoption::stale_offer").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-stale-offer");
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (a, b) = two_replicas(&store, "ts", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let arguments = json!({"topic": "stays", "steps": 12, "step_ms": STEP_MS});
    let handle = running_job(&on_a, "ts__staged", arguments).await;
    let job_id = handle.job_id.clone();
    let before = eventually("the job is re-attachable", || async {
        let s = job_snapshot(&b, &job_id).await;
        (s["durability"] == "upstream_task").then_some(s)
    })
    .await;

    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let offers = format!("{prefix}:v3:handover");
    let _: () = redis::cmd("SADD")
        .arg(&offers)
        .arg(&job_id)
        .query_async(&mut redis)
        .await
        .unwrap();
    eventually("the stale offer is taken off", || async {
        let left: i64 = redis::cmd("SCARD")
            .arg(&offers)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        left == 0
    })
    .await;

    let events = read_sse(&handle.events_url, Some(0), SseEvent::is_terminal).await;
    assert_consecutive(&events);
    assert_one_line_of(&events, "stays", 12);
    let after = job_snapshot(&a, &job_id).await;
    assert_eq!(after["status"], "completed", "{after}");
    assert_eq!(
        after["owner"], before["owner"],
        "never changed hands: {after}"
    );
    let metrics = metrics_text(&b.base()).await;
    assert!(
        metrics.contains("bridge_job_adoptions_total{event=\"adopted_handed_over\"} 0"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_caller_on_a_draining_owner_gets_the_handle_of_its_handed_over_job() {
    let Some(url) = test_redis("adoption::handover_sync").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-handover-sync");
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let (mut a, b) = tokio::join!(
        http_replica("sync", &store, "ts", &upstream),
        http_replica("sync", &store, "ts", &upstream)
    );
    // The caller's correlation names its job, which a sync call keeps to itself until the end.
    let cid = "handover-sync-turn";
    let on_a = connect_with(&a.mcp_url(), None, Some(cid)).await;
    let caller = tokio::spawn(async move {
        let arguments = json!({"topic": "sync", "steps": STEPS, "step_ms": STEP_MS});
        call(&on_a, "ts__staged", arguments).await
    });
    let token = job_tokens().correlation(&cid.parse().unwrap());
    let started = read_sse(
        &format!("{}/correlations/{cid}/events?token={token}", a.base()),
        None,
        |e| e.event == "job_started",
    )
    .await;
    let job_id = started.last().unwrap().data["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(
        "the job is re-attachable and past its second stage",
        || async {
            let s = job_snapshot(&b, &job_id).await;
            s["durability"] == "upstream_task" && s["progress"].as_f64() >= Some(2.0)
        },
    )
    .await;

    a.terminate();
    // Not a bare error: the handle of the job, which goes on elsewhere.
    let answer = within("the sync caller's answer", caller).await.unwrap();
    let handle = answer.structured_content.clone().expect("the job handle");
    assert_eq!(handle["job_id"], job_id.as_str(), "{answer:?}");
    assert_eq!(handle["status"], "running", "{answer:?}");
    assert_ne!(answer.is_error, Some(true), "{answer:?}");
    let exit = within("the draining owner exits", a.wait()).await.unwrap();
    assert!(exit.success(), "{exit:?}");

    let on_b = connect_url(&b.mcp_url()).await;
    let arguments = json!({"job_id": job_id, "timeout_seconds": 45});
    assert_eq!(
        first_text(&call(&on_b, "wait_for_job", arguments).await),
        "done: sync"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_alone_on_redis_runs_its_task_job_to_the_end_then_exits() {
    let Some(url) = test_redis("adoption::handover_alone").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "adopt-handover-alone");
    let Some((_server, upstream, _)) = task_http_server(&["--session-tasks"]).await else {
        return;
    };
    let store = redis_store_toml(&url, &prefix, LEASE_SECS);
    let mut a = http_replica("async", &store, "ts", &upstream).await;
    let on_a = connect_url(&a.mcp_url()).await;
    let steps = 12;
    let arguments = json!({"topic": "alone", "steps": steps, "step_ms": STEP_MS});
    let handle = running_job(&on_a, "ts__staged", arguments).await;
    let events_url = handle.events_url.clone();
    let reader =
        tokio::spawn(async move { read_sse(&events_url, Some(0), SseEvent::is_terminal).await });
    eventually("the job is re-attachable", || async {
        job_snapshot(&a, &handle.job_id).await["durability"] == "upstream_task"
    })
    .await;

    // Offered, but nobody takes it: the job runs to its end here, as in a plain drain.
    a.terminate();
    let events = within("the reader's stream", reader).await.unwrap();
    assert_eq!(events[0].seq(), 1);
    assert_consecutive(&events);
    assert_one_line_of(&events, "alone", steps);
    let exit = within("the replica exits after its job", a.wait())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(!a.log().contains("handed over:"), "{}", a.log_tail());
}
