//! Adoption and its fence: a running job whose owner's lease lapsed passes to exactly one live
//! replica when its upstream call can be re-attached (it has a `_reattach` record), instead of
//! failing `owner_lost`; every write of a job is checked against its owner and generation, so
//! an old owner back from a pause writes nothing over the adopter. Why and how:
//! docs/design/adoption.md.

use ::redis::Value;

use super::{
    codec,
    outbox::{Fence, Owned},
    state::{CURSOR_FIELD, Inner, Written, pairs},
};
use crate::events::{Adopted, StoreError};
use crate::metrics::AdoptionEvent;
use crate::model::{EventBody, FailureReason, JobFailure, JobId, JobSnapshot, Reattach};

/// The hash field of a job's re-attach record (JSON of `model::Reattach`).
const REATTACH_FIELD: &str = "_reattach";
/// The hash field of a job's generation (absent: 0, a job never adopted).
const GENERATION_FIELD: &str = "_gen";

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
    let mut record: Option<Reattach> =
        field(REATTACH_FIELD).and_then(|v| serde_json::from_slice(v).ok());
    let cursor = field(CURSOR_FIELD).and_then(|v| std::str::from_utf8(v).ok());
    if let (Some(stream), Some(cursor)) = (record.as_mut().and_then(|r| r.stream.as_mut()), cursor)
    {
        stream.last_event_id = cursor.to_string();
    }
    Some(Stored {
        snapshot,
        generation,
        record,
    })
}

/// Look whether every job this replica runs is still its own at its generation; stop
/// those another replica adopted (a pause past the lease), without waiting for their next
/// write to be refused. In chunks of one pipeline each; a Redis error waits for next time.
pub(super) async fn check_owned(inner: &Inner) {
    if !inner.cmd.is_up() {
        return;
    }
    let jobs: Vec<(JobId, u64)> = inner
        .owned
        .iter()
        .map(|o| (*o.key(), o.value().generation))
        .collect();
    let mine = Fence::new(&inner.replica, 0).owner;
    for chunk in jobs.chunks(500) {
        let mut pipe = ::redis::pipe();
        for (job, _) in chunk {
            pipe.cmd("HMGET")
                .arg(inner.keys.job(*job))
                .arg("owner")
                .arg(GENERATION_FIELD);
        }
        let Ok(found) = inner
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
                inner.lose(*job, stored.unwrap_or(0));
            }
        }
    }
}

