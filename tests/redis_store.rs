//! The Redis store through the `Store` trait, against a real Redis: the same semantics as the
//! memory store (numbering, history, terminal rules, correlations), plus what only a shared
//! store has: a second store (another replica) sees everything, and cancel requests reach the
//! owner. Each test uses its own key prefix.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use mcp_progress_bridge::{
    model::{Channel, EventBody, EventKind, JobId, JobStatus, NewJob, ProgressUpdate},
    shutdown::{Shutdown, ShutdownGuard},
    store::{CancelAck, ChannelSnapshot, LiveItem, RedisOptions, RedisStore, Store, StoreError},
};

struct Replica {
    store: RedisStore,
    name: String,
    /// Stops the store's tasks when the replica is dropped.
    _stop: ShutdownGuard,
}

async fn replica(url: &str, prefix: &str, history: usize) -> Replica {
    let name = format!("replica-{:08x}", fastrand::u32(..));
    let shutdown = Shutdown::new();
    let options = RedisOptions {
        url: url.to_string(),
        key_prefix: prefix.to_string(),
        history,
        retention: Duration::from_secs(60),
        lease: Duration::from_secs(15),
        outage_buffer: 100,
        command_timeout: Duration::from_secs(2),
    };
    let store = RedisStore::start(options, name.clone(), &shutdown).expect("store");
    within("the store connects", async {
        while store.ping().await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Replica {
        store,
        name,
        _stop: shutdown.drop_guard(),
    }
}

fn new_job(owner: &str, correlation: Option<&str>) -> NewJob {
    NewJob {
        id: JobId::random(),
        tool: "demo__t".into(),
        upstream: "demo".into(),
        upstream_tool: "t".into(),
        correlation_id: correlation.map(|c| c.parse().unwrap()),
        owner: owner.into(),
    }
}

fn progress(p: f64) -> EventBody {
    EventBody::Progress(ProgressUpdate {
        progress: p,
        total: Some(10.0),
        message: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_appended_after_a_terminal_event_and_numbers_come_from_redis() {
    let Some(url) = test_redis("redis_store::terminal").await else {
        return;
    };
    let prefix = unique_prefix("terminal");
    let a = replica(&url, &prefix, 100).await;
    let b = replica(&url, &prefix, 100).await;
    let job = a
        .store
        .create_job(new_job(&a.name, None))
        .await
        .unwrap()
        .job_id;
    assert!(matches!(
        a.store
            .create_job(NewJob {
                id: job,
                ..new_job(&a.name, None)
            })
            .await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(a.store.append(job, progress(1.0)).await.unwrap(), Some(1));
    // Another replica appending to the same job continues the same numbering.
    assert_eq!(b.store.append(job, progress(2.0)).await.unwrap(), Some(2));
    let done = EventBody::Cancelled {
        reason: "test".into(),
    };
    assert_eq!(b.store.append(job, done).await.unwrap(), Some(3));
    assert_eq!(a.store.append(job, progress(3.0)).await.unwrap(), None);
    let s = a.store.snapshot(job).await.unwrap().unwrap();
    assert_eq!(
        (s.status, s.seq, s.progress),
        (JobStatus::Cancelled, 3, Some(2.0))
    );
    assert_eq!(s.error.unwrap().message, "test");
    let unknown = JobId::random();
    assert!(a.store.snapshot(unknown).await.unwrap().is_none());
    assert_eq!(a.store.append(unknown, progress(1.0)).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_after_a_position_returns_the_gap_and_detects_lost_history() {
    let Some(url) = test_redis("redis_store::history").await else {
        return;
    };
    let a = replica(&url, &unique_prefix("history"), 3).await;
    let job = a
        .store
        .create_job(new_job(&a.name, None))
        .await
        .unwrap()
        .job_id;
    for p in 1..=5 {
        a.store.append(job, progress(p as f64)).await.unwrap();
    }
    let opened = a
        .store
        .open(&Channel::Job(job), Some(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        opened.backlog.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![4, 5]
    );
    assert!(opened.covered);
    assert_eq!(opened.head, 5);
    let frame = std::str::from_utf8(&opened.backlog[0].frame).unwrap();
    assert!(
        frame.starts_with("id: 4\nevent: progress\ndata: {\"job_id\":"),
        "{frame}"
    );
    let data: serde_json::Value = serde_json::from_slice(&opened.backlog[0].data).unwrap();
    assert_eq!(
        (data["seq"].as_u64(), data["progress"].as_f64()),
        (Some(4), Some(4.0))
    );
    let opened = a
        .store
        .open(&Channel::Job(job), Some(1))
        .await
        .unwrap()
        .unwrap();
    assert!(!opened.covered, "event 2 is gone from a 3-event history");
    let replay = a.store.replay(&Channel::Job(job), 2).await.unwrap();
    assert_eq!(
        replay.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert!(replay.covered);
    assert!(
        a.store
            .open(&Channel::Job(JobId::random()), None)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_reach_a_subscriber_on_another_replica_in_order() {
    let Some(url) = test_redis("redis_store::live").await else {
        return;
    };
    let prefix = unique_prefix("live");
    let a = replica(&url, &prefix, 100).await;
    let b = replica(&url, &prefix, 100).await;
    let job = a
        .store
        .create_job(new_job(&a.name, None))
        .await
        .unwrap()
        .job_id;
    let opened = b
        .store
        .open(&Channel::Job(job), None)
        .await
        .unwrap()
        .unwrap();
    assert!(!opened.ended);
    let mut live = opened.live;
    for p in 1..=20 {
        a.store.append(job, progress(p as f64)).await.unwrap();
    }
    let result = serde_json::json!({"content": [], "isError": false});
    a.store
        .append(
            job,
            EventBody::Completed {
                result: result.clone(),
            },
        )
        .await
        .unwrap();
    let seqs = within("live events", async {
        let mut seqs = Vec::new();
        while let Some(item) = live.next().await {
            let LiveItem::Event(event) = item else {
                panic!("lagged")
            };
            seqs.push(event.seq);
            if event.is_terminal() {
                assert_eq!(event.kind, EventKind::Completed);
                return seqs;
            }
        }
        panic!("live stream ended")
    })
    .await;
    assert_eq!(seqs, (1..=21).collect::<Vec<_>>());
    let s = b.store.snapshot(job).await.unwrap().unwrap();
    assert_eq!(s.result, Some(result), "an empty array stays an array");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_asked_on_any_replica_reaches_the_owner() {
    let Some(url) = test_redis("redis_store::cancel").await else {
        return;
    };
    let prefix = unique_prefix("cancel");
    let owner = replica(&url, &prefix, 100).await;
    let other = replica(&url, &prefix, 100).await;
    let mut requests = owner.store.cancel_requests();
    let mut elsewhere = other.store.cancel_requests();
    let job = owner
        .store
        .create_job(new_job(&owner.name, None))
        .await
        .unwrap()
        .job_id;
    let ack = other
        .store
        .request_cancel(job, "asked on B".into())
        .await
        .unwrap();
    assert!(matches!(ack, CancelAck::Requested(_)));
    let request = within("the owner gets the request", requests.next())
        .await
        .unwrap();
    assert_eq!(
        (request.job_id, request.reason.as_str()),
        (job, "asked on B")
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), elsewhere.next())
            .await
            .is_err(),
        "only the owner is asked"
    );
    owner
        .store
        .append(
            job,
            EventBody::Cancelled {
                reason: request.reason,
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        other
            .store
            .request_cancel(job, "again".into())
            .await
            .unwrap(),
        CancelAck::AlreadyTerminal(_)
    ));
    assert!(matches!(
        other
            .store
            .request_cancel(JobId::random(), "x".into())
            .await
            .unwrap(),
        CancelAck::Unknown
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_channel_numbers_its_own_events_across_replicas() {
    let Some(url) = test_redis("redis_store::correlation").await else {
        return;
    };
    let prefix = unique_prefix("correlation");
    let a = replica(&url, &prefix, 100).await;
    let b = replica(&url, &prefix, 100).await;
    let x = a
        .store
        .create_job(new_job(&a.name, Some("turn-1")))
        .await
        .unwrap()
        .job_id;
    let y = b
        .store
        .create_job(new_job(&b.name, Some("turn-1")))
        .await
        .unwrap()
        .job_id;
    a.store.append(x, progress(1.0)).await.unwrap();
    b.store.append(y, progress(1.0)).await.unwrap();
    let channel = Channel::Correlation("turn-1".parse().unwrap());
    let opened = b.store.open(&channel, Some(0)).await.unwrap().unwrap();
    let kinds: Vec<_> = opened.backlog.iter().map(|e| (e.seq, e.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (1, EventKind::JobStarted),
            (2, EventKind::JobStarted),
            (3, EventKind::Progress),
            (4, EventKind::Progress)
        ]
    );
    let ChannelSnapshot::Correlation(jobs) = opened.snapshot else {
        panic!("not a correlation")
    };
    assert_eq!(
        jobs.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![x, y]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_expires_by_redis_ttl() {
    let Some(url) = test_redis("redis_store::ttl").await else {
        return;
    };
    let prefix = unique_prefix("ttl");
    let a = replica(&url, &prefix, 100).await;
    let running = a
        .store
        .create_job(new_job(&a.name, None))
        .await
        .unwrap()
        .job_id;
    let done = a
        .store
        .create_job(new_job(&a.name, None))
        .await
        .unwrap()
        .job_id;
    a.store
        .append(done, EventBody::Cancelled { reason: "x".into() })
        .await
        .unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let ttl = |id: JobId, suffix: &str| {
        redis::cmd("PTTL")
            .arg(format!("{prefix}:job:{id}{suffix}"))
            .clone()
    };
    let done_ttl: i64 = ttl(done, "").query_async(&mut conn).await.unwrap();
    let done_events_ttl: i64 = ttl(done, ":events").query_async(&mut conn).await.unwrap();
    let running_ttl: i64 = ttl(running, "").query_async(&mut conn).await.unwrap();
    assert!(
        (1..=60_000).contains(&done_ttl),
        "retention 60 s: {done_ttl}"
    );
    assert!((1..=60_000).contains(&done_events_ttl), "{done_events_ttl}");
    assert_eq!(running_ttl, -1, "a running job does not expire");
}
