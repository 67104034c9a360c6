//! One running job: its [`Intake`], where the upstream's reports enter, checked, bounded and
//! queued in order, and the [`Runner`], the task that moves them into the store while it waits
//! for the work's outcome, and ends the job with exactly one terminal event.
//!
//! The intake is called synchronously from the upstream connection's read path: it takes only
//! a short lock and wakes the runner, which does the (possibly slow) store writes. Order is the
//! point of one task per job: the read path queues a report before it passes the response on,
//! and the runner drains the queue before it writes the terminal event, so a subscriber never
//! sees progress after `completed`.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};
use tracing::Instrument;

use futures::future::BoxFuture;
use parking_lot::{Mutex, MutexGuard};
use rmcp::{ErrorData, model::CallToolResult};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{CallLimits, JobsConfig},
    events::StoreError,
    metrics::Metrics,
    model::{EventBody, FailureReason, Heartbeat, JobFailure, JobId, ProgressUpdate, Reattach},
    redact,
    store::Store,
    traces,
    wait::sleep_until,
};

/// Events waiting for the runner. Past this, consecutive progress is merged into the newest
/// and log lines are dropped (counted), so an upstream that floods cannot grow memory.
const MAX_QUEUED: usize = 256;
/// Longest progress message kept, in bytes; longer ones are cut with an ellipsis.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Largest log payload kept, in bytes of JSON; a larger one is replaced by its cut text.
pub const MAX_LOG_BYTES: usize = 16 * 1024;

pub struct Intake {
    upstream: String,
    state: Mutex<State>,
    pub(super) wake: Notify,
    metrics: Arc<Metrics>,
}

/// A report as queued: what the upstream said, and when it reached the bridge (where the
/// delivery lag counts from).
pub(super) struct Report {
    pub body: EventBody,
    pub received: std::time::Instant,
    /// The id of the upstream's resumable-stream event that carried it: written with the event
    /// (the job's resume cursor), so an adopter resumes exactly after it.
    pub cursor: Option<Box<str>>,
}

#[derive(Default)]
struct State {
    last_progress: Option<f64>,
    closed: bool,
    queue: VecDeque<Report>,
    /// How another replica can re-attach to the call, as it now stands.
    reattach: Option<Reattach>,
    /// Bumped at each change of `reattach` (the runner keeps the version it wrote).
    reattach_version: u64,
    /// The event id of the report about to be taken in (`stream_cursor`).
    next_cursor: Option<Box<str>>,
}

