//! What every handler of the MCP front door shares: one [`Core`] per bridge, behind an `Arc`
//! that every session's `Front` holds. Handlers are functions (or types) of their own files
//! that take `&Core`; this file holds only the state and the reads they all need.

use std::sync::Arc;

use rmcp::{ErrorData, model::CallToolResult};

use super::{
    handle::{Links, attach_job_meta, error_result, store_error},
    listeners::{FollowedTasks, Listeners},
    round_requests::RoundRequests,
    wait_bound::WaitBounds,
};
use crate::{
    auth::{Identity, may_access},
    config::JobsConfig,
    jobs::{JobQuota, Jobs},
    metrics::Metrics,
    model::{JobId, JobSnapshot, JobStatus},
    shutdown::Tasks,
    upstream::Upstreams,
};

pub struct Core {
    /// MCP sessions and listen requests: told when a list changes (an upstream came or went,
    /// or changed a list) or a followed resource is updated.
    pub(super) listeners: Arc<Listeners>,
    pub(super) upstreams: Upstreams,
    pub(super) jobs: Jobs,
    pub(super) config: JobsConfig,
    pub(super) links: Links,
    /// Lower-case name of the header that carries the correlation ID.
    pub(super) correlation_header: String,
    /// Running jobs per principal.
    pub(super) quota: JobQuota,
    /// Task IDs one `subscriptions/listen` request may follow (`limits.max_listen_task_ids`).
    pub(super) max_listen_task_ids: usize,
    /// Places for the tasks listen requests follow at once (`limits.max_followed_tasks`, and
    /// its share per principal).
    pub(super) followed_tasks: FollowedTasks,
    /// Samples and roots the tools of this replica's jobs ask their callers in rounds for.
    pub(super) round_requests: Arc<RoundRequests>,
    pub(super) metrics: Arc<Metrics>,
    /// How long each caller can wait for a `wait_for_job` answer, as learned.
    pub(super) wait_bounds: WaitBounds,
    /// Where the followers of tasks run: the HTTP stage, they stop with the sessions they tell.
    pub(super) tasks: Tasks,
}

impl Core {
    /// The job's snapshot if `identity` may see it (`auth::may_access`); `None` for a job that
    /// does not exist and for another caller's alike.
    pub(super) async fn visible_job(
        &self,
        id: JobId,
        identity: &Identity,
    ) -> Result<Option<JobSnapshot>, ErrorData> {
        let snapshot = self.jobs.snapshot(id).await.map_err(store_error)?;
        Ok(snapshot.filter(|s| may_access(identity, s)))
    }

    /// The result of an ended job, as the direct call would have answered (a JSON-RPC error
    /// becomes a tool error: a long-poll has no way to fail the original call).
    pub(super) fn final_result(&self, snapshot: &JobSnapshot) -> CallToolResult {
        let id = snapshot.job_id;
        let stored = snapshot
            .result
            .clone()
            .and_then(|r| serde_json::from_value::<CallToolResult>(r).ok());
        let mut result = match (snapshot.status, stored) {
            (JobStatus::Completed | JobStatus::Failed, Some(result)) => result,
            (JobStatus::Cancelled, _) => error_result(format!(
                "the job was cancelled: {}",
                snapshot
                    .error
                    .as_ref()
                    .map_or("no reason given", |e| e.message.as_str())
            )),
            _ => error_result(
                snapshot
                    .error
                    .as_ref()
                    .map_or_else(|| "the job failed".to_string(), |e| e.message.clone()),
            ),
        };
        attach_job_meta(&mut result, &self.links, id);
        result
    }
}
