//! A store that times every call of the one it wraps (`bridge_store_call_duration_seconds`,
//! by operation), so that the memory store and Redis are measured the same way, at the one
//! place every layer calls them. Streams (live tails, cancel and answer requests, adoptions)
//! are handed through untimed: they are not calls.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::Store;
use crate::{
    events::{
        Adopted, AnswerRequest, Broker, Bus, CancelRequest, Opened, Relay, Relayed, Replay,
        ReplyTo, StoreError,
    },
    metrics::{Metrics, StoreOp},
    model::{
        AnswerVerdict, CancelAck, Channel, EventBody, Heartbeat, JobId, JobSnapshot, NewJob,
        Principal, Reattach, Seq,
    },
};

/// `inner`, each call timed in `metrics`.
pub struct TimedStore {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl TimedStore {
    pub fn wrap(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Arc<dyn Store> {
        Arc::new(Self { inner, metrics })
    }

    async fn timed<T>(&self, op: StoreOp, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let answer = call.await;
        self.observe(op, started.elapsed());
        answer
    }

    fn observe(&self, op: StoreOp, elapsed: Duration) {
        let histogram = self
            .metrics
            .store_call_duration
            .with_label_values(&[op.label()]);
        Metrics::observe(&histogram, elapsed);
    }
}

#[async_trait]
impl Broker for TimedStore {
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError> {
        self.timed(StoreOp::CreateJob, self.inner.create_job(job))
            .await
    }

    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError> {
        self.timed(StoreOp::Append, self.inner.append(job, body))
            .await
    }

    async fn append_received(
        &self,
        job: JobId,
        body: EventBody,
        received: Instant,
        cursor: Option<&str>,
    ) -> Result<Option<Seq>, StoreError> {
        let call = self.inner.append_received(job, body, received, cursor);
        self.timed(StoreOp::Append, call).await
    }

    async fn record_reattach(&self, job: JobId, record: &Reattach) -> Result<bool, StoreError> {
        let call = self.inner.record_reattach(job, record);
        self.timed(StoreOp::RecordReattach, call).await
    }

    async fn heartbeat(&self, job: JobId, beat: Heartbeat) -> Result<(), StoreError> {
        self.timed(StoreOp::Heartbeat, self.inner.heartbeat(job, beat))
            .await
    }

    async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError> {
        self.timed(StoreOp::Snapshot, self.inner.snapshot(job))
            .await
    }

    async fn open(
        &self,
        channel: &Channel,
        after: Option<Seq>,
    ) -> Result<Option<Opened>, StoreError> {
        self.timed(StoreOp::Open, self.inner.open(channel, after))
            .await
    }

    async fn replay(&self, channel: &Channel, after: Seq) -> Result<Replay, StoreError> {
        self.timed(StoreOp::Replay, self.inner.replay(channel, after))
            .await
    }

    async fn expire(&self) -> Result<usize, StoreError> {
        self.timed(StoreOp::Expire, self.inner.expire()).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed(StoreOp::Ping, self.inner.ping()).await
    }
}

#[async_trait]
impl Bus for TimedStore {
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError> {
        let call = self.inner.request_cancel(job, reason);
        self.timed(StoreOp::RequestCancel, call).await
    }

    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest> {
        self.inner.cancel_requests()
    }

    async fn relay_answer(&self, relay: Relay) -> Result<Relayed, StoreError> {
        let call = self.inner.relay_answer(relay);
        self.timed(StoreOp::RelayAnswer, call).await
    }

    fn answer_requests(&self) -> BoxStream<'static, AnswerRequest> {
        self.inner.answer_requests()
    }

    async fn reply_answer(&self, to: ReplyTo, verdict: AnswerVerdict) -> Result<(), StoreError> {
        let call = self.inner.reply_answer(to, verdict);
        self.timed(StoreOp::ReplyAnswer, call).await
    }

    fn adoptions(&self) -> BoxStream<'static, Adopted> {
        self.inner.adoptions()
    }

    fn hand_over(&self) {
        self.inner.hand_over()
    }
}

#[async_trait]
impl Store for TimedStore {
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError> {
        let call = self.inner.list_task(principal, job, cap);
        self.timed(StoreOp::ListTask, call).await
    }

    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError> {
        let call = self.inner.listed_tasks(principal, after, limit);
        self.timed(StoreOp::ListedTasks, call).await
    }
}