impl Intake {
    pub(super) fn new(upstream: String, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            state: Mutex::default(),
            wake: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn dropped(&self, reason: &str) {
        self.metrics
            .progress_dropped
            .with_label_values(&[reason])
            .inc();
    }

    /// A progress notification from the upstream. MCP requires progress to increase with
    /// every notification; one that does not, or is not a finite non-negative number, is
    /// dropped and counted. `total` is kept only when it is a finite positive number.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !progress.is_finite() || progress < 0.0 {
            self.dropped("invalid");
            tracing::debug!(upstream = %self.upstream, progress, "progress is not a finite non-negative number: dropped");
            return;
        }
        let total = total.filter(|t| t.is_finite() && *t > 0.0);
        let message = message.map(|m| truncate(m, MAX_MESSAGE_BYTES));
        let update = ProgressUpdate {
            progress,
            total,
            message,
        };
        {
            let mut state = self.lock();
            let cursor = state.next_cursor.take();
            if state.closed {
                drop(state);
                self.dropped("after_end");
                return;
            }
            if state.last_progress.is_some_and(|last| progress <= last) {
                drop(state);
                self.dropped("non_increasing");
                return;
            }
            state.last_progress = Some(progress);
            let full = state.queue.len() >= MAX_QUEUED;
            let received = std::time::Instant::now();
            match state.queue.back_mut() {
                Some(Report {
                    body: EventBody::Progress(newest),
                    received: when,
                    cursor: at,
                }) if full => {
                    (*newest, *when, *at) = (update, received, cursor);
                    drop(state);
                    self.dropped("coalesced");
                }
                _ => state.queue.push_back(Report {
                    body: EventBody::Progress(update),
                    received,
                    cursor,
                }),
            }
        }
        self.wake.notify_one();
    }

    /// A `notifications/message` attributed to this job.
    pub fn log(&self, level: String, logger: Option<String>, data: Value) {
        let data = bound_log(data);
        {
            let mut state = self.lock();
            let cursor = state.next_cursor.take();
            if state.closed || state.queue.len() >= MAX_QUEUED {
                drop(state);
                self.metrics
                    .log_dropped
                    .with_label_values(&["overflow"])
                    .inc();
                return;
            }
            state.queue.push_back(Report {
                body: EventBody::Log {
                    level,
                    logger,
                    data,
                },
                received: std::time::Instant::now(),
                cursor,
            });
        }
        self.wake.notify_one();
    }

    /// The call became an upstream task another replica can re-attach to: the runner keeps
    /// the record in the store before the reports that follow it.
    pub fn reattach(&self, record: Reattach) {
        {
            let mut state = self.lock();
            if state.closed {
                return;
            }
            state.reattach = Some(record);
            state.reattach_version += 1;
        }
        self.wake.notify_one();
    }

    /// The report taken in next (a `progress` or `log` call) is the one the call's resumable
    /// stream carried in event `event_id`: the runner writes the id with that report's event,
    /// in one step, so the job's resume cursor names exactly the last event it has. A report
    /// that is dropped takes its id with it. Only once the job has a stream record (the first
    /// id is the record's own). Bounded by the upstream's `max_event_id_bytes` check.
    pub fn stream_cursor(&self, event_id: &str) {
        let mut state = self.lock();
        if state.closed || state.reattach.as_ref().is_none_or(|r| r.stream.is_none()) {
            return;
        }
        state.next_cursor = Some(event_id.into());
    }

    /// An adopted job's intake: progress up to `progress` is the job's already (a resumed
    /// stream replays from a cursor that may be behind it), so it is dropped as not
    /// increasing.
    pub(super) fn resume_after(&self, progress: Option<f64>) {
        self.lock().last_progress = progress;
    }

    /// The re-attach record and its version, if it changed since version `kept`.
    pub(super) fn reattach_since(&self, kept: u64) -> Option<(Reattach, u64)> {
        let state = self.lock();
        if state.reattach_version == kept {
            return None;
        }
        Some((state.reattach.clone()?, state.reattach_version))
    }

    /// Everything queued so far, oldest first.
    #[cfg(test)]
    pub(super) fn take(&self) -> VecDeque<EventBody> {
        let queue = std::mem::take(&mut self.lock().queue);
        queue.into_iter().map(|report| report.body).collect()
    }

    /// Swap everything queued so far into `out` (which must be empty), oldest first. The two
    /// buffers trade places and both keep their capacity, so a steady stream of reports
    /// allocates no queue at all (a fresh `VecDeque` per drain showed in the ingest profile).
    pub(super) fn take_into(&self, out: &mut VecDeque<Report>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut self.lock().queue, out);
    }

    /// The call is over (answered or cancelled): later reports are dropped.
    pub(super) fn close(&self) {
        self.lock().closed = true;
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = text.floor_char_boundary(max);
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn bound_log(data: Value) -> Value {
    let size = serde_json::to_vec(&data)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size <= MAX_LOG_BYTES {
        return data;
    }
    let text = match data {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Value::String(truncate(text, MAX_LOG_BYTES))
}

/// The work a job runs: the outcome of the upstream call (never `Cancelled`: a cancel is the
/// runner's), and how to cancel it upstream.
pub struct Work {
    pub outcome: BoxFuture<'static, Finished>,
    pub cancel: Box<dyn FnOnce(String) -> BoxFuture<'static, ()> + Send>,
}

/// How a job ended, for callers in this process waiting on it (sync calls).
#[derive(Debug)]
pub enum Finished {
    /// A tool result; `is_error: Some(true)` ends the job `failed`.
    Result(CallToolResult),
    RpcError(ErrorData),
    Failed(JobFailure),
    Cancelled(String),
}

/// The failure message local waiters get for a job another replica took over (the drain's
/// hand-over, or an adoption after this replica's lease lapsed): it goes on there.
pub const TAKEN_OVER: &str = "another bridge replica took this job over (this one drained and \
                              handed it over, or its lease had lapsed); it goes on there: follow \
                              it by its ID";

impl Finished {
    /// The job did not end: another replica carries it on ([`TAKEN_OVER`]).
    pub fn taken_over(&self) -> bool {
        matches!(self, Finished::Failed(f) if f.reason == FailureReason::OwnerLost && f.message == TAKEN_OVER)
    }
}

/// The cancel switch of a job running here.
pub(super) struct Running {
    cancel: CancellationToken,
    reason: Mutex<Option<String>>,
    /// Another replica adopted the job: stop, leaving its upstream call alone.
    abandoned: AtomicBool,
}

impl Running {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            cancel: CancellationToken::new(),
            reason: Mutex::new(None),
            abandoned: AtomicBool::new(false),
        })
    }

    pub(super) fn cancel(&self, reason: String) {
        self.reason.lock().get_or_insert(reason);
        self.cancel.cancel();
    }

    pub(super) fn abandon(&self, reason: String) {
        self.abandoned.store(true, Ordering::Release);
        self.cancel(reason);
    }

    fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    fn reason(&self) -> String {
        self.reason
            .lock()
            .clone()
            .unwrap_or_else(|| "cancelled".into())
    }
}

