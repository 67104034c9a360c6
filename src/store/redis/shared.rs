//! History read back from Redis, shared by the readers that read it. Every reader's catch-up
//! reads its own copy of the stream entries, and a reader that has not read them yet holds
//! them in its queue: with a 10 MiB result in a job's terminal event, each reader held a copy
//! of its own. Here a large event read again is swapped for the copy some reader already
//! holds (checked byte for byte: a correlation ID can come back after its channel expired,
//! with its numbers starting over), so readers hold one copy between them. Weak references
//! only: a copy lives as long as some reader holds it.

use std::{
    collections::HashMap,
    sync::{Arc, Weak},
};

use parking_lot::Mutex;

use crate::{
    events::StoredEvent,
    model::{Channel, Seq},
};

/// Frames from this size up are shared; a smaller copy costs less than looking it up.
const SHARE_FROM: usize = 1024;
/// Entries past which dead ones are swept out (then at twice what is left).
const SWEEP: usize = 1024;

#[derive(Default)]
pub(super) struct SharedHistory {
    events: Mutex<Events>,
}

#[derive(Default)]
struct Events {
    held: HashMap<(Channel, Seq), Weak<StoredEvent>>,
    sweep_at: usize,
}

impl SharedHistory {
    /// `event` of `channel`, as the copy a reader already holds if there is one.
    pub(super) fn share(&self, channel: &Channel, event: StoredEvent) -> Arc<StoredEvent> {
        if event.frame.len() < SHARE_FROM {
            return Arc::new(event);
        }
        let key = (channel.clone(), event.seq);
        let held = self.events.lock().held.get(&key).and_then(Weak::upgrade);
        if let Some(held) = held
            && held.frame == event.frame
        {
            return held;
        }
        let event = Arc::new(event);
        let mut events = self.events.lock();
        if events.held.len() >= events.sweep_at.max(SWEEP) {
            events.held.retain(|_, e| e.strong_count() > 0);
            events.sweep_at = events.held.len() * 2;
        }
        events.held.insert(key, Arc::downgrade(&event));
        event
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::model::{EventKind, JobId};

    #[test]
    fn one_copy_of_a_large_event_while_someone_holds_it() {
        let shared = SharedHistory::default();
        let job = Channel::Job(JobId::random());
        let data = Bytes::from(vec![b'x'; 2 * SHARE_FROM]);
        let read = || StoredEvent::render(3, EventKind::Completed, data.clone(), false);
        let a = shared.share(&job, read());
        let b = shared.share(&job, read());
        assert!(Arc::ptr_eq(&a, &b));
        let other = Channel::Job(JobId::random());
        assert!(!Arc::ptr_eq(&a, &shared.share(&other, read())));
        let changed = StoredEvent::render(3, EventKind::Failed, data.clone(), false);
        assert!(
            !Arc::ptr_eq(&a, &shared.share(&job, changed)),
            "same seq, other bytes"
        );
        let small = StoredEvent::render(4, EventKind::Progress, Bytes::from_static(b"{}"), false);
        let small_again = small.clone();
        assert!(!Arc::ptr_eq(
            &shared.share(&job, small),
            &shared.share(&job, small_again)
        ));
    }
}
