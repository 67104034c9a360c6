//! The `Store` contract, written once and run against both stores (`on_memory::…` and
//! `on_redis::…`): numbering, the terminal rule, history and the gap a resuming reader gets,
//! live delivery, cancel requests, correlation channels. Each behaviour sees the store through
//! two handles, as two replicas would: the memory store twice (one process is one replica),
//! or two Redis stores on one key prefix (a real Redis; each run its own prefix, swept after),
//! and the same on a Redis Cluster of three primaries the test starts (`on_cluster::…`).
//!
//! What only one store has is tested with it: expiry by the memory store's sweep in
//! `src/store/memory.rs`, Redis TTLs and cancel routing in `redis_store.rs`, Redis outages,
//! leases and connection counts in `replicas.rs`.

use std::sync::Arc;

use crate::common::*;
use futures::StreamExt;
use mcp_progress_bridge::{
    events::{ChannelSnapshot, LiveItem, StoreError},
    model::CancelAck,
    model::{Channel, EventBody, EventKind, JobId, JobStatus, NewJob, Principal, ProgressUpdate},
    store::{MemoryStore, Store},
};

/// Retention of finished jobs in these stores (seconds): longer than any test.
const RETENTION_SECS: u64 = 60;

#[derive(Clone, Copy)]
enum Backend {
    Memory,
    Redis,
    /// A Redis Cluster of three primaries started for the test.
    Cluster,
}

/// Two handles on one store, each with the replica name it creates jobs under.
struct Replicas {
    a: Arc<dyn Store>,
    a_name: String,
    b: Arc<dyn Store>,
    b_name: String,
    /// The Redis replicas (stopped when dropped) and then the key prefix (swept after them).
    _redis: Option<(StoreReplica, StoreReplica, RedisPrefix)>,
    /// The replicas on a cluster, then the cluster (stopped after them).
    _cluster: Option<(StoreReplica, StoreReplica, RedisCluster)>,
}

impl Backend {
    /// The store with `history` events kept per channel; `None` when its server is missing
    /// and the test is skipped (a failure under `BRIDGE_TEST_STRICT=1`).
    async fn replicas(self, test: &str, history: usize) -> Option<Replicas> {
        match self {
            Backend::Memory => {
                let store: Arc<dyn Store> = Arc::new(MemoryStore::new(history, RETENTION_SECS));
                Some(Replicas {
                    a: store.clone(),
                    a_name: "memory".into(),
                    b: store,
                    b_name: "memory".into(),
                    _redis: None,
                    _cluster: None,
                })
            }
            Backend::Redis => {
                let url = test_redis(&format!("store_conformance::{test}")).await?;
                let prefix = RedisPrefix::new(&url, &format!("conformance-{test}"));
                let a = store_replica(&url, &prefix, history).await;
                let b = store_replica(&url, &prefix, history).await;
                Some(Replicas {
                    a: Arc::new(a.store.clone()),
                    a_name: a.name.clone(),
                    b: Arc::new(b.store.clone()),
                    b_name: b.name.clone(),
                    _redis: Some((a, b, prefix)),
                    _cluster: None,
                })
            }
            Backend::Cluster => {
                let cluster = RedisCluster::start(&format!("store_conformance::{test}")).await?;
                let prefix = unique_prefix(&format!("conformance-{test}"));
                let a = cluster_store_replica(&cluster.url(), &prefix, history).await;
                let b = cluster_store_replica(&cluster.url(), &prefix, history).await;
                Some(Replicas {
                    a: Arc::new(a.store.clone()),
                    a_name: a.name.clone(),
                    b: Arc::new(b.store.clone()),
                    b_name: b.name.clone(),
                    _redis: None,
                    _cluster: Some((a, b, cluster)),
                })
            }
        }
    }
}

/// Each behaviour as a test per store.
macro_rules! conformance {
    ($($behaviour:ident),* $(,)?) => {
        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    super::$behaviour(super::Backend::Memory).await;
                }
            )*
        }
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    super::$behaviour(super::Backend::Redis).await;
                }
            )*
        }
        mod on_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    super::$behaviour(super::Backend::Cluster).await;
                }
            )*
        }
    };
}

conformance!(
    nothing_is_appended_after_a_terminal_event_and_every_replica_numbers_alike,
    open_after_a_position_returns_the_gap_and_detects_lost_history,
    live_events_reach_a_subscriber_on_another_replica_in_order,
    a_cancel_asked_on_any_replica_reaches_the_owner,
    a_correlation_channel_numbers_its_own_events_across_replicas,
    a_correlation_opens_empty_before_its_first_job_and_the_job_joins_live,
    the_principal_is_kept_with_the_job_but_never_shown,
);

