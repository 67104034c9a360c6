//! Job events: what the job owner appends, and the rendered form every subscriber shares.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::{JobId, Seq};

/// The SSE event name (`event:` line) of an event.
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
}

impl EventKind {
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
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EventKind::Completed | EventKind::Failed | EventKind::Cancelled
        )
    }
}

/// One progress report, after hygiene (finite, increasing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressUpdate {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Why a job failed, as a short machine-readable word plus a sentence for people.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct JobFailure {
    pub reason: String,
    pub message: String,
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
    Cancelled {
        reason: String,
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

/// An event as stored and sent. `frame` is the complete SSE frame (`id:`, `event:`, `data:`),
/// rendered once when the event is appended; every subscriber writes the same bytes, so a
/// fan-out to thousands of readers costs a reference count each, not a copy.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// Position in the channel this event belongs to (a job, or a correlation).
    pub seq: Seq,
    pub kind: EventKind,
    /// The `data:` JSON alone, for consumers other than SSE (long-poll tools).
    pub data: Bytes,
    pub frame: Bytes,
    /// Live-only (heartbeat): not in history, does not advance the position.
    pub ephemeral: bool,
}

impl StoredEvent {
    pub fn is_terminal(&self) -> bool {
        self.kind.is_terminal()
    }

    /// Render the JSON data and the SSE frame for an event at `seq` of its channel.
    pub fn render(seq: Seq, kind: EventKind, data: Bytes, ephemeral: bool) -> Self {
        let frame = sse_frame(seq, kind.as_str(), &data);
        Self {
            seq,
            kind,
            data,
            frame,
            ephemeral,
        }
    }
}

/// `id: N\nevent: KIND\ndata: JSON\n\n`. Compact JSON never contains a raw newline, so one
/// `data:` line is always enough.
pub fn sse_frame(seq: Seq, kind: &str, data: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(data.len() + kind.len() + 40);
    frame.extend_from_slice(b"id: ");
    frame.extend_from_slice(itoa_u64(seq).as_bytes());
    frame.extend_from_slice(b"\nevent: ");
    frame.extend_from_slice(kind.as_bytes());
    frame.extend_from_slice(b"\ndata: ");
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

fn itoa_u64(n: u64) -> String {
    n.to_string()
}

/// The JSON `data` of a stored job event: `job_id`, `seq`, `ts` and the body's own fields.
pub fn render_job_event(job_id: JobId, seq: Seq, ts: u64, body: &EventBody) -> Bytes {
    #[derive(Serialize)]
    struct Envelope<'a, B: Serialize> {
        job_id: JobId,
        seq: Seq,
        ts: u64,
        #[serde(flatten)]
        body: &'a B,
    }
    #[derive(Serialize)]
    struct Log<'a> {
        level: &'a str,
        logger: &'a Option<String>,
        data: &'a Value,
    }
    #[derive(Serialize)]
    struct Completed<'a> {
        status: &'static str,
        result: &'a Value,
    }
    #[derive(Serialize)]
    struct Failed<'a> {
        status: &'static str,
        reason: &'a str,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: &'a Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rpc_error: &'a Option<Value>,
    }
    #[derive(Serialize)]
    struct Cancelled<'a> {
        status: &'static str,
        reason: &'a str,
    }
    let bytes = match body {
        EventBody::Progress(p) => to_vec(&Envelope {
            job_id,
            seq,
            ts,
            body: p,
        }),
        EventBody::Log {
            level,
            logger,
            data,
        } => to_vec(&Envelope {
            job_id,
            seq,
            ts,
            body: &Log {
                level,
                logger,
                data,
            },
        }),
        EventBody::Completed { result } => to_vec(&Envelope {
            job_id,
            seq,
            ts,
            body: &Completed {
                status: "completed",
                result,
            },
        }),
        EventBody::Failed {
            failure,
            result,
            rpc_error,
        } => to_vec(&Envelope {
            job_id,
            seq,
            ts,
            body: &Failed {
                status: "failed",
                reason: &failure.reason,
                message: &failure.message,
                result,
                rpc_error,
            },
        }),
        EventBody::Cancelled { reason } => to_vec(&Envelope {
            job_id,
            seq,
            ts,
            body: &Cancelled {
                status: "cancelled",
                reason,
            },
        }),
    };
    Bytes::from(bytes)
}

/// The JSON `data` of a heartbeat.
pub fn render_heartbeat(job_id: JobId, seq: Seq, ts: u64, beat: &Heartbeat) -> Bytes {
    #[derive(Serialize)]
    struct Envelope<'a> {
        job_id: JobId,
        seq: Seq,
        ts: u64,
        #[serde(flatten)]
        beat: &'a Heartbeat,
    }
    Bytes::from(to_vec(&Envelope {
        job_id,
        seq,
        ts,
        beat,
    }))
}

/// Serializing these plain structs cannot fail (string keys, finite numbers checked by
/// progress hygiene); should it ever, the event still goes out as an empty object rather than
/// taking the job down.
pub(crate) fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| {
        tracing::error!(error = %e, "event did not serialize");
        b"{}".to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_event_data_has_the_contract_fields() {
        let id = JobId::random();
        let body = EventBody::Progress(ProgressUpdate {
            progress: 3.0,
            total: None,
            message: Some("three".into()),
        });
        let data = render_job_event(id, 7, 1000, &body);
        let v: Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(v["job_id"], id.to_string());
        assert_eq!(v["seq"], 7);
        assert_eq!(v["progress"], 3.0);
        assert!(v["total"].is_null());
        assert_eq!(v["message"], "three");
        assert_eq!(v["ts"], 1000);
        let ev = StoredEvent::render(7, EventKind::Progress, data.clone(), false);
        let frame = std::str::from_utf8(&ev.frame).unwrap();
        assert!(
            frame.starts_with("id: 7\nevent: progress\ndata: {"),
            "{frame}"
        );
        assert!(frame.ends_with("}\n\n"));
        assert_eq!(frame.matches('\n').count(), 4);
    }
}
