//! This replica's relayed answers waiting for their verdicts from the replicas running their
//! jobs: bounded in all (`limits.max_input_relays`) and per principal of the answered jobs
//! (`limits.max_input_relays_per_principal`), so that one principal's answers, held up by a
//! replica slow to give verdicts, leave room for another's. An answer past either bound is
//! refused at once (`Relayed::Busy`). Jobs of the anonymous principal (an open `/mcp`, where
//! every caller is that one principal) count in all only.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::sync::oneshot;

use crate::model::{AnswerVerdict, Principal};

/// The bound an answer found full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RelaysFull {
    Replica,
    Principal,
}

pub(super) struct Relays {
    max: usize,
    max_per_principal: usize,
    next: AtomicU64,
    /// A plain mutex: held for a map operation, never across an `.await`.
    state: parking_lot::Mutex<State>,
}

#[derive(Default)]
struct State {
    waiting: HashMap<u64, Waiting>,
    per_principal: HashMap<Principal, usize>,
}

struct Waiting {
    /// The answered job's principal, when it counts against a share.
    principal: Option<Principal>,
    verdict: oneshot::Sender<AnswerVerdict>,
}

impl Relays {
    pub(super) fn new(max: usize, max_per_principal: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            max_per_principal: max_per_principal.max(1),
            next: AtomicU64::new(1),
            state: parking_lot::Mutex::default(),
        })
    }

    /// A place for an answer to a job of `principal`: its request number, the place (given
    /// back when dropped) and where the verdict arrives; or the bound that is full.
    pub(super) fn wait(
        self: &Arc<Self>,
        principal: Option<&Principal>,
    ) -> Result<(u64, RelayPlace, oneshot::Receiver<AnswerVerdict>), RelaysFull> {
        let principal = principal.filter(|p| **p != Principal::anonymous());
        let mut state = self.state.lock();
        if state.waiting.len() >= self.max {
            return Err(RelaysFull::Replica);
        }
        if let Some(p) = principal
            && state.per_principal.get(p).copied().unwrap_or(0) >= self.max_per_principal
        {
            return Err(RelaysFull::Principal);
        }
        if let Some(p) = principal {
            *state.per_principal.entry(p.clone()).or_default() += 1;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let waiting = Waiting {
            principal: principal.cloned(),
            verdict: tx,
        };
        state.waiting.insert(id, waiting);
        let place = RelayPlace {
            relays: self.clone(),
            id,
        };
        Ok((id, place, rx))
    }

    /// The verdict on request `id` arrived: to its waiting answer, if it still waits.
    pub(super) fn settle(&self, id: u64, verdict: AnswerVerdict) {
        if let Some(waiting) = self.release(id) {
            let _ = waiting.verdict.send(verdict);
        }
    }

    fn release(&self, id: u64) -> Option<Waiting> {
        let mut state = self.state.lock();
        let waiting = state.waiting.remove(&id)?;
        if let Some(p) = &waiting.principal
            && let Some(count) = state.per_principal.get_mut(p)
        {
            *count -= 1;
            if *count == 0 {
                state.per_principal.remove(p);
            }
        }
        Some(waiting)
    }
}

/// A relayed answer's place among those waiting for a verdict, given back when dropped.
pub(super) struct RelayPlace {
    relays: Arc<Relays>,
    id: u64,
}

impl Drop for RelayPlace {
    fn drop(&mut self) {
        self.relays.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One principal stops at its share, another still finds room, the anonymous principal
    /// counts in all only, and every place given back (answered or dropped) is free again.
    #[test]
    fn one_principal_takes_at_most_its_share() {
        let relays = Relays::new(4, 2);
        let (alice, bob) = (Principal::token("alice"), Principal::token("bob"));
        let a1 = relays.wait(Some(&alice)).unwrap();
        let a2 = relays.wait(Some(&alice)).unwrap();
        assert_eq!(relays.wait(Some(&alice)).err(), Some(RelaysFull::Principal));
        let b1 = relays.wait(Some(&bob)).unwrap();
        let anonymous = relays.wait(Some(&Principal::anonymous())).unwrap();
        assert_eq!(relays.wait(None).err(), Some(RelaysFull::Replica));
        assert_eq!(relays.wait(Some(&bob)).err(), Some(RelaysFull::Replica));

        // A verdict frees its place and reaches its answer; a dropped place is free too.
        let (id, _place, mut verdict) = a1;
        relays.settle(id, AnswerVerdict::Taken);
        assert_eq!(verdict.try_recv().unwrap(), AnswerVerdict::Taken);
        let a3 = relays.wait(Some(&alice)).unwrap();
        drop(a2);
        drop(anonymous);
        let a4 = relays.wait(Some(&alice)).unwrap();
        assert_eq!(relays.wait(Some(&alice)).err(), Some(RelaysFull::Principal));
        drop((a3, a4, b1));
        let state = relays.state.lock();
        assert!(state.waiting.is_empty() && state.per_principal.is_empty());
    }
}
