//! Where jobs and their events live: `memory`, the embedded default, and `redis`, shared by
//! replicas so that any replica can serve any job. Each is an events [`Broker`] and [`Bus`]
//! (`crate::events` says what those promise) and keeps the task index ([`Store`]).
//!
//! Appending an event folds it into the snapshot, keeps it in the capped history and delivers
//! it live, at once, so a reader that opens a channel gets a consistent cut: a snapshot at
//! some sequence number, the history after it, and every live event after that.

pub mod memory;
pub mod redis;
mod task_index;

use async_trait::async_trait;

use crate::events::{
    Adopted, AnswerRequest, Broker, Bus, CancelRequest, ChannelSnapshot, LiveItem, LiveStream,
    Opened, Relayed, RelayedAnswer, Replay, ReplyTo, StoreError, StoredEvent,
};
pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore};

use crate::model::{AnswerVerdict, CancelAck, JobId, Principal};

/// A store: the events' [`Broker`] and [`Bus`], and the index of tasks for `tasks/list`.
#[async_trait]
pub trait Store: Broker + Bus {
    /// Remember task `job` of `principal` for `tasks/list` (MCP 2025-11-25), newest last,
    /// within `cap` tasks of each caller (the memory store: in the replica, all callers
    /// together within four times `cap`; Redis: shared by every replica); whether an older
    /// one was forgotten for it.
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
}
