//! A transport wrapper that routes an upstream's progress and log notifications to the call
//! they belong to, in wire order, before rmcp sees them.
//!
//! Why a transport wrapper and not `ClientHandler::on_progress`: rmcp hands each notification
//! to the handler in a task of its own, so two notifications can be handled out of order, and
//! the response can reach the caller before the progress that preceded it. And rmcp picks the
//! progress token itself when it sends the request, so a tool that reports progress at once
//! can beat the caller to learning the token. Here both problems vanish: the request carries a
//! private marker (in its in-memory extensions, never on the wire) naming its route; `send`
//! binds the token to the route before the request is written; `receive` delivers each
//! notification synchronously, in the order read, before the response is passed on. Progress
//! notifications stop here (rmcp would only discard them, at the cost of a task each).

// MCP logging is deprecated (SEP-2577) but servers still send it; the bridge relays it.
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use dashmap::DashMap;
use futures::{FutureExt, future::BoxFuture};
// Sampling and roots are deprecated by SEP-2577 but upstreams still send them.
#[allow(deprecated)]
use rmcp::{
    ErrorData, RoleClient,
    model::{
        ClientNotification, ClientRequest, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequestParams, ElicitResult, ElicitationAction, GetExtensions, GetMeta,
        JsonRpcMessage, ListRootsResult, ProgressNotificationParam, ProgressToken, RequestId,
        ServerNotification,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};

use super::{
    event_ids::{EVENT_ID_META, EVENT_REQUEST_META},
    request_spans::RequestSpans,
};
use crate::{config::LogAttribution, metrics::Metrics, model::Principal};

/// Receives what an upstream reports about one call while it runs. Called on the connection's
/// read path: implementations must be quick and must not block.
pub trait CallSink: Send + Sync + 'static {
    fn progress(&self, progress: &ProgressNotificationParam);
    #[allow(deprecated)]
    fn log(&self, message: &LoggingMessageNotificationParam);
    /// The upstream asks for input during the call (`elicitation/create`): the answer, when
    /// someone gives one. Not on the read path: rmcp runs each server request in a task of
    /// its own, so this may wait. The default declines.
    fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        let _ = request;
        std::future::ready(ElicitResult::new(ElicitationAction::Decline)).boxed()
    }
    /// The upstream asks for a sample of the caller's model (`sampling/createMessage`). Like
    /// `input`, may wait. The default refuses ([`no_sampling`]).
    #[allow(deprecated)]
    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let _ = request;
        std::future::ready(Err(no_sampling())).boxed()
    }
    /// The upstream asks for the caller's roots (`roots/list`). The default: none.
    #[allow(deprecated)]
    fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        std::future::ready(ListRootsResult::default()).boxed()
    }
    /// Whose call this is: a question that names no call goes to the only call in flight
    /// only when no call of another principal (or of nobody known) may still be asking.
    fn principal(&self) -> Option<Principal> {
        None
    }
    /// The call became an upstream task another replica can re-attach to (`durable`). The
    /// default keeps nothing.
    fn reattach(&self, record: crate::model::Reattach) {
        let _ = record;
    }
    /// The next report handed to this sink (`progress` or `log`) came in event `event_id` of
    /// the call's resumable response stream: the job's resume cursor moves there with it. The
    /// default keeps nothing.
    fn stream_cursor(&self, event_id: &str) {
        let _ = event_id;
    }
}

/// The answer to a `sampling/createMessage` nobody can take: there is no model behind the
/// bridge, only a caller that may have one.
pub fn no_sampling() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        "sampling is not available: this call's MCP caller is not waiting on it, or did not \
         declare the sampling capability, or did not answer in time (the bridge relays \
         sampling/createMessage only to a waiting caller that declared it: on its session, or \
         in an input_required round)",
        None,
    )
}

/// The 2025-11-25 task status notification (rmcp 3.11 knows only 2026-07-28's
/// `notifications/tasks`, so it arrives as a custom notification).
const TASK_STATUS_METHOD: &str = "notifications/tasks/status";
/// The `limit` label of a status dropped from a full queue (`bridge_limit_hits_total`).
const STATUS_QUEUE_LIMIT: &str = "upstream_tasks.max_queued_statuses";

