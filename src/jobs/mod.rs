//! The job lifecycle: a job is created running, receives the upstream's reports through its
//! [`Intake`], and ends exactly once — `completed`, `failed` or `cancelled` — with a terminal
//! event that carries the result or the reason. No path leaves a job running once its work is
//! gone: the runner owns the work's future and always appends a terminal event when it ends.

mod drain;
mod input;
#[cfg(test)]
mod intake_fuzz;
mod runner;
mod status_changes;

use std::{sync::Arc, time::Duration};

use dashmap::DashMap;
use futures::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tracing::Instrument;

pub use drain::{DRAIN_CUT_SHORT, DRAIN_TIME_PASSED, DrainEnd};
pub use input::{CallerRequests, InputDesk, InputError};
pub use runner::{Finished, Intake, MAX_LOG_BYTES, MAX_MESSAGE_BYTES, TAKEN_OVER, Work};
pub use status_changes::StatusChanges;

use runner::{Pacing, Runner, Running};

use crate::{
    config::{CallLimits, JobsConfig},
    events::{LiveItem, StoreError},
    metrics::Metrics,
    model::CancelAck,
    model::{
        Channel, CorrelationId, EventKind, FailureReason, JobFailure, JobId, JobSnapshot,
        JobStatus, NewJob, Principal, ProgressUpdate,
    },
    shutdown::Tasks,
    store::Store,
};

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the bridge is already running its maximum of {0} jobs (jobs.max_jobs); try again when some have finished"
    )]
    AtCapacity(usize),
    #[error(
        "this replica of the bridge is draining (shutting down) and starts no new job: call the \
         tool again in a few seconds; another replica will take the call (this one was not started)"
    )]
    Draining,
}

impl JobsError {
    /// What a caller may be told: the store's faults without their internals (the whole error
    /// is for the log).
    pub fn public_message(&self) -> String {
        match self {
            JobsError::Store(e) => e.public_message().to_string(),
            other => other.to_string(),
        }
    }
}

/// What the caller asked for.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub tool: String,
    pub upstream: String,
    pub upstream_tool: String,
    pub correlation_id: Option<CorrelationId>,
    /// Who asked: the job is theirs (see `auth::may_access`).
    pub principal: Principal,
}

/// Jobs of this replica, and access to all jobs through the store.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    config: JobsConfig,
    replica: String,
    running: DashMap<JobId, Arc<Running>>,
    /// The places under `max_jobs`: one is taken before a job is created, so two calls racing
    /// for the last place cannot both get it, and given back when the job is over.
    places: Arc<Semaphore>,
    /// Set when the drain begins: no new jobs.
    drain: drain::DrainState,
    /// Woken whenever a job of this replica ends (shutdown waits for none to be left).
    ended: Notify,
    metrics: Arc<Metrics>,
    /// Where the job runners and the cancel routing run (the shutdown's jobs stage).
    tasks: Tasks,
    /// Questions the jobs running here asked, waiting for answers.
    inputs: InputDesk,
}

