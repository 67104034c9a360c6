//! The drain's hand-over: a draining replica offers every job it runs that another replica can
//! re-attach (its snapshot says `upstream_task`: a `_reattach` record was kept), instead of
//! running it to its end. It keeps following each until one is taken: a live replica that is
//! not draining claims it with the same fenced `ADOPT` script as a lapsed lease's job
//! (`adoption.rs`), so the seq line goes on without a gap and the old owner's later writes are
//! refused; the old owner, nudged, sees the job is no longer its own and stops without a word to
//! the upstream. Nobody to take it: the job runs here to its end, as in a plain drain.
//! Offers live in one set (`Keys::handover`) with the live TTL; nudges go on the replicas'
//! control channels (`hub::LookMessage`), the maintenance tick is the fallback.

use super::{adoption, outbox::Fence, state::Inner};
use crate::model::{Durability, JobId};

/// Most offers taken in one look (the rest wait for the next look or tick).
const MAX_OFFERS_PER_LOOK: usize = 500;

/// Draining: offer the re-attachable jobs owned here not offered yet, and nudge the other
/// replicas. A Redis error leaves them for the next tick.
pub(super) async fn offer_owned(inner: &Inner) {
    if !inner.handover.is_draining() || !inner.cmd.is_up() {
        return;
    }
    let candidates: Vec<(JobId, u64)> = {
        let offered = inner.handover.offered.lock();
        inner
            .owned
            .iter()
            .filter(|o| !offered.contains(o.key()))
            .filter(|o| o.lock().snapshot.durability != Durability::None)
            .map(|o| (*o.key(), o.value().generation))
            .collect()
    };
    let mut new = Vec::with_capacity(candidates.len());
    for (job, generation) in candidates {
        match mark_offered(inner, job, generation).await {
            Some(true) => new.push(job),
            Some(false) => {}
            None => return,
        }
    }
    if new.is_empty() {
        return;
    }
    let mut pipe = ::redis::pipe();
    let key = inner.keys.handover();
    for job in &new {
        pipe.cmd("SADD").arg(&key).arg(job.to_string()).ignore();
    }
    pipe.cmd("PEXPIRE")
        .arg(&key)
        .arg(inner.live_ttl_ms)
        .ignore();
    if let Err(error) = inner
        .cmd
        .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
        .await
    {
        tracing::warn!(%error, "could not offer jobs for adoption; trying again");
        return;
    }
    inner.handover.offered.lock().extend(new.iter().copied());
    tracing::info!(
        offered = new.len(),
        "draining: jobs whose upstream task or call stream another replica can carry on offered for adoption"
    );
    nudge_others(inner).await;
}

/// Mark `job` offered by this replica (the `OFFER` script): only a marked job can be
/// claimed as handed over. `Some(false)`: not this replica's to offer any more (ended, or
/// fenced); `None`: Redis failed (the next tick tries again).
async fn mark_offered(inner: &Inner, job: JobId, generation: u64) -> Option<bool> {
    let fence = Fence::new(&inner.replica, generation);
    let mut call = inner.scripts.offer.prepare_invoke();
    call.key(inner.keys.job(job))
        .arg(&fence.owner)
        .arg(fence.generation);
    match inner
        .cmd
        .run(|mut conn| async move { call.invoke_async::<i64>(&mut conn).await })
        .await
    {
        Ok(1) => Some(true),
        Ok(-3) => {
            inner.fenced(job, generation + 1);
            Some(false)
        }
        Ok(_) => Some(false),
        Err(error) => {
            tracing::warn!(job = %job, %error, "could not offer a job for adoption; trying again");
            None
        }
    }
}

/// Tell every other replica to look at the hand-over now.
async fn nudge_others(inner: &Inner) {
    let Ok(others) = inner.other_replicas().await else {
        return;
    };
    for replica in &others {
        inner.nudge(replica).await;
    }
}

/// Not draining: claim the jobs draining replicas offer. Each is taken off the offers once
/// claimed (here or by another replica), ended, or no longer re-attachable.
pub(super) async fn take_offers(inner: &Inner) {
    if !adoption::can_adopt(inner) || !inner.cmd.is_up() {
        return;
    }
    let key = inner.keys.handover();
    let Ok(offers) = inner
        .cmd
        .run(|mut conn| async move {
            ::redis::cmd("SRANDMEMBER")
                .arg(&key)
                .arg(MAX_OFFERS_PER_LOOK)
                .query_async::<Vec<String>>(&mut conn)
                .await
        })
        .await
    else {
        return;
    };
    for raw in offers {
        let done = match raw.parse::<JobId>() {
            Ok(job) => match adoption::take_offered(inner, job).await {
                Some(done) => done,
                None => return,
            },
            Err(_) => true,
        };
        if done {
            inner.remove_member(inner.keys.handover(), &raw).await;
        }
    }
}
