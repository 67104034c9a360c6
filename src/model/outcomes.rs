//! What a cancel request and an answer to a tool's question came to: returned by `jobs` to
//! the front door, and (the verdict) carried between replicas by the store.

use super::JobSnapshot;

/// What a cancel request came to.
#[derive(Debug, Clone)]
pub enum CancelAck {
    /// The request was routed to the job's owner; the snapshot is from before the cancel.
    Requested(Box<JobSnapshot>),
    /// The job had already ended; nothing was sent.
    AlreadyTerminal(Box<JobSnapshot>),
    Unknown,
}

/// What the job's replica did with a relayed answer: the same outcomes as a local answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum AnswerVerdict {
    /// The tool has it.
    Taken,
    UnknownJob,
    NothingToAnswer,
    Mismatch {
        field: String,
        problem: String,
    },
    TooLarge {
        size: usize,
        limit: usize,
    },
    /// An answer to a caller request that is not the result that request wants (`expected`,
    /// the answer to `method`), nor a JSON-RPC error object; `error` says where it differs.
    Unfit {
        expected: String,
        method: String,
        error: String,
    },
}
