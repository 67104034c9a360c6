//! Creating a job: its owner's `running` set, the job's own keys and its correlation's, each
//! in a hash slot of its own (one script or command per slot, as a Redis Cluster needs), in an
//! order that leaves nothing wrong when a step fails: the owner lists the job first (an owner
//! lost right after creating it is then found), a failed create takes the job off again, and a
//! correlation that refuses the job (a foreign key in its place) takes the job's keys away.

use super::{Inner, MAX_CORRELATION_JOBS, codec::all_fields, link::LinkError};
use crate::model::{JobSnapshot, NewJob};

/// How a creation ended.
pub(super) enum Created {
    Created,
    Duplicate,
}

impl Inner {
    /// Write `snapshot` of the new `job`, with its correlation's `job_started`.
    pub(super) async fn create(
        &self,
        job: &NewJob,
        snapshot: &JobSnapshot,
    ) -> Result<Created, LinkError> {
        self.enlist(&job.owner, &job.id.to_string()).await?;
        let keys = &self.keys;
        let mut call = self.scripts.create.prepare_invoke();
        call.key(keys.job(job.id))
            .key(keys.job_events(job.id))
            .arg(self.live_ttl_ms);
        for (name, value) in all_fields(snapshot) {
            call.arg(name).arg(value);
        }
        let created: Result<i64, LinkError> = self
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await;
        match created {
            Ok(0) => return Ok(Created::Duplicate),
            Ok(_) => {}
            Err(error @ LinkError::Down { .. }) => return Err(error),
            Err(error) => {
                self.delist(&job.owner, &job.id.to_string()).await;
                return Err(error);
            }
        }
        let Some(c) = &job.correlation_id else {
            return Ok(Created::Created);
        };
        let started = serde_json::to_vec(snapshot).unwrap_or_else(|_| b"{}".to_vec());
        let mut call = self.scripts.corr_start.prepare_invoke();
        call.key(keys.corr(c))
            .key(keys.corr_events(c))
            .key(keys.corr_jobs(c))
            .arg(job.id.to_string())
            .arg(self.history)
            .arg(keys.corr_channel(c))
            .arg(started)
            .arg(MAX_CORRELATION_JOBS)
            .arg(self.live_ttl_ms);
        let joined: Result<i64, LinkError> = self
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await;
        match joined {
            Ok(_) => Ok(Created::Created),
            Err(error @ LinkError::Down { .. }) => Err(error),
            Err(error) => {
                self.unwrite(job).await;
                Err(error)
            }
        }
    }

    /// Put `job` on `replica`'s `running` set (and the replica on the replicas set).
    pub(super) async fn enlist(&self, replica: &str, job: &str) -> Result<(), LinkError> {
        let mut pipe = ::redis::pipe();
        let (running, replicas) = (self.keys.running(replica), self.keys.replicas());
        pipe.cmd("SADD").arg(&running).arg(job).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&running)
            .arg(self.live_ttl_ms)
            .ignore();
        pipe.cmd("SADD").arg(&replicas).arg(replica).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&replicas)
            .arg(self.live_ttl_ms)
            .ignore();
        self.cmd
            .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
            .await
    }

    /// Take `job` off `replica`'s `running` set, if Redis answers (else the owner-loss check
    /// does, once it finds the job ended or another's).
    pub(super) async fn delist(&self, replica: &str, job: &str) {
        let (key, member) = (self.keys.running(replica), job.to_string());
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

    /// Undo a creation whose correlation refused the job.
    async fn unwrite(&self, job: &NewJob) {
        let (hash, events) = (self.keys.job(job.id), self.keys.job_events(job.id));
        let _ = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("DEL")
                    .arg(&hash)
                    .arg(&events)
                    .exec_async(&mut conn)
                    .await
            })
            .await;
        self.delist(&job.owner, &job.id.to_string()).await;
    }
}