/// A report as the runner writes it: what, when it was received, and the id of the upstream's
/// stream event that carried it (`Report::cursor`).
type Received<T> = (T, std::time::Instant, Option<Box<str>>);

/// How a runner paces what it publishes (from `[jobs]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pacing {
    /// Progress closer together than this is coalesced (the newest held back, never lost).
    pub coalesce: Duration,
    /// A job that reports nothing for this long gets a heartbeat event (`None`: never).
    pub heartbeat: Option<Duration>,
}

impl From<&JobsConfig> for Pacing {
    fn from(config: &JobsConfig) -> Self {
        Self {
            coalesce: Duration::from_millis(config.min_progress_interval_ms),
            heartbeat: (config.heartbeat_secs > 0)
                .then(|| Duration::from_secs(config.heartbeat_secs)),
        }
    }
}

/// The job a runner runs.
pub(super) struct Job {
    pub id: JobId,
    pub upstream: String,
    /// The tool's label in the job histograms (`Metrics::tool_label`).
    pub tool: String,
    pub intake: Arc<Intake>,
    pub running: Arc<Running>,
}

pub(super) struct Runner {
    job: Job,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    limits: CallLimits,
    mirror: Option<mpsc::Sender<ProgressUpdate>>,
    coalesce: Duration,
    started: Instant,
    /// When progress was last published (for coalescing).
    last_progress: Option<Instant>,
    /// When the upstream last reported progress (for the idle limit and heartbeats).
    last_report: Instant,
    heartbeat: Option<Duration>,
    next_heartbeat: Option<Instant>,
    /// The newest progress held back by coalescing, when it was received and its stream event
    /// id; always delivered before the job ends, and before any other report (so that no
    /// event's cursor is written ahead of it).
    held: Option<Received<ProgressUpdate>>,
    /// The drained reports, kept between drains for its capacity (see `Intake::take_into`).
    batch: VecDeque<Report>,
    /// The version of the re-attach record the store has (`Intake::reattach_since`).
    record_kept: u64,
}

impl Runner {
    pub(super) fn new(
        job: Job,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        pacing: Pacing,
        limits: CallLimits,
        mirror: Option<mpsc::Sender<ProgressUpdate>>,
    ) -> Self {
        let Pacing {
            coalesce,
            heartbeat,
        } = pacing;
        let now = Instant::now();
        Self {
            job,
            store,
            metrics,
            limits,
            mirror,
            coalesce,
            started: now,
            last_progress: None,
            last_report: now,
            heartbeat,
            next_heartbeat: heartbeat.map(|h| now + h),
            held: None,
            batch: VecDeque::new(),
            record_kept: 0,
        }
    }

    fn id(&self) -> JobId {
        self.job.id
    }

    fn intake(&self) -> &Arc<Intake> {
        &self.job.intake
    }

    fn running(&self) -> &Arc<Running> {
        &self.job.running
    }

