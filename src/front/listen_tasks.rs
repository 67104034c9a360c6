//! Task status pushed over `subscriptions/listen` at 2026-07-28 (Tasks extension, SEP-2663): a
//! client lists task IDs in the listen filter's `taskIds`; the server acknowledges those it
//! will follow, and sends `notifications/tasks` (the whole task, as `tasks/get` would answer)
//! when a followed task's status changes.
//!
//! rmcp 3.11 drops `taskIds` and refuses `notifications/tasks`, so [`follow_tasks`] works on
//! the wire in front of rmcp: it keeps the first `limits.max_listen_task_ids` IDs the caller
//! may see (others are not acknowledged, and nothing says whether they exist), hands them to
//! the handler ([`ListenTasks`]) and adds them to rmcp's acknowledgment. `Front::listen` then
//! follows each task for as long as the listen request lasts, through the request's own peer.
//! Nothing is kept beyond the request. Details: docs/design/tasks.md.

use std::{collections::HashMap, sync::Arc};

use parking_lot::Mutex;

use axum::{extract::Request, http::header, middleware::Next, response::Response};
use futures::future::join_all;
use rmcp::{
    RoleServer,
    model::{
        NotificationMetaObject, RequestId, ServerNotification, TaskStatus, TaskStatusNotification,
        TaskStatusNotificationParams,
    },
    service::{Peer, RequestContext},
};
use serde_json::Value;

use super::{core::Core, listeners::Place, tasks};
use crate::{
    auth::{Identity, ToolAccess},
    model::{JobId, McpMessage},
    rmcp_ext::sse_events::{Rewrites, rewrite_events, rewrite_message},
};

/// The method this module looks at.
pub(super) const LISTEN: &str = "subscriptions/listen";
/// The notification whose `notifications` it completes.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// An SSE event larger than this before the acknowledgment is passed on as it is.
const MAX_EVENT: usize = 1024 * 1024;

/// The task IDs a `subscriptions/listen` request follows, as acknowledged, each with its place
/// (taken by its follower, which holds it while it follows; those never taken go when the
/// request does).
#[derive(Clone)]
pub(super) struct ListenTasks(Arc<Vec<JobId>>, Places);

/// The places of a listen request's acknowledged tasks, by task.
pub(super) type Places = Arc<Mutex<HashMap<JobId, Place>>>;

/// A `subscriptions/listen` request on its way to rmcp (see the module docs; `tasks_2025::adapt`
/// hands it here).
pub(super) async fn follow_tasks(core: Arc<Core>, request: Request, next: Next) -> Response {
    let requested = request
        .extensions()
        .get::<McpMessage>()
        .and_then(requested_task_ids);
    let Some(requested) = requested else {
        return next.run(request).await;
    };
    let (mut parts, body) = request.into_parts();
    let identity = parts
        .extensions
        .get::<Arc<Identity>>()
        .cloned()
        .unwrap_or_else(|| Arc::new(Identity::anonymous(ToolAccess::Only(Vec::new()))));
    let (acknowledged, places) = acknowledge_tasks(&core, requested, &identity).await;
    parts.extensions.insert(ListenTasks(
        Arc::new(acknowledged.clone()),
        Arc::new(Mutex::new(places)),
    ));
    let response = next.run(Request::from_parts(parts, body)).await;
    with_acknowledged(response, acknowledged)
}

/// The `taskIds` of a `subscriptions/listen` request, if it is one and lists any (strings
/// only; anything else in the list is ignored).
fn requested_task_ids(message: &McpMessage) -> Option<Vec<String>> {
    if message.method() != Some(LISTEN) {
        return None;
    }
    let ids = message
        .params()?
        .pointer("/notifications/taskIds")?
        .as_array()?;
    Some(
        ids.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    )
}

/// The response with `taskIds` added to the acknowledgment (the first event of a listen
/// stream); everything after it passes as it is.
fn with_acknowledged(response: Response, acknowledged: Vec<JobId>) -> Response {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !is_sse {
        // An error answer: nothing was acknowledged.
        return response;
    }
    let ids: Vec<Value> = acknowledged
        .iter()
        .map(|id| Value::String(id.to_string()))
        .collect();
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = rewrite_events(body, MAX_EVENT, Rewrites::First, move |event| {
        acknowledgment_with(event, &ids)
    });
    Response::from_parts(parts, body)
}

