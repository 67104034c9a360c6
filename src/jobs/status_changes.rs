//! One job's status followed from one store subscription: its snapshot at once, then one per
//! change of status (a question asked or answered, the end). For pushing a task's status to
//! the client that follows it, however long the task lives, at one snapshot read per event
//! that can change the status (and per lag) and no new subscription per change.

use std::sync::Arc;

use futures::StreamExt;

use crate::{
    events::{LiveItem, LiveStream},
    model::{Channel, JobId, JobSnapshot, JobStatus},
    store::Store,
};

/// The changes of one job's status; see [`StatusChanges::next`].
pub struct StatusChanges {
    store: Arc<dyn Store>,
    id: JobId,
    /// `None` once nothing more can come (the job ended, or the subscription closed).
    live: Option<LiveStream>,
    last: Option<JobStatus>,
}

impl StatusChanges {
    /// Subscribed before the first look, so no change falls between the two. `None` when
    /// there is no such job.
    pub(super) async fn open(
        store: Arc<dyn Store>,
        id: JobId,
    ) -> Result<Option<Self>, crate::events::StoreError> {
        let Some(opened) = store.open(&Channel::Job(id), None).await? else {
            return Ok(None);
        };
        let live = (!opened.ended).then_some(opened.live);
        Ok(Some(Self {
            store,
            id,
            live,
            last: None,
        }))
    }

    /// The job's snapshot when its status is other than the last one given (the first call
    /// answers at once); `None` after the terminal status was given, when the job is gone,
    /// or when the store cannot answer or its subscription closed (shutdown).
    pub async fn next(&mut self) -> Option<JobSnapshot> {
        if matches!(self.last, Some(status) if status.is_terminal()) {
            return None;
        }
        loop {
            if self.last.is_some() {
                let live = self.live.as_mut()?;
                if !next_that_may_change_status(live).await {
                    // Closed: one last look tells whether an end slipped past.
                    self.live = None;
                }
            }
            let snapshot = self.store.snapshot(self.id).await.ok().flatten()?;
            if self.last != Some(snapshot.status) {
                self.last = Some(snapshot.status);
                return Some(snapshot);
            }
            self.live.as_ref()?;
        }
    }
}

/// Wait for an event that can change a job's status (or a lag, which may have skipped one);
/// false when the subscription closed.
async fn next_that_may_change_status(live: &mut LiveStream) -> bool {
    while let Some(item) = live.next().await {
        let may_change = match item {
            LiveItem::Event(event) => event.kind.may_change_status(),
            LiveItem::Lagged => true,
        };
        if may_change {
            return true;
        }
    }
    false
}
