//! The embedded store: jobs, histories and live fan-out in this process's memory.
//!
//! Each channel (a job, or a correlation) is one [`Log`] behind a plain (`parking_lot`) mutex,
//! held only for the few steps of an append or an open and never across an `.await`: cheaper
//! than an async mutex, and a reader that opens a channel sees snapshot, history and live tail
//! with no gap and no duplicate between them.
//!
//! Live delivery is a `tokio::sync::broadcast` ring per channel, created with the first reader
//! and dropped with the last. A reader more than the ring's capacity behind is told it lagged
//! and catches up from history (or gets a `reset`): it never slows the writer or other readers.
//! A read creates nothing that outlives it: a correlation opened before it has any event is
//! kept while it has readers and removed with the last one ([`CorrelationReader`]).

use std::{
    collections::VecDeque,
    sync::{Arc, Weak},
    time::Instant,
};

use async_trait::async_trait;
use bytes::Bytes;
use dashmap::DashMap;
use futures::{StreamExt, stream::BoxStream};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::broadcast;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};

use super::task_index::{Store, TaskIndex};
use crate::events::{
    Broker, Bus, CancelRequest, ChannelSnapshot, LiveItem, Opened, Replay, StoreError, StoredEvent,
};
use crate::model::CancelAck;
use crate::model::{
    Channel, CorrelationId, EventBody, EventKind, Heartbeat, JobId, JobSnapshot, NewJob, Principal,
    Reattach, Seq, now_ms,
    wire::{render_heartbeat, render_job_event, to_vec},
};

/// Live events buffered per channel for readers that are momentarily behind. Past this a
/// reader lags and re-reads history, so this bounds memory per channel, not correctness.
const LIVE_CAPACITY: usize = 128;

/// Cancel requests in flight between the API and the job runner of this process.
const CANCEL_CAPACITY: usize = 1024;

#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: DashMap<JobId, Arc<Log>>,
    correlations: DashMap<CorrelationId, Arc<Log>>,
    history: usize,
    retention_ms: u64,
    cancels: broadcast::Sender<CancelRequest>,
    /// The tasks `tasks/list` shows.
    tasks: TaskIndex,
}

struct Log {
    state: Mutex<LogState>,
}

struct LogState {
    head: Seq,
    events: VecDeque<Arc<StoredEvent>>,
    live: Option<broadcast::Sender<Arc<StoredEvent>>>,
    kind: LogKind,
}

enum LogKind {
    Job(Box<JobSnapshot>),
    Correlation {
        jobs: Vec<JobId>,
        last_activity: u64,
    },
}

impl Log {
    fn new(kind: LogKind) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(LogState {
                head: 0,
                events: VecDeque::new(),
                live: None,
                kind,
            }),
        })
    }

    /// The lock does not poison: a panic while holding it cannot leave the state half-written
    /// in a way that matters more than losing the job, so the next caller simply takes it.
    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.state.lock()
    }
}

impl LogState {
    /// Store and deliver an event. Called with the lock held, so history order, sequence
    /// order and live delivery order are the same.
    fn push(&mut self, event: Arc<StoredEvent>, history: usize) {
        self.head = event.seq;
        if self.events.len() == history {
            self.events.pop_front();
        }
        self.events.push_back(event.clone());
        self.deliver(event);
    }

    fn deliver(&mut self, event: Arc<StoredEvent>) {
        if let Some(live) = &self.live
            && live.send(event).is_err()
        {
            // Nobody listens any more: free the ring until the next reader comes.
            self.live = None;
        }
    }

