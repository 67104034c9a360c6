//! The store's background duties: the lease in a task of its own (`keep_lease`), the rest in
//! one (`run`): adopt or end the running jobs of replicas whose lease expired (`adoption.rs`),
//! offer or take the jobs of a drain's hand-over (`handover.rs`), write held events once Redis
//! is back, and pick up cancel requests that arrived while the control channel was not
//! subscribed.
//!
//! Lease timing: renewed every third of `lease`; others are checked as often. A replica that
//! dies is noticed at most `lease` after its last renewal plus one check interval. A replica
//! only judges others after its own connection has been up for a whole lease: after a Redis
//! restart every lease may have lapsed, and each live replica renews within that time.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use ::redis::Value;
use tokio_util::sync::CancellationToken;

use super::{
    adoption, handover,
    hub::ControlMessage,
    link::LinkError,
    state::{Inner, Written},
};
use crate::model::JobId;

/// The lease, in a task of its own: no other duty (a long look at the hand-over, a lost
/// replica's many jobs) delays its renewal past the lease, which would have this live replica
/// taken for lost. At the end, with nothing left running here, the lease is given up.
pub(super) async fn keep_lease(inner: Arc<Inner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(check_period(&inner));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connected = inner.cmd.connected();
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                release(&inner).await;
                return;
            }
            _ = tick.tick() => renew(&inner).await,
            changed = connected.changed() => {
                if changed.is_err() {
                    return;
                }
                renew(&inner).await;
            }
        }
    }
}

pub(super) async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(check_period(&inner));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connected = inner.cmd.connected();
    let mut resubscribed = inner.hub.resubscribed();
    let ttl_period = Duration::from_millis(inner.live_ttl_ms / 4);
    let mut ttls_renewed = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {
                flush_held(&inner).await;
                end_jobs_of_dead_replicas(&inner).await;
                handover::offer_owned(&inner).await;
                handover::take_offers(&inner).await;
                adoption::check_owned(&inner).await;
                inner.forget_lost();
                if ttls_renewed.elapsed() >= ttl_period && renew_live_ttls(&inner).await {
                    ttls_renewed = Instant::now();
                }
            }
            changed = connected.changed() => {
                if changed.is_err() {
                    return;
                }
                flush_held(&inner).await;
            }
            changed = resubscribed.changed() => {
                if changed.is_err() {
                    return;
                }
                recheck_cancels(&inner).await;
            }
            _ = inner.flush.notified() => flush_held(&inner).await,
            _ = inner.handover.wake.notified() => handover::offer_owned(&inner).await,
            _ = inner.hub.looks().notified() => {
                handover::take_offers(&inner).await;
                adoption::check_owned(&inner).await;
            }
        }
    }
}

/// A lease's value: whether its replica drains (it adopts nothing then), and when it was set.
const LEASE_LIVE: &str = "live";
const LEASE_DRAINING: &str = "draining";

/// How often the lease is renewed and the others' leases are checked: a third of a lease.
fn check_period(inner: &Inner) -> Duration {
    (inner.lease / 3).max(Duration::from_millis(100))
}

async fn renew(inner: &Inner) {
    if !inner.cmd.is_up() {
        return;
    }
    let mut pipe = ::redis::pipe();
    pipe.cmd("SET")
        .arg(inner.keys.lease(&inner.replica))
        .arg(format!(
            "{}:{}",
            if inner.handover.is_draining() {
                LEASE_DRAINING
            } else {
                LEASE_LIVE
            },
            crate::model::now_ms()
        ))
        .arg("PX")
        .arg(inner.lease.as_millis() as u64)
        .ignore()
        .cmd("SADD")
        .arg(inner.keys.replicas())
        .arg(&inner.replica)
        .ignore()
        .cmd("PEXPIRE")
        .arg(inner.keys.replicas())
        .arg(inner.live_ttl_ms)
        .ignore()
        .cmd("PEXPIRE")
        .arg(inner.keys.running(&inner.replica))
        .arg(inner.live_ttl_ms)
        .ignore();
    if let Err(error) = inner
        .cmd
        .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
        .await
    {
        tracing::warn!(%error, "could not renew this replica's lease");
    }
}

/// Keep the keys of the jobs this replica runs from expiring while they run (they carry
/// the live TTL so that nothing stays for ever when every replica is gone). A job that has
/// just ended may get the live TTL back instead of the retention: at most a minute more.
/// False when Redis did not take it (tried again at the next tick).
async fn renew_live_ttls(inner: &Inner) -> bool {
    if !inner.cmd.is_up() {
        return false;
    }
    let jobs: Vec<_> = inner
        .owned
        .iter()
        .map(|o| (*o.key(), o.lock().snapshot.correlation_id.clone()))
        .collect();
    for chunk in jobs.chunks(500) {
        let mut pipe = ::redis::pipe();
        for (job, correlation) in chunk {
            let mut keys = vec![inner.keys.job(*job), inner.keys.job_events(*job)];
            if let Some(c) = correlation {
                keys.extend([
                    inner.keys.corr(c),
                    inner.keys.corr_events(c),
                    inner.keys.corr_jobs(c),
                ]);
            }
            for key in keys {
                pipe.cmd("PEXPIRE").arg(key).arg(inner.live_ttl_ms).ignore();
            }
        }
        if let Err(error) = inner
            .cmd
            .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
            .await
        {
            tracing::warn!(%error, "could not renew the TTL of running jobs' keys");
            return false;
        }
    }
    true
}