impl Jobs {
    /// `replica` names this process in job snapshots (the owner of the jobs it runs). Job
    /// runners and the cancel routing run on `tasks`.
    pub fn new(
        store: Arc<dyn Store>,
        config: JobsConfig,
        replica: String,
        metrics: Arc<Metrics>,
        tasks: Tasks,
    ) -> Self {
        // Past the semaphore's maximum (2^61) there is no practical difference: no limit.
        let places = Arc::new(Semaphore::new(config.max_jobs.min(Semaphore::MAX_PERMITS)));
        let inputs = InputDesk::new(
            store.clone(),
            config.clone(),
            replica.clone(),
            metrics.clone(),
        );
        let jobs = Self {
            inner: Arc::new(Inner {
                store,
                config,
                replica,
                running: DashMap::new(),
                places,
                drain: drain::DrainState::new(
                    metrics.draining.clone(),
                    metrics.calls_refused_draining.clone(),
                ),
                ended: Notify::new(),
                metrics,
                tasks: tasks.clone(),
                inputs,
            }),
        };
        tasks.spawn_until_stopped(jobs.clone().route_cancels());
        tasks.spawn_until_stopped(jobs.clone().route_answers());
        jobs
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// The questions the jobs running here asked, and the answers to them.
    pub fn inputs(&self) -> &InputDesk {
        &self.inner.inputs
    }

    /// A job of this replica ended: forget it here, and wake a shutdown waiting for the last.
    /// Only its own entry: a job adopted back after this replica lost it has a new one.
    fn forget(&self, id: JobId, running: &Arc<Running>) {
        self.inner.metrics.jobs_running.dec();
        let removed = self
            .inner
            .running
            .remove_if(&id, |_, r| Arc::ptr_eq(r, running));
        if removed.is_some() {
            self.inner.inputs.forget(id);
        }
        self.inner.ended.notify_waiters();
    }

    /// Cancel requests arrive through the store (from this or any replica); the ones for jobs
    /// running here flip their switch. Runs until the jobs stage stops, after the last job.
    async fn route_cancels(self) {
        let mut requests = self.inner.store.cancel_requests();
        while let Some(request) = requests.next().await {
            let running = self
                .inner
                .running
                .get(&request.job_id)
                .map(|r| r.value().clone());
            match running {
                Some(running) if request.abandon => running.abandon(request.reason),
                Some(running) => running.cancel(request.reason),
                None => {}
            }
        }
    }

    /// Answers other replicas relayed for jobs running here (through the store): each is
    /// taken or refused on a task of its own, and its verdict sent back.
    async fn route_answers(self) {
        let mut requests = self.inner.store.answer_requests();
        while let Some(request) = requests.next().await {
            let jobs = self.clone();
            self.inner
                .tasks
                .spawn_until_stopped(async move { jobs.inputs().answer_relayed(request).await });
        }
    }

    /// Record a new running job. Start it with [`PendingJob::start`] once its work is sent,
    /// or end it with [`PendingJob::fail`] if the work could not be started.
    pub async fn create(&self, spec: JobSpec) -> Result<PendingJob, JobsError> {
        if self.is_draining() {
            self.inner.drain.refused();
            return Err(JobsError::Draining);
        }
        let place = self
            .inner
            .places
            .clone()
            .try_acquire_owned()
            .map_err(|_| JobsError::AtCapacity(self.inner.config.max_jobs))?;
        let id = JobId::random();
        let span = job_span(id, &spec);
        let tool = self.inner.metrics.tool_label(&spec.tool).to_string();
        self.inner
            .store
            .create_job(NewJob {
                id,
                tool: spec.tool,
                upstream: spec.upstream.clone(),
                upstream_tool: spec.upstream_tool,
                correlation_id: spec.correlation_id,
                owner: self.inner.replica.clone(),
                principal: Some(spec.principal),
            })
            .await?;
        let running = Running::new();
        self.inner.running.insert(id, running.clone());
        self.inner
            .metrics
            .jobs_started
            .with_label_values(&[&spec.upstream])
            .inc();
        self.inner.metrics.jobs_running.inc();
        let intake = Intake::new(spec.upstream.clone(), self.inner.metrics.clone());
        let job = runner::Job {
            id,
            upstream: spec.upstream,
            tool,
            intake,
            running,
        };
        Ok(self.pending(job, Some(place), span))
    }

    /// Carry on a job this replica adopted (`events::Adopted`): it runs here from now on,
    /// from `snapshot`. Start it with [`PendingJob::start`] once its upstream call is
    /// re-attached, or end it with [`PendingJob::fail`].
    pub fn adopt(&self, snapshot: &JobSnapshot) -> PendingJob {
        let id = snapshot.job_id;
        let span = tracing::info_span!(
            "job",
            job_id = %id,
            tool = %snapshot.tool,
            upstream = %snapshot.upstream,
            adopted = true,
        );
        let running = Running::new();
        self.inner.running.insert(id, running.clone());
        self.inner.metrics.jobs_running.inc();
        let intake = Intake::new(snapshot.upstream.clone(), self.inner.metrics.clone());
        intake.resume_after(snapshot.progress);
        let place = self.inner.places.clone().try_acquire_owned().ok();
        let job = runner::Job {
            id,
            upstream: snapshot.upstream.clone(),
            tool: self.inner.metrics.tool_label(&snapshot.tool).to_string(),
            intake,
            running,
        };
        self.pending(job, place, span)
    }

    fn pending(
        &self,
        job: runner::Job,
        place: Option<OwnedSemaphorePermit>,
        span: tracing::Span,
    ) -> PendingJob {
        PendingJob {
            jobs: self.clone(),
            _place: place,
            job,
            span,
        }
    }

    fn runner(
        &self,
        job: runner::Job,
        limits: CallLimits,
        mirror: Option<mpsc::Sender<ProgressUpdate>>,
    ) -> Runner {
        let store = self.inner.store.clone();
        let pacing = Pacing::from(&self.inner.config);
        Runner::new(
            job,
            store,
            self.inner.metrics.clone(),
            pacing,
            limits,
            mirror,
        )
    }

    /// A job of this replica ended as `finished`: forget it here, then tell local waiters.
    fn ended(
        &self,
        (id, running): (JobId, &Arc<Running>),
        finished: Finished,
        done: &watch::Sender<Option<Arc<Finished>>>,
    ) {
        self.forget(id, running);
        done.send_replace(Some(Arc::new(finished)));
    }

    pub async fn snapshot(&self, id: JobId) -> Result<Option<JobSnapshot>, JobsError> {
        Ok(self.inner.store.snapshot(id).await?)
    }

    /// Ask for a job to be cancelled, wherever it runs.
    pub async fn cancel(&self, id: JobId, reason: String) -> Result<CancelAck, JobsError> {
        Ok(self.inner.store.request_cancel(id, reason).await?)
    }

    /// Cancel a job running in this replica directly (the caller's own request went away).
    pub fn cancel_local(&self, id: JobId, reason: String) {
        if let Some(running) = self.inner.running.get(&id) {
            running.cancel(reason);
        }
    }

    /// Cancel every job running here, each with `reason` on its `cancelled` event.
    pub fn cancel_all_local(&self, reason: &str) {
        for running in self.inner.running.iter() {
            running.cancel(reason.to_string());
        }
    }

    pub fn running_here(&self) -> usize {
        self.inner.running.len()
    }

    /// Begin the drain: no new job starts here from now on (a call gets [`JobsError::Draining`]);
    /// running ones go on. See [`Jobs::drain`].
    pub fn start_draining(&self) {
        self.inner.drain.begin();
    }

    pub fn is_draining(&self) -> bool {
        self.inner.drain.is_on()
    }

    /// Let the jobs running here end until `within` passes or `cut_short` resolves (a second
    /// signal), then cancel those still running (their runners append the `cancelled` events;
    /// wait for them with [`Jobs::drained`]). Returns at once when no job is left.
    pub async fn drain(&self, within: Duration, cut_short: impl Future<Output = ()>) -> DrainEnd {
        self.start_draining();
        // Jobs another replica can carry on are handed over (a store of several replicas):
        // each ends here as abandoned once taken, which shortens the wait below.
        self.inner.store.hand_over();
        let end = drain::ending(self.drained(within), cut_short).await;
        if let Some(reason) = end.cancel_reason() {
            self.cancel_all_local(reason);
        }
        end
    }

    /// Wait until no job runs in this replica, or `within` has passed; true if none is left.
    pub async fn drained(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let ended = self.inner.ended.notified();
                if self.inner.running.is_empty() {
                    return;
                }
                ended.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }

    /// Wait until the job ends or `within` passes, then return its snapshot (`None` if there
    /// is no such job).
    pub async fn wait(
        &self,
        id: JobId,
        within: Duration,
    ) -> Result<Option<JobSnapshot>, JobsError> {
        self.wait_until(id, within, |s| s.is_terminal()).await
    }

    /// Wait until the job ends, asks a question (status `input_required`), or `within`
    /// passes, then return its snapshot (`None` if there is no such job): the next thing a
    /// waiting caller that answers questions itself must hear about.
    pub async fn next_turn(
        &self,
        id: JobId,
        within: Duration,
    ) -> Result<Option<JobSnapshot>, JobsError> {
        self.wait_until(id, within, |s| {
            s.is_terminal() || s == JobStatus::InputRequired
        })
        .await
    }

    /// The job's status from now on, followed from one subscription (`None`: no such job).
    /// For pushing a task's status as it changes.
    pub async fn status_changes(&self, id: JobId) -> Result<Option<StatusChanges>, JobsError> {
        Ok(StatusChanges::open(self.inner.store.clone(), id).await?)
    }

    /// Wait until the job ends, the questions waiting on it are other than `known` (by key:
    /// one asked, or one answered or timed out), or `within` passes; then its snapshot
    /// (`None` if there is no such job). For a waiting caller that is asked the questions
    /// itself and must stop waiting for its answer to one nobody waits for any more.
    pub async fn questions_change(
        &self,
        id: JobId,
        known: &[String],
        within: Duration,
    ) -> Result<Option<JobSnapshot>, JobsError> {
        let changed = |s: &JobSnapshot| {
            s.status.is_terminal()
                || s.input_requests.len() != known.len()
                || s.input_requests.iter().any(|q| !known.contains(&q.key))
        };
        let seen = |kind: EventKind| {
            if kind.may_change_status() {
                Seen::Look
            } else {
                Seen::Pass
            }
        };
        self.watch(id, within, |s| s.is_none_or(changed), seen)
            .await
    }

    /// Wait until the job's status is one `stop` takes (checked after every event that can
    /// change it, and at once), or `within` passes; then its snapshot. An answer may take the
    /// job back to running: it is checked as `running` (the snapshot read then says whether
    /// questions are still open).
    async fn wait_until(
        &self,
        id: JobId,
        within: Duration,
        stop: impl Fn(JobStatus) -> bool,
    ) -> Result<Option<JobSnapshot>, JobsError> {
        let seen = |kind: EventKind| {
            let stops = match kind {
                EventKind::InputRequired => stop(JobStatus::InputRequired),
                EventKind::InputAnswered => stop(JobStatus::Running),
                kind => kind.is_terminal(),
            };
            if stops { Seen::Done } else { Seen::Pass }
        };
        let done = |s: Option<&JobSnapshot>| s.is_some_and(|s| stop(s.status));
        self.watch(id, within, done, seen).await
    }

    /// Wait until the job's snapshot is `done` (looked at once subscribed, after each event
    /// `seen` says to look, and after a lag, which may have skipped one), an event is `done` by
    /// itself, or `within` passes; then its snapshot (`None` if there is no such job).
    async fn watch(
        &self,
        id: JobId,
        within: Duration,
        done: impl Fn(Option<&JobSnapshot>) -> bool,
        seen: impl Fn(EventKind) -> Seen,
    ) -> Result<Option<JobSnapshot>, JobsError> {
        let store = &self.inner.store;
        let Some(opened) = store.open(&Channel::Job(id), None).await? else {
            return Ok(None);
        };
        // Subscribed first, then looked: a change between the two is in the live tail.
        let now = store.snapshot(id).await?;
        if opened.ended || now.is_none() || done(now.as_ref()) {
            return Ok(now);
        }
        let mut live = opened.live;
        let until = async {
            while let Some(item) = live.next().await {
                let seen = match &item {
                    LiveItem::Event(event) => seen(event.kind),
                    LiveItem::Lagged => Seen::Look,
                };
                match seen {
                    Seen::Done => break,
                    Seen::Look if done(store.snapshot(id).await.ok().flatten().as_ref()) => break,
                    Seen::Look | Seen::Pass => {}
                }
            }
        };
        let _ = tokio::time::timeout(within, until).await;
        Ok(store.snapshot(id).await?)
    }
}

/// What an event means to a [`Jobs::watch`]: the wait is over, look at the snapshot, or pass.
enum Seen {
    Done,
    Look,
    Pass,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "too many running jobs: this caller already has {0} (limits.max_jobs_per_token); wait for \
     one to finish (wait_for_job) or cancel one (cancel_job), then call again"
)]
pub struct QuotaFull(usize);

