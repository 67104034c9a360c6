//! What only the Redis store has, against a real Redis: a cancel request is routed to the
//! owner's replica alone, and finished jobs expire by Redis TTL. (What both stores share is
//! `store_conformance.rs`; outages, leases and connection counts are `replicas.rs`.) Each test
//! uses its own key prefix, swept when it ends.

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use mcp_progress_bridge::{
    model::{EventBody, JobId, NewJob},
    store::{CancelAck, Store},
};

fn new_job(owner: &str) -> NewJob {
    NewJob {
        id: JobId::random(),
        tool: "demo__t".into(),
        upstream: "demo".into(),
        upstream_tool: "t".into(),
        correlation_id: None,
        owner: owner.into(),
        principal: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_routed_to_the_owner_alone() {
    let Some(url) = test_redis("redis_store::cancel").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-cancel");
    let owner = store_replica(&url, &prefix, 100).await;
    let other = store_replica(&url, &prefix, 100).await;
    let mut requests = owner.store.cancel_requests();
    let mut elsewhere = other.store.cancel_requests();
    let job = owner
        .store
        .create_job(new_job(&owner.name))
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_expires_by_redis_ttl() {
    let Some(url) = test_redis("redis_store::ttl").await else {
        return;
    };
    let prefix = RedisPrefix::new(&url, "store-ttl");
    let a = store_replica(&url, &prefix, 100).await;
    let running = a.store.create_job(new_job(&a.name)).await.unwrap().job_id;
    let done = a.store.create_job(new_job(&a.name)).await.unwrap().job_id;
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
