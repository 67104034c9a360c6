//! Every Redis key and pub/sub channel name the bridge uses, in one place.
//!
//! The scheme is `<key_prefix>:v3:<kind>:{<id>}`. The prefix keeps bridges (and tests) sharing
//! one Redis apart, pub/sub channels included. The kind is a fixed word before the ID and the
//! ID is last, between braces that no ID may contain, so two keys are equal only if kind and ID
//! both are. The braces are a Redis Cluster hash tag (one job's keys share a slot); `v3` names
//! the scheme, so a bridge of another scheme finds nothing instead of misreading it.
//! Why this shape: docs/design/store.md.

use sha2::{Digest, Sha256};

use crate::model::{CorrelationId, JobId, Principal};

#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
}

/// The version of the key scheme, part of every key.
const SCHEME: &str = "v3";

impl Keys {
    pub(super) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
        }
    }

    fn tagged(&self, kind: &str, id: &str) -> String {
        format!("{}:{SCHEME}:{kind}:{{{id}}}", self.prefix)
    }

    /// Sorted set: the tasks `tasks/list` (MCP 2025-11-25) shows a principal, by creation
    /// time. Named by the SHA-256 of the principal: a JWT subject may hold any character.
    pub(super) fn tasks(&self, principal: &Principal) -> String {
        let digest = Sha256::digest(principal.as_str().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.tagged("tasks", &hex)
    }

    /// Hash: the job snapshot, one field per snapshot field (JSON text), plus `_cancel`.
    pub(super) fn job(&self, id: JobId) -> String {
        self.tagged("job", &id.to_string())
    }

    /// Stream: the job's capped history; entry IDs are `<seq>-0`.
    pub(super) fn job_events(&self, id: JobId) -> String {
        self.tagged("job-events", &id.to_string())
    }

    /// Pub/sub: the job's live events, as complete SSE frames.
    pub(super) fn job_channel(&self, id: JobId) -> String {
        self.tagged("job-live", &id.to_string())
    }

    /// Hash: a correlation's `seq` and its number of `running` jobs.
    pub(super) fn corr(&self, id: &CorrelationId) -> String {
        self.tagged("corr", id.as_str())
    }

    pub(super) fn corr_events(&self, id: &CorrelationId) -> String {
        self.tagged("corr-events", id.as_str())
    }

    /// List: the job IDs of a correlation, oldest first.
    pub(super) fn corr_jobs(&self, id: &CorrelationId) -> String {
        self.tagged("corr-jobs", id.as_str())
    }

    pub(super) fn corr_channel(&self, id: &CorrelationId) -> String {
        self.tagged("corr-live", id.as_str())
    }

    /// Set: every replica that may hold running jobs (the owner-loss check walks it).
    pub(super) fn replicas(&self) -> String {
        format!("{}:{SCHEME}:replicas", self.prefix)
    }

    /// Set: the running jobs draining replicas offer for adoption (job IDs; the job's `owner`
    /// names the replica that offers it).
    pub(super) fn handover(&self) -> String {
        format!("{}:{SCHEME}:handover", self.prefix)
    }

    /// String with a TTL: present while the replica is alive.
    pub(super) fn lease(&self, replica: &str) -> String {
        self.tagged("lease", replica)
    }

    /// Set: the running jobs a replica owns.
    pub(super) fn running(&self, replica: &str) -> String {
        self.tagged("running", replica)
    }

    /// Pub/sub: cancel requests for the jobs a replica owns.
    pub(super) fn control(&self, replica: &str) -> String {
        self.tagged("control", replica)
    }

    /// What precedes a replica name in its control channel (the cancel script builds the
    /// owner's channel from the job's `owner` field, and closes it with `}`).
    pub(super) fn control_prefix(&self) -> String {
        format!("{}:{SCHEME}:control:{{", self.prefix)
    }

    /// An MCP session record.
    pub(super) fn mcp_session(&self, id: &str) -> String {
        self.tagged("mcp-session", id)
    }

    /// The `CLIENT SETNAME` of one of a replica's connections (`role`: `cmd` or `sub`), so an
    /// operator (and the tests) can count them with `CLIENT LIST`.
    pub(super) fn client_name(&self, replica: &str, role: &str) -> String {
        format!("{}:{replica}:{role}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the IDs contain, keys of different kinds or IDs never coincide, and a job's
    /// keys share one hash tag.
    #[test]
    fn keys_of_hostile_ids_never_collide() {
        let keys = Keys::new("p");
        let cids = [
            "T", "T:events", "T:jobs", "T:live", "events", "corr:T", "T:v2", "-",
        ];
        let mut all = std::collections::HashSet::new();
        for cid in cids {
            let cid: CorrelationId = cid.parse().unwrap();
            for key in [
                keys.corr(&cid),
                keys.corr_events(&cid),
                keys.corr_jobs(&cid),
                keys.corr_channel(&cid),
            ] {
                assert!(all.insert(key.clone()), "{key} twice");
            }
        }
        let job = JobId::random();
        for key in [keys.job(job), keys.job_events(job), keys.job_channel(job)] {
            assert!(key.ends_with(&format!("{{{job}}}")), "{key}");
            assert!(all.insert(key.clone()), "{key} twice");
        }
        for replica in ["r", "r:jobs", "r:lease"] {
            for key in [
                keys.lease(replica),
                keys.running(replica),
                keys.control(replica),
            ] {
                assert!(all.insert(key.clone()), "{key} twice");
            }
        }
        assert_eq!(
            keys.corr(&"T:events".parse().unwrap()),
            "p:v3:corr:{T:events}"
        );
        assert_eq!(
            format!("{}r}}", keys.control_prefix()),
            keys.control("r"),
            "the cancel script's channel is the owner's"
        );
    }
}
