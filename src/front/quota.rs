//! Running jobs per MCP caller (`limits.max_jobs_per_token`): one token cannot fill the bridge
//! with jobs and starve the others.
//!
//! A permit is taken when a job is created and travels with the job's work future, so it is
//! given back when the upstream call ends, however it ends (answer, error, cancel, shutdown).

use std::sync::Arc;

use dashmap::DashMap;
use rmcp::{RoleServer, service::RequestContext};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Caller;

#[derive(Debug, thiserror::Error)]
#[error(
    "too many running jobs: this client already has {0} (limits.max_jobs_per_token); wait for \
     one to finish (wait_for_job) or cancel one (cancel_job), then call again"
)]
pub struct QuotaFull(usize);

pub struct JobQuota {
    max: usize,
    /// One semaphore per caller. Callers are the configured tokens (or the one open caller),
    /// so the map stays small.
    running: DashMap<Caller, Arc<Semaphore>>,
}

impl JobQuota {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            running: DashMap::new(),
        }
    }

    pub fn try_start(&self, caller: Caller) -> Result<OwnedSemaphorePermit, QuotaFull> {
        let semaphore = self
            .running
            .entry(caller)
            .or_insert_with(|| Arc::new(Semaphore::new(self.max)))
            .clone();
        semaphore
            .try_acquire_owned()
            .map_err(|_| QuotaFull(self.max))
    }
}

/// The caller the HTTP layer recorded for this MCP request (see `http::auth`). A request that
/// did not come through it (none in the bridge) counts as the open caller.
pub fn caller(context: &RequestContext<RoleServer>) -> Caller {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .copied()
        .unwrap_or(Caller::Open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_per_caller_come_back_when_dropped() {
        let quota = JobQuota::new(2);
        let a1 = quota.try_start(Caller::Token(0)).unwrap();
        let _a2 = quota.try_start(Caller::Token(0)).unwrap();
        assert!(quota.try_start(Caller::Token(0)).is_err());
        assert!(quota.try_start(Caller::Token(1)).is_ok(), "another caller");
        drop(a1);
        assert!(quota.try_start(Caller::Token(0)).is_ok());
    }
}
