//! `notifications/tasks/status` for 2025-11-25 tasks: the session that created a task is told
//! when its status changes, so a client need not poll `tasks/get` (the notification is
//! optional in that revision; clients that do not listen ignore it).
//!
//! One follower per task (at most `jobs.max_jobs`) waits on the job's changes of status
//! (`Jobs::next_change`) and ends with the job, with the session (a notification that cannot be sent ends it: nothing is queued),
//! or at shutdown. It compares the job's status with the last one it sent, so a burst of
//! changes becomes one notification. Past `jobs.max_task_status_notifications` changes only
//! the end is sent (`bridge_limit_hits_total{limit="max_task_status_notifications"}`).

use std::{sync::Arc, time::Duration};

use rmcp::{
    RoleServer,
    model::{CustomNotification, ServerNotification, TaskStatus},
    service::Peer,
};

use super::{core::Core, tasks, tasks_2025::task_2025};
use crate::model::JobId;

/// The notification's method (MCP 2025-11-25).
const METHOD: &str = "notifications/tasks/status";
/// How long one notification may take to be handed to the session before the follower gives
/// up on the session (a client that does not read its stream).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one wait for the next change of status lasts; the follower then waits again.
const WATCH_WINDOW: Duration = Duration::from_secs(300);

/// Tell the session behind `peer` of task `id`'s status changes from now on; `told` is
/// the status its creation answer gave.
pub(super) fn follow_task_status(
    core: &Arc<Core>,
    id: JobId,
    peer: Peer<RoleServer>,
    told: TaskStatus,
) {
    let follower = tell_status_changes(core.clone(), id, peer, told);
    core.tasks.spawn_until_stopped(follower);
}

async fn tell_status_changes(
    core: Arc<Core>,
    id: JobId,
    peer: Peer<RoleServer>,
    mut told: TaskStatus,
) {
    let cap = core.config.max_task_status_notifications;
    let mut sent = 0usize;
    let mut capped = false;
    // Looked at once (a change before the follower started), then at each change of status.
    let Ok(Some(mut snapshot)) = core.jobs.snapshot(id).await else {
        return;
    };
    loop {
        let task = tasks::detailed(&core, &snapshot).task;
        let ended = snapshot.status.is_terminal();
        if task.status != told {
            if ended || sent < cap {
                let notification = ServerNotification::CustomNotification(CustomNotification::new(
                    METHOD,
                    Some(task_2025(&task)),
                ));
                let delivered =
                    tokio::time::timeout(SEND_TIMEOUT, peer.send_notification(notification)).await;
                if !matches!(delivered, Ok(Ok(()))) {
                    tracing::debug!(job = %id, "the session that created the task is gone: no more status notifications");
                    return;
                }
                sent += 1;
                told = task.status;
            } else if !capped {
                capped = true;
                core.metrics
                    .limit_hits
                    .with_label_values(&["max_task_status_notifications"])
                    .inc();
            }
        }
        if ended {
            return;
        }
        snapshot = match core
            .jobs
            .next_change(id, snapshot.status, WATCH_WINDOW)
            .await
        {
            Ok(Some(next)) => next,
            // The job is gone (expired), or the store cannot answer: nothing more to tell.
            _ => return,
        };
    }
}