/// At shutdown, with nothing left running here: give up the lease at once, so nobody
/// waits for it to expire.
async fn release(inner: &Inner) {
    if !inner.owned.is_empty() || !inner.cmd.is_up() {
        return;
    }
    let mut pipe = ::redis::pipe();
    pipe.cmd("DEL")
        .arg(inner.keys.lease(&inner.replica))
        .ignore()
        .cmd("SREM")
        .arg(inner.keys.replicas())
        .arg(&inner.replica)
        .ignore();
    let _ = inner
        .cmd
        .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
        .await;
}

/// Write held events, oldest first per job, while Redis answers.
pub(super) async fn flush_held(inner: &Inner) {
    if !inner.cmd.is_up() {
        return;
    }
    let jobs: Vec<_> = inner
        .owned
        .iter()
        .filter(|o| !o.lock().held.is_empty())
        .map(|o| (*o.key(), o.value().clone()))
        .collect();
    for (job, owned) in jobs {
        let held = owned.lock().held.len();
        tracing::info!(job = %job, held, "writing events held while Redis was away");
        loop {
            let Some(write) = owned.lock().held.front().cloned() else {
                break;
            };
            match inner.write(job, &write).await {
                Ok(Written::Stored(_)) => {
                    let mut state = owned.lock();
                    if state.held.front().is_some_and(|f| Arc::ptr_eq(f, &write)) {
                        state.held.pop_front();
                    }
                    if write.terminal {
                        drop(state);
                        inner.owned.remove(&job);
                        break;
                    }
                }
                Ok(Written::Fenced(generation)) => {
                    inner.fenced(job, generation);
                    break;
                }
                Ok(Written::Unknown | Written::Ended) => {
                    owned.lock().held.clear();
                    inner.owned.remove(&job);
                    inner.cancel_locally(
                        job,
                        "the job was ended elsewhere while this replica could not reach Redis",
                    );
                    break;
                }
                Err(LinkError::Down { .. }) => return,
                Err(error @ LinkError::Server { .. }) => {
                    // Not a connection problem: retrying would fail the same way.
                    tracing::error!(job = %job, %error, "a held event could not be written; dropping it");
                    owned.lock().held.pop_front();
                }
            }
        }
    }
}

/// Cancel requests are also recorded on the job; after (re)subscribing the control channel,
/// look for any that were published while it was not subscribed.
async fn recheck_cancels(inner: &Inner) {
    let jobs: Vec<JobId> = inner.owned.iter().map(|o| *o.key()).collect();
    if jobs.is_empty() {
        return;
    }
    let mut pipe = ::redis::pipe();
    for job in &jobs {
        pipe.cmd("HGET").arg(inner.keys.job(*job)).arg("_cancel");
    }
    let Ok(found) = inner
        .cmd
        .run(|mut conn| async move { pipe.query_async::<Vec<Option<String>>>(&mut conn).await })
        .await
    else {
        return;
    };
    for message in found.into_iter().flatten() {
        if let Ok(m) = serde_json::from_str::<ControlMessage>(&message) {
            inner.cancel_locally(m.job_id, &m.reason);
        }
    }
}

/// Adopt or end the running jobs of every replica whose lease has expired.
async fn end_jobs_of_dead_replicas(inner: &Inner) {
    if inner.cmd.up_for().is_none_or(|up| up < inner.lease) {
        return;
    }
    let Ok(others) = inner.other_replicas().await else {
        return;
    };
    if others.is_empty() {
        return;
    }
    let mut pipe = ::redis::pipe();
    for replica in &others {
        pipe.cmd("GET").arg(inner.keys.lease(replica));
        pipe.cmd("SMEMBERS").arg(inner.keys.running(replica));
    }
    let Ok(answers) = inner
        .cmd
        .run(|mut conn| async move { pipe.query_async::<Vec<Value>>(&mut conn).await })
        .await
    else {
        return;
    };
    let leases: Vec<Option<String>> = answers
        .iter()
        .step_by(2)
        .map(|v| ::redis::from_redis_value_ref(v).ok())
        .collect();
    // Another live replica that is not draining adopts what this one cannot.
    let adopters_live = leases
        .iter()
        .flatten()
        .any(|lease| !lease.starts_with(LEASE_DRAINING));
    for ((replica, lease), pair) in others.iter().zip(&leases).zip(answers.chunks(2)) {
        if lease.is_some() {
            continue;
        }
        let jobs: Vec<String> = pair
            .get(1)
            .and_then(|v| ::redis::from_redis_value_ref(v).ok())
            .unwrap_or_default();
        end_jobs_of(inner, replica, jobs, adopters_live).await;
    }
}

async fn end_jobs_of(inner: &Inner, replica: &str, jobs: Vec<String>, adopters_live: bool) {
    let running_key = inner.keys.running(replica);
    for raw in &jobs {
        let failed = match raw.parse::<JobId>() {
            Ok(job) => match adoption::take_over(inner, replica, job, adopters_live).await {
                Some(failed) => failed,
                None => return,
            },
            Err(_) => false,
        };
        if !failed {
            // Unknown, malformed or already ended: it is no running job of anyone.
            inner.delist(replica, raw).await;
        }
    }
    // Nothing of it is left running: forget the replica (a live one adds itself back).
    let (running, replicas, name) = (running_key, inner.keys.replicas(), replica.to_string());
    let _ = inner
        .cmd
        .run(|mut conn| async move {
            let left: i64 = ::redis::cmd("SCARD")
                .arg(&running)
                .query_async(&mut conn)
                .await?;
            if left == 0 {
                ::redis::cmd("SREM")
                    .arg(&replicas)
                    .arg(&name)
                    .exec_async(&mut conn)
                    .await?;
            }
            Ok(())
        })
        .await;
}