/// Marks an outgoing `tools/call` with the route its notifications go to.
#[derive(Debug, Clone, Copy)]
pub(super) struct RouteMarker(pub u64);

/// The calls in flight on one upstream connection, by route, by progress token and by
/// request id.
pub(super) struct CallRoutes {
    upstream: String,
    next: AtomicU64,
    routes: DashMap<u64, Route>,
    by_token: DashMap<ProgressToken, u64>,
    by_request: DashMap<RequestId, u64>,
    /// Upstream tasks the bridge follows (`task_call.rs`), by task ID: where their
    /// `notifications/tasks/status` go.
    tasks: DashMap<String, tokio::sync::mpsc::Sender<serde_json::Value>>,
    /// The latest statuses of tasks nobody follows yet: the upstream may announce a task's
    /// first stage before its answer to the `tools/call` names the task.
    unclaimed: parking_lot::Mutex<std::collections::VecDeque<serde_json::Value>>,
    /// The bound of `unclaimed` and of each task's queue (`upstream_tasks.max_queued_statuses`).
    max_statuses: usize,
    /// What a queued status keeps of its `statusMessage`
    /// (`upstream_tasks.max_status_message_bytes`): see [`kept_status`].
    max_message: usize,
    logs: LogAttribution,
    /// Calls that ended here before their upstream answered (cancelled, abandoned): their
    /// upstream may still be asking for them, for [`UNANSWERED_FOR`] after they ended.
    unanswered: parking_lot::Mutex<Unanswered>,
    /// The spans of the requests in flight, when traces are on.
    pub(super) spans: RequestSpans,
    metrics: Arc<Metrics>,
}

/// How long a call that ended unanswered may still be asking (its upstream notices a cancel
/// late, or its question was on the wire): a question naming no call is not guessed to be
/// another principal's meanwhile.
const UNANSWERED_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// Calls ended unanswered remembered per connection; past it, no guess is made at all until
/// the forgotten ones' time is over.
const MAX_UNANSWERED: usize = 256;

/// The principals of calls that ended unanswered, each with when it may stop asking.
#[derive(Default)]
struct Unanswered {
    calls: std::collections::VecDeque<(Option<Principal>, std::time::Instant)>,
    /// Until then, guess for nobody: a forgotten entry's time is not over.
    unsure_until: Option<std::time::Instant>,
}

impl Unanswered {
    fn push(&mut self, principal: Option<Principal>, now: std::time::Instant) {
        self.calls.retain(|(_, until)| *until > now);
        if self.calls.len() >= MAX_UNANSWERED
            && let Some((_, until)) = self.calls.pop_front()
        {
            self.unsure_until = Some(until);
        }
        self.calls.push_back((principal, now + UNANSWERED_FOR));
    }

    /// Whether a call of `principal` is the only one that may be asking now.
    fn only(&self, principal: Option<&Principal>, now: std::time::Instant) -> bool {
        self.unsure_until.is_none_or(|until| until <= now)
            && self.calls.iter().all(|(other, until)| {
                *until <= now || (principal.is_some() && other.as_ref() == principal)
            })
    }
}

struct Route {
    sink: Arc<dyn CallSink>,
    token: Option<ProgressToken>,
    request: Option<RequestId>,
    /// Its upstream answered the request now in flight.
    answered: bool,
    /// The answer was larger than this limit and was dropped unread (see `oversize`).
    too_large: Option<usize>,
}

impl CallRoutes {
    #[cfg(test)]
    pub(super) fn new(upstream: String, logs: LogAttribution, metrics: Arc<Metrics>) -> Arc<Self> {
        let spans = RequestSpans::new("pipe", 1024, metrics.clone());
        Self::with_status_queue(upstream, spans, logs, metrics, (16, 4096))
    }