    fn subscribe(&mut self) -> broadcast::Receiver<Arc<StoredEvent>> {
        match &self.live {
            Some(live) => live.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(LIVE_CAPACITY);
                self.live = Some(tx);
                rx
            }
        }
    }

    /// Events after `after`, and whether history still reaches back to `after + 1`.
    fn since(&self, after: Seq) -> (Vec<Arc<StoredEvent>>, bool) {
        if after >= self.head {
            return (Vec::new(), true);
        }
        let oldest = self.events.front().map_or(self.head + 1, |e| e.seq);
        let covered = after + 1 >= oldest;
        let events = self
            .events
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        (events, covered)
    }

    /// Nothing in it and nobody reading it: a correlation opened by readers only.
    fn unused(&self) -> bool {
        self.head == 0 && !self.has_readers()
    }

    fn has_readers(&self) -> bool {
        self.live.as_ref().is_some_and(|tx| tx.receiver_count() > 0)
    }

    fn ended(&self) -> bool {
        match &self.kind {
            LogKind::Job(s) => s.status.is_terminal(),
            LogKind::Correlation { .. } => false,
        }
    }
}

/// What an open reads of a channel under its lock: the cut at `head` and the live
/// subscription taken with it.
struct Cut {
    head: Seq,
    snapshot: Option<Box<JobSnapshot>>,
    jobs: Vec<JobId>,
    backlog: Vec<Arc<StoredEvent>>,
    covered: bool,
    ended: bool,
    rx: broadcast::Receiver<Arc<StoredEvent>>,
}

impl Cut {
    fn of(log: &Log, after: Option<Seq>) -> Self {
        let mut state = log.lock();
        let rx = state.subscribe();
        let (backlog, covered) = match after {
            Some(after) => state.since(after),
            None => (Vec::new(), true),
        };
        let (snapshot, jobs) = match &state.kind {
            LogKind::Job(s) => (Some(s.clone()), Vec::new()),
            LogKind::Correlation { jobs, .. } => (None, jobs.clone()),
        };
        Cut {
            head: state.head,
            snapshot,
            jobs,
            backlog,
            covered,
            ended: state.ended(),
            rx,
        }
    }
}

/// A reader of a correlation: when it goes, a correlation that never had an event and has no
/// other reader goes with it, so a made-up correlation ID costs nothing once its stream closes
/// (each one read used to keep a log and a live ring until `jobs.retention_secs`).
struct CorrelationReader {
    store: Weak<Inner>,
    cid: CorrelationId,
    log: Arc<Log>,
}

impl Drop for CorrelationReader {
    fn drop(&mut self) {
        let Some(inner) = self.store.upgrade() else {
            return;
        };
        inner.correlations.remove_if(&self.cid, |_, log| {
            Arc::ptr_eq(log, &self.log) && log.lock().unused()
        });
    }
}

/// A correlation's live stream with its [`CorrelationReader`]; the fields drop in order, so
/// the subscription is gone before the reader looks whether anyone still listens.
struct Guarded {
    live: BoxStream<'static, LiveItem>,
    _reader: CorrelationReader,
}

impl futures::Stream for Guarded {
    type Item = LiveItem;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<LiveItem>> {
        self.get_mut().live.poll_next_unpin(cx)
    }
}

impl MemoryStore {
    pub fn new(history: usize, retention_secs: u64) -> Self {
        let (cancels, _) = broadcast::channel(CANCEL_CAPACITY);
        Self {
            inner: Arc::new(Inner {
                jobs: DashMap::new(),
                correlations: DashMap::new(),
                history: history.max(1),
                retention_ms: retention_secs.saturating_mul(1000),
                cancels,
                tasks: TaskIndex::default(),
            }),
        }
    }

    fn job(&self, id: JobId) -> Option<Arc<Log>> {
        self.inner.jobs.get(&id).map(|e| e.value().clone())
    }

    /// The log of a channel, if it exists.
    fn log(&self, channel: &Channel) -> Option<Arc<Log>> {
        match channel {
            Channel::Job(id) => self.job(*id),
            Channel::Correlation(c) => self.inner.correlations.get(c).map(|e| e.value().clone()),
        }
    }