fn new_job(owner: &str, correlation: Option<&str>) -> NewJob {
    NewJob {
        id: JobId::random(),
        tool: "demo__t".into(),
        upstream: "demo".into(),
        upstream_tool: "t".into(),
        correlation_id: correlation.map(|c| c.parse().unwrap()),
        owner: owner.into(),
        principal: None,
    }
}

fn progress(p: f64) -> EventBody {
    EventBody::Progress(ProgressUpdate {
        progress: p,
        total: Some(10.0),
        message: None,
    })
}

async fn nothing_is_appended_after_a_terminal_event_and_every_replica_numbers_alike(
    backend: Backend,
) {
    let Some(r) = backend.replicas("terminal", 100).await else {
        return;
    };
    let job =
        r.a.create_job(new_job(&r.a_name, None))
            .await
            .unwrap()
            .job_id;
    assert!(matches!(
        r.a.create_job(NewJob {
            id: job,
            ..new_job(&r.a_name, None)
        })
        .await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(r.a.append(job, progress(1.0)).await.unwrap(), Some(1));
    // Another replica appending to the same job continues the same numbering.
    assert_eq!(r.b.append(job, progress(2.0)).await.unwrap(), Some(2));
    let done = EventBody::Cancelled {
        reason: "test".into(),
    };
    assert_eq!(r.b.append(job, done).await.unwrap(), Some(3));
    assert_eq!(r.a.append(job, progress(3.0)).await.unwrap(), None);
    let s = r.a.snapshot(job).await.unwrap().unwrap();
    assert_eq!(
        (s.status, s.seq, s.progress),
        (JobStatus::Cancelled, 3, Some(2.0))
    );
    assert_eq!(s.error.unwrap().message, "test");
    let unknown = JobId::random();
    assert!(r.a.snapshot(unknown).await.unwrap().is_none());
    assert_eq!(r.a.append(unknown, progress(1.0)).await.unwrap(), None);
}

async fn open_after_a_position_returns_the_gap_and_detects_lost_history(backend: Backend) {
    let Some(r) = backend.replicas("history", 3).await else {
        return;
    };
    let store = &r.a;
    let job = store
        .create_job(new_job(&r.a_name, None))
        .await
        .unwrap()
        .job_id;
    for p in 1..=5 {
        store.append(job, progress(p as f64)).await.unwrap();
    }
    let opened = store
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
    let opened = store
        .open(&Channel::Job(job), Some(1))
        .await
        .unwrap()
        .unwrap();
    assert!(!opened.covered, "event 2 is gone from a 3-event history");
    assert_eq!(opened.head, 5);
    let replay = store.replay(&Channel::Job(job), 2).await.unwrap();
    assert_eq!(
        replay.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert!(replay.covered);
    assert!(
        store
            .open(&Channel::Job(JobId::random()), None)
            .await
            .unwrap()
            .is_none()
    );
}

async fn live_events_reach_a_subscriber_on_another_replica_in_order(backend: Backend) {
    let Some(r) = backend.replicas("live", 100).await else {
        return;
    };
    let job =
        r.a.create_job(new_job(&r.a_name, None))
            .await
            .unwrap()
            .job_id;
    let opened = r.b.open(&Channel::Job(job), None).await.unwrap().unwrap();
    assert!(!opened.ended);
    let mut live = opened.live;
    for p in 1..=20 {
        r.a.append(job, progress(p as f64)).await.unwrap();
    }
    let result = serde_json::json!({"content": [], "isError": false});
    r.a.append(
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
    let s = r.b.snapshot(job).await.unwrap().unwrap();
    assert_eq!(s.result, Some(result), "an empty array stays an array");
}

async fn a_cancel_asked_on_any_replica_reaches_the_owner(backend: Backend) {
    let Some(r) = backend.replicas("cancel", 100).await else {
        return;
    };
    let mut requests = r.a.cancel_requests();
    let job =
        r.a.create_job(new_job(&r.a_name, None))
            .await
            .unwrap()
            .job_id;
    let ack = r.b.request_cancel(job, "asked on B".into()).await.unwrap();
    assert!(matches!(ack, CancelAck::Requested(_)));
    let request = within("the owner gets the request", requests.next())
        .await
        .unwrap();
    assert_eq!(
        (request.job_id, request.reason.as_str()),
        (job, "asked on B")
    );
    r.a.append(
        job,
        EventBody::Cancelled {
            reason: request.reason,
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        r.b.request_cancel(job, "again".into()).await.unwrap(),
        CancelAck::AlreadyTerminal(_)
    ));
    assert!(matches!(
        r.b.request_cancel(JobId::random(), "x".into())
            .await
            .unwrap(),
        CancelAck::Unknown
    ));
}

async fn a_correlation_channel_numbers_its_own_events_across_replicas(backend: Backend) {
    let Some(r) = backend.replicas("correlation", 100).await else {
        return;
    };
    let x =
        r.a.create_job(new_job(&r.a_name, Some("turn-1")))
            .await
            .unwrap()
            .job_id;
    let y =
        r.b.create_job(new_job(&r.b_name, Some("turn-1")))
            .await
            .unwrap()
            .job_id;
    r.a.append(x, progress(1.0)).await.unwrap();
    r.b.append(y, progress(1.0)).await.unwrap();
    let channel = Channel::Correlation("turn-1".parse().unwrap());
    let opened = r.b.open(&channel, Some(0)).await.unwrap().unwrap();
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

/// An application subscribes to its correlation ID before it calls the agent: the channel
/// opens empty (not unknown), and the first job, started on another replica, arrives live.
async fn a_correlation_opens_empty_before_its_first_job_and_the_job_joins_live(backend: Backend) {
    let Some(r) = backend.replicas("early", 100).await else {
        return;
    };
    let channel = Channel::Correlation("turn-early".parse().unwrap());
    let opened = r.b.open(&channel, Some(0)).await.unwrap();
    let opened = opened.expect("a correlation with no job yet opens empty, not unknown");
    assert_eq!(
        (opened.head, opened.covered, opened.ended),
        (0, true, false)
    );
    assert!(opened.backlog.is_empty());
    let ChannelSnapshot::Correlation(jobs) = &opened.snapshot else {
        panic!("not a correlation")
    };
    assert!(jobs.is_empty());
    let replay = r.b.replay(&channel, 0).await.unwrap();
    assert!(replay.covered && replay.events.is_empty() && replay.head == 0);
    let mut live = opened.live;
    let job =
        r.a.create_job(new_job(&r.a_name, Some("turn-early")))
            .await
            .unwrap()
            .job_id;
    let event = within("job_started, live", async {
        match live.next().await {
            Some(LiveItem::Event(event)) => event,
            other => panic!("{:?}", other.map(|_| "lagged")),
        }
    })
    .await;
    assert_eq!((event.seq, event.kind), (1, EventKind::JobStarted));
    let data: serde_json::Value = serde_json::from_slice(&event.data).unwrap();
    assert_eq!(data["job_id"], job.to_string());
}

/// The owner check needs the job's principal from any replica, through every read (snapshot,
/// a channel's snapshot, a correlation's jobs, a cancel's answer), and it stays there as the
/// job changes; but no JSON a reader gets (the `job_started` event) names it.
async fn the_principal_is_kept_with_the_job_but_never_shown(backend: Backend) {
    let Some(r) = backend.replicas("principal", 100).await else {
        return;
    };
    let principal = Principal::jwt("https://idp.example/tenant/v2.0", "user-0042");
    let job =
        r.a.create_job(NewJob {
            principal: Some(principal.clone()),
            ..new_job(&r.a_name, Some("turn-principal"))
        })
        .await
        .unwrap()
        .job_id;
    r.a.append(job, progress(1.0)).await.unwrap();
    let snapshot = r.b.snapshot(job).await.unwrap().expect("the job");
    assert_eq!(snapshot.principal.as_ref(), Some(&principal));
    let opened = r.b.open(&Channel::Job(job), None).await.unwrap().unwrap();
    match opened.snapshot {
        ChannelSnapshot::Job(s) => assert_eq!(s.principal.as_ref(), Some(&principal)),
        other => panic!("a job channel gave {other:?}"),
    }
    let correlation = Channel::Correlation("turn-principal".parse().unwrap());
    let opened = r.b.open(&correlation, Some(0)).await.unwrap().unwrap();
    match &opened.snapshot {
        ChannelSnapshot::Correlation(jobs) => {
            assert_eq!(jobs.len(), 1);
            assert_eq!(jobs[0].principal.as_ref(), Some(&principal));
        }
        other => panic!("a correlation channel gave {other:?}"),
    }
    let started = opened
        .backlog
        .iter()
        .find(|e| e.kind == EventKind::JobStarted)
        .expect("job_started in the correlation's history");
    let text = String::from_utf8_lossy(&started.data);
    assert!(
        !text.contains("user-0042"),
        "job_started shows the principal: {text}"
    );
    match r.b.request_cancel(job, "test".into()).await.unwrap() {
        CancelAck::Requested(s) => assert_eq!(s.principal.as_ref(), Some(&principal)),
        other => panic!("cancel answered {other:?}"),
    }
    let finished =
        r.a.append(job, EventBody::Cancelled { reason: "x".into() })
            .await;
    assert!(finished.unwrap().is_some());
    let snapshot = r.b.snapshot(job).await.unwrap().expect("the job");
    assert_eq!(snapshot.status, JobStatus::Cancelled);
    assert_eq!(snapshot.principal.as_ref(), Some(&principal));
}
