//! The SSE tail when live delivery is not perfect: a live event lost on its way (the last one
//! of a job included), or history that cannot be read for a while (the store reconnecting).
//! A reader still gets every event once, in order, and the terminal one, on one stream.
//!
//! The store is the memory store behind a wrapper (`common::FaultyStore`) that drops chosen
//! events from live streams and can make history reads fail, so each case happens exactly,
//! every run.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use crate::common::*;
use mcp_progress_bridge::{
    config::{Config, Secret},
    events::Broker,
    http::{self, ApiState, Readiness, auth::Guard},
    metrics::Metrics,
    model::{EventBody, Heartbeat, JobId, NewJob, ProgressUpdate},
};
use serde_json::Value;
use tokio::sync::Notify;

struct AlwaysReady;

impl Readiness for AlwaysReady {
    fn report(&self) -> (Option<&'static str>, Value) {
        (None, Value::Array(Vec::new()))
    }

    fn draining(&self) -> bool {
        false
    }
}

/// The job API over `store` on a free port; its base URL.
async fn serve(store: Arc<FaultyStore>, keep_alive: Duration) -> String {
    serve_until(store, keep_alive, Default::default()).await
}

/// [`serve`], with the shutdown token that ends its streams.
async fn serve_until(
    store: Arc<FaultyStore>,
    keep_alive: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> String {
    let mut config = Config::default_for_tests();
    config.auth.job_secret = Some(Secret::literal(TEST_JOB_SECRET).into());
    let metrics = Arc::new(Metrics::new());
    let router = http::router(ApiState {
        broker: store.clone(),
        bus: store,
        guard: Guard::new(&config, job_tokens(), &metrics).unwrap(),
        metrics,
        readiness: Arc::new(AlwaysReady),
        keep_alive,
        max_sse_buffer_bytes: 4 << 20,
        shutdown,
        inputs: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

async fn new_job(store: &FaultyStore) -> JobId {
    let id = JobId::random();
    store
        .create_job(NewJob {
            id,
            tool: "demo__t".into(),
            upstream: "demo".into(),
            upstream_tool: "t".into(),
            correlation_id: None,
            owner: "test".into(),
            principal: None,
        })
        .await
        .unwrap();
    id
}

fn progress(p: f64) -> EventBody {
    EventBody::Progress(ProgressUpdate {
        progress: p,
        total: Some(10.0),
        message: None,
    })
}

fn completed() -> EventBody {
    EventBody::Completed {
        result: serde_json::json!({"content": []}),
    }
}

/// A fresh reader of `job`, read until its terminal event (within `bound`); returns once the
/// reader has its `status` event (so what is appended next reaches it live).
async fn reader(base: &str, job: JobId, bound: Duration) -> tokio::task::JoinHandle<Vec<SseEvent>> {
    let opened = Arc::new(Notify::new());
    let request = reqwest::Client::new().get(job_events_url(base, &job.to_string()));
    let handle = tokio::spawn({
        let opened = opened.clone();
        async move {
            read_sse_request_within(bound, request, |e| {
                opened.notify_one();
                e.is_terminal()
            })
            .await
        }
    });
    within("the reader has its status event", opened.notified()).await;
    handle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_event_lost_on_its_way_live_still_reaches_the_reader() {
    let store = FaultyStore::new();
    let base = serve(store.clone(), Duration::from_millis(300)).await;
    let job = new_job(&store).await;
    // The terminal event will be number 3; nothing after it would reveal the gap.
    store.lose(3);
    let reader = reader(&base, job, Duration::from_secs(10)).await;
    store.append(job, progress(1.0)).await.unwrap();
    store.append(job, progress(2.0)).await.unwrap();
    store.append(job, completed()).await.unwrap();

    let events = reader.await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        ["status", "progress", "progress", "completed"],
        "{events:?}"
    );
    assert_consecutive(&events);
}

/// At shutdown a job's terminal event is written before the streams are told to end, but its
/// live copy may still be on its way (on Redis it comes through pub/sub). A stream that ends
/// for shutdown reads history once first, so the reader still gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ended_for_shutdown_still_sends_the_terminal_event_not_yet_live() {
    let store = FaultyStore::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Keep-alives far apart: only the shutdown reads history here.
    let base = serve_until(store.clone(), Duration::from_secs(60), shutdown.clone()).await;
    let job = new_job(&store).await;
    store.lose(2);
    let reader = reader(&base, job, WAIT).await;
    store.append(job, progress(1.0)).await.unwrap();
    store
        .append(
            job,
            EventBody::Cancelled {
                reason: "the bridge is shutting down".into(),
            },
        )
        .await
        .unwrap();
    shutdown.cancel();

    let events = reader.await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["status", "progress", "cancelled"], "{events:?}");
    assert_consecutive(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_stays_open_while_history_cannot_be_read_and_catches_up_after() {
    let store = FaultyStore::new();
    // Keep-alives far apart: only the gap and the retries read history here.
    let base = serve(store.clone(), Duration::from_secs(60)).await;
    let job = new_job(&store).await;
    // Number 2 goes missing live, and so does the terminal event: only history has them.
    store.lose(2);
    store.lose(4);
    let reader = reader(&base, job, WAIT).await;
    store.unavailable.store(true, Ordering::SeqCst);
    store.append(job, progress(1.0)).await.unwrap();
    store.append(job, progress(2.0)).await.unwrap();
    // Number 3 shows the gap; history cannot be read; the reader must wait, not end.
    store.append(job, progress(3.0)).await.unwrap();
    eventually("the reader tries history again", || async {
        store.failed_replays.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(!reader.is_finished(), "the stream stayed open");
    store.append(job, completed()).await.unwrap();
    // History is back: the next retry reads 2, 3 and the terminal event.
    store.unavailable.store(false, Ordering::SeqCst);

    let events = reader.await.unwrap();
    assert_eq!(
        progress_values(&events),
        [1.0, 2.0, 3.0],
        "every event once, in order: {events:?}"
    );
    assert_eq!(events.last().unwrap().event, "completed");
    assert_consecutive(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_ahead_of_the_reader_fills_the_gap_first_and_never_moves_its_position() {
    let store = FaultyStore::new();
    let base = serve(store.clone(), Duration::from_secs(60)).await;
    let job = new_job(&store).await;
    store.lose(2);
    let (opened, beat) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let request = reqwest::Client::new().get(job_events_url(&base, &job.to_string()));
    let reader = tokio::spawn({
        let (opened, beat) = (opened.clone(), beat.clone());
        async move {
            read_sse_request(request, |e| {
                match e.event.as_str() {
                    "status" => opened.notify_one(),
                    "heartbeat" => beat.notify_one(),
                    _ => {}
                }
                e.is_terminal()
            })
            .await
        }
    });
    within("the reader has its status event", opened.notified()).await;
    store.append(job, progress(1.0)).await.unwrap();
    store.append(job, progress(2.0)).await.unwrap();
    // Its `id:` is 2: the reader, at 1, must get event 2 before it (or never see it).
    store
        .heartbeat(
            job,
            Heartbeat {
                elapsed_ms: 1,
                since_progress_ms: 1,
            },
        )
        .await
        .unwrap();
    within("the reader has the heartbeat", beat.notified()).await;
    store.append(job, completed()).await.unwrap();

    let events = reader.await.unwrap();
    let seen: Vec<(&str, u64)> = events.iter().map(|e| (e.event.as_str(), e.seq())).collect();
    assert_eq!(
        seen,
        [
            ("status", 0),
            ("progress", 1),
            ("progress", 2),
            ("heartbeat", 2),
            ("completed", 3)
        ],
        "{events:?}"
    );
}

/// A reader that falls behind past the end of a job (its live events lost, history too short
/// to fill the gap) gets `reset` and then the terminal event, and every `id:` it is sent is
/// new: the reset holds the position before the terminal event, not the terminal's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reset_past_the_end_of_a_job_gets_increasing_ids_and_the_end() {
    let store = FaultyStore::with_history(3);
    let base = serve(store.clone(), Duration::from_secs(60)).await;
    let job = new_job(&store).await;
    for seq in 1..=6 {
        store.lose(seq);
    }
    let reader = reader(&base, job, WAIT).await;
    for p in 1..=6 {
        store.append(job, progress(p as f64)).await.unwrap();
    }
    // Number 7, the end, arrives live and shows the gap; history holds 5..7 only.
    store.append(job, completed()).await.unwrap();

    let events = reader.await.unwrap();
    let seen: Vec<(u64, &str)> = events.iter().map(|e| (e.seq(), e.event.as_str())).collect();
    assert_eq!(
        seen,
        [(0, "status"), (6, "reset"), (7, "completed")],
        "{events:?}"
    );
    assert_eq!(events[1].data["status"], "completed");
    assert_eq!(events[1].data["progress"], 6.0);
}
