//! The drain's hand-over: a draining replica offers every job it runs that another replica can
//! re-attach (its snapshot says `upstream_task`: a `_reattach` record was kept), instead of
//! running it to its end. It keeps following each until one is taken: a live replica that is
//! not draining claims it with the same fenced `ADOPT` script as a lapsed lease's job
//! (`adoption.rs`), so the seq line goes on without a gap and the old owner's later writes are
//! refused; the old owner, nudged, sees the job is no longer its own and stops without a word to
//! the upstream. Nobody to take it: the job runs here to its end, as in a plain drain.
//! Offers live in one set (`Keys::handover`) with the live TTL; nudges go on the replicas'
//! control channels (`hub::LookMessage`), the maintenance tick is the fallback.

use std::{
    collections::HashSet,
    sync::atomic::{AtomicBool, Ordering},
};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Inner, hub::LookMessage, outbox::Fence};
use crate::model::{Durability, JobId};

/// Most offers taken in one look (the rest wait for the next look or tick).
const MAX_OFFERS_PER_LOOK: usize = 500;

/// This replica's side of the hand-over.
#[derive(Default)]
pub(super) struct Handover {
    /// Set when the drain begins: offer, adopt nothing.
    draining: AtomicBool,
    /// The jobs offered so far (each once; the set is cleared by the process's end).
    offered: Mutex<HashSet<JobId>>,
    /// Wakes the maintenance task to offer at once.
    pub(super) wake: Notify,
}

impl Handover {
    pub(super) fn begin(&self) {
        self.draining.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether `job` was offered by this replica (its loss is then a hand-over, not a pause).
    pub(super) fn was_offered(&self, job: JobId) -> bool {
        self.offered.lock().contains(&job)
    }
}

impl Inner {
    /// Draining: offer the re-attachable jobs owned here not offered yet, and nudge the other
    /// replicas. A Redis error leaves them for the next tick.
    pub(super) async fn offer_owned(&self) {
        if !self.handover.is_draining() || !self.cmd.is_up() {
            return;
        }
        let candidates: Vec<(JobId, u64)> = {
            let offered = self.handover.offered.lock();
            self.owned
                .iter()
                .filter(|o| !offered.contains(o.key()))
                .filter(|o| o.lock().snapshot.durability != Durability::None)
                .map(|o| (*o.key(), o.value().generation))
                .collect()
        };
        let mut new = Vec::with_capacity(candidates.len());
        for (job, generation) in candidates {
            match self.mark_offered(job, generation).await {
                Some(true) => new.push(job),
                Some(false) => {}
                None => return,
            }
        }
        if new.is_empty() {
            return;
        }
        let mut pipe = ::redis::pipe();
        let key = self.keys.handover();
        for job in &new {
            pipe.cmd("SADD").arg(&key).arg(job.to_string()).ignore();
        }
        pipe.cmd("PEXPIRE").arg(&key).arg(self.live_ttl_ms).ignore();
        if let Err(error) = self
            .cmd
            .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
            .await
        {
            tracing::warn!(%error, "could not offer jobs for adoption; trying again");
            return;
        }
        self.handover.offered.lock().extend(new.iter().copied());
        tracing::info!(
            offered = new.len(),
            "draining: jobs whose upstream task or call stream another replica can carry on offered for adoption"
        );
        self.nudge_others().await;
    }

    /// Mark `job` offered by this replica (the `OFFER` script): only a marked job can be
    /// claimed as handed over. `Some(false)`: not this replica's to offer any more (ended, or
    /// fenced); `None`: Redis failed (the next tick tries again).
    async fn mark_offered(&self, job: JobId, generation: u64) -> Option<bool> {
        let fence = Fence::new(&self.replica, generation);
        let mut call = self.scripts.offer.prepare_invoke();
        call.key(self.keys.job(job))
            .arg(&fence.owner)
            .arg(fence.generation);
        match self
            .cmd
            .run(|mut conn| async move { call.invoke_async::<i64>(&mut conn).await })
            .await
        {
            Ok(1) => Some(true),
            Ok(-3) => {
                self.fenced(job, generation + 1);
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
    async fn nudge_others(&self) {
        let replicas_key = self.keys.replicas();
        let Ok(replicas) = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("SMEMBERS")
                    .arg(&replicas_key)
                    .query_async::<Vec<String>>(&mut conn)
                    .await
            })
            .await
        else {
            return;
        };
        for replica in replicas.iter().filter(|r| **r != self.replica) {
            self.nudge(replica).await;
        }
    }

    /// Tell `replica` to look at the hand-over now (its maintenance tick would, later).
    pub(super) async fn nudge(&self, replica: &str) {
        let message = serde_json::to_string(&LookMessage {
            look: "handover".into(),
        })
        .unwrap_or_default();
        let _ = self.publish(self.keys.control(replica), message).await;
    }

    /// Not draining: claim the jobs draining replicas offer. Each is taken off the offers once
    /// claimed (here or by another replica), ended, or no longer re-attachable.
    pub(super) async fn take_offers(&self) {
        if !self.can_adopt() || !self.cmd.is_up() {
            return;
        }
        let key = self.keys.handover();
        let Ok(offers) = self
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
                Ok(job) => match self.take_offered(job).await {
                    Some(done) => done,
                    None => return,
                },
                Err(_) => true,
            };
            if done {
                let (key, member) = (self.keys.handover(), raw);
                let _ = self
                    .cmd
                    .run(|mut conn| async move {
                        ::redis::cmd("SREM")
                            .arg(&key)
                            .arg(&member)
                            .exec_async(&mut conn)
                            .await
                    })
                    .await;
            }
        }
    }
}
