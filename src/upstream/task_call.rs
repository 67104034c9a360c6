//! A call to a tool whose upstream runs it only as a task (`execution.taskSupport:
//! "required"`, MCP 2025-11-25): send the task-augmented `tools/call`, poll `tasks/get` at
//! the interval the upstream suggests (and take its `notifications/tasks/status` as they
//! come), and fetch `tasks/result` once `completed`. Each new `statusMessage` becomes a
//! progress step of the job; cancelling the job sends `tasks/cancel`.
//!
//! On a Streamable HTTP upstream the task outlives its connection: the call waits for the
//! supervisor's next connection (at most `upstream_tasks.resume_within_secs`) and goes on
//! polling there. A stdio child that exits takes its tasks with it (`upstream_lost`).
//! The requests are rmcp `CustomRequest`s read as JSON: rmcp 3.11 models only the 2026-07-28
//! task shapes.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio::time::Instant;

use rmcp::{
    RoleClient, ServiceError,
    model::{
        ClientRequest, CustomRequest, NumberOrString, ProgressNotificationParam, ProgressToken,
        ServerResult,
    },
    service::Peer,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{
    call_outcome::{CallOutcome, tool_result},
    session_poller::SessionPoller,
    session_seen::SessionSeen,
    shared::Shared,
    tap::{CallRoutes, CallSink, cut},
};
use crate::{
    config::{TransportKind, UpstreamTasksConfig},
    metrics::Metrics,
    model::{FailureReason, Reattach},
};

/// How long a `tasks/get`, `tasks/result` or `tasks/cancel` may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a task call needs besides the first answer.
pub(super) struct TaskCall {
    /// The upstream: each request goes to its connection of the moment.
    pub upstream: Arc<Shared>,
    pub sink: Arc<dyn CallSink>,
    /// Set once the upstream named the task: what `tasks/cancel` needs.
    pub task_id: Arc<OnceLock<String>>,
    pub metrics: Arc<Metrics>,
    /// Where the upstream's `notifications/tasks/status` are routed.
    pub routes: Arc<CallRoutes>,
    /// `[upstream_tasks]`: the poll interval's bounds, the polls allowed, a status message's
    /// size.
    pub bounds: UpstreamTasksConfig,
    /// How long to wait for a new connection when the one the task started on is gone (a
    /// Streamable HTTP upstream keeps its tasks); `None`: fail at once (stdio).
    pub resume: Option<Duration>,
    /// Where the task's requests go.
    pub line: TaskLine,
}

impl TaskCall {
    /// How the bridge follows a call of `upstream` once the upstream runs it as a task.
    pub(super) fn new(upstream: &Arc<Shared>, sink: Arc<dyn CallSink>, line: TaskLine) -> Self {
        let bounds = upstream.limits.tasks;
        // A Streamable HTTP upstream keeps its tasks when a connection ends; a stdio child's
        // die with it.
        let resume = (matches!(upstream.config.transport, TransportKind::Http)
            && bounds.resume_within_secs > 0)
            .then(|| Duration::from_secs(bounds.resume_within_secs));
        TaskCall {
            upstream: upstream.clone(),
            sink,
            task_id: Arc::default(),
            metrics: upstream.metrics.clone(),
            routes: upstream.routes.clone(),
            bounds,
            resume,
            line,
        }
    }
}

/// Where a task's requests go.
pub(super) enum TaskLine {
    /// The upstream's connection of the moment (the task was created here). With the
    /// connection's session, when the task is to be re-attachable: its record is made from it
    /// (`durable`, docs/replicas.md).
    Connection(Option<SessionSeen>),
    /// The session the task was created in by another replica (an adopted job).
    Session(Arc<SessionPoller>),
}

/// Where an adopted task's job stood: the progress steps it had, and the last status message.
pub struct TaskResume {
    pub steps: u32,
    pub message: Option<String>,
}

/// The `params` of a task-augmented `tools/call`.
pub(super) fn call_params(tool: &str, arguments: Option<rmcp::model::JsonObject>) -> Value {
    let mut params = json!({ "name": tool, "task": {} });
    if let Some(arguments) = arguments {
        params["arguments"] = Value::Object(arguments);
    }
    params
}

/// Follow the task the first answer created to its end. An upstream that answered with a plain
/// result after all gets that result taken as it is.
pub(super) async fn follow(
    upstream: String,
    created: ServerResult,
    call: TaskCall,
    closed: watch::Receiver<Option<String>>,
) -> CallOutcome {
    let task = created_task(&created);
    let Some(id) = task["taskId"].as_str().map(str::to_string) else {
        return tool_result(created, &upstream);
    };
    let _ = call.task_id.set(id.clone());
    // Re-attachable where the session is known (a session-less upstream's task is not yet).
    let mut keep = None;
    if let TaskLine::Connection(Some(session)) = &call.line
        && let Some(seen) = session.get()
    {
        call.sink.reattach(Reattach {
            upstream: upstream.clone(),
            session_id: Some(seen.session_id.to_string()),
            protocol: seen.protocol,
            task_id: id.clone(),
            stream: None,
        });
        keep = Some(KeepUnlessFollowed {
            session: session.clone(),
            followed: false,
        });
    }
    let mut state = TaskState::new(call.bounds, call.metrics.clone());
    state.update(&task, &call.sink);
    let outcome = follow_task(upstream, id, call, state, Some(closed)).await;
    if let Some(keep) = &mut keep {
        keep.followed = true;
    }
    outcome
}

/// Dropped before its re-attachable task was followed to its end (the job was handed over or
/// adopted elsewhere, and its runner here stopped): the session is kept open for the replica
/// that follows the task now. A job cancelled here keeps it too: the upstream's idle expiry
/// ends it then.
struct KeepUnlessFollowed {
    session: SessionSeen,
    followed: bool,
}

impl Drop for KeepUnlessFollowed {
    fn drop(&mut self) {
        if !self.followed {
            self.session.keep();
        }
    }
}

/// Follow task `id`, which another replica created on the session `call.line` names, from
/// where its job stood (`resume`).
pub(super) async fn follow_adopted(
    upstream: String,
    id: String,
    call: TaskCall,
    resume: TaskResume,
) -> CallOutcome {
    let _ = call.task_id.set(id.clone());
    let mut state = TaskState::new(call.bounds, call.metrics.clone());
    state.steps = resume.steps;
    state.message = resume.message;
    follow_task(upstream, id, call, state, None).await
}

/// Poll task `id` (and take its pushed statuses) until it ends; then its outcome. `closed`:
/// the connection it was created on, watched to resume on the next one.
// Long because: one loop that takes pushed statuses, polls, connection ends and the bounds.
async fn follow_task(
    upstream: String,
    id: String,
    call: TaskCall,
    mut state: TaskState,
    closed: Option<watch::Receiver<Option<String>>>,
) -> CallOutcome {
    let mut statuses = call.routes.watch_task(&id);
    let _unwatch = Unwatch(&call.routes, &id);
    let mut polls: u64 = 0;
    let mut lost: Option<Instant> = None;
    let mut watching = closed.is_some();
    let mut closed = closed.unwrap_or_else(|| watch::channel(None).1);
    let on_connection = matches!(call.line, TaskLine::Connection(_));
    // An adopter (on a session, where nothing is pushed) asks at once: the stages that pass
    // before its first poll are seen by nobody.
    let mut first = !on_connection;
    while !state.is_terminal() {
        let pause = if std::mem::take(&mut first) {
            Duration::ZERO
        } else {
            state.poll
        };
        tokio::select! {
            // A status the upstream pushes: every stage, even those shorter than a poll.
            Some(status) = statuses.recv() => {
                state.update(&status, &call.sink);
                if state.status != "input_required" {
                    continue;
                }
            }
            () = tokio::time::sleep(pause) => {}
            gone = closed.wait_for(Option::is_some), if watching => {
                let why = gone.ok().and_then(|r| r.clone()).unwrap_or_default();
                if let Err(lost) = connection_ended(&upstream, &call, &id, &why) {
                    return lost;
                }
                watching = false;
            }
        }
        if polls >= call.bounds.max_polls {
            return out_of_polls(&upstream, &call, &id, polls, &state).await;
        }
        polls += 1;
        match poll(&upstream, &call, &id, &mut lost).await {
            Ok(Some(answer)) => state.update(&answer, &call.sink),
            // Not connected (yet): wait a poll interval, then try again.
            Ok(None) => continue,
            Err(outcome) => return outcome,
        }
        if on_connection
            && !watching
            && let Some(live) = call.upstream.live()
        {
            closed = live.closed;
            watching = true;
        }
        if state.status == "input_required" {
            // The 2025-11-25 way: the upstream's questions come while the client waits on
            // `tasks/result`, which answers once the task has ended (on an adopted task's
            // session too: `SessionPoller` answers them through the call's sink).
            return result(&upstream, &call, &id, None, &mut lost).await;
        }
    }
    ended(&upstream, &call, &id, &state, &mut lost).await
}

/// One `tasks/get`: the task as it is now; `None` while no connection is up.
async fn poll(
    upstream: &str,
    call: &TaskCall,
    id: &str,
    lost: &mut Option<Instant>,
) -> Result<Option<Value>, CallOutcome> {
    resumed(upstream, call, "tasks/get", id, Some(REQUEST_TIMEOUT), lost).await
}

/// The task object of the first answer (a `CreateTaskResult`, `{task: {…}}`), or the answer
/// itself when it has none.
fn created_task(created: &ServerResult) -> Value {
    let mut answer = serde_json::to_value(created).unwrap_or_default();
    if answer["task"].is_object() {
        answer["task"].take()
    } else {
        answer
    }
}

/// The connection the task ran on ended (`why`): a stdio upstream took its tasks with it (the
/// call fails); a Streamable HTTP one keeps them, to be polled on its next connection.
fn connection_ended(
    upstream: &str,
    call: &TaskCall,
    id: &str,
    why: &str,
) -> Result<(), CallOutcome> {
    if call.resume.is_none() {
        return Err(CallOutcome::Failed {
            reason: FailureReason::UpstreamLost,
            message: format!("upstream {upstream} went away while its task {id} ran: {why}"),
        });
    }
    tracing::info!(upstream = %upstream, task = %id, reason = %why,
        "connection ended while an upstream task ran; resuming it on the next one");
    Ok(())
}

/// `upstream_tasks.max_polls` reached: cancel the task upstream and fail the call.
async fn out_of_polls(
    upstream: &str,
    call: &TaskCall,
    id: &str,
    polls: u64,
    state: &TaskState,
) -> CallOutcome {
    call.metrics
        .limit_hits
        .with_label_values(&[MAX_POLLS])
        .inc();
    if let Some(peer) = call.upstream.live_peer() {
        cancel(&peer, &call.metrics, id).await;
    }
    CallOutcome::Failed {
        reason: FailureReason::Timeout,
        message: format!(
            "upstream {upstream}'s task {id} was still {} after {polls} polls \
             ({MAX_POLLS}); the bridge cancelled it{}",
            state.status,
            state.suffix()
        ),
    }
}

/// The call's outcome once the task reached a terminal status: its result if `completed`.
async fn ended(
    upstream: &str,
    call: &TaskCall,
    id: &str,
    state: &TaskState,
    lost: &mut Option<Instant>,
) -> CallOutcome {
    match state.status.as_str() {
        "completed" => result(upstream, call, id, Some(REQUEST_TIMEOUT), lost).await,
        "cancelled" => CallOutcome::Failed {
            reason: FailureReason::Cancelled,
            message: format!(
                "upstream {upstream} cancelled its task {id}{}",
                state.suffix()
            ),
        },
        _ => CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: format!("upstream {upstream}'s task {id} failed{}", state.suffix()),
        },
    }
}

