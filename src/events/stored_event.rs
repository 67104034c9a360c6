//! An event as the store keeps and delivers it: numbered in its channel and already rendered.
//!
//! A storage concept, not vocabulary: only a store makes one (at append time, or when reading
//! history back), and readers take it from the store. The format it is rendered in is the
//! model's ([`crate::model::wire`]).

use std::time::Instant;

use bytes::Bytes;

use super::sse_frame;
use crate::model::{EventKind, Seq};

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
    /// When what it carries reached this process: the upstream's report (see
    /// `Broker::append_received`), else the event's making here or its arrival from Redis.
    /// What `bridge_sse_delivery_lag_seconds` counts from.
    pub born: Instant,
}

impl StoredEvent {
    pub fn is_terminal(&self) -> bool {
        self.kind.is_terminal()
    }

    /// Render the SSE frame for an event at `seq` of its channel, around its JSON `data`.
    pub fn render(seq: Seq, kind: EventKind, data: Bytes, ephemeral: bool) -> Self {
        let frame = sse_frame::frame(seq, kind.as_str(), &data);
        Self {
            seq,
            kind,
            data,
            frame,
            ephemeral,
            born: Instant::now(),
        }
    }

    /// Read back a frame made by [`StoredEvent::render`] (or by the Redis store's scripts, in
    /// the same format). The frame is kept as is; `data` is a slice of it.
    pub fn from_frame(frame: Bytes) -> Option<Self> {
        let (seq, kind, data) = sse_frame::parse(&frame)?;
        let kind = EventKind::named(kind)?;
        Some(Self {
            seq,
            kind,
            data: frame.slice(data),
            frame,
            ephemeral: kind == EventKind::Heartbeat,
            born: Instant::now(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventBody, JobId, ProgressUpdate, wire::render_job_event};
    use bytes::Bytes;

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

    #[test]
    fn frames_parse_back_into_the_event_the_memory_store_would_have_made() {
        let job = JobId::random();
        let data = render_job_event(job, 12, 1, &EventBody::Cancelled { reason: "x".into() });
        let made = StoredEvent::render(12, EventKind::Cancelled, data.clone(), false);
        let parsed = StoredEvent::from_frame(made.frame.clone()).unwrap();
        assert_eq!(
            (parsed.seq, parsed.kind, &parsed.data, parsed.ephemeral),
            (12, EventKind::Cancelled, &data, false)
        );
        assert!(
            StoredEvent::from_frame(Bytes::from_static(b"id: x\nevent: log\ndata: {}\n\n"))
                .is_none()
        );
        assert!(
            StoredEvent::from_frame(Bytes::from_static(b"id: 1\nevent: nope\ndata: {}\n\n"))
                .is_none()
        );
    }
}
