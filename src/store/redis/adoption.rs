//! Adoption and its fence: a running job whose owner's lease lapsed passes to exactly one live
//! replica when its upstream call can be re-attached (it has a `_reattach` record), instead of
//! failing `owner_lost`; every write of a job is checked against its owner and generation, so
//! an old owner back from a pause writes nothing over the adopter. Why and how:
//! docs/design/adoption.md.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use ::redis::Value;
use futures::{StreamExt, stream::BoxStream};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{
    CancelRequest, Inner, StoreError, Written, codec,
    outbox::{Fence, Owned},
    pairs,
};
use crate::events::Adopted;
use crate::metrics::AdoptionEvent;
use crate::model::{EventBody, FailureReason, JobFailure, JobId, JobSnapshot, Reattach};

/// The hash field of a job's re-attach record (JSON of `model::Reattach`).
const REATTACH_FIELD: &str = "_reattach";
/// The hash field of a job's generation (absent: 0, a job never adopted).
const GENERATION_FIELD: &str = "_gen";

/// The jobs this replica adopted, on their way to the one consumer that carries them on.
/// Unbounded: each item is one job that this replica now owns and must not lose; their number
/// is bounded by the running jobs of the replicas that were lost.
pub(super) struct Adoptions {
    tx: mpsc::UnboundedSender<Adopted>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Adopted>>>,
    taken: AtomicBool,
}

impl Default for Adoptions {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            taken: AtomicBool::new(false),
        }
    }
}

impl Adoptions {
    /// The stream of adopted jobs, for the first caller; nothing for any other.
    pub(super) fn take(&self) -> BoxStream<'static, Adopted> {
        match self.rx.lock().take() {
            Some(rx) => {
                self.taken.store(true, Ordering::Release);
                UnboundedReceiverStream::new(rx).boxed()
            }
            None => {
                tracing::warn!("the adopted jobs were asked for twice; the second asker gets none");
                futures::stream::pending().boxed()
            }
        }
    }

    /// Whether someone carries adopted jobs on: without, this replica adopts none.
    pub(super) fn wanted(&self) -> bool {
        self.taken.load(Ordering::Acquire) && !self.tx.is_closed()
    }
}

/// Why a job is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Its owner's lease lapsed (a crash, a pause, Redis out of its reach).
    LeaseLapsed,
    /// Its draining owner offered it (`handover.rs`).
    HandedOver,
}

/// A job as its hash holds it: the snapshot, its generation and its re-attach record.
struct Stored {
    snapshot: JobSnapshot,
    generation: u64,
    record: Option<Reattach>,
}

fn stored(fields: &[(String, Vec<u8>)]) -> Option<Stored> {
    let snapshot = codec::snapshot_from_fields(fields)?;
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let generation = field(GENERATION_FIELD)
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    let record = field(REATTACH_FIELD).and_then(|v| serde_json::from_slice(v).ok());
    Some(Stored {
        snapshot,
        generation,
        record,
    })
}

impl Inner {
    /// A write for `job` was refused by the fence: another replica owns it, at `generation`.
    pub(super) fn fenced(&self, job: JobId, generation: u64) {
        self.adoption_events.count(AdoptionEvent::WriteFenced);
        self.lose(job, generation);
    }

    /// Another replica adopted `job` (now at `generation`) while this one's lease had lapsed:
    /// stop working on it, here, without a word to its upstream call (the adopter carries it).
    pub(super) fn lose(&self, job: JobId, generation: u64) {
        self.owned.remove(&job);
        self.lost.insert(job, Instant::now());
        if self.handover.was_offered(job) {
            self.adoption_events.count(AdoptionEvent::HandedOver);
            tracing::info!(job = %job, generation,
                "handed over: another replica took this job and follows its upstream task; \
                 this draining replica stops working on it");
        } else {
            tracing::warn!(job = %job, generation,
                "another replica adopted this job while this replica's lease had lapsed (a \
                 pause, or Redis out of reach): this replica stops working on it and writes \
                 nothing more to it");
        }
        let _ = self.hub.cancels().send(CancelRequest {
            job_id: job,
            reason: "another replica adopted this job".into(),
            abandon: true,
        });
    }