/// The task's result (`tasks/result`), waiting at most `within` (none: until the task ends, which
/// the job's own timeout or a cancel bounds).
async fn result(
    upstream: &str,
    call: &TaskCall,
    id: &str,
    within: Option<Duration>,
    lost: &mut Option<Instant>,
) -> CallOutcome {
    let answer = loop {
        match resumed(upstream, call, "tasks/result", id, within, lost).await {
            Ok(Some(answer)) => break Ok(answer),
            Ok(None) => {
                tokio::time::sleep(Duration::from_millis(call.bounds.default_poll_ms)).await
            }
            Err(outcome) => break Err(outcome),
        }
    };
    match answer {
        Ok(result) => match serde_json::from_value(result) {
            Ok(result) => CallOutcome::Result(result),
            Err(e) => CallOutcome::Failed {
                reason: FailureReason::UpstreamError,
                message: format!(
                    "upstream {upstream}'s task {id} ended with something that is not a tool \
                     result: {e}"
                ),
            },
        },
        Err(outcome) => outcome,
    }
}

/// The `limit` label of a task whose upstream did not come back in time.
const RESUME_WITHIN: &str = "upstream_tasks.resume_within_secs";

/// One request for the task on the upstream's connection of the moment. A connection that is
/// gone (or none at all) is `Ok(None)` while the call may wait for the next one (`lost` says
/// since when it has been waiting; see [`TaskCall::resume`]); past that, or on stdio, it is the
/// call's end (`upstream_lost`).
async fn resumed(
    upstream: &str,
    call: &TaskCall,
    method: &str,
    id: &str,
    within: Option<Duration>,
    lost: &mut Option<Instant>,
) -> Result<Option<Value>, CallOutcome> {
    let answer = match (&call.line, call.upstream.live_peer()) {
        (TaskLine::Session(poller), _) => {
            let answer = poller.request(method, id, within, call.sink.as_ref()).await;
            count(&call.metrics, method, answer.is_ok());
            answer
        }
        (TaskLine::Connection(_), Some(peer)) => {
            request(&peer, &call.metrics, method, id, within).await
        }
        (TaskLine::Connection(_), None) => Err(CallOutcome::Failed {
            reason: FailureReason::UpstreamLost,
            message: format!("{method} for task {id}: upstream {upstream} is not connected"),
        }),
    };
    match answer {
        Ok(answer) => {
            if lost.take().is_some() {
                tracing::info!(upstream = %upstream, task = %id, "upstream task resumed on a new connection");
            }
            Ok(Some(answer))
        }
        Err(CallOutcome::Failed {
            reason: FailureReason::UpstreamLost,
            message,
        }) => {
            let Some(window) = call.resume else {
                return Err(CallOutcome::Failed {
                    reason: FailureReason::UpstreamLost,
                    message,
                });
            };
            let since = *lost.get_or_insert_with(Instant::now);
            if since.elapsed() >= window {
                call.metrics
                    .limit_hits
                    .with_label_values(&[RESUME_WITHIN])
                    .inc();
                return Err(CallOutcome::Failed {
                    reason: FailureReason::UpstreamLost,
                    message: format!(
                        "upstream {upstream} was not back within {}s ({RESUME_WITHIN}) while its \
                         task {id} ran: {message}",
                        window.as_secs()
                    ),
                });
            }
            Ok(None)
        }
        Err(outcome) => Err(outcome),
    }
}

