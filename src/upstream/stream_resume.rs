//! Calls whose upstream's SSE events carry ids (`durable = "auto" | "resume"`): the
//! spec's resumability. While the call runs here, each progress event's id becomes the job's
//! resume cursor (`ResumableSink`); a replica that adopts the job sends `GET` with the call's
//! `Mcp-Session-Id` and `Last-Event-ID` set to that cursor (`follow_stream`) and takes the rest
//! of the call's stream: its progress, its log lines and its answer.
//!
//! The cursor only ever names an event whose progress was handed to the job: never ahead of
//! what the job holds. A replay from a cursor behind it repeats progress the adopter's intake
//! drops as not increasing; an upstream that forgot the session (HTTP 404, or 400/405: no
//! resumption here) ends the job `owner_lost` at once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use rmcp::model::{ProgressNotificationParam, RequestId};
use serde_json::Value;
use tokio::time::Instant;

use super::{
    call_outcome::CallOutcome, session_poller::SessionPoller, session_seen::SessionSeen,
    tap::CallSink,
};
use crate::model::{FailureReason, Reattach, StreamCursor};

/// The `_meta` key the bridge's HTTP client puts an upstream event's id under, in a progress
/// notification read from a call's response stream (`http_client.rs`). Never on the wire.
pub(super) const EVENT_ID_META: &str = "io.github.mcp-progress-bridge/upstreamEventId";

/// Whether `id` may be kept as a resume cursor: at most `max` bytes of visible ASCII (the
/// SDKs' ids are counters, UUIDs or `stream_id/counter`). Anything else is not kept.
pub(super) fn acceptable_event_id(id: &str, max: usize) -> bool {
    !id.is_empty() && id.len() <= max && id.bytes().all(|b| b.is_ascii_graphic())
}

/// `progress` as the tap hands it on: rmcp keeps a notification's `_meta` beside its params
/// (in its extensions), so the event id the HTTP client noted is put back in the params'
/// `_meta`, where the call's sink reads it. Copied only when there is one.
pub(super) fn with_event_id(
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

/// The event id the HTTP client noted on `progress`, if any.
fn event_id(progress: &ProgressNotificationParam) -> Option<&str> {
    progress.meta.as_ref()?.get(EVENT_ID_META)?.as_str()
}

/// A call's sink that turns the event ids of its progress into the job's re-attach record.
pub(super) struct ResumableSink {
    pub inner: Arc<dyn CallSink>,
    pub upstream: String,
    pub seen: SessionSeen,
    /// The `tools/call`'s id, once rmcp has sent it (the resumed stream answers it; a cancel
    /// names it). A progress event that comes before it is known makes no record: the next does.
    pub request: Arc<std::sync::OnceLock<RequestId>>,
    /// Set once the record is made: a handed-over call keeps its upstream session open.
    pub recorded: Arc<AtomicBool>,
}

impl CallSink for ResumableSink {
    fn progress(&self, progress: &ProgressNotificationParam) {
        self.inner.progress(progress);
        // After the progress: the cursor never names an event the job does not have.
        let Some(id) = event_id(progress) else {
            return;
        };
        if self.recorded.load(Ordering::Acquire) {
            self.inner.stream_cursor(id);
            return;
        }
        let (Some(seen), Some(request)) = (self.seen.get(), self.request.get()) else {
            return;
        };
        let request = serde_json::to_value(request).unwrap_or_default();
        self.recorded.store(true, Ordering::Release);
        self.inner.reattach(Reattach {
            upstream: self.upstream.clone(),
            session_id: Some(seen.session_id.to_string()),
            protocol: seen.protocol,
            task_id: String::new(),
            stream: Some(StreamCursor {
                request_id: request,
                last_event_id: id.to_string(),
            }),
        });
    }

    #[allow(deprecated)]
    fn log(&self, message: &rmcp::model::LoggingMessageNotificationParam) {
        self.inner.log(message);
    }
    fn input(
        &self,
        request: rmcp::model::ElicitRequestParams,
    ) -> futures::future::BoxFuture<'static, rmcp::model::ElicitResult> {
        self.inner.input(request)
    }
    #[allow(deprecated)]
    fn sample(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
    ) -> futures::future::BoxFuture<
        'static,
        Result<rmcp::model::CreateMessageResult, rmcp::ErrorData>,
    > {
        self.inner.sample(request)
    }
    #[allow(deprecated)]
    fn roots(&self) -> futures::future::BoxFuture<'static, rmcp::model::ListRootsResult> {
        self.inner.roots()
    }
    fn principal(&self) -> Option<crate::model::Principal> {
        self.inner.principal()
    }
    fn reattach(&self, record: Reattach) {
        self.inner.reattach(record);
    }
    fn stream_cursor(&self, event_id: &str) {
        self.inner.stream_cursor(event_id);
    }
}