    /// Run the job to its end; how it ended.
    // Long because: one select over every way a job's work ends, and its reports meanwhile.
    pub(super) async fn run(mut self, work: Work) -> Finished {
        let Work {
            mut outcome,
            cancel,
        } = work;
        let running = self.running().clone();
        let intake = self.intake().clone();
        let hard_deadline = self.limits.timeout.map(|t| self.started + t);
        let finished = loop {
            let release_at = self.release_at();
            let idle_deadline = self.limits.idle_timeout.map(|t| self.last_report + t);
            let heartbeat_at = self.next_heartbeat;
            tokio::select! {
                biased;
                _ = running.cancel.cancelled() => {
                    let reason = running.reason();
                    // Reports after the cancel are dropped; the upstream's late answer, if
                    // any, is ignored (its future is dropped below, unread). A job another
                    // replica adopted is left to it: its upstream call goes on there.
                    intake.close();
                    if !running.is_abandoned() {
                        cancel(reason.clone()).await;
                    }
                    break Finished::Cancelled(reason);
                }
                finished = &mut outcome => {
                    intake.close();
                    break finished;
                }
                _ = intake.wake.notified() => self.drain().await,
                _ = sleep_until(release_at), if release_at.is_some() => self.release_held().await,
                _ = sleep_until(hard_deadline), if hard_deadline.is_some() => {
                    let limit = self.limits.timeout.unwrap_or_default();
                    let message = format!("the call took longer than its limit of {}s (timeout_secs)", limit.as_secs());
                    intake.close();
                    cancel(message.clone()).await;
                    break Finished::Failed(JobFailure { reason: FailureReason::Timeout, message });
                }
                _ = sleep_until(idle_deadline), if idle_deadline.is_some() => {
                    let limit = self.limits.idle_timeout.unwrap_or_default();
                    let message = format!(
                        "the call reported no progress for {}s (idle_timeout_secs)",
                        limit.as_secs()
                    );
                    intake.close();
                    cancel(message.clone()).await;
                    break Finished::Failed(JobFailure { reason: FailureReason::Timeout, message });
                }
                _ = sleep_until(heartbeat_at), if heartbeat_at.is_some() => self.beat().await,
            }
        };
        drop(outcome);
        if running.is_abandoned() {
            return self.abandon();
        }
        self.drain().await;
        self.release_held().await;
        // Boxed: the state of the job's last steps (1.2 KB, a second copy of the runner's among
        // it) would otherwise be reserved in every running job's task for its whole life.
        Box::pin(self.finish(finished)).await
    }

    /// Tell subscribers the job is alive although it reports nothing.
    async fn beat(&mut self) {
        let now = Instant::now();
        self.next_heartbeat = self.heartbeat.map(|h| now + h);
        let beat = Heartbeat {
            elapsed_ms: millis(now - self.started),
            since_progress_ms: millis(now - self.last_report),
        };
        if let Err(error) = self.store.heartbeat(self.id(), beat).await {
            self.store_failed(&error);
        }
    }

    fn release_at(&self) -> Option<Instant> {
        self.held.as_ref()?;
        Some(
            self.last_progress
                .map_or_else(Instant::now, |last| last + self.coalesce),
        )
    }

    /// Move everything the intake has queued into the store, in order. A task's re-attach
    /// record goes before the reports that follow it; a resumable stream's after the reports
    /// before it (its first event id is its own), and not while one is held back: an adopter
    /// resumes after the cursor, so it must never be ahead of the job. Later ids go with the
    /// events that carried them (`Report::cursor`), written in the same step.
    async fn drain(&mut self) {
        let record = self.intake().reattach_since(self.record_kept);
        let (before, after) = match record {
            Some(r) if r.0.stream.is_none() => (Some(r), None),
            r => (None, r),
        };
        if let Some(record) = before {
            self.keep_record(record).await;
        }
        self.drain_reports().await;
        if let Some(record) = after
            && self.held.is_none()
        {
            self.keep_record(record).await;
        }
    }

    async fn keep_record(&mut self, (record, version): (Reattach, u64)) {
        match self.store.record_reattach(self.id(), &record).await {
            Ok(kept) => {
                self.record_kept = version;
                tracing::debug!(kept, task = %record.task_id, "re-attach record");
            }
            Err(error) => self.store_failed(&error),
        }
    }