/// Send `tasks/cancel` for `id`; the upstream's answer only acknowledges it.
pub(super) async fn cancel(peer: &Peer<RoleClient>, metrics: &Metrics, id: &str) {
    if let Err(e) = request(peer, metrics, "tasks/cancel", id, Some(REQUEST_TIMEOUT)).await {
        tracing::debug!(?e, "tasks/cancel did not reach the upstream");
    }
}

/// Stops routing a task's status notifications when its call ends, however it ends.
struct Unwatch<'a>(&'a CallRoutes, &'a str);

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.0.unwatch_task(self.1);
    }
}

/// The `limit` labels of `bridge_limit_hits_total` this module counts.
const MAX_POLLS: &str = "upstream_tasks.max_polls";
const MIN_POLL: &str = "upstream_tasks.min_poll_ms";
const MAX_POLL: &str = "upstream_tasks.max_poll_ms";
const STATUS_MESSAGE: &str = "upstream_tasks.max_status_message_bytes";
/// The longest status (`status` field) taken as it is: the known ones are far shorter.
const MAX_STATUS_LEN: usize = 32;

/// What the polls and status notifications have learned.
struct TaskState {
    status: String,
    message: Option<String>,
    poll: Duration,
    steps: u32,
    bounds: UpstreamTasksConfig,
    metrics: Arc<Metrics>,
}

