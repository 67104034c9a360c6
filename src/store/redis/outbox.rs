//! The jobs this replica runs, and the events it holds for them while Redis is away.
//!
//! The owner is the only writer of its running jobs, so it keeps a copy of each snapshot (and
//! sends Redis only the fields that changed) and knows which sequence number Redis will assign
//! (a retried write is idempotent). Redis unreachable: events are held in order, at most
//! `outage_buffer` per job, and written in order when it returns; past the bound a progress
//! merges into the newest held one and a log line is dropped; the terminal event is always
//! held. If the job was ended elsewhere meanwhile (owner lost), the held events are discarded
//! and the upstream call is cancelled.

use std::{
    collections::VecDeque,
    sync::{Arc, atomic::AtomicU64},
};

use parking_lot::{Mutex, MutexGuard};

use super::codec::SplitData;
use crate::model::{CorrelationId, EventKind, JobSnapshot, Seq};

/// One event ready to be written by the append script.
#[derive(Debug)]
pub(super) struct Write {
    pub kind: EventKind,
    pub data: SplitData,
    pub terminal: bool,
    /// Snapshot fields the event changes (JSON text).
    pub fields: Vec<(String, String)>,
    /// The sequence number this event gets; 0 when not known (a write by a non-owner).
    pub expect: Seq,
    pub owner: String,
    pub correlation: Option<CorrelationId>,
    /// Whose write this is: refused by Redis unless the job is still theirs (none: a write
    /// that is not fenced).
    pub fence: Option<Fence>,
    /// The seq the job's own keys stored this event at (0: not yet): a retry after the job's
    /// part ran only copies it to the correlation, which is written in another slot.
    pub stored: AtomicU64,
}

/// The owner (its name as the job hash holds it, JSON text) and the generation a write is
/// made under: the append script refuses it once another replica adopted the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fence {
    pub owner: String,
    pub generation: u64,
}

impl Fence {
    pub(super) fn new(owner: &str, generation: u64) -> Self {
        Self {
            owner: serde_json::Value::from(owner).to_string(),
            generation,
        }
    }
}

pub(super) struct Owned {
    state: Mutex<OwnedState>,
    /// The generation this replica owns the job at (0 for the job it created, the claimed
    /// one for a job it adopted).
    pub generation: u64,
}

pub(super) struct OwnedState {
    pub snapshot: JobSnapshot,
    pub held: VecDeque<Arc<Write>>,
}

/// What holding an event did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Held {
    Queued,
    /// The buffer was full: the event was merged into the newest held one.
    Merged,
    /// The buffer was full: the event was dropped (its snapshot changes were kept).
    Dropped,
}

impl Owned {
    pub(super) fn new(snapshot: JobSnapshot, generation: u64) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(OwnedState {
                snapshot,
                held: VecDeque::new(),
            }),
            generation,
        })
    }

    /// A plain (`parking_lot`) mutex: held for a fold or a queue operation, never across an `.await`.
    pub(super) fn lock(&self) -> MutexGuard<'_, OwnedState> {
        self.state.lock()
    }
}

impl OwnedState {
    /// Queue `write` behind the held events, within `cap` (see the module doc).
    pub(super) fn hold(&mut self, write: Write, cap: usize) -> Held {
        // The front may be in flight to Redis: never rewrite it.
        let full = self.held.len() >= cap && self.held.len() >= 2;
        if write.terminal || !full {
            self.held.push_back(Arc::new(write));
            return Held::Queued;
        }
        // One event fewer reaches Redis: the next number is one lower than counted.
        self.snapshot.seq -= 1;
        let Some(back) = self.held.back_mut() else {
            return Held::Dropped;
        };
        let mut fields = back.fields.clone();
        for (name, value) in write.fields {
            match fields.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => fields.push((name, value)),
            }
        }
        let merge = write.kind == EventKind::Progress && back.kind == EventKind::Progress;
        let (kind, data) = if merge {
            (write.kind, write.data)
        } else {
            (back.kind, back.data.clone())
        };
        *back = Arc::new(Write {
            kind,
            data,
            terminal: back.terminal,
            fields,
            expect: back.expect,
            owner: back.owner.clone(),
            correlation: back.correlation.clone(),
            fence: back.fence.clone(),
            stored: AtomicU64::new(0),
        });
        if merge { Held::Merged } else { Held::Dropped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobId, NewJob};
    use bytes::Bytes;

    fn write(kind: EventKind, expect: Seq, field: (&str, &str)) -> Write {
        Write {
            kind,
            data: SplitData {
                before: Bytes::from(format!("{expect}")),
                after: Bytes::new(),
            },
            terminal: kind.is_terminal(),
            fields: vec![(field.0.into(), field.1.into())],
            expect,
            owner: "r".into(),
            correlation: None,
            fence: None,
            stored: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_full_buffer_merges_progress_keeps_the_terminal_and_never_touches_the_front() {
        let snapshot = JobSnapshot::new(
            &NewJob {
                id: JobId::random(),
                tool: "t".into(),
                upstream: "u".into(),
                upstream_tool: "t".into(),
                correlation_id: None,
                owner: "r".into(),
                principal: None,
            },
            0,
        );
        let mut state = OwnedState {
            snapshot,
            held: VecDeque::new(),
        };
        state.snapshot.seq = 10;
        assert_eq!(
            state.hold(write(EventKind::Progress, 1, ("progress", "1")), 2),
            Held::Queued
        );
        assert_eq!(
            state.hold(write(EventKind::Progress, 2, ("progress", "2")), 2),
            Held::Queued
        );
        assert_eq!(
            state.hold(write(EventKind::Progress, 3, ("message", "\"m\"")), 2),
            Held::Merged
        );
        assert_eq!(state.snapshot.seq, 9);
        assert_eq!(state.held.len(), 2);
        let back = state.held.back().unwrap();
        assert_eq!(
            back.expect, 2,
            "the merged event takes the held one's place"
        );
        assert_eq!(&back.data.before[..], b"3", "with the newest data");
        assert_eq!(back.fields.len(), 2, "and every field change");
        assert_eq!(&state.held.front().unwrap().data.before[..], b"1");
        assert_eq!(
            state.hold(write(EventKind::Log, 3, ("updated_at", "5")), 2),
            Held::Dropped
        );
        assert_eq!(
            state.hold(
                write(EventKind::Completed, 3, ("status", "\"completed\"")),
                2
            ),
            Held::Queued
        );
        assert_eq!(state.held.len(), 3);
    }
}