    /// `spans`: the connection's request spans. `(max_statuses, max_message)`:
    /// `upstream_tasks.max_queued_statuses` and `upstream_tasks.max_status_message_bytes`.
    pub(super) fn with_status_queue(
        upstream: String,
        spans: RequestSpans,
        logs: LogAttribution,
        metrics: Arc<Metrics>,
        (max_statuses, max_message): (usize, usize),
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            next: AtomicU64::new(1),
            routes: DashMap::new(),
            by_token: DashMap::new(),
            by_request: DashMap::new(),
            tasks: DashMap::new(),
            unclaimed: Default::default(),
            max_statuses: max_statuses.max(1),
            max_message,
            logs,
            unanswered: Default::default(),
            spans,
            metrics,
        })
    }

    /// Register a call about to be sent; its notifications go to `sink` until `remove`.
    pub(super) fn add(&self, sink: Arc<dyn CallSink>) -> RouteMarker {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let route = Route {
            sink,
            token: None,
            request: None,
            answered: false,
            too_large: None,
        };
        self.routes.insert(key, route);
        RouteMarker(key)
    }

    pub(super) fn remove(&self, marker: RouteMarker) {
        if let Some((_, route)) = self.routes.remove(&marker.0) {
            if !route.answered {
                let now = std::time::Instant::now();
                self.unanswered.lock().push(route.sink.principal(), now);
            }
            if let Some(token) = route.token {
                self.by_token.remove(&token);
            }
            if let Some(request) = route.request {
                self.by_request.remove(&request);
            }
        }
    }

    fn bind(&self, marker: RouteMarker, request: RequestId, token: Option<ProgressToken>) {
        // A call retried after an `input_required` round is a new request on the same route:
        // the previous request's entries go.
        if let Some(mut route) = self.routes.get_mut(&marker.0) {
            route.answered = false;
            self.by_request.insert(request.clone(), marker.0);
            if let Some(old) = route.request.replace(request.clone())
                && old != request
            {
                self.by_request.remove(&old);
            }
            if let Some(token) = token {
                if let Some(old) = route.token.replace(token.clone())
                    && old != token
                {
                    self.by_token.remove(&old);
                }
                self.by_token.insert(token, marker.0);
            }
        }
    }

    /// The upstream answered `request`: if it is a call's, that call asks nothing more.
    fn answered(&self, request: &RequestId) {
        let key = self.by_request.get(request).map(|key| *key.value());
        if let Some(key) = key
            && let Some(mut route) = self.routes.get_mut(&key)
        {
            route.answered = true;
        }
    }

    /// The answer to `request` was over `limit` and is being replaced by an error: if it is a
    /// call's, the call learns why (see [`Self::too_large`]).
    pub(super) fn answer_too_large(&self, request: &RequestId, limit: usize) {
        let key = self.by_request.get(request).map(|key| *key.value());
        if let Some(key) = key
            && let Some(mut route) = self.routes.get_mut(&key)
        {
            route.too_large = Some(limit);
        }
    }

    /// Whether the call's answer was dropped as too large, and the limit it passed.
    pub(super) fn too_large(&self, marker: RouteMarker) -> Option<usize> {
        self.routes.get(&marker.0).and_then(|route| route.too_large)
    }

    /// Follow the status notifications of upstream task `id` (until [`Self::unwatch_task`]).
    /// Bounded: a status that finds the queue full is dropped; the next poll sees it anyway.
    pub(super) fn watch_task(&self, id: &str) -> tokio::sync::mpsc::Receiver<serde_json::Value> {
        let (tx, rx) = tokio::sync::mpsc::channel(self.max_statuses);
        let mut unclaimed = self.unclaimed.lock();
        unclaimed.retain(|status| {
            if status["taskId"] != id {
                return true;
            }
            let _ = tx.try_send(status.clone());
            false
        });
        self.tasks.insert(id.to_string(), tx);
        rx
    }

    pub(super) fn unwatch_task(&self, id: &str) {
        self.tasks.remove(id);
    }

    /// A `notifications/tasks/status` (2025-11-25): to the call that follows the task, if any.
    fn task_status(&self, params: Option<&serde_json::Value>) {
        let Some(params) = params else { return };
        let Some(params) = kept_status(params, self.max_message) else {
            return;
        };
        let params = &params;
        let id = params["taskId"].as_str().unwrap_or_default();
        if let Some(tx) = self.tasks.get(id) {
            self.queue_status(&tx, params);
            return;
        }
        let mut unclaimed = self.unclaimed.lock();
        if self.tasks.contains_key(id) {
            // Claimed meanwhile (`watch_task` holds this lock while it registers).
            drop(unclaimed);
            if let Some(tx) = self.tasks.get(id) {
                self.queue_status(&tx, params);
            }
            return;
        }
        if unclaimed.len() >= self.max_statuses {
            unclaimed.pop_front();
            self.status_dropped();
        }
        unclaimed.push_back(params.clone());
    }

    /// Hand a status to the task's follower; a full queue drops it (the next poll sees the
    /// task's status anyway).
    fn queue_status(
        &self,
        tx: &tokio::sync::mpsc::Sender<serde_json::Value>,
        params: &serde_json::Value,
    ) {
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(_)) = tx.try_send(params.clone()) {
            self.status_dropped();
        }
    }

    #[cfg(test)]
    pub(super) fn unclaimed_bytes(&self) -> usize {
        self.unclaimed
            .lock()
            .iter()
            .map(|s| serde_json::to_vec(s).map_or(0, |v| v.len()))
            .sum()
    }

    fn status_dropped(&self) {
        self.metrics
            .limit_hits
            .with_label_values(&[STATUS_QUEUE_LIMIT])
            .inc();
    }

    fn progress(&self, params: &ProgressNotificationParam) {
        let sink = self
            .by_token
            .get(&params.progress_token)
            .and_then(|key| self.routes.get(key.value()).map(|r| r.sink.clone()));
        match sink {
            Some(sink) => sink.progress(params),
            None => {
                self.metrics
                    .progress_dropped
                    .with_label_values(&["unknown_token"])
                    .inc();
                tracing::debug!(upstream = %self.upstream, token = ?params.progress_token,
                    "progress for a token with no call in flight: dropped");
            }
        }
    }

    /// MCP log messages carry no request ID or token, so none provably belongs to a call: by
    /// default they go on no job (a line logged after call A answered, while user B's call is
    /// the only one in flight, is A's output, not B's). With `logs = "attribute_when_single"`
    /// a line goes to the only call in flight on this connection; with more, to none.
    #[allow(deprecated)]
    fn log(&self, message: &LoggingMessageNotificationParam) {
        if self.logs == LogAttribution::None {
            self.metrics
                .log_dropped
                .with_label_values(&["unattributed"])
                .inc();
            return;
        }
        let only = if self.routes.len() == 1 {
            self.routes
                .iter()
                .next()
                .map(|r| (r.sink.clone(), r.request.clone()))
        } else {
            None
        };
        match only {
            Some((sink, request)) => {
                let (noted, line) = without_event_id(message);
                // The id moves the job's cursor only when the line came on the call's own
                // response stream (the next line the sink takes in is this one).
                if let (Some((id, from)), Some(request)) = (noted, request)
                    && serde_json::to_value(&request).ok() == Some(from)
                {
                    sink.stream_cursor(&id);
                }
                sink.log(&line);
            }
            None => {
                let reason = if self.routes.is_empty() {
                    "no_call"
                } else {
                    "ambiguous"
                };
                self.metrics.log_dropped.with_label_values(&[reason]).inc();
            }
        }
    }

    /// An `elicitation/create` names no call: its `_meta.progressToken`, if any, is the
    /// upstream's own token for progress of the question, and the request it belongs to is
    /// known only to the upstream's transport. So it goes to the only call in flight here,
    /// and only when no call of another principal may still be asking ([`Unanswered`]: a
    /// call cancelled here whose upstream has not noticed); otherwise it is declined
    /// (guessing would show one caller's question to another).
    pub(super) fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        match self.asker("input") {
            Some(sink) => sink.input(request),
            None => std::future::ready(ElicitResult::new(ElicitationAction::Decline)).boxed(),
        }
    }

    /// A `sampling/createMessage`, routed as `input` is (refused with no single call).
    #[allow(deprecated)]
    pub(super) fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        match self.asker("sampling") {
            Some(sink) => sink.sample(request),
            None => std::future::ready(Err(no_sampling())).boxed(),
        }
    }

    /// A `roots/list`, routed as `input` is (no roots with no single call).
    #[allow(deprecated)]
    pub(super) fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        match self.asker("roots") {
            Some(sink) => sink.roots(),
            None => std::future::ready(ListRootsResult::default()).boxed(),
        }
    }

    /// The sink of the call a request (`what`) asks for: the only call in flight here when no
    /// other principal's call may be asking; otherwise the request is counted
    /// (`limit="ambiguous_input"`) and answered without a call.
    fn asker(&self, what: &str) -> Option<Arc<dyn CallSink>> {
        let only = if self.routes.len() == 1 {
            self.routes.iter().next().map(|r| r.sink.clone())
        } else {
            None
        };
        let only = only.filter(|sink| {
            let principal = sink.principal();
            let now = std::time::Instant::now();
            let alone = self.unanswered.lock().only(principal.as_ref(), now);
            if !alone {
                self.ambiguous(what, "another caller's cancelled call may be asking");
            }
            alone
        });
        // A session-level `roots/list` (a server may ask at connection) belongs to no call and
        // is no ambiguity.
        if only.is_none() && self.routes.len() != 1 && !(what == "roots" && self.routes.is_empty())
        {
            self.ambiguous(what, "no single call in flight");
        }
        only
    }

    /// A request of the upstream's that no call can be shown: counted and logged.
    fn ambiguous(&self, what: &str, why: &str) {
        self.metrics
            .limit_hits
            .with_label_values(&["ambiguous_input"])
            .inc();
        tracing::info!(upstream = %self.upstream, calls = self.routes.len(), request = what,
            "an upstream asked its client something that no call can be shown ({why}): \
             answered without a caller");
    }

    pub(super) fn in_flight(&self) -> usize {
        self.routes.len()
    }
}