/// Keep `record` with `job`, if this replica still owns it at its generation.
pub(super) async fn record_reattach(
    inner: &Inner,
    job: JobId,
    record: &Reattach,
) -> Result<bool, StoreError> {
    let Some(owned) = inner.owned.get(&job).map(|o| o.value().clone()) else {
        return Ok(false);
    };
    let fence = Fence::new(&inner.replica, owned.generation);
    let durability = serde_json::to_string(&record.durability()).unwrap_or_default();
    let mut call = inner.scripts.record_reattach.prepare_invoke();
    call.key(inner.keys.job(job))
        .arg(&fence.owner)
        .arg(fence.generation)
        .arg(serde_json::to_string(record).unwrap_or_default())
        .arg(durability);
    let kept: i64 = inner
        .cmd
        .run(|mut conn| async move { call.invoke_async(&mut conn).await })
        .await?;
    match kept {
        1 => {
            owned.lock().snapshot.durability = record.durability();
            Ok(true)
        }
        -3 => {
            inner.fenced(job, owned.generation + 1);
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
    inner: &Inner,
    replica: &str,
    job: JobId,
    adopters_live: bool,
) -> Option<bool> {
    let found = match read_stored(inner, job).await {
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
        if can_adopt(inner) {
            let lapsed = (found.generation, record, Claim::LeaseLapsed);
            return claim(inner, replica, job, lapsed).await;
        }
        if adopters_live {
            return Some(true);
        }
    }
    fail_orphan(inner, replica, job, found).await
}

/// Whether this replica takes jobs over: someone here carries them on, and it is not
/// draining.
pub(super) fn can_adopt(inner: &Inner) -> bool {
    inner.adoptions.wanted() && !inner.handover.is_draining()
}

async fn read_stored(inner: &Inner, job: JobId) -> Result<Option<Stored>, StoreError> {
    let fields = inner.job_fields(job).await?;
    Ok(if fields.is_empty() {
        None
    } else {
        stored(&fields)
    })
}

/// A job a draining replica offered: claimed here if it still runs there and can be
/// re-attached. `Some(true)`: the offer is done with (claimed here or elsewhere, ended, not
/// re-attachable); `Some(false)`: it stays; `None`: Redis failed.
pub(super) async fn take_offered(inner: &Inner, job: JobId) -> Option<bool> {
    let found = match read_stored(inner, job).await {
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
    if found.snapshot.status.is_terminal() || owner == inner.replica {
        return Some(true);
    }
    claim(
        inner,
        &owner,
        job,
        (found.generation, record, Claim::HandedOver),
    )
    .await
}

/// The atomic claim (the `ADOPT` script), then the job handed up to be carried on here.
// Long because: the script's call, its three answers and the hand-up in one place.
async fn claim(
    inner: &Inner,
    replica: &str,
    job: JobId,
    (generation, record, how): (u64, Reattach, Claim),
) -> Option<bool> {
    // Listed as this replica's before the claim, so that once claimed it is found if this
    // replica is lost in turn; taken off again if the claim is lost.
    let member = job.to_string();
    if let Err(error) = inner.enlist(&inner.replica, &member).await {
        tracing::warn!(job = %job, %error, "could not claim a lost replica's job");
        return None;
    }
    let mut call = inner.scripts.adopt.prepare_invoke();
    call.key(inner.keys.job(job))
        .arg(Fence::new(replica, generation).owner)
        .arg(generation)
        .arg(Fence::new(&inner.replica, 0).owner)
        .arg(inner.live_ttl_ms)
        .arg(if how == Claim::HandedOver { "1" } else { "0" });
    let reply: Value = match inner
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
        inner.adoption_events.count(AdoptionEvent::ClaimLost);
        inner.delist(&inner.replica, &member).await;
        return Some(true);
    };
    inner.delist(replica, &member).await;
    // Lost here once (a pause past the lease), now this replica's again: its writes go.
    inner.lost.remove(&job);
    inner.adoption_events.count(match how {
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
    inner
        .owned
        .insert(job, Owned::new(found.snapshot.clone(), generation));
    let adopted = Adopted {
        snapshot: found.snapshot,
        record,
    };
    if inner.adoptions.tx.send(adopted).is_err() {
        give_up(inner, job, "this replica is shutting down").await;
    }
    if how == Claim::HandedOver {
        // The draining owner stops following it now, not at its next tick.
        inner.nudge(replica).await;
    }
    Some(true)
}

/// End a job this replica adopted but cannot carry on.
async fn give_up(inner: &Inner, job: JobId, why: &str) {
    let Some(owned) = inner.owned.get(&job).map(|o| o.value().clone()) else {
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
    match inner.append_owned(job, owned, body, None).await {
        Ok(Some(_)) => inner.adoption_events.count(AdoptionEvent::OwnerLost),
        Ok(None) => {}
        Err(error) => tracing::warn!(job = %job, %error, "could not end an adopted job"),
    }
}

/// End `job` of the lost `replica` with `owner_lost`, unless it is no longer that replica's
/// at the generation read (the fence: an adopter may have claimed it meanwhile).
async fn fail_orphan(inner: &Inner, replica: &str, job: JobId, found: Stored) -> Option<bool> {
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
    let mut write = Inner::prepare(job, &mut snapshot, &body);
    write.expect = 0;
    write.fence = Some(Fence::new(replica, found.generation));
    match inner.write(job, &write).await {
        Ok(Written::Stored(seq)) => {
            inner.adoption_events.count(AdoptionEvent::OwnerLost);
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