/// One SSE event rewritten with `taskIds`, if it is the acknowledgment.
fn acknowledgment_with(event: &[u8], ids: &[Value]) -> Option<Vec<u8>> {
    memchr::memmem::find(event, ACKNOWLEDGED.as_bytes())?;
    rewrite_message(event, |data| {
        let mut message: Value = serde_json::from_str(data).ok()?;
        if message.get("method").and_then(Value::as_str) != Some(ACKNOWLEDGED) {
            return None;
        }
        let notifications = message
            .pointer_mut("/params/notifications")?
            .as_object_mut()?;
        notifications.insert("taskIds".into(), Value::Array(ids.to_vec()));
        serde_json::to_vec(&message).ok()
    })
}

/// The task IDs this listen request follows (none when it listed none), and their places.
pub(super) fn listed(context: &RequestContext<RoleServer>) -> (Arc<Vec<JobId>>, Places) {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<ListenTasks>())
        .map(|tasks| (tasks.0.clone(), tasks.1.clone()))
        .unwrap_or_default()
}

/// Of `requested`, the first `limits.max_listen_task_ids` (without repeats) that
/// `identity` may see, as far as places are free (`listeners::FollowedTasks`): each with its place.
async fn acknowledge_tasks(
    core: &Core,
    mut requested: Vec<String>,
    identity: &Identity,
) -> (Vec<JobId>, HashMap<JobId, Place>) {
    let mut seen = std::collections::HashSet::new();
    requested.retain(|id| seen.insert(id.clone()));
    let max = core.max_listen_task_ids;
    if requested.len() > max {
        core.metrics
            .limit_hits
            .with_label_values(&["max_listen_task_ids"])
            .inc();
        requested.truncate(max);
    }
    let mut acknowledged = Vec::new();
    let mut places = HashMap::new();
    for id in &requested {
        let Ok(snapshot) = tasks::task_job(core, id, identity).await else {
            continue;
        };
        // Each followed task holds a subscription to its job's channel, like an SSE
        // reader: bounded for the replica and per principal, as readers are.
        let place = match core.followed_tasks.try_take(&identity.principal) {
            Ok(place) => place,
            Err(key) => {
                core.metrics.limit_hits.with_label_values(&[key]).inc();
                tracing::info!(
                    "subscriptions/listen: limits.{key} tasks are followed already; the rest \
                     of this request's tasks are not acknowledged (their client polls)"
                );
                break;
            }
        };
        acknowledged.push(snapshot.job_id);
        places.insert(snapshot.job_id, place);
    }
    (acknowledged, places)
}

/// Push every followed task's state now and at each status change, until each has ended
/// (the caller stops it sooner by ending the listen request).
pub(super) async fn follow(
    core: &Core,
    context: &RequestContext<RoleServer>,
    (tasks, places): &(Arc<Vec<JobId>>, Places),
) {
    join_all(tasks.iter().map(|id| {
        // Held while the task is followed: an ended task gives its place back.
        let place = places.lock().remove(id);
        follow_one(core, &context.peer, &context.id, *id, place)
    }))
    .await;
}

async fn follow_one(
    core: &Core,
    peer: &Peer<RoleServer>,
    subscription: &RequestId,
    id: JobId,
    _place: Option<Place>,
) {
    let Ok(Some(mut changes)) = core.jobs.status_changes(id).await else {
        return;
    };
    let mut sent: Option<TaskStatus> = None;
    while let Some(snapshot) = changes.next().await {
        let task = tasks::detailed(core, &snapshot);
        let status = task.task.status;
        if sent != Some(status) {
            let mut notification =
                TaskStatusNotification::new(TaskStatusNotificationParams::new(task));
            let mut meta = NotificationMetaObject::new();
            meta.set_subscription_id(subscription.clone());
            notification.extensions.insert(meta);
            let pushed = peer
                .send_notification(ServerNotification::TaskStatusNotification(notification))
                .await;
            if pushed.is_err() {
                return;
            }
            sent = Some(status);
        }
    }
}
