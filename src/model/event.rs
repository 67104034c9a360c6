//! Job events as the bridge's layers pass them around: what the job owner appends
//! ([`EventBody`]), and the names events go by on the wire ([`EventKind`]). How an event is
//! written out (its JSON data and SSE frame) is in [`super::wire`].

use serde::Serialize;
use serde_json::Value;

use super::{InputQuestion, JobFailure};

/// The SSE event name (`event:` line) of an event. The names are part of the external
/// contract; [`EventKind::as_str`] is the one place they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Status,
    Progress,
    Log,
    Heartbeat,
    Completed,
    Failed,
    Cancelled,
    Reset,
    JobStarted,
    InputRequired,
    InputAnswered,
}

impl EventKind {
    /// Every kind, for reading a name back ([`EventKind::named`]).
    pub const ALL: [EventKind; 11] = [
        EventKind::Status,
        EventKind::Progress,
        EventKind::Log,
        EventKind::Heartbeat,
        EventKind::Completed,
        EventKind::Failed,
        EventKind::Cancelled,
        EventKind::Reset,
        EventKind::JobStarted,
        EventKind::InputRequired,
        EventKind::InputAnswered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Status => "status",
            EventKind::Progress => "progress",
            EventKind::Log => "log",
            EventKind::Heartbeat => "heartbeat",
            EventKind::Completed => "completed",
            EventKind::Failed => "failed",
            EventKind::Cancelled => "cancelled",
            EventKind::Reset => "reset",
            EventKind::JobStarted => "job_started",
            EventKind::InputRequired => "input_required",
            EventKind::InputAnswered => "input_answered",
        }
    }

    /// The kind whose name is `name` (as bytes read back from a stored frame).
    pub fn named(name: &[u8]) -> Option<EventKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str().as_bytes() == name)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EventKind::Completed | EventKind::Failed | EventKind::Cancelled
        )
    }

    /// An event after which the job's status may be another: a question asked or answered,
    /// the end.
    pub fn may_change_status(self) -> bool {
        self.is_terminal() || matches!(self, EventKind::InputRequired | EventKind::InputAnswered)
    }
}

/// One progress report, after hygiene (finite, increasing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressUpdate {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What the job owner appends to a job's log. The store assigns the sequence number and
/// timestamp, folds the event into the job snapshot, and renders it once for all readers.
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    Progress(ProgressUpdate),
    /// An upstream `notifications/message` received during the call.
    Log {
        level: String,
        logger: Option<String>,
        data: Value,
    },
    /// The upstream's `CallToolResult`, as JSON.
    Completed {
        result: Value,
    },
    /// `result` is the upstream's own result when it was a tool error (`isError: true`);
    /// `rpc_error` the JSON-RPC error object when the upstream answered with one.
    Failed {
        failure: JobFailure,
        result: Option<Value>,
        rpc_error: Option<Value>,
    },
    /// `reason` is a sentence for people (who cancelled, how), not a [`super::FailureReason`]:
    /// the snapshot of a cancelled job has `error.reason` `cancelled` and this as the message.
    Cancelled {
        reason: String,
    },
    /// The tool asked a question (an upstream `elicitation/create`) that a person answers.
    InputRequired(InputQuestion),
    /// The question `key` was answered (`action` accept, decline or cancel) `by` the answer
    /// path named (`POST /jobs/{id}/input`, `tasks/update`, `timeout`, …). The content of an
    /// answer is not in the event: it goes to the tool only.
    InputAnswered {
        key: String,
        action: String,
        by: String,
    },
}

impl EventBody {
    pub fn kind(&self) -> EventKind {
        match self {
            EventBody::Progress(_) => EventKind::Progress,
            EventBody::Log { .. } => EventKind::Log,
            EventBody::Completed { .. } => EventKind::Completed,
            EventBody::Failed { .. } => EventKind::Failed,
            EventBody::Cancelled { .. } => EventKind::Cancelled,
            EventBody::InputRequired(_) => EventKind::InputRequired,
            EventBody::InputAnswered { .. } => EventKind::InputAnswered,
        }
    }
}

/// A live-only signal that is never stored: it carries the sequence number of the last stored
/// event, so it never moves a reader's resume position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heartbeat {
    pub elapsed_ms: u64,
    pub since_progress_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_name() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::named(kind.as_str().as_bytes()), Some(kind));
        }
        assert_eq!(EventKind::named(b"nope"), None);
    }
}
