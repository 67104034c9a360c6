//! Calls whose upstream's SSE events carry ids (`durable = "auto" | "resume"`): the
//! spec's resumability. While the call runs here, each progress event's id becomes the job's
//! resume cursor (`ResumableSink`); a replica that adopts the job sends `GET` with the call's
//! `Mcp-Session-Id` and `Last-Event-ID` set to that cursor (`follow_stream`) and takes the rest
//! of the call's stream: its progress, its log lines and its answer.
//!
//! Each later id is written with the event that carried it (`CallSink::stream_cursor` before
//! the report), so the cursor names exactly the job's last event: a resume repeats nothing. An
//! upstream that forgot the session (HTTP 404, or 400/405: no resumption here) ends the job
//! `owner_lost` at once.

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
    call_outcome::CallOutcome,
    event_ids::{acceptable_event_id, event_id},
    session_asks,
    session_poller::{Resume, ResumedEvent, SessionPoller},
    session_seen::SessionSeen,
    tap::CallSink,
};
use crate::model::{FailureReason, Reattach, StreamCursor};

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
        let id = event_id(progress);
        if let Some(id) = id
            && self.recorded.load(Ordering::Acquire)
        {
            // The next report the job takes in is this one: its id is written with it.
            self.inner.stream_cursor(id);
        }
        self.inner.progress(progress);
        // The first id makes the record, after the progress it carried.
        let Some(id) = id else {
            return;
        };
        if self.recorded.load(Ordering::Acquire) {
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
                progress_token: serde_json::to_value(&progress.progress_token).ok(),
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

/// How long a resumed stream may stay open and silent before it is asked for again from the
/// last event taken: an upstream whose resumed stream only replays what it stored (and sends
/// its later events nowhere, as server-everything's event store does) gives them on the next
/// `GET`. An upstream that sends its later events on the stream is asked again for nothing.
const QUIET: Duration = Duration::from_secs(3);

/// Follow the call `cursor` names, on `poller`'s session, from its `last_event_id` to its
/// answer. `window`: how long the upstream may give nothing (refused or broken `GET`s, streams
/// that end at once) before the call fails (`upstream_tasks.resume_within_secs`).
// Long because: one loop over the GETs, the events of each and the three ways a stream ends.
pub(super) async fn follow_stream(
    upstream: String,
    poller: Arc<SessionPoller>,
    cursor: StreamCursor,
    sink: Arc<dyn CallSink>,
    (window, max_id): (Duration, usize),
) -> CallOutcome {
    let mut call = ResumedCall::new(&cursor, max_id, poller.ask_cap().clone());
    // The upstream's requests being answered; dropped (unanswered) when the call ends.
    let mut asks = tokio::task::JoinSet::new();
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
        loop {
            let event = match tokio::time::timeout(QUIET, events.next()).await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                // Open and quiet: the upstream is there; ask again from `last`.
                Err(_) => {
                    heard = Instant::now();
                    break;
                }
            };
            heard = Instant::now();
            match call.take(&event, sink.as_ref()) {
                Taken::Answer(outcome) => return outcome,
                Taken::Cursor(id) => last = id,
                Taken::Request(id, request) => {
                    asks.spawn(answer_request(poller.clone(), sink.clone(), id, request));
                }
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

enum Taken {
    Answer(CallOutcome),
    Cursor(String),
    /// A request of the upstream (its id, the message), to answer.
    Request(Value, Value),
    Nothing,
}

/// Answer request `id` the upstream made on a resumed stream, as the call's sink decides.
async fn answer_request(
    poller: Arc<SessionPoller>,
    sink: Arc<dyn CallSink>,
    id: Value,
    request: Value,
) {
    let Some(outcome) = session_asks::answer(sink.as_ref(), &request).await else {
        return;
    };
    if let Err(error) = poller.respond(&id, outcome).await {
        tracing::warn!(%error, "could not answer the upstream's request on a resumed call stream");
    }
}

/// What a resumed stream may carry of its call: the answer to its request id, progress with
/// its token. An upstream that replays more than the one stream (server-everything replays
/// every stream of the session after the id) sends other calls' messages too: they are
/// dropped, and from the first of them on so are log lines, which name no call.
struct ResumedCall {
    request_id: Value,
    progress_token: Option<Value>,
    max_id: usize,
    asks: session_asks::AskCap,
    mixed: bool,
    /// The upstream's requests taken (a replay after a new `GET` repeats them).
    asked: std::collections::HashSet<String>,
}

impl ResumedCall {
    fn new(cursor: &StreamCursor, max_id: usize, asks: session_asks::AskCap) -> Self {
        Self {
            request_id: cursor.request_id.clone(),
            progress_token: cursor.progress_token.clone(),
            max_id,
            asks,
            mixed: false,
            asked: Default::default(),
        }
    }

    /// Hand one event to the call's sink: its progress and log lines; its answer ends it.
    fn take(&mut self, event: &ResumedEvent, sink: &dyn CallSink) -> Taken {
        let id = (event.id.as_deref()).filter(|id| acceptable_event_id(id, self.max_id));
        // The next report the job takes in is this event's: its id is written with it.
        let at = |sink: &dyn CallSink| id.inspect(|id| sink.stream_cursor(id));
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
                let token = params.get("progressToken");
                if self
                    .progress_token
                    .as_ref()
                    .is_some_and(|t| Some(t) != token)
                {
                    self.mixed = true;
                    return Taken::Nothing;
                }
                if let Ok(progress) = serde_json::from_value::<ProgressNotificationParam>(params) {
                    at(sink);
                    sink.progress(&progress);
                }
            }
            #[allow(deprecated)]
            Some("notifications/message") => {
                if self.mixed {
                    return Taken::Nothing;
                }
                if let Ok(line) = serde_json::from_value(params) {
                    at(sink);
                    sink.log(&line);
                }
            }
            // A request of the upstream's own (it names no call either: taken while the
            // stream carries this call's messages alone), once.
            Some(_) => {
                let Some(id) = message.get("id").filter(|_| !self.mixed) else {
                    return Taken::Nothing;
                };
                if self.asked.contains(&id.to_string()) || !self.asks.admits(self.asked.len()) {
                    return Taken::Nothing;
                }
                self.asked.insert(id.to_string());
                return Taken::Request(id.clone(), message);
            }
            None if message.get("id") != Some(&self.request_id) => {
                self.mixed = true;
                return Taken::Nothing;
            }
            None => return Taken::Answer(answer(message)),
        }
        match id {
            Some(id) => Taken::Cursor(id.to_string()),
            None => Taken::Nothing,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that counts what it is handed.
    #[derive(Default)]
    struct Counted {
        progress: std::sync::Mutex<Vec<f64>>,
        logs: std::sync::atomic::AtomicUsize,
    }

    impl CallSink for Counted {
        fn progress(&self, p: &ProgressNotificationParam) {
            self.progress.lock().unwrap().push(p.progress);
        }
        #[allow(deprecated)]
        fn log(&self, _: &rmcp::model::LoggingMessageNotificationParam) {
            self.logs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A cap of `max` asks, and its metrics.
    fn cap(max: usize) -> (session_asks::AskCap, Arc<crate::metrics::Metrics>) {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let cap = session_asks::AskCap {
            max,
            metrics: metrics.clone(),
        };
        (cap, metrics)
    }

    /// A hostile upstream that asks and asks on a resumed stream: past
    /// `upstream_tasks.max_asks_per_stream` its requests go unanswered, each counted; a request
    /// replayed by a new `GET` is not answered twice, nor counted.
    #[test]
    fn past_the_cap_an_upstreams_requests_go_unanswered_and_are_counted() {
        let cursor = StreamCursor {
            request_id: Value::from(7),
            last_event_id: "0".into(),
            progress_token: None,
        };
        let (cap, metrics) = cap(3);
        let mut call = ResumedCall::new(&cursor, 64, cap);
        let sink = Counted::default();
        let ping = |id: i64| serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let taken: Vec<bool> = (1..=10)
            .map(|id| matches!(call.take(&event("e", ping(id)), &sink), Taken::Request(..)))
            .collect();
        assert_eq!(taken, [[true; 3].as_slice(), &[false; 7]].concat());
        assert!(matches!(
            call.take(&event("e", ping(2)), &sink),
            Taken::Nothing
        ));
        let hits = metrics
            .limit_hits
            .with_label_values(&["upstream_tasks.max_asks_per_stream"])
            .get();
        assert_eq!(hits, 7);
    }

    fn event(id: &str, data: Value) -> ResumedEvent {
        ResumedEvent {
            id: Some(id.into()),
            data: Some(data.to_string()),
        }
    }

    /// An upstream that replays every stream of the session (server-everything's event store)
    /// hands this call other calls' progress and answers: none of them reaches the job, and
    /// no log line after the first of them (a log line names no call).
    #[test]
    fn another_calls_progress_answer_and_later_log_lines_are_dropped() {
        let cursor = StreamCursor {
            request_id: Value::from(7),
            last_event_id: "0".into(),
            progress_token: Some(Value::from(3)),
        };
        let mut call = ResumedCall::new(&cursor, 64, cap(64).0);
        let sink = Counted::default();
        let progress = |token: i64, p: f64| {
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": p}})
        };
        let log = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "a line"}});
        let answer = |id: i64, text: &str| {
            serde_json::json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": text}]}})
        };
        assert!(
            matches!(call.take(&event("1", progress(3, 1.0)), &sink), Taken::Cursor(c) if c == "1")
        );
        assert!(matches!(
            call.take(&event("2", log.clone()), &sink),
            Taken::Cursor(_)
        ));
        assert!(matches!(
            call.take(&event("3", progress(9, 5.0)), &sink),
            Taken::Nothing
        ));
        assert!(matches!(
            call.take(&event("4", answer(8, "theirs")), &sink),
            Taken::Nothing
        ));
        assert!(matches!(call.take(&event("5", log), &sink), Taken::Nothing));
        assert!(matches!(
            call.take(&event("6", progress(3, 2.0)), &sink),
            Taken::Cursor(_)
        ));
        match call.take(&event("7", answer(7, "mine")), &sink) {
            Taken::Answer(CallOutcome::Result(result)) => {
                assert_eq!(
                    serde_json::to_value(&result).unwrap()["content"][0]["text"],
                    "mine"
                );
            }
            _ => panic!("the call's own answer ends it"),
        }
        assert_eq!(*sink.progress.lock().unwrap(), vec![1.0, 2.0]);
        assert_eq!(sink.logs.load(Ordering::Relaxed), 1);
    }
}
