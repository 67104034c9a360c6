//! The tasks `tasks/list` (MCP 2025-11-25) shows, for a store of one replica
//! ([`super::MemoryStore`]): the last `jobs.max_listed_tasks` tasks of all callers together,
//! newest last. One bound across callers, not one per caller: the callers of one replica
//! are not bounded in number (every JWT subject is one), its memory must be. The Redis store
//! keeps one index per caller in Redis instead (`redis::tasks`), each expiring on its own.

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::model::{JobId, Principal};

#[derive(Default)]
pub(super) struct TaskIndex {
    entries: Mutex<VecDeque<(Principal, JobId)>>,
}

impl TaskIndex {
    /// Remember a task of `principal`; whether an older one had to be forgotten for it.
    pub(super) fn add(&self, principal: &Principal, id: JobId, capacity: usize) -> bool {
        let mut entries = self.entries.lock();
        let mut forgot = false;
        while entries.len() >= capacity.max(1) {
            entries.pop_front();
            forgot = true;
        }
        entries.push_back((principal.clone(), id));
        forgot
    }

    /// Up to `limit` task IDs of `principal`, newest first, starting after `after` (a task
    /// ID of an earlier page); `None` if `after` is not one of theirs here.
    pub(super) fn page(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Option<Vec<JobId>> {
        let entries = self.entries.lock();
        let mut theirs = entries
            .iter()
            .rev()
            .filter(|(p, _)| p == principal)
            .map(|(_, id)| *id);
        if let Some(after) = after {
            theirs.by_ref().find(|id| *id == after)?;
        }
        Some(theirs.take(limit).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_pages_one_callers_tasks_newest_first() {
        let index = TaskIndex::default();
        let a = Principal::token("a");
        let b = Principal::token("b");
        let ids: Vec<JobId> = (0..5).map(|_| JobId::random()).collect();
        for id in &ids {
            index.add(&a, *id, 100);
        }
        index.add(&b, JobId::random(), 100);
        let first = index.page(&a, None, 2).unwrap();
        assert_eq!(first, vec![ids[4], ids[3]]);
        let second = index.page(&a, Some(ids[3]), 2).unwrap();
        assert_eq!(second, vec![ids[2], ids[1]]);
        // Another caller's task, or an unknown one, is no cursor.
        assert!(index.page(&b, Some(ids[3]), 2).is_none());
        assert!(index.page(&a, Some(JobId::random()), 2).is_none());
        // The bound forgets the oldest first.
        assert!(index.add(&a, JobId::random(), 6));
        assert!(!index.page(&a, None, 100).unwrap().contains(&ids[0]));
    }
}