    async fn drain_reports(&mut self) {
        let mut batch = std::mem::take(&mut self.batch);
        self.intake().take_into(&mut batch);
        for Report {
            body,
            received,
            cursor,
        } in batch.drain(..)
        {
            match body {
                EventBody::Progress(update) => {
                    let now = Instant::now();
                    self.last_report = now;
                    self.next_heartbeat = self.heartbeat.map(|h| now + h);
                    let too_soon = self
                        .last_progress
                        .is_some_and(|last| now < last + self.coalesce);
                    if too_soon {
                        if self.held.replace((update, received, cursor)).is_some() {
                            self.metrics
                                .progress_dropped
                                .with_label_values(&["coalesced"])
                                .inc();
                        }
                    } else {
                        self.held = None;
                        self.publish_progress((update, received, cursor)).await;
                    }
                }
                other => {
                    self.release_held().await;
                    self.append_received((other, received, cursor)).await;
                }
            }
        }
        self.batch = batch;
    }

    async fn release_held(&mut self) {
        if let Some(held) = self.held.take() {
            self.publish_progress(held).await;
        }
    }

    async fn publish_progress(&mut self, (update, received, cursor): Received<ProgressUpdate>) {
        self.last_progress = Some(Instant::now());
        if let Some(mirror) = &self.mirror
            && mirror.try_send(update.clone()).is_err()
        {
            // The sync caller is gone (answered with a handle) or not keeping up; progress
            // still goes to the job channel.
            self.mirror = None;
        }
        let progress = (EventBody::Progress(update), received, cursor);
        if self.append_received(progress).await {
            self.metrics
                .progress_events
                .with_label_values(&[&self.job.upstream])
                .inc();
        }
    }

    /// Append a report, with the id of the stream event that carried it (if any).
    async fn append_received(&self, (body, received, cursor): Received<EventBody>) -> bool {
        let appended = (self.store)
            .append_received(self.id(), body, received, cursor.as_deref())
            .await;
        match appended {
            Ok(seq) => seq.is_some(),
            Err(error) => {
                self.store_failed(&error);
                false
            }
        }
    }

    fn store_failed(&self, error: &StoreError) {
        tracing::error!(job = %self.id(), %error, "could not write a job event");
    }

    /// Another replica adopted the job: write nothing, and tell local waiters it went on
    /// elsewhere.
    fn abandon(self) -> Finished {
        let message = TAKEN_OVER;
        self.metrics
            .jobs_finished
            .with_label_values(&[&self.job.upstream, "abandoned"])
            .inc();
        tracing::warn!("job left to the replica that adopted it");
        Finished::Failed(JobFailure {
            reason: FailureReason::OwnerLost,
            message: message.into(),
        })
    }