impl TaskState {
    fn new(bounds: UpstreamTasksConfig, metrics: Arc<Metrics>) -> Self {
        Self {
            status: "working".into(),
            message: None,
            poll: Duration::from_millis(bounds.default_poll_ms),
            steps: 0,
            bounds,
            metrics,
        }
    }

    fn hit(&self, limit: &str) {
        self.metrics.limit_hits.with_label_values(&[limit]).inc();
    }

    /// Take in one task object (`tasks/get` answer or the created task); a new status message
    /// is one more progress step.
    fn update(&mut self, task: &Value, sink: &Arc<dyn CallSink>) {
        if let Some(status) = task["status"].as_str() {
            self.status = if status.len() <= MAX_STATUS_LEN {
                status.to_string()
            } else {
                // Not a status of the extension: it can only be `failed`-like; kept short.
                cut(status, MAX_STATUS_LEN)
            };
        }
        let interval = task["pollInterval"]
            .as_f64()
            .or_else(|| task["pollIntervalMs"].as_f64());
        if let Some(ms) = interval {
            let (min, max) = (self.bounds.min_poll_ms, self.bounds.max_poll_ms);
            // `as` saturates: 1e300 ms is u64::MAX, a negative or NaN one 0.
            let ms = ms as u64;
            if ms < min {
                self.hit(MIN_POLL);
            } else if ms > max {
                self.hit(MAX_POLL);
            }
            self.poll = Duration::from_millis(ms.clamp(min, max));
        }
        let max = self.bounds.max_status_message_bytes;
        let message = task["statusMessage"].as_str().map(|m| {
            if m.len() <= max {
                m.to_string()
            } else {
                self.hit(STATUS_MESSAGE);
                cut(m, max)
            }
        });
        if message.is_some() && message != self.message {
            self.steps += 1;
            self.message = message.clone();
            // The token is not looked at: the sink is this call's own.
            let token = ProgressToken(NumberOrString::Number(0));
            let mut progress = ProgressNotificationParam::new(token, f64::from(self.steps));
            progress.message = message;
            sink.progress(&progress);
        }
    }

    fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }

    fn suffix(&self) -> String {
        self.message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    }
}

/// One task request by its method, answered as JSON.
async fn request(
    peer: &Peer<RoleClient>,
    metrics: &Metrics,
    method: &str,
    id: &str,
    within: Option<Duration>,
) -> Result<Value, CallOutcome> {
    let request =
        ClientRequest::CustomRequest(CustomRequest::new(method, Some(json!({ "taskId": id }))));
    let sent = peer.send_request(request);
    let answer = match within {
        Some(within) => tokio::time::timeout(within, sent).await,
        None => Ok(sent.await),
    };
    count(metrics, method, matches!(answer, Ok(Ok(_))));
    match answer {
        Ok(Ok(result)) => Ok(serde_json::to_value(&result).unwrap_or_default()),
        Ok(Err(ServiceError::McpError(error))) => Err(CallOutcome::RpcError(error)),
        Ok(Err(error)) => Err(CallOutcome::Failed {
            reason: FailureReason::UpstreamLost,
            message: format!("{method} for task {id}: {error}"),
        }),
        Err(_) => Err(CallOutcome::Failed {
            reason: FailureReason::Timeout,
            message: format!(
                "{method} for task {id} got no answer in {}s",
                within.unwrap_or_default().as_secs()
            ),
        }),
    }
}

/// Count one task request in `bridge_upstream_task_requests_total`.
fn count(metrics: &Metrics, method: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics
        .upstream_task_requests
        .with_label_values(&[method, outcome])
        .inc();
}
