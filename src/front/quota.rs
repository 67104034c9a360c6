//! Running jobs per principal (`limits.max_jobs_per_token`): one caller cannot fill the bridge
//! with jobs and starve the others. Tasks followed by listen requests are counted per
//! principal the same way ([`FollowedTasks`]).
//!
//! A permit is taken when a job is created and travels with the job's work future, so it is
//! given back when the upstream call ends, however it ends (answer, error, cancel, shutdown).
//! Principals come and go (every end user of an OAuth client is one), so a principal's entry
//! is dropped when its last permit comes back: the map holds only principals with running jobs.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::model::Principal;

#[derive(Debug, thiserror::Error)]
#[error(
    "too many running jobs: this caller already has {0} (limits.max_jobs_per_token); wait for \
     one to finish (wait_for_job) or cancel one (cancel_job), then call again"
)]
pub struct QuotaFull(usize);

#[derive(Clone)]
pub struct JobQuota {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    /// One semaphore per principal with running jobs.
    running: DashMap<Principal, Arc<Semaphore>>,
}

/// One running job's place in its principal's quota.
pub struct QuotaPermit {
    permit: Option<OwnedSemaphorePermit>,
    quota: Arc<Inner>,
    principal: Principal,
}

impl Drop for QuotaPermit {
    fn drop(&mut self) {
        self.permit = None;
        // Gone when no permit holds the semaphore and none is being taken (a taker holds a
        // clone of the `Arc` while it takes one, so the count is above 1 then).
        self.quota
            .running
            .remove_if(&self.principal, |_, s| Arc::strong_count(s) == 1);
    }
}

impl JobQuota {
    pub fn new(max: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                max,
                running: DashMap::new(),
            }),
        }
    }

    pub fn try_start(&self, principal: &Principal) -> Result<QuotaPermit, QuotaFull> {
        let semaphore = self
            .inner
            .running
            .entry(principal.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.inner.max)))
            .clone();
        let permit = semaphore.try_acquire_owned();
        let permit = QuotaPermit {
            permit: permit.ok(),
            quota: self.inner.clone(),
            principal: principal.clone(),
        };
        if permit.permit.is_none() {
            // Dropping it removes the entry if nothing else holds it.
            return Err(QuotaFull(self.inner.max));
        }
        Ok(permit)
    }

    #[cfg(test)]
    fn principals(&self) -> usize {
        self.inner.running.len()
    }
}

/// The places of followed tasks: of the replica (`limits.max_followed_tasks`) and of each
/// principal (`limits.max_followed_tasks_per_principal`, counted as running jobs are), so one
/// principal's listen requests cannot take the places every other caller's need.
pub(super) struct FollowedTasks {
    total: Arc<Semaphore>,
    per_principal: JobQuota,
}

/// One followed task's place: of the replica, and of its principal (none when `/mcp` is open
/// and every caller is the anonymous principal).
pub(super) struct Place {
    _total: OwnedSemaphorePermit,
    _own: Option<QuotaPermit>,
}

impl FollowedTasks {
    pub(super) fn new(total: usize, per_principal: usize) -> Self {
        Self {
            total: Arc::new(Semaphore::new(total)),
            per_principal: JobQuota::new(per_principal),
        }
    }

    /// A place for one more task of `principal`, or the `[limits]` key that refuses it.
    pub(super) fn try_take(&self, principal: &Principal) -> Result<Place, &'static str> {
        let own = if *principal == Principal::anonymous() {
            None
        } else {
            let own = self.per_principal.try_start(principal);
            Some(own.map_err(|_| "max_followed_tasks_per_principal")?)
        };
        let total = self.total.clone().try_acquire_owned();
        let total = total.map_err(|_| "max_followed_tasks")?;
        Ok(Place {
            _total: total,
            _own: own,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_per_principal_come_back_and_idle_principals_are_forgotten() {
        let quota = JobQuota::new(2);
        let a = Principal::token("a");
        let a1 = quota.try_start(&a).unwrap();
        let a2 = quota.try_start(&a).unwrap();
        assert!(quota.try_start(&a).is_err());
        let b1 = quota
            .try_start(&Principal::jwt("https://i/", "b"))
            .expect("another principal");
        assert_eq!(quota.principals(), 2);
        drop(a1);
        let a3 = quota.try_start(&a).unwrap();
        drop((a2, a3, b1));
        assert_eq!(quota.principals(), 0, "no running job, no entry");
        for i in 0..100 {
            drop(quota.try_start(&Principal::jwt("https://i/", &i.to_string())));
        }
        assert_eq!(quota.principals(), 0);
    }
}
