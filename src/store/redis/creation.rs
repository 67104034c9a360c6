//! Creating a job: its owner's `running` set, the job's own keys and its correlation's, each
//! in a hash slot of its own (one script or command per slot, as a Redis Cluster needs), in an
//! order that leaves nothing wrong when a step fails: the owner lists the job first (an owner
//! lost right after creating it is then found), a failed create takes the job off again, and a
//! correlation that refuses the job (a foreign key in its place) takes the job's keys away.

use super::{codec::all_fields, link::LinkError, state::Inner};
use crate::model::{JobSnapshot, NewJob};

/// Job IDs kept per correlation for its `status` snapshot (the newest ones).
const MAX_CORRELATION_JOBS: usize = 1000;

/// How a creation ended.
pub(super) enum Created {
    Created,
    Duplicate,
}

/// Write `snapshot` of the new `job`, with its correlation's `job_started`.
pub(super) async fn create(
    inner: &Inner,
    job: &NewJob,
    snapshot: &JobSnapshot,
) -> Result<Created, LinkError> {
    inner.enlist(&job.owner, &job.id.to_string()).await?;
    let keys = &inner.keys;
    let mut call = inner.scripts.create.prepare_invoke();
    call.key(keys.job(job.id))
        .key(keys.job_events(job.id))
        .arg(inner.live_ttl_ms);
    for (name, value) in all_fields(snapshot) {
        call.arg(name).arg(value);
    }
    let created: Result<i64, LinkError> = inner
        .cmd
        .run(|mut conn| async move { call.invoke_async(&mut conn).await })
        .await;
    match created {
        Ok(0) => return Ok(Created::Duplicate),
        Ok(_) => {}
        Err(error @ LinkError::Down { .. }) => return Err(error),
        Err(error) => {
            inner.delist(&job.owner, &job.id.to_string()).await;
            return Err(error);
        }
    }
    let Some(c) = &job.correlation_id else {
        return Ok(Created::Created);
    };
    let started = serde_json::to_vec(snapshot).unwrap_or_else(|_| b"{}".to_vec());
    let mut call = inner.scripts.corr_start.prepare_invoke();
    call.key(keys.corr(c))
        .key(keys.corr_events(c))
        .key(keys.corr_jobs(c))
        .arg(job.id.to_string())
        .arg(inner.history)
        .arg(keys.corr_channel(c))
        .arg(started)
        .arg(MAX_CORRELATION_JOBS)
        .arg(inner.live_ttl_ms);
    let joined: Result<i64, LinkError> = inner
        .cmd
        .run(|mut conn| async move { call.invoke_async(&mut conn).await })
        .await;
    match joined {
        Ok(_) => Ok(Created::Created),
        Err(error @ LinkError::Down { .. }) => Err(error),
        Err(error) => {
            unwrite(inner, job).await;
            Err(error)
        }
    }
}

/// Undo a creation whose correlation refused the job.
async fn unwrite(inner: &Inner, job: &NewJob) {
    let (hash, events) = (inner.keys.job(job.id), inner.keys.job_events(job.id));
    let _ = inner
        .cmd
        .run(|mut conn| async move {
            ::redis::cmd("DEL")
                .arg(&hash)
                .arg(&events)
                .exec_async(&mut conn)
                .await
        })
        .await;
    inner.delist(&job.owner, &job.id.to_string()).await;
}
