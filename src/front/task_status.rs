//! `notifications/tasks/status` for 2025-11-25 tasks: the session that created a task is told
//! when its status changes, so a client need not poll `tasks/get` (the notification is
//! optional in that revision; clients that do not listen ignore it).
//!
//! One follower per task (at most `jobs.max_jobs`) reads the job's live channel and ends with
//! the job, with the session (a notification that cannot be sent ends it: nothing is queued),
//! or at shutdown. It compares the job's status with the last one it sent, so a burst of
//! changes becomes one notification. Past `jobs.max_task_status_notifications` changes only
//! the end is sent (`bridge_limit_hits_total{limit="max_task_status_notifications"}`).

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use rmcp::{
    RoleServer,
    model::{CustomNotification, ServerNotification, Task, TaskStatus},
    service::Peer,
};

use super::{core::Core, tasks, tasks_2025::task_2025};
use crate::{
    model::{Channel, EventKind, JobId},
    store::LiveItem,
};

/// The notification's method (MCP 2025-11-25).
const METHOD: &str = "notifications/tasks/status";
/// How long one notification may take to be handed to the session before the follower gives
/// up on the session (a client that does not read its stream).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

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
    let store = core.jobs.store().clone();
    let Ok(Some(opened)) = store.open(&Channel::Job(id), None).await else {
        return;
    };
    let mut live = opened.live;
    let cap = core.config.max_task_status_notifications;
    let mut sent = 0usize;
    let mut capped = false;
    // Looked once at the start (a change before the subscription), then on each event
    // that may change the status.
    let mut look = true;
    let mut open = true;
    loop {
        if look {
            let Ok(Some(snapshot)) = store.snapshot(id).await else {
                return;
            };
            let task = tasks::detailed(&core, &snapshot).task;
            let ended = snapshot.status.is_terminal();
            if task.status != told {
                if ended || sent < cap {
                    if !notify(&peer, id, &task).await {
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
            if ended || !open {
                return;
            }
        }
        let item = live.next().await;
        open = item.is_some();
        look = may_change_status(item.as_ref());
    }
}

/// Send the task as it is now to the session that created it; `false` when it is gone.
async fn notify(peer: &Peer<RoleServer>, id: JobId, task: &Task) -> bool {
    let notification = ServerNotification::CustomNotification(CustomNotification::new(
        METHOD,
        Some(task_2025(task)),
    ));
    let delivered = tokio::time::timeout(SEND_TIMEOUT, peer.send_notification(notification)).await;
    if !matches!(delivered, Ok(Ok(()))) {
        tracing::debug!(job = %id, "the session that created the task is gone: no more status notifications");
        return false;
    }
    true
}

/// Whether this item of the job's live channel may have changed the task's status. `None`,
/// the channel ended (the job did): one last look tells its end.
fn may_change_status(item: Option<&LiveItem>) -> bool {
    match item {
        Some(LiveItem::Event(event)) => {
            matches!(
                event.kind,
                EventKind::InputRequired | EventKind::InputAnswered
            ) || event.kind.is_terminal()
        }
        Some(LiveItem::Lagged) | None => true,
    }
}