    /// Look whether every job this replica runs is still its own at its generation; stop
    /// those another replica adopted (a pause past the lease), without waiting for their next
    /// write to be refused. In chunks of one pipeline each; a Redis error waits for next time.
    pub(super) async fn check_owned(&self) {
        if !self.cmd.is_up() {
            return;
        }
        let jobs: Vec<(JobId, u64)> = self
            .owned
            .iter()
            .map(|o| (*o.key(), o.value().generation))
            .collect();
        let mine = Fence::new(&self.replica, 0).owner;
        for chunk in jobs.chunks(500) {
            let mut pipe = ::redis::pipe();
            for (job, _) in chunk {
                pipe.cmd("HMGET")
                    .arg(self.keys.job(*job))
                    .arg("owner")
                    .arg(GENERATION_FIELD);
            }
            let Ok(found) = self
                .cmd
                .run(|mut conn| async move {
                    pipe.query_async::<Vec<(Option<String>, Option<u64>)>>(&mut conn)
                        .await
                })
                .await
            else {
                return;
            };
            for ((job, generation), (owner, stored)) in chunk.iter().zip(found) {
                let theirs = owner.is_some_and(|o| o != mine);
                let newer = stored.unwrap_or(0) > *generation;
                if theirs || newer {
                    self.lose(*job, stored.unwrap_or(0));
                }
            }
        }
    }

    /// Forget the jobs lost to an adopter longer ago than a running job's keys live: their
    /// runners here stopped long since.
    pub(super) fn forget_lost(&self) {
        let keep = Duration::from_millis(self.live_ttl_ms);
        self.lost.retain(|_, at| at.elapsed() < keep);
    }

    /// A write for a job this replica lost to an adopter: refused here, never sent. The lost
    /// job's runner ends with a terminal write, after which the job is forgotten here.
    pub(super) fn refused_as_lost(&self, job: JobId, body: &EventBody) -> bool {
        if !self.lost.contains_key(&job) {
            return false;
        }
        if body.kind().is_terminal() {
            self.lost.remove(&job);
        } else {
            // A runner that started after the job was lost missed the first word: stop it.
            let _ = self.hub.cancels().send(CancelRequest {
                job_id: job,
                reason: "another replica adopted this job".into(),
                abandon: true,
            });
        }
        tracing::debug!(job = %job, kind = body.kind().as_str(), "a write for a job another replica adopted: refused");
        true
    }