/// Running jobs per principal (`limits.max_jobs_per_token`): one caller cannot fill the bridge
/// with jobs and starve the others. A permit travels with the job's work future, so it is
/// given back when the upstream call ends, however it ends; a principal's entry goes with its
/// last permit (every end user of an OAuth client is a principal).
#[derive(Clone)]
pub struct JobQuota {
    inner: Arc<QuotaInner>,
}

struct QuotaInner {
    max: usize,
    /// One semaphore per principal with running jobs.
    running: DashMap<Principal, Arc<Semaphore>>,
}

/// One running job's place in its principal's quota.
pub struct QuotaPermit {
    permit: Option<OwnedSemaphorePermit>,
    quota: Arc<QuotaInner>,
    principal: Principal,
}

impl Drop for QuotaPermit {
    fn drop(&mut self) {
        self.permit = None;
        // Gone when no permit holds the semaphore and none is being taken (a taker holds a
        // clone of the `Arc` while it takes one, so the count is above 1 then).
        self.quota
            .running
            .remove_if(&self.principal, |_, s| Arc::strong_count(s) == 1);
    }
}

impl JobQuota {
    pub fn new(max: usize) -> Self {
        Self {
            inner: Arc::new(QuotaInner {
                max,
                running: DashMap::new(),
            }),
        }
    }

