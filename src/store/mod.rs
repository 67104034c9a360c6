//! Where jobs and their events live, behind one trait. `memory` is the embedded default; a
//! shared engine (Redis) implements the same trait so that any replica can serve any job.
//!
//! The store owns three things per job: the snapshot, the event log (capped history for
//! `Last-Event-ID` replay) and the live fan-out to subscribers. Appending an event does all
//! three at once, so a reader that opens a channel gets a consistent cut: a snapshot at some
//! sequence number, the history after it, and every live event after that.
//!
//! Only storage is here; the job vocabulary is [`crate::model`]'s. The types below say how a
//! store hands things out ([`StoredEvent`], [`Opened`], [`LiveItem`], [`Replay`]) and routes
//! cancels and answers between replicas ([`CancelRequest`], [`AnswerRequest`], [`Relayed`]).

pub mod memory;
pub mod redis;
mod stored_event;
mod task_index;

use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};

pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore};
pub use stored_event::StoredEvent;

pub use crate::model::{AnswerVerdict, CancelAck};
use crate::model::{
    Channel, EventBody, Heartbeat, InputAnswer, JobId, JobSnapshot, NewJob, Principal, Seq, now_ms,
};

/// Why the store could not do what was asked. The message is whole (what happened and what
/// to check), for the log: it may name the Redis address and the OS error. A client is told
/// [`StoreError::public_message`] instead.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("a job with ID {0} already exists")]
    Duplicate(JobId),
    #[error("the job store is unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// What a client may be told: what to do, and no internals (addresses, credentials in
    /// URLs, OS errors); whoever answers logs the whole error.
    pub fn public_message(&self) -> &'static str {
        match self {
            StoreError::Duplicate(_) => {
                "the bridge made a job ID that already exists (this should not happen); try again"
            }
            StoreError::Unavailable(_) => {
                "the job store is unreachable and the bridge is reconnecting; try again in a few \
                 seconds (the bridge's log has the reason)"
            }
        }
    }
}

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

/// A request to stop a running job, routed to the replica that runs its upstream call.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    pub job_id: JobId,
    pub reason: String,
}

/// An answer for a job this replica runs, passed on by the replica it reached (what it answers
/// waits only here, in the job's runner).
#[derive(Debug, Clone)]
pub struct AnswerRequest {
    pub job_id: JobId,
    pub answer: RelayedAnswer,
    /// The answer path, for the job's `input_answered` event.
    pub by: String,
    /// Where the verdict goes ([`Store::reply_answer`]).
    pub reply: ReplyTo,
}

/// What a relayed answer answers.
#[derive(Debug, Clone, PartialEq)]
pub enum RelayedAnswer {
    /// A question of the job (it waits on the job's input desk for anyone who may answer).
    Question(InputAnswer),
    /// A request the job's tool made of its waiting 2026-07-28 caller (a sample, the roots),
    /// under the key the caller's `inputResponses` names it by, and the answer as the caller
    /// gave it (unchecked: the owner checks it as a local one).
    CallerRequest {
        key: String,
        value: serde_json::Value,
    },
}

/// The replica waiting for the verdict on a relayed answer, and until when it waits.
#[derive(Debug, Clone)]
pub struct ReplyTo {
    pub(crate) replica: String,
    pub(crate) id: u64,
    /// Milliseconds since the epoch: past it the answering replica has told its client the
    /// answer is unconfirmed, so the answer must not be taken any more.
    pub(crate) expires_ms: u64,
}

impl ReplyTo {
    /// The answering replica no longer waits: the answer must be dropped, not taken.
    pub fn expired(&self) -> bool {
        now_ms() > self.expires_ms
    }
}

/// How relaying an answer to the job's replica ended, for the answering replica.
#[derive(Debug, Clone, PartialEq)]
pub enum Relayed {
    Verdict(AnswerVerdict),
    /// No verdict within the wait (`store.input_relay_timeout_ms`): the job's replica drops
    /// the answer if it gets it later, but one on its way at the deadline may have been taken.
    Unconfirmed {
        waited_ms: u64,
    },
    /// Nobody listens on the job's replica's channel (it is gone, or reconnecting to Redis):
    /// nothing was delivered.
    OwnerAway,
    /// Too many answers of this replica wait for verdicts already.
    Busy,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Record a new running job (and announce it on its correlation channel, if any).
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError>;

    /// Append an event to a job: assign its sequence number, fold it into the snapshot, keep
    /// it in history, deliver it live (and copy it to the job's correlation channel).
    /// Returns `None`, appending nothing, when the job is unknown or already ended: nothing
    /// follows a terminal event.
    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError>;

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

    /// Ask the job's owner to cancel it.
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError>;

    /// Cancel requests for jobs that this replica owns.
    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest>;

    /// Pass an answer (to a question, or to a request the tool made of its caller) for job
    /// `job` to its replica `owner` (not this one), and wait (bounded) for its verdict. A store of one replica has nobody to pass it to.
    async fn relay_answer(
        &self,
        _owner: &str,
        _job: JobId,
        _answer: RelayedAnswer,
        _by: String,
    ) -> Result<Relayed, StoreError> {
        Ok(Relayed::OwnerAway)
    }

    /// Answers other replicas passed on for jobs this replica runs (none have expired yet).
    fn answer_requests(&self) -> BoxStream<'static, AnswerRequest> {
        futures::stream::pending().boxed()
    }

    /// Send the verdict on a relayed answer back to the replica that waits for it.
    async fn reply_answer(&self, _to: ReplyTo, _verdict: AnswerVerdict) -> Result<(), StoreError> {
        Ok(())
    }

    /// Remember task `job` of `principal` for `tasks/list` (MCP 2025-11-25), newest last,
    /// within `cap` (the memory store: `cap` tasks of all callers; Redis: `cap` of each
    /// caller, shared by every replica); whether an older one was forgotten for it.
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` of `principal`'s listed tasks, newest first, after `after` (a task of an
    /// earlier page); `None` if `after` is not one of theirs (or no longer listed). A task
    /// whose job has expired may be among them: the caller skips what it cannot read.
    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError>;

    /// Drop finished jobs past retention. Returns how many were dropped.
    async fn expire(&self) -> Result<usize, StoreError>;

    /// Whether the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
}