    /// Keep `record` with `job`, if this replica still owns it at its generation.
    pub(super) async fn record_reattach(
        &self,
        job: JobId,
        record: &Reattach,
    ) -> Result<bool, StoreError> {
        let Some(owned) = self.owned.get(&job).map(|o| o.value().clone()) else {
            return Ok(false);
        };
        let fence = Fence::new(&self.replica, owned.generation);
        let durability = serde_json::to_string(&record.durability()).unwrap_or_default();
        let mut call = self.scripts.record_reattach.prepare_invoke();
        call.key(self.keys.job(job))
            .arg(&fence.owner)
            .arg(fence.generation)
            .arg(serde_json::to_string(record).unwrap_or_default())
            .arg(durability);
        let kept: i64 = self
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        match kept {
            1 => {
                owned.lock().snapshot.durability = record.durability();
                Ok(true)
            }
            -3 => {
                self.fenced(job, owned.generation + 1);
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// The job `job` of the lost `replica`: adopted when it can be re-attached and someone here
    /// carries adopted jobs on, else ended `owner_lost`. `Some(true)`: handled (adopted here or
    /// by another replica now, or ended now: the write took it off `replica`'s running set, or
    /// the next look will); `Some(false)`: it was unknown, already ended or another replica's
    /// already (take it off that set); `None`: Redis failed (try again later).
    /// `adopters_live`: another live replica can adopt (not draining); a re-attachable job
    /// this replica cannot adopt is then left to it, never failed.
    pub(super) async fn take_over(
        &self,
        replica: &str,
        job: JobId,
        adopters_live: bool,
    ) -> Option<bool> {
        let found = match self.read_stored(job).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(job = %job, %error, "could not read a lost replica's job");
                return None;
            }
        };
        let Some(found) = found else {
            return Some(false);
        };
        if found.snapshot.status.is_terminal() {
            return Some(false);
        }
        if found.snapshot.owner != replica {
            // Adopted already: no job of the lost replica's any more.
            return Some(false);
        }
        if let Some(record) = found.record.clone() {
            if self.can_adopt() {
                let claim = (found.generation, record, Claim::LeaseLapsed);
                return self.claim(replica, job, claim).await;
            }
            if adopters_live {
                return Some(true);
            }
        }
        self.fail_orphan(replica, job, found).await
    }

    /// Whether this replica takes jobs over: someone here carries them on, and it is not
    /// draining.
    pub(super) fn can_adopt(&self) -> bool {
        self.adoptions.wanted() && !self.handover.is_draining()
    }

    async fn read_stored(&self, job: JobId) -> Result<Option<Stored>, StoreError> {
        let key = self.keys.job(job);
        let reply: Value = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let fields = pairs(reply);
        Ok(if fields.is_empty() {
            None
        } else {
            stored(&fields)
        })
    }

    /// A job a draining replica offered: claimed here if it still runs there and can be
    /// re-attached. `Some(true)`: the offer is done with (claimed here or elsewhere, ended, not
    /// re-attachable); `Some(false)`: it stays; `None`: Redis failed.
    pub(super) async fn take_offered(&self, job: JobId) -> Option<bool> {
        let found = match self.read_stored(job).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(job = %job, %error, "could not read a job offered for adoption");
                return None;
            }
        };
        let Some(found) = found else {
            return Some(true);
        };
        let owner = found.snapshot.owner.clone();
        let Some(record) = found.record.clone() else {
            return Some(true);
        };
        if found.snapshot.status.is_terminal() || owner == self.replica {
            return Some(true);
        }
        self.claim(&owner, job, (found.generation, record, Claim::HandedOver))
            .await
    }

    /// The atomic claim (the `ADOPT` script), then the job handed up to be carried on here.
    // Long because: the script's call, its three answers and the hand-up in one place.
    async fn claim(
        &self,
        replica: &str,
        job: JobId,
        (generation, record, how): (u64, Reattach, Claim),
    ) -> Option<bool> {
        // Listed as this replica's before the claim, so that once claimed it is found if this
        // replica is lost in turn; taken off again if the claim is lost.
        let member = job.to_string();
        if let Err(error) = self.enlist(&self.replica, &member).await {
            tracing::warn!(job = %job, %error, "could not claim a lost replica's job");
            return None;
        }
        let mut call = self.scripts.adopt.prepare_invoke();
        call.key(self.keys.job(job))
            .arg(Fence::new(replica, generation).owner)
            .arg(generation)
            .arg(Fence::new(&self.replica, 0).owner)
            .arg(self.live_ttl_ms)
            .arg(if how == Claim::HandedOver { "1" } else { "0" });
        let reply: Value = match self
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await
        {
            Ok(reply) => reply,
            Err(error) => {
                tracing::warn!(job = %job, %error, "could not claim a lost replica's job");
                return None;
            }
        };
        let Value::Array(mut parts) = reply else {
            return Some(true);
        };
        let fields = (parts.len() == 2).then(|| pairs(parts.pop().unwrap_or(Value::Nil)));
        let claimed: Option<u64> = parts
            .pop()
            .and_then(|v| ::redis::from_redis_value(v).ok())
            .filter(|g| *g > 0);
        let (Some(generation), Some(Some(found))) = (claimed, fields.map(|f| stored(&f))) else {
            // Another replica claimed it first, or it ended meanwhile.
            self.adoption_events.count(AdoptionEvent::ClaimLost);
            self.delist(&self.replica, &member).await;
            return Some(true);
        };
        self.delist(replica, &member).await;
        // Lost here once (a pause past the lease), now this replica's again: its writes go.
        self.lost.remove(&job);
        self.adoption_events.count(match how {
            Claim::LeaseLapsed => AdoptionEvent::AdoptedLeaseLapsed,
            Claim::HandedOver => AdoptionEvent::AdoptedHandedOver,
        });
        match how {
            Claim::LeaseLapsed => tracing::warn!(job = %job, lost = %replica, generation,
                seq = found.snapshot.seq, upstream = %record.upstream,
                "adopted a job whose owner's lease lapsed"),
            Claim::HandedOver => tracing::info!(job = %job, from = %replica, generation,
                seq = found.snapshot.seq, upstream = %record.upstream,
                "adopted a job its draining owner handed over"),
        }
        self.owned
            .insert(job, Owned::new(found.snapshot.clone(), generation));
        let adopted = Adopted {
            snapshot: found.snapshot,
            record,
        };
        if self.adoptions.tx.send(adopted).is_err() {
            self.give_up(job, "this replica is shutting down").await;
        }
        if how == Claim::HandedOver {
            // The draining owner stops following it now, not at its next tick.
            self.nudge(replica).await;
        }
        Some(true)
    }

    /// End a job this replica adopted but cannot carry on.
    async fn give_up(&self, job: JobId, why: &str) {
        let Some(owned) = self.owned.get(&job).map(|o| o.value().clone()) else {
            return;
        };
        let body = EventBody::Failed {
            failure: JobFailure {
                reason: FailureReason::OwnerLost,
                message: format!(
                    "the bridge replica that ran this job stopped renewing its lease, and the \
                     one that adopted it could not carry it on ({why}): run the tool again"
                ),
            },
            result: None,
            rpc_error: None,
        };
        match self.append_owned(job, owned, body).await {
            Ok(Some(_)) => self.adoption_events.count(AdoptionEvent::OwnerLost),
            Ok(None) => {}
            Err(error) => tracing::warn!(job = %job, %error, "could not end an adopted job"),
        }
    }

    /// End `job` of the lost `replica` with `owner_lost`, unless it is no longer that replica's
    /// at the generation read (the fence: an adopter may have claimed it meanwhile).
    async fn fail_orphan(&self, replica: &str, job: JobId, found: Stored) -> Option<bool> {
        let body = EventBody::Failed {
            failure: JobFailure {
                reason: FailureReason::OwnerLost,
                message: format!(
                    "the bridge replica {replica} that ran this job stopped renewing \
                     its lease (it crashed, or lost Redis); the upstream call is lost: \
                     run the tool again"
                ),
            },
            result: None,
            rpc_error: None,
        };
        let mut snapshot = found.snapshot;
        let mut write = Self::prepare(job, &mut snapshot, &body);
        write.expect = 0;
        write.fence = Some(Fence::new(replica, found.generation));
        match self.write(job, &write).await {
            Ok(Written::Stored(seq)) => {
                self.adoption_events.count(AdoptionEvent::OwnerLost);
                tracing::warn!(job = %job, %replica, seq, "job failed: its owner is gone");
                Some(true)
            }
            Ok(Written::Fenced(_)) => Some(true),
            Ok(Written::Unknown | Written::Ended) => Some(false),
            Err(error) => {
                tracing::warn!(job = %job, %error, "could not end a dead replica's job");
                None
            }
        }
    }
}
