//! What went wrong in the store behind the events, for the log and for a client.

use crate::model::JobId;

/// Why the store behind the events could not do what was asked. The message is whole (what happened and what
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