    pub fn try_start(&self, principal: &Principal) -> Result<QuotaPermit, QuotaFull> {
        let semaphore = self
            .inner
            .running
            .entry(principal.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.inner.max)))
            .clone();
        let permit = semaphore.try_acquire_owned();
        let permit = QuotaPermit {
            permit: permit.ok(),
            quota: self.inner.clone(),
            principal: principal.clone(),
        };
        if permit.permit.is_none() {
            // Dropping it removes the entry if nothing else holds it.
            return Err(QuotaFull(self.inner.max));
        }
        Ok(permit)
    }

    #[cfg(test)]
    fn principals(&self) -> usize {
        self.inner.running.len()
    }
}

/// A job that exists but whose work is not running yet.
pub struct PendingJob {
    jobs: Jobs,
    /// The job's place under `max_jobs`, given back when the job (or its failed creation) is
    /// over. An adopted job takes one if there is one, and runs without otherwise: it was
    /// admitted once, and would be lost if refused now.
    _place: Option<OwnedSemaphorePermit>,
    job: runner::Job,
    /// Every log line about the job, from its creation to its terminal event, is in this span
    /// (see [`job_span`]).
    span: tracing::Span,
}

/// The span of one job: a child of the current span (the MCP request that started it), with
/// the fields an operator filters a job's log lines by. The runner task runs in it, so what
/// the job's task logs carries them, and so does the upstream call made in it.
fn job_span(id: JobId, spec: &JobSpec) -> tracing::Span {
    let span = tracing::info_span!(
        "job",
        job_id = %id,
        tool = %spec.tool,
        upstream = %spec.upstream,
        correlation_id = tracing::field::Empty,
    );
    if let Some(cid) = &spec.correlation_id {
        span.record("correlation_id", tracing::field::display(cid));
    }
    span
}