/// Dropped before the call was answered (its job was handed over or adopted elsewhere, and
/// its runner here stopped) with a resume record made: the session stays open for the replica
/// that resumes the stream.
pub(super) struct KeepUnlessAnswered {
    pub seen: Option<SessionSeen>,
    pub recorded: Arc<AtomicBool>,
    pub answered: bool,
}

impl Drop for KeepUnlessAnswered {
    fn drop(&mut self) {
        if !self.answered
            && self.recorded.load(Ordering::Acquire)
            && let Some(seen) = &self.seen
        {
            seen.keep();
        }
    }
}

/// The pause between two `GET`s of a stream that ended without the answer (its first
/// reader's connection may still hold it upstream, which then only replays).
const PAUSE: Duration = Duration::from_millis(200);

/// Follow the call `cursor` names, on `poller`'s session, from its `last_event_id` to its
/// answer. `window`: how long the upstream may give nothing (refused or broken `GET`s, streams
/// that end at once) before the call fails (`upstream_tasks.resume_within_secs`).
pub(super) async fn follow_stream(
    upstream: String,
    poller: Arc<SessionPoller>,
    cursor: StreamCursor,
    sink: Arc<dyn CallSink>,
    (window, max_id): (Duration, usize),
) -> CallOutcome {
    let mut last = cursor.last_event_id;
    let mut heard = Instant::now();
    loop {
        let events = match poller.resume(&last).await {
            Ok(events) => events,
            Err(Resume::Gone(status)) => {
                return CallOutcome::Failed {
                    reason: FailureReason::OwnerLost,
                    message: format!(
                        "upstream {upstream} answered HTTP {status} to the GET that resumes this \
                         job's call stream (Last-Event-ID), so the replica that adopted it \
                         cannot carry it on: run the tool again"
                    ),
                };
            }
            Err(Resume::Broken(why)) => {
                if heard.elapsed() >= window {
                    return lost(&upstream, window, &why);
                }
                tokio::time::sleep(PAUSE).await;
                continue;
            }
        };
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            heard = Instant::now();
            match take(&event, sink.as_ref(), max_id) {
                Taken::Answer(outcome) => return outcome,
                Taken::Cursor(id) => last = id,
                Taken::Nothing => {}
            }
        }
        if heard.elapsed() >= window {
            return lost(
                &upstream,
                window,
                "every GET's stream ended without the answer",
            );
        }
        tokio::time::sleep(PAUSE).await;
    }
}

fn lost(upstream: &str, window: Duration, why: &str) -> CallOutcome {
    CallOutcome::Failed {
        reason: FailureReason::UpstreamLost,
        message: format!(
            "upstream {upstream} gave nothing of this job's resumed call stream for {}s \
             (upstream_tasks.resume_within_secs): {why}",
            window.as_secs()
        ),
    }
}

/// Why a resuming `GET` gave no stream.
pub(super) enum Resume {
    /// The upstream refused it for good (404: session gone; 400, 405: no resumption).
    Gone(u16),
    /// It may work on the next try (connection refused, 5xx).
    Broken(String),
}

/// One SSE event of a resumed stream, as read.
pub(super) struct ResumedEvent {
    pub id: Option<String>,
    pub data: Option<String>,
}

enum Taken {
    Answer(CallOutcome),
    Cursor(String),
    Nothing,
}