/// The transport of one upstream connection, with call routing on top.
pub(super) struct Tap<T> {
    inner: T,
    routes: Arc<CallRoutes>,
}

impl<T> Tap<T> {
    pub(super) fn new(inner: T, routes: Arc<CallRoutes>) -> Self {
        Self { inner, routes }
    }
}

impl<T> Transport<RoleClient> for Tap<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(request) => {
                if let ClientRequest::CallToolRequest(call) = &request.request
                    && let Some(marker) = call.extensions().get::<RouteMarker>()
                {
                    let token = request.request.get_meta().get_progress_token();
                    self.routes.bind(*marker, request.id.clone(), token);
                }
                // A call's request has the span of the call (see `request_spans`).
                if request.request.extensions().get::<RouteMarker>().is_none() {
                    self.routes.spans.sent(&request.id, &request.request);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.routes.spans.cancelled(id);
                }
            }
            _ => {}
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            match &message {
                JsonRpcMessage::Response(r) => {
                    self.routes.answered(&r.id);
                    self.routes.spans.answered(&r.id, None);
                }
                JsonRpcMessage::Error(e) => e.id.iter().for_each(|id| {
                    self.routes.answered(id);
                    let error = (e.error.code.0, e.error.message.as_ref());
                    self.routes.spans.answered(id, Some(error));
                }),
                _ => {}
            }
            if let JsonRpcMessage::Notification(n) = &message {
                #[allow(deprecated)]
                match &n.notification {
                    ServerNotification::ProgressNotification(p) => {
                        self.routes.progress(&with_event_id(p));
                        // Delivered: rmcp has nothing left to do with it (the bridge's client
                        // handler ignores progress and no request sets a progress timeout),
                        // and handing it on would cost a spawned task per notification.
                        continue;
                    }
                    ServerNotification::LoggingMessageNotification(m) => {
                        self.routes.log(&log_with_event_id(m))
                    }
                    ServerNotification::CustomNotification(c) if c.method == TASK_STATUS_METHOD => {
                        self.routes.task_status(c.params.as_ref());
                        continue;
                    }
                    _ => {}
                }
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.routes.spans.closed();
        self.inner.close()
    }
}