    /// The correlation's entry, created empty if it has none. Held, the entry's shard is
    /// locked: a log is only locked under it (or with no map lock held), so the lock order is
    /// always map, then log, and [`CorrelationReader`]'s removal cannot race an append or an
    /// open of the same correlation.
    fn correlation(
        &self,
        cid: &CorrelationId,
    ) -> dashmap::mapref::one::RefMut<'_, CorrelationId, Arc<Log>> {
        self.inner
            .correlations
            .entry(cid.clone())
            .or_insert_with(|| {
                Log::new(LogKind::Correlation {
                    jobs: Vec::new(),
                    last_activity: now_ms(),
                })
            })
    }

    /// Copy a job event to its correlation channel, numbered in that channel's own sequence.
    /// `Broker::append`, with the instant the event's report reached the bridge, if known.
    fn append_born(&self, job: JobId, body: EventBody, born: Option<Instant>) -> Option<Seq> {
        let log = self.job(job)?;
        let (seq, data, correlation) = {
            let mut state = log.lock();
            let LogKind::Job(snapshot) = &mut state.kind else {
                return None;
            };
            if snapshot.status.is_terminal() {
                return None;
            }
            let seq = snapshot.seq + 1;
            let ts = now_ms();
            snapshot.apply(seq, ts, &body);
            let correlation = snapshot.correlation_id.clone();
            let data = render_job_event(job, seq, ts, &body);
            let mut event = StoredEvent::render(seq, body.kind(), data.clone(), false);
            if let Some(born) = born {
                event.born = born;
            }
            let event = Arc::new(event);
            state.push(event, self.inner.history);
            (seq, data, correlation)
        };
        if let Some(cid) = correlation {
            self.copy_to_correlation(&cid, body.kind(), data, None);
        }
        Some(seq)
    }

    fn copy_to_correlation(
        &self,
        cid: &CorrelationId,
        kind: EventKind,
        data: Bytes,
        job: Option<JobId>,
    ) {
        let entry = self.correlation(cid);
        let mut state = entry.value().lock();
        if let LogKind::Correlation {
            jobs,
            last_activity,
        } = &mut state.kind
        {
            *last_activity = now_ms();
            if let Some(job) = job {
                jobs.push(job);
            }
        }
        let seq = state.head + 1;
        state.push(
            Arc::new(StoredEvent::render(seq, kind, data, false)),
            self.inner.history,
        );
    }

    fn correlation_snapshots(&self, jobs: &[JobId]) -> Vec<JobSnapshot> {
        jobs.iter()
            .filter_map(|id| self.job(*id))
            .filter_map(|log| match &log.lock().kind {
                LogKind::Job(s) => Some((**s).clone()),
                LogKind::Correlation { .. } => None,
            })
            .collect()
    }

    fn live_stream(rx: broadcast::Receiver<Arc<StoredEvent>>) -> BoxStream<'static, LiveItem> {
        BroadcastStream::new(rx)
            .map(|item| match item {
                Ok(event) => LiveItem::Event(event),
                Err(BroadcastStreamRecvError::Lagged(_)) => LiveItem::Lagged,
            })
            .boxed()
    }
}

#[async_trait]
impl Broker for MemoryStore {
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError> {
        let snapshot = JobSnapshot::new(&job, now_ms());
        match self.inner.jobs.entry(job.id) {
            dashmap::Entry::Occupied(_) => return Err(StoreError::Duplicate(job.id)),
            dashmap::Entry::Vacant(slot) => {
                slot.insert(Log::new(LogKind::Job(Box::new(snapshot.clone()))));
            }
        }
        if let Some(cid) = &job.correlation_id {
            let data = Bytes::from(to_vec(&snapshot));
            self.copy_to_correlation(cid, EventKind::JobStarted, data, Some(job.id));
        }
        Ok(snapshot)
    }

    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError> {
        Ok(self.append_born(job, body, None))
    }

    async fn append_received(
        &self,
        job: JobId,
        body: EventBody,
        received: Instant,
        _cursor: Option<&str>,
    ) -> Result<Option<Seq>, StoreError> {
        Ok(self.append_born(job, body, Some(received)))
    }

