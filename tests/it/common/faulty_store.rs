//! The memory store behind a wrapper that injects faults on demand, so that a failure that is
//! rare in a real store happens exactly, every run: live events lost on their way, history
//! reads failing (as while Redis reconnects), appends of chosen kinds slow (as on a loaded
//! machine or a slow Redis). Everything not faulted is the memory store's own answer.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use mcp_progress_bridge::{
    events::{Broker, Bus, CancelRequest, LiveItem, Opened, Replay, StoreError},
    model::CancelAck,
    model::{Channel, EventBody, EventKind, Heartbeat, JobId, JobSnapshot, NewJob, Principal, Seq},
    store::{MemoryStore, Store},
};

/// The memory store, with faults on demand.
pub struct FaultyStore {
    inner: MemoryStore,
    /// Job events with these numbers never reach a live stream.
    lost: Mutex<HashSet<Seq>>,
    /// Appending an event of one of these kinds first waits this long.
    slow: Mutex<Vec<(EventKind, Duration)>>,
    /// History reads fail (as when Redis is reconnecting).
    pub unavailable: AtomicBool,
    /// History reads that failed for `unavailable`.
    pub failed_replays: AtomicUsize,
}

impl FaultyStore {
    /// No fault yet; history of 100 events per job.
    pub fn new() -> Arc<Self> {
        Self::with_history(100)
    }

    /// No fault yet; history of `history` events per job.
    pub fn with_history(history: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(history, 3600),
            lost: Mutex::new(HashSet::new()),
            slow: Mutex::new(Vec::new()),
            unavailable: AtomicBool::new(false),
            failed_replays: AtomicUsize::new(0),
        })
    }

    /// The job event numbered `seq` never reaches a live stream (history has it).
    pub fn lose(&self, seq: Seq) {
        self.lost.lock().unwrap().insert(seq);
    }

    /// Appending an event of one of `kinds` waits `delay` before it is written.
    pub fn slow_appends(&self, kinds: &[EventKind], delay: Duration) {
        let mut slow = self.slow.lock().unwrap();
        slow.extend(kinds.iter().map(|&kind| (kind, delay)));
    }

    fn slow_append(&self, kind: EventKind) -> Option<Duration> {
        let slow = self.slow.lock().unwrap();
        slow.iter()
            .find(|(k, _)| *k == kind)
            .map(|&(_, delay)| delay)
    }
}

#[async_trait]
impl Broker for FaultyStore {
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError> {
        self.inner.create_job(job).await
    }

    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError> {
        let kind = body.kind();
        let delay = self.slow_append(kind);
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        self.inner.append(job, body).await
    }

    async fn heartbeat(&self, job: JobId, beat: Heartbeat) -> Result<(), StoreError> {
        self.inner.heartbeat(job, beat).await
    }

    async fn record_reattach(
        &self,
        job: JobId,
        record: &mcp_progress_bridge::model::Reattach,
    ) -> Result<bool, StoreError> {
        self.inner.record_reattach(job, record).await
    }

    async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError> {
        self.inner.snapshot(job).await
    }

    async fn open(
        &self,
        channel: &Channel,
        after: Option<Seq>,
    ) -> Result<Option<Opened>, StoreError> {
        let Some(mut opened) = self.inner.open(channel, after).await? else {
            return Ok(None);
        };
        let lost = self.lost.lock().unwrap().clone();
        opened.live = opened
            .live
            .filter(move |item| {
                let keep = match item {
                    LiveItem::Event(e) => e.ephemeral || !lost.contains(&e.seq),
                    LiveItem::Lagged => true,
                };
                async move { keep }
            })
            .boxed();
        Ok(Some(opened))
    }

    async fn replay(&self, channel: &Channel, after: Seq) -> Result<Replay, StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            self.failed_replays.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable(
                "Redis is reconnecting (test)".into(),
            ));
        }
        self.inner.replay(channel, after).await
    }

    async fn expire(&self) -> Result<usize, StoreError> {
        self.inner.expire().await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl Bus for FaultyStore {
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError> {
        self.inner.request_cancel(job, reason).await
    }

    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest> {
        self.inner.cancel_requests()
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError> {
        self.inner.list_task(principal, job, cap).await
    }

    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError> {
        self.inner.listed_tasks(principal, after, limit).await
    }
}
