//! What a reader follows, and positions in it.

use super::{CorrelationId, JobId};

/// What a subscriber reads: one job's events, or all events of the jobs of one correlation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Channel {
    Job(JobId),
    Correlation(CorrelationId),
}

/// Position of an event in its channel; the first event is 1, 0 means "before any event". It is
/// the SSE `id:` of the event, and what a reader resumes from (`Last-Event-ID`).
pub type Seq = u64;