/// The longest task ID a status may name to be routed (an ID the upstream made up; the
/// SDKs' are UUIDs). A status naming a longer one is dropped: its task is polled anyway.
const MAX_TASK_ID: usize = 1024;
/// The longest `status` kept (the known ones are far shorter; `task_call` cuts it again).
const MAX_STATUS: usize = 256;

/// What the bridge reads of an upstream's task status (`task_call::TaskState::update`), and
/// all a queue keeps of it: `taskId` (at most [`MAX_TASK_ID`] bytes, else `None`: dropped),
/// `status`, `pollInterval` / `pollIntervalMs`, and `statusMessage` cut to `max_message` bytes
/// (cut again, and counted, where it is read). A status may be as large as any upstream
/// message (`limits.max_result_bytes`), and up to `upstream_tasks.max_queued_statuses` of
/// them wait per connection and per task: kept whole, a flood of 16 MiB statuses would hold
/// 256 MiB in each queue.
fn kept_status(params: &serde_json::Value, max_message: usize) -> Option<serde_json::Value> {
    let id = params["taskId"]
        .as_str()
        .filter(|id| id.len() <= MAX_TASK_ID)?;
    let mut kept = serde_json::Map::new();
    kept.insert("taskId".into(), id.into());
    for (field, max) in [("status", MAX_STATUS), ("statusMessage", max_message)] {
        if let Some(text) = params[field].as_str() {
            let text = if text.len() <= max {
                text.to_string()
            } else {
                cut(text, max)
            };
            kept.insert(field.into(), text.into());
        }
    }
    for field in ["pollInterval", "pollIntervalMs"] {
        if let Some(value) = params.get(field).filter(|v| v.is_number()) {
            kept.insert(field.into(), value.clone());
        }
    }
    Some(serde_json::Value::Object(kept))
}