/// Hand one event to the call's sink: progress and log lines; the answer ends the call.
fn take(event: &ResumedEvent, sink: &dyn CallSink, max_id: usize) -> Taken {
    let Some(message) = event
        .data
        .as_deref()
        .filter(|d| !d.is_empty())
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
    else {
        return Taken::Nothing;
    };
    let params = message.get("params").cloned().unwrap_or_default();
    match message.get("method").and_then(Value::as_str) {
        Some("notifications/progress") => {
            if let Ok(progress) = serde_json::from_value::<ProgressNotificationParam>(params) {
                sink.progress(&progress);
            }
        }
        #[allow(deprecated)]
        Some("notifications/message") => {
            if let Ok(line) = serde_json::from_value(params) {
                sink.log(&line);
            }
        }
        Some(_) => return Taken::Nothing,
        None => return Taken::Answer(answer(message)),
    }
    match &event.id {
        Some(id) if acceptable_event_id(id, max_id) => {
            sink.stream_cursor(id);
            Taken::Cursor(id.clone())
        }
        _ => Taken::Nothing,
    }
}

/// The call's answer: its result, or its JSON-RPC error.
fn answer(message: Value) -> CallOutcome {
    if let Some(error) = message.get("error")
        && let Ok(error) = serde_json::from_value(error.clone())
    {
        return CallOutcome::RpcError(error);
    }
    match message.get("result").cloned().map(serde_json::from_value) {
        Some(Ok(result)) => CallOutcome::Result(result),
        _ => CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: "the resumed call stream ended with an answer that is not a tool result"
                .into(),
        },
    }
}

/// The `limit` label of an event id not kept (`bridge_limit_hits_total`).
const MAX_EVENT_ID: &str = "upstream_tasks.max_event_id_bytes";

/// What the HTTP client notes of a call stream's event ids: one per connection, shared with
/// the upstream (which shows whether its streams carry ids).
#[derive(Clone)]
pub(super) struct EventIds {
    pub max: usize,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Set once an id was noted (`/upstreams` `resumable_streams`).
    pub seen: Arc<AtomicBool>,
}

impl EventIds {
    /// Note event `id` in `data`, the JSON-RPC message of an event on a call's response
    /// stream, when it is a progress notification: under [`EVENT_ID_META`] in its `_meta`,
    /// where the call's sink finds it. Only progress moves a job's cursor; parsing it again
    /// costs a small message's parse and write, and only on upstreams whose events have ids.
    pub(super) fn note(&self, id: &str, data: &mut String) {
        if !data.contains("notifications/progress") {
            return;
        }
        if !acceptable_event_id(id, self.max) {
            self.metrics
                .limit_hits
                .with_label_values(&[MAX_EVENT_ID])
                .inc();
            return;
        }
        let Ok(mut message) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if message["method"] != "notifications/progress" {
            return;
        }
        let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
            return;
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        let Some(meta) = meta.as_object_mut() else {
            return;
        };
        meta.insert(EVENT_ID_META.into(), Value::String(id.to_string()));
        if let Ok(text) = serde_json::to_string(&message) {
            *data = text;
            self.seen.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> EventIds {
        EventIds {
            max: 16,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            seen: Arc::default(),
        }
    }

    const PROGRESS: &str = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#;

    #[test]
    fn a_progress_event_carries_its_id_in_its_meta() {
        let ids = ids();
        let mut data = PROGRESS.to_string();
        ids.note("7", &mut data);
        let message: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(message["params"]["_meta"][EVENT_ID_META], "7");
        assert_eq!(message["params"]["progress"], 2);
        assert!(ids.seen.load(Ordering::Relaxed));
    }

    #[test]
    fn a_hostile_id_is_not_kept_and_is_counted() {
        let ids = ids();
        for id in [
            "x".repeat(17),
            "a b".into(),
            "a\u{7f}".into(),
            "é".into(),
            String::new(),
        ] {
            let mut data = PROGRESS.to_string();
            ids.note(&id, &mut data);
            assert_eq!(data, PROGRESS, "{id:?}");
        }
        assert!(!ids.seen.load(Ordering::Relaxed));
        let hits = ids
            .metrics
            .limit_hits
            .with_label_values(&[MAX_EVENT_ID])
            .get();
        assert_eq!(hits, 5);
    }

    #[test]
    fn other_messages_and_garbage_are_left_as_they_are() {
        let ids = ids();
        for data in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"notifications/progress"}}"#,
            r#"notifications/progress {"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":7}}"#,
        ] {
            let mut kept = data.to_string();
            ids.note("1", &mut kept);
            assert_eq!(kept, data);
        }
    }
}
