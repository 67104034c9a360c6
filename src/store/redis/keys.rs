//! Every Redis key and pub/sub channel name the bridge uses, in one place.
//!
//! All start with the configured `key_prefix`, so bridges (and tests) sharing one Redis never
//! see each other's jobs. Pub/sub channels are not scoped by database number in Redis, which
//! is one more reason the prefix is on them too.

use crate::model::{CorrelationId, JobId};

#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
}

impl Keys {
    pub(super) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
        }
    }

    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Hash: the job snapshot, one field per snapshot field (JSON text), plus `_cancel`.
    pub(super) fn job(&self, id: JobId) -> String {
        format!("{}:job:{id}", self.prefix)
    }

    /// Stream: the job's capped history; entry IDs are `<seq>-0`.
    pub(super) fn job_events(&self, id: JobId) -> String {
        format!("{}:job:{id}:events", self.prefix)
    }

    /// Pub/sub: the job's live events, as complete SSE frames.
    pub(super) fn job_channel(&self, id: JobId) -> String {
        format!("{}:job:{id}:live", self.prefix)
    }

    /// Hash: a correlation's `seq` and its number of `running` jobs.
    pub(super) fn corr(&self, id: &CorrelationId) -> String {
        format!("{}:corr:{id}", self.prefix)
    }

    pub(super) fn corr_events(&self, id: &CorrelationId) -> String {
        format!("{}:corr:{id}:events", self.prefix)
    }

    /// List: the job IDs of a correlation, oldest first.
    pub(super) fn corr_jobs(&self, id: &CorrelationId) -> String {
        format!("{}:corr:{id}:jobs", self.prefix)
    }

    pub(super) fn corr_channel(&self, id: &CorrelationId) -> String {
        format!("{}:corr:{id}:live", self.prefix)
    }

    /// Set: every replica that may hold running jobs (the owner-loss check walks it).
    pub(super) fn replicas(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    /// String with a TTL: present while the replica is alive.
    pub(super) fn lease(&self, replica: &str) -> String {
        format!("{}:replica:{replica}:lease", self.prefix)
    }

    /// Set: the running jobs a replica owns.
    pub(super) fn running(&self, replica: &str) -> String {
        format!("{}:replica:{replica}:jobs", self.prefix)
    }

    /// Pub/sub: cancel requests for the jobs a replica owns.
    pub(super) fn control(&self, replica: &str) -> String {
        format!("{}:replica:{replica}:control", self.prefix)
    }

    /// What precedes a replica name in its control channel (the cancel script builds the
    /// owner's channel from the job's `owner` field).
    pub(super) fn control_prefix(&self) -> String {
        format!("{}:replica:", self.prefix)
    }

    /// The `CLIENT SETNAME` of one of a replica's connections (`role`: `cmd` or `sub`), so an
    /// operator (and the tests) can count them with `CLIENT LIST`.
    pub(super) fn client_name(&self, replica: &str, role: &str) -> String {
        format!("{}:{replica}:{role}", self.prefix)
    }
}
