//! The task that runs one job: it waits for the work's outcome while moving the intake's
//! reports into the store in order, and it ends the job with exactly one terminal event.
//!
//! Order is the point of having one task per job. The upstream's read path queues a report
//! before it passes the response on, and the runner drains the queue before it writes the
//! terminal event, so a subscriber never sees progress after `completed`.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use tokio::{sync::mpsc, time::Instant};
use tracing::Instrument;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use rmcp::{ErrorData, model::CallToolResult};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

use super::intake::{Intake, Report};
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

/// The work a job runs: the outcome of the upstream call, and how to cancel it upstream.
pub struct Work {
    pub outcome: BoxFuture<'static, WorkOutcome>,
    pub cancel: Box<dyn FnOnce(String) -> BoxFuture<'static, ()> + Send>,
}

#[derive(Debug)]
pub enum WorkOutcome {
    /// A tool result; `is_error: Some(true)` ends the job `failed`.
    Result(CallToolResult),
    RpcError(ErrorData),
    Failed(JobFailure),
}

/// How a job ended, for callers in this process waiting on it (sync calls).
#[derive(Debug)]
pub enum Finished {
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

/// The least time between two writes of a resumable stream's cursor (the first is at once).
const CURSOR_EVERY: Duration = Duration::from_secs(1);

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
    /// The newest progress held back by coalescing; always delivered before the job ends.
    held: Option<(ProgressUpdate, std::time::Instant)>,
    /// The drained reports, kept between drains for its capacity (see `Intake::take_into`).
    batch: VecDeque<Report>,
    /// The version of the re-attach record the store has (`Intake::reattach_since`).
    record_kept: u64,
    /// When a resumable stream's record was last written.
    cursor_written: Option<Instant>,
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
            cursor_written: None,
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
                result = &mut outcome => {
                    intake.close();
                    break match result {
                        WorkOutcome::Result(result) => Finished::Result(result),
                        WorkOutcome::RpcError(error) => Finished::RpcError(error),
                        WorkOutcome::Failed(failure) => Finished::Failed(failure),
                    };
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
    /// its cursor covers (taken before them, so it names none that is not written), and not
    /// while one is held back: an adopter resumes after the cursor, so it must never be ahead
    /// of the job. A cursor behind the job costs nothing but a longer replay (the adopter drops
    /// progress it has), so it is written at most every [`CURSOR_EVERY`]: a 60-step job at 20
    /// steps a second made 48 record writes beside its 61 appends when each drain wrote it.
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
        let due = self
            .cursor_written
            .is_none_or(|at| at.elapsed() >= CURSOR_EVERY);
        if let Some(record) = after
            && self.held.is_none()
            && due
        {
            self.cursor_written = Some(Instant::now());
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
        for Report { body, received } in batch.drain(..) {
            match body {
                EventBody::Progress(update) => {
                    let now = Instant::now();
                    self.last_report = now;
                    self.next_heartbeat = self.heartbeat.map(|h| now + h);
                    let too_soon = self
                        .last_progress
                        .is_some_and(|last| now < last + self.coalesce);
                    if too_soon {
                        if self.held.replace((update, received)).is_some() {
                            self.metrics
                                .progress_dropped
                                .with_label_values(&["coalesced"])
                                .inc();
                        }
                    } else {
                        self.held = None;
                        self.publish_progress(update, received).await;
                    }
                }
                other => {
                    self.append(other).await;
                }
            }
        }
        self.batch = batch;
    }

    async fn release_held(&mut self) {
        if let Some((update, received)) = self.held.take() {
            self.publish_progress(update, received).await;
        }
    }

    async fn publish_progress(&mut self, update: ProgressUpdate, received: std::time::Instant) {
        self.last_progress = Some(Instant::now());
        if let Some(mirror) = &self.mirror
            && mirror.try_send(update.clone()).is_err()
        {
            // The sync caller is gone (answered with a handle) or not keeping up; progress
            // still goes to the job channel.
            self.mirror = None;
        }
        let appended = (self.store)
            .append_received(self.id(), EventBody::Progress(update), received)
            .await;
        if appended
            .unwrap_or_else(|error| {
                self.store_failed(&error);
                None
            })
            .is_some()
        {
            self.metrics
                .progress_events
                .with_label_values(&[&self.job.upstream])
                .inc();
        }
    }

    async fn append(&self, body: EventBody) -> bool {
        match self.store.append(self.id(), body).await {
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
