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
mod timed;

pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore};
pub use task_index::Store;
pub use timed::TimedStore;
