//! `notifications/tasks/status` for 2025-11-25 tasks: the session that created a task is told
//! when its status changes (`working` → `input_required` → `working` … → `completed`,
//! `failed` or `cancelled`), so a client need not poll `tasks/get` to hear it. The revision
//! makes the notification optional; clients that do not listen for it ignore it.
//!
//! One follower per task, started when the task is created, reads the job's live channel and
//! ends with the job (a task is created running in this replica, so there are at most
//! `jobs.max_jobs` followers), when the session is gone (a notification that cannot be sent:
//! the rest are dropped, never queued), or at shutdown. It keeps no queue of its own: it
//! compares the job's current status with the last one it sent, so a burst of changes while a
//! notification is on its way becomes one notification of where the task is now. A task whose
//! status flips more than `jobs.max_task_status_notifications` times (a tool asking question
//! after question) is not told past that bound (`bridge_limit_hits_total{limit=
//! "max_task_status_notifications"}`), except of its end, which is always sent.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use rmcp::{
    RoleServer,
    model::{CustomNotification, ServerNotification, TaskStatus},
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
                    let notification = ServerNotification::CustomNotification(
                        CustomNotification::new(METHOD, Some(task_2025(&task))),
                    );
                    let delivered =
                        tokio::time::timeout(SEND_TIMEOUT, peer.send_notification(notification))
                            .await;
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
            if ended || !open {
                return;
            }
        }
        look = match live.next().await {
            Some(LiveItem::Event(event)) => {
                matches!(
                    event.kind,
                    EventKind::InputRequired | EventKind::InputAnswered
                ) || event.kind.is_terminal()
            }
            Some(LiveItem::Lagged) => true,
            // The channel ended (the job did): one last look tells its end.
            None => {
                open = false;
                true
            }
        };
    }
}
