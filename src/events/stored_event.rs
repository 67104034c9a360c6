//! An event as the store keeps and delivers it: numbered in its channel and already rendered.
//!
//! A storage concept, not vocabulary: only a store makes one (at append time, or when reading
//! history back), and readers take it from the store. The format it is rendered in is the
//! model's ([`crate::model::wire`]).

use bytes::Bytes;

use crate::model::{EventKind, Seq, wire::sse_frame};

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

    /// Render the SSE frame for an event at `seq` of its channel, around its JSON `data`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventBody, JobId, ProgressUpdate, wire::render_job_event};

    #[test]
    fn the_frame_is_rendered_once_around_the_data() {
        let id = JobId::random();
        let body = EventBody::Progress(ProgressUpdate {
            progress: 3.0,
            total: None,
            message: Some("three".into()),
        });
        let data = render_job_event(id, 7, 1000, &body);
        let ev = StoredEvent::render(7, EventKind::Progress, data.clone(), false);
        let frame = std::str::from_utf8(&ev.frame).unwrap();
        assert!(
            frame.starts_with("id: 7\nevent: progress\ndata: {"),
            "{frame}"
        );
        assert!(frame.ends_with("}\n\n"));
        assert_eq!(frame.matches('\n').count(), 4);
        assert_eq!(ev.data, data);
    }
}