/// `text` cut to at most `max` bytes at a character boundary, ended with `…`.
pub(super) fn cut(text: &str, max: usize) -> String {
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `progress` as the tap hands it on: rmcp keeps a notification's `_meta` beside its params
/// (in its extensions), so the event id the HTTP client noted is put back in the params'
/// `_meta`, where the call's sink reads it. Copied only when there is one.
fn with_event_id(
    progress: &rmcp::model::ProgressNotification,
) -> std::borrow::Cow<'_, ProgressNotificationParam> {
    use rmcp::model::NotificationMetaObject;
    let id = progress
        .extensions
        .get::<NotificationMetaObject>()
        .and_then(|meta| meta.get(EVENT_ID_META).cloned());
    match id {
        Some(id) if progress.params.meta.is_none() => {
            let mut params = progress.params.clone();
            let mut meta = NotificationMetaObject::new();
            meta.insert(EVENT_ID_META.into(), id);
            params.meta = Some(meta);
            std::borrow::Cow::Owned(params)
        }
        _ => std::borrow::Cow::Borrowed(&progress.params),
    }
}

/// A log line as the tap hands it on: the event id and request the HTTP client noted (kept by
/// rmcp in the notification's extensions) put in the params' `_meta`, as for progress.
#[allow(deprecated)]
fn log_with_event_id(
    line: &rmcp::model::LoggingMessageNotification,
) -> std::borrow::Cow<'_, LoggingMessageNotificationParam> {
    use rmcp::model::NotificationMetaObject;
    let Some(meta) = line.extensions.get::<NotificationMetaObject>() else {
        return std::borrow::Cow::Borrowed(&line.params);
    };
    let mut noted = NotificationMetaObject::new();
    for key in [EVENT_ID_META, EVENT_REQUEST_META] {
        if let Some(value) = meta.get(key) {
            noted.insert(key.into(), value.clone());
        }
    }
    if noted.is_empty() || line.params.meta.is_some() {
        return std::borrow::Cow::Borrowed(&line.params);
    }
    let mut params = line.params.clone();
    params.meta = Some(noted);
    std::borrow::Cow::Owned(params)
}