    /// Write the terminal event; how the job ended, for local waiters. Runs in the job's span;
    /// with traces on, the write has a span of its own (`terminal_event`), so a trace shows
    /// when readers could see the end.
    pub(super) async fn finish(self, mut finished: Finished) -> Finished {
        // A failure's message may quote an upstream's error, which may quote its URL.
        match &mut finished {
            Finished::Failed(failure) => {
                failure.message = redact::text(&failure.message).into_owned();
            }
            Finished::RpcError(error) => {
                error.message = redact::text(&error.message).into_owned().into();
            }
            Finished::Result(_) | Finished::Cancelled(_) => {}
        }
        let body = terminal_body(&finished);
        let status = body.kind().as_str();
        if let EventBody::Failed { failure, .. } = &body {
            traces::failed(&tracing::Span::current(), failure.message.as_str());
        }
        let written = self
            .store
            .append(self.id(), body)
            .instrument(traces::span(|| {
                tracing::info_span!("terminal_event", status)
            }))
            .await;
        if let Err(error) = written {
            self.store_failed(&error);
        }
        self.metrics
            .jobs_finished
            .with_label_values(&[&self.job.upstream, status])
            .inc();
        let duration = (self.metrics.job_duration).with_label_values(&[
            self.job.upstream.as_str(),
            &self.job.tool,
            status,
        ]);
        Metrics::observe(&duration, self.started.elapsed());
        tracing::info!(status, "job ended");
        finished
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The terminal event for an outcome.
fn terminal_body(finished: &Finished) -> EventBody {
    match finished {
        Finished::Result(result) if result.is_error == Some(true) => EventBody::Failed {
            failure: JobFailure {
                reason: FailureReason::ToolError,
                message: first_text(result),
            },
            result: serde_json::to_value(result).ok(),
            rpc_error: None,
        },
        Finished::Result(result) => EventBody::Completed {
            result: serde_json::to_value(result).unwrap_or_default(),
        },
        Finished::RpcError(error) => EventBody::Failed {
            failure: JobFailure {
                reason: FailureReason::UpstreamError,
                message: format!(
                    "the upstream answered with error {}: {}",
                    error.code.0, error.message
                ),
            },
            result: None,
            rpc_error: serde_json::to_value(error).ok(),
        },
        Finished::Failed(failure) => EventBody::Failed {
            failure: failure.clone(),
            result: None,
            rpc_error: None,
        },
        Finished::Cancelled(reason) => EventBody::Cancelled {
            reason: reason.clone(),
        },
    }
}

/// The first text content of a result, for a one-line error message.
fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_else(|| "the tool reported an error".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake() -> Arc<Intake> {
        Intake::new("t".into(), Arc::new(Metrics::new()))
    }

    fn stream_record(cursor: &str) -> Reattach {
        Reattach {
            upstream: "u".into(),
            session_id: Some("s".into()),
            protocol: None,
            task_id: String::new(),
            stream: Some(crate::model::StreamCursor {
                request_id: Value::from(1),
                last_event_id: cursor.into(),
                progress_token: None,
            }),
        }
    }

    #[test]
    fn a_stream_cursor_goes_with_the_next_report_once_the_job_has_a_stream_record() {
        let i = intake();
        assert!(i.reattach_since(0).is_none());
        // No record yet: the first id is the record's own.
        i.stream_cursor("3");
        i.progress(1.0, None, None);
        i.reattach(stream_record("3"));
        let (record, version) = i.reattach_since(0).unwrap();
        assert_eq!(record.stream.unwrap().last_event_id, "3");
        i.stream_cursor("4");
        i.log("info".into(), None, Value::from("line"));
        i.stream_cursor("5");
        i.progress(1.0, None, None); // not increasing: dropped, and its id with it
        i.progress(2.0, None, None);
        assert!(
            i.reattach_since(version).is_none(),
            "a cursor is no record change"
        );
        let mut queue = VecDeque::new();
        i.take_into(&mut queue);
        let cursors: Vec<Option<&str>> = queue.iter().map(|r| r.cursor.as_deref()).collect();
        assert_eq!(cursors, vec![None, Some("4"), None]);
    }

    #[test]
    fn an_adopted_intake_drops_replayed_progress() {
        let i = intake();
        i.resume_after(Some(5.0));
        for p in [4.0, 5.0, 6.0] {
            i.progress(p, None, None);
        }
        assert_eq!(progress_values(&i), vec![6.0]);
    }

    fn progress_values(i: &Intake) -> Vec<f64> {
        i.take()
            .into_iter()
            .filter_map(|b| match b {
                EventBody::Progress(p) => Some(p.progress),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn keeps_only_increasing_finite_progress() {
        let i = intake();
        for p in [1.0, 1.0, 0.5, f64::NAN, f64::INFINITY, -1.0, 2.5, 3.0] {
            i.progress(p, None, None);
        }
        assert_eq!(progress_values(&i), vec![1.0, 2.5, 3.0]);
    }

    #[test]
    fn drops_everything_after_close() {
        let i = intake();
        i.progress(1.0, None, None);
        i.close();
        i.progress(2.0, None, None);
        i.log("info".into(), None, Value::Null);
        assert_eq!(i.take().len(), 1);
    }

    #[test]
    fn a_flood_is_bounded_and_keeps_the_newest() {
        let i = intake();
        for p in 1..=10_000 {
            i.progress(p as f64, Some(10_000.0), None);
        }
        let values = progress_values(&i);
        assert_eq!(values.len(), MAX_QUEUED);
        assert_eq!(values.last(), Some(&10_000.0));
    }

    #[test]
    fn cuts_long_messages_and_rejects_bad_totals() {
        let i = intake();
        i.progress(1.0, Some(f64::NAN), Some("é".repeat(MAX_MESSAGE_BYTES)));
        let EventBody::Progress(p) = i.take().pop_front().unwrap() else {
            panic!()
        };
        assert_eq!(p.total, None);
        let m = p.message.unwrap();
        assert!(m.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8() && m.ends_with('…'));
    }
}