    /// Nothing outlives this process, and no other replica shares its jobs: a record would
    /// have no reader, so none is kept and the job's durability stays `none`.
    async fn record_reattach(&self, _job: JobId, _record: &Reattach) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn heartbeat(&self, job: JobId, beat: Heartbeat) -> Result<(), StoreError> {
        let Some(log) = self.job(job) else {
            return Ok(());
        };
        let (data, correlation) = {
            let mut state = log.lock();
            let LogKind::Job(snapshot) = &state.kind else {
                return Ok(());
            };
            if snapshot.status.is_terminal() {
                return Ok(());
            }
            let correlation = snapshot.correlation_id.clone();
            let data = render_heartbeat(job, state.head, now_ms(), &beat);
            let event = Arc::new(StoredEvent::render(
                state.head,
                EventKind::Heartbeat,
                data.clone(),
                true,
            ));
            state.deliver(event);
            (data, correlation)
        };
        if let Some(log) =
            correlation.and_then(|c| self.inner.correlations.get(&c).map(|e| e.value().clone()))
        {
            let mut state = log.lock();
            let event = Arc::new(StoredEvent::render(
                state.head,
                EventKind::Heartbeat,
                data,
                true,
            ));
            state.deliver(event);
        }
        Ok(())
    }

    async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError> {
        Ok(self.job(job).and_then(|log| match &log.lock().kind {
            LogKind::Job(s) => Some((**s).clone()),
            LogKind::Correlation { .. } => None,
        }))
    }

    async fn open(
        &self,
        channel: &Channel,
        after: Option<Seq>,
    ) -> Result<Option<Opened>, StoreError> {
        let (cut, reader) = match channel {
            Channel::Job(id) => {
                let Some(log) = self.job(*id) else {
                    return Ok(None);
                };
                (Cut::of(&log, after), None)
            }
            Channel::Correlation(cid) => {
                let entry = self.correlation(cid);
                let cut = Cut::of(entry.value(), after);
                let reader = CorrelationReader {
                    store: Arc::downgrade(&self.inner),
                    cid: cid.clone(),
                    log: entry.value().clone(),
                };
                (cut, Some(reader))
            }
        };
        let snapshot = match cut.snapshot {
            Some(s) => ChannelSnapshot::Job(s),
            None => ChannelSnapshot::Correlation(self.correlation_snapshots(&cut.jobs)),
        };
        let live = Self::live_stream(cut.rx);
        Ok(Some(Opened {
            head: cut.head,
            snapshot,
            backlog: cut.backlog,
            covered: cut.covered,
            ended: cut.ended,
            live: match reader {
                Some(reader) => Guarded {
                    live,
                    _reader: reader,
                }
                .boxed(),
                None => live,
            },
        }))
    }

    async fn replay(&self, channel: &Channel, after: Seq) -> Result<Replay, StoreError> {
        let Some(log) = self.log(channel) else {
            return Ok(Replay {
                events: Vec::new(),
                covered: false,
                head: after,
            });
        };
        let state = log.lock();
        let (events, covered) = state.since(after);
        Ok(Replay {
            events,
            covered,
            head: state.head,
        })
    }