/// A started job, for a caller in this process that waits on it.
pub struct JobHandle {
    pub id: JobId,
    done: watch::Receiver<Option<Arc<Finished>>>,
}

impl JobHandle {
    /// Wait for the job to end.
    pub async fn finished(&mut self) -> Arc<Finished> {
        match self.done.wait_for(Option::is_some).await {
            Ok(done) => done.clone().unwrap_or_else(unreachable_finished),
            // The runner never drops the sender before sending; if it somehow did, say so
            // rather than hang.
            Err(_) => unreachable_finished(),
        }
    }
}

fn unreachable_finished() -> Arc<Finished> {
    Arc::new(Finished::Failed(JobFailure {
        reason: FailureReason::Internal,
        message: "the job runner stopped without a result".into(),
    }))
}

impl PendingJob {
    pub fn id(&self) -> JobId {
        self.job.id
    }

    /// Where the upstream's reports for this job go.
    pub fn intake(&self) -> Arc<Intake> {
        self.job.intake.clone()
    }

    /// The job's span: run what concerns the job in it (`Instrument::instrument`).
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Run the job. Accepted progress is also sent to `mirror`, if given, while the receiver
    /// is there to read it (a sync caller forwarding progress on its own request).
    pub fn start(
        self,
        work: Work,
        limits: CallLimits,
        mirror: Option<mpsc::Sender<ProgressUpdate>>,
    ) -> JobHandle {
        let (done_tx, done) = watch::channel(None);
        let PendingJob {
            jobs,
            _place: place,
            job,
            span,
        } = self;
        let (id, running) = (job.id, job.running.clone());
        let runner = jobs.runner(job, limits, mirror);
        let tasks = jobs.inner.tasks.clone();
        let run = async move {
            let finished = runner.run(work).await;
            jobs.ended((id, &running), finished, &done_tx);
            drop(place);
        };
        tasks.spawn(run.instrument(span));
        JobHandle { id, done }
    }

    /// End a job whose work never started (the upstream was unreachable).
    pub async fn fail(self, failure: JobFailure) {
        let (done_tx, _) = watch::channel(None);
        let (id, running) = (self.id(), self.job.running.clone());
        let runner = self.jobs.runner(self.job, CallLimits::default(), None);
        let finished = runner
            .finish(Finished::Failed(failure))
            .instrument(self.span)
            .await;
        self.jobs.ended((id, &running), finished, &done_tx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_per_principal_come_back_and_idle_principals_are_forgotten() {
        let quota = JobQuota::new(2);
        let a = Principal::token("a");
        let a1 = quota.try_start(&a).unwrap();
        let a2 = quota.try_start(&a).unwrap();
        assert!(quota.try_start(&a).is_err());
        let b1 = quota
            .try_start(&Principal::jwt("https://i/", "b"))
            .expect("another principal");
        assert_eq!(quota.principals(), 2);
        drop(a1);
        let a3 = quota.try_start(&a).unwrap();
        drop((a2, a3, b1));
        assert_eq!(quota.principals(), 0, "no running job, no entry");
        for i in 0..100 {
            drop(quota.try_start(&Principal::jwt("https://i/", &i.to_string())));
        }
        assert_eq!(quota.principals(), 0);
    }
}