/// The event id and request a log line's `_meta` carries (see `event_ids`), and the line
/// without them: they are the bridge's own, never shown to a caller.
#[allow(deprecated)]
fn without_event_id(
    line: &LoggingMessageNotificationParam,
) -> (
    Option<(String, serde_json::Value)>,
    std::borrow::Cow<'_, LoggingMessageNotificationParam>,
) {
    let Some(meta) = &line.meta else {
        return (None, std::borrow::Cow::Borrowed(line));
    };
    if !meta.contains_key(EVENT_ID_META) && !meta.contains_key(EVENT_REQUEST_META) {
        return (None, std::borrow::Cow::Borrowed(line));
    }
    let mut clean = line.clone();
    let meta = clean.meta.as_mut().expect("checked above");
    let id = meta.remove(EVENT_ID_META);
    let request = meta.remove(EVENT_REQUEST_META);
    if meta.is_empty() {
        clean.meta = None;
    }
    let noted = match (id, request) {
        (Some(serde_json::Value::String(id)), Some(request)) => Some((id, request)),
        _ => None,
    };
    (noted, std::borrow::Cow::Owned(clean))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A flood of statuses of megabytes each (tasks nobody follows yet, and a followed task
    /// that does not read them) keeps a few KiB per status: what the bridge reads of them.
    #[test]
    fn queued_statuses_keep_only_what_the_bridge_reads() {
        let metrics = Arc::new(Metrics::new());
        let routes = CallRoutes::with_status_queue(
            "t".into(),
            RequestSpans::new("pipe", 1024, metrics.clone()),
            LogAttribution::default(),
            metrics,
            (16, 4096),
        );
        let huge = "é".repeat(1_000_000);
        let status = |id: &str| {
            json!({"taskId": id, "status": "working", "statusMessage": huge,
                "pollInterval": 5, "extra": huge})
        };
        for i in 0..40 {
            routes.task_status(Some(&status(&format!("other-{i}"))));
        }
        let held = routes.unclaimed_bytes();
        assert!(held < 16 * 5000, "16 unclaimed statuses hold {held} bytes");
        let mut rx = routes.watch_task("other-39");
        let kept = rx.try_recv().expect("the unclaimed status is handed over");
        assert_eq!(kept["status"], "working");
        assert_eq!(kept["pollInterval"], 5);
        assert!(kept.get("extra").is_none());
        let message = kept["statusMessage"].as_str().unwrap();
        assert!(message.len() <= 4096 + '…'.len_utf8(), "{}", message.len());
        assert!(message.ends_with('…'));
        // A task ID past the bound is not routed, nor kept.
        let before = routes.unclaimed_bytes();
        routes.task_status(Some(
            &json!({"taskId": "x".repeat(2000), "status": "working"}),
        ));
        assert_eq!(routes.unclaimed_bytes(), before);
    }

    /// A call of alice's that ended unanswered keeps a guess from going to bob's call (not to
    /// another of alice's, nor to a call of nobody known) until its time is over; past the
    /// bound, no guess is made until the forgotten call's time is over.
    #[test]
    fn a_call_ended_unanswered_keeps_guesses_within_its_principal() {
        let (alice, bob) = (Principal::token("alice"), Principal::token("bob"));
        let now = std::time::Instant::now();
        let mut unanswered = Unanswered::default();
        assert!(unanswered.only(Some(&bob), now));
        assert!(unanswered.only(None, now));
        unanswered.push(Some(alice.clone()), now);
        assert!(!unanswered.only(Some(&bob), now));
        assert!(!unanswered.only(None, now));
        assert!(unanswered.only(Some(&alice), now));
        assert!(unanswered.only(Some(&bob), now + UNANSWERED_FOR));
        for _ in 0..MAX_UNANSWERED {
            unanswered.push(Some(bob.clone()), now);
        }
        assert!(unanswered.calls.len() <= MAX_UNANSWERED);
        assert!(
            !unanswered.only(Some(&bob), now),
            "alice's was forgotten, not over"
        );
        assert!(unanswered.only(Some(&bob), now + UNANSWERED_FOR));
    }
}