    async fn expire(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        let retention = self.inner.retention_ms;
        let expired: Vec<JobId> = self
            .inner
            .jobs
            .iter()
            .filter(|e| match &e.value().lock().kind {
                LogKind::Job(s) => s
                    .finished_at
                    .is_some_and(|f| f.saturating_add(retention) <= now),
                LogKind::Correlation { .. } => false,
            })
            .map(|e| *e.key())
            .collect();
        for id in &expired {
            self.inner.jobs.remove(id);
        }
        let jobs = &self.inner.jobs;
        self.inner.correlations.retain(|_, log| {
            let state = log.lock();
            match &state.kind {
                // Kept while someone reads it: a reader waiting longer than the retention
                // for its first job would otherwise follow a log no job reaches.
                LogKind::Correlation {
                    jobs: ids,
                    last_activity,
                } => {
                    last_activity.saturating_add(retention) > now
                        || ids.iter().any(|id| jobs.contains_key(id))
                        || state.has_readers()
                }
                LogKind::Job(_) => true,
            }
        });
        Ok(expired.len())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl Bus for MemoryStore {
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError> {
        let Some(snapshot) = self.snapshot(job).await? else {
            return Ok(CancelAck::Unknown);
        };
        if snapshot.status.is_terminal() {
            return Ok(CancelAck::AlreadyTerminal(Box::new(snapshot)));
        }
        // No receiver means no job runner in this process, which cannot happen while the
        // bridge runs; the job's owner-loss handling covers a runner that is gone.
        let _ = self.inner.cancels.send(CancelRequest {
            job_id: job,
            reason,
            abandon: false,
        });
        Ok(CancelAck::Requested(Box::new(snapshot)))
    }

    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest> {
        BroadcastStream::new(self.inner.cancels.subscribe())
            .filter_map(|r| async move { r.ok() })
            .boxed()
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError> {
        Ok(self.inner.tasks.add(principal, job, cap))
    }

    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError> {
        Ok(self.inner.tasks.page(principal, after, limit))
    }
}

#[cfg(test)]
mod tests {
    //! What only the memory store has. The behaviours both stores share (numbering, the
    //! terminal rule, history, live delivery, cancels, correlations) are one suite run against
    //! each: `tests/it/store_conformance.rs`.

    use super::*;

    fn new_job() -> NewJob {
        NewJob {
            id: JobId::random(),
            tool: "demo__t".into(),
            upstream: "demo".into(),
            upstream_tool: "t".into(),
            correlation_id: None,
            owner: "test".into(),
            principal: None,
        }
    }

    #[tokio::test]
    async fn expire_drops_only_finished_jobs_past_retention() {
        let store = MemoryStore::new(100, 0);
        let running = store.create_job(new_job()).await.unwrap().job_id;
        let done = store.create_job(new_job()).await.unwrap().job_id;
        store
            .append(done, EventBody::Cancelled { reason: "x".into() })
            .await
            .unwrap();
        assert_eq!(store.expire().await.unwrap(), 1);
        assert!(store.snapshot(done).await.unwrap().is_none());
        assert!(store.snapshot(running).await.unwrap().is_some());
    }

    /// A correlation opened before any job: kept while read (even past the retention), a
    /// job that starts meanwhile reaches its reader, and one never used goes with its last
    /// reader.
    #[tokio::test]
    async fn a_correlation_only_read_goes_with_its_last_reader() {
        let store = MemoryStore::new(100, 0);
        let made_up = Channel::Correlation("made-up".parse().unwrap());
        let a = store.open(&made_up, Some(0)).await.unwrap().unwrap();
        let b = store.open(&made_up, Some(0)).await.unwrap().unwrap();
        assert_eq!(store.inner.correlations.len(), 1);
        drop(a);
        assert_eq!(store.inner.correlations.len(), 1, "b still reads it");
        drop(b);
        assert_eq!(store.inner.correlations.len(), 0, "nothing left by readers");

        let turn = Channel::Correlation("turn".parse().unwrap());
        let mut reader = store.open(&turn, Some(0)).await.unwrap().unwrap();
        store.expire().await.unwrap();
        let mut job = new_job();
        job.correlation_id = Some("turn".parse().unwrap());
        store.create_job(job).await.unwrap();
        match reader.live.next().await {
            Some(LiveItem::Event(event)) => assert_eq!(event.seq, 1),
            _ => panic!("the job's start reaches the reader that waited past the retention"),
        }
        drop(reader);
        assert_eq!(
            store.inner.correlations.len(),
            1,
            "a used correlation stays"
        );
    }
}
