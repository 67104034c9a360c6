//! The read and write side of event channels: append, history, live subscription.

use std::{sync::Arc, time::Instant};

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::{error::StoreError, stored_event::StoredEvent};
use crate::model::{Channel, EventBody, Heartbeat, JobId, JobSnapshot, NewJob, Reattach, Seq};

/// One item of a live subscription.
#[derive(Debug, Clone)]
pub enum LiveItem {
    Event(Arc<StoredEvent>),
    /// The subscriber fell behind and missed live events; it must re-read history from its
    /// last position (and get a `reset` if history no longer reaches back that far).
    Lagged,
}

pub type LiveStream = BoxStream<'static, LiveItem>;

/// What a reader gets when it opens a channel: a consistent cut plus the live tail.
pub struct Opened {
    /// Sequence number of the newest stored event at the moment of the cut.
    pub head: Seq,
    /// For a job channel, the snapshot at `head`. For a correlation, the snapshots of its jobs.
    pub snapshot: ChannelSnapshot,
    /// Events after the requested position, oldest first (empty when none was requested).
    pub backlog: Vec<Arc<StoredEvent>>,
    /// False when the requested position is older than the retained history: the reader
    /// missed events that are gone and must be given a `reset`.
    pub covered: bool,
    /// The channel has ended (a job's terminal event is stored); nothing more will come.
    pub ended: bool,
    /// Live events after `head` (and possibly some at or before it, which readers skip).
    pub live: LiveStream,
}

#[derive(Debug, Clone)]
pub enum ChannelSnapshot {
    Job(Box<JobSnapshot>),
    Correlation(Vec<JobSnapshot>),
}

/// The history after a position, for a reader that lagged.
pub struct Replay {
    pub events: Vec<Arc<StoredEvent>>,
    pub covered: bool,
    pub head: Seq,
}

#[async_trait]
pub trait Broker: Send + Sync + 'static {
    /// Record a new running job (and announce it on its correlation channel, if any).
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError>;

    /// Append an event to a job: assign its sequence number, fold it into the snapshot, keep
    /// it in history, deliver it live (and copy it to the job's correlation channel).
    /// Returns `None`, appending nothing, when the job is unknown or already ended: nothing
    /// follows a terminal event.
    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError>;

    /// [`Broker::append`] of what an upstream reported at `received`: the event's
    /// [`StoredEvent::born`] where the store keeps the instant (in this process), so that
    /// the delivery lag counts from the report. `cursor`: the id of the upstream's stream event
    /// that carried it, kept with the event in one step where another replica may resume the
    /// stream (the job's resume cursor: never ahead of its events, never behind).
    async fn append_received(
        &self,
        job: JobId,
        body: EventBody,
        received: Instant,
        cursor: Option<&str>,
    ) -> Result<Option<Seq>, StoreError> {
        let _ = (received, cursor);
        self.append(job, body).await
    }

    /// Keep, beside the running job, how another replica re-attaches to its upstream call, and
    /// show the job as durable (its snapshot's `durability`). True when kept; false when this
    /// store's jobs cannot outlive this process (the memory store: nobody would read it), or
    /// the job is no longer this replica's to run.
    async fn record_reattach(&self, job: JobId, record: &Reattach) -> Result<bool, StoreError>;

    /// Deliver a live-only heartbeat to the job's current subscribers.
    async fn heartbeat(&self, job: JobId, beat: Heartbeat) -> Result<(), StoreError>;

    async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError>;

    /// Open a channel for reading. `after`: the last sequence number the reader has (its
    /// `Last-Event-ID`), or `None` for a fresh reader. `None` when the channel is unknown.
    async fn open(
        &self,
        channel: &Channel,
        after: Option<Seq>,
    ) -> Result<Option<Opened>, StoreError>;

    /// History after `after`, for a reader whose live subscription lagged.
    async fn replay(&self, channel: &Channel, after: Seq) -> Result<Replay, StoreError>;

    /// Drop finished jobs past retention. Returns how many were dropped.
    async fn expire(&self) -> Result<usize, StoreError>;

    /// Whether the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
}
