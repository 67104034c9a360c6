//! The index of the tasks `tasks/list` (MCP 2025-11-25) shows: the [`Store`] (a `Broker` and a
//! `Bus` that keep it), and the index of a store of one replica ([`super::MemoryStore`]): the last `jobs.max_listed_tasks` tasks of each caller, newest
//! last, as the Redis store keeps them (`redis::tasks`), so one caller's tasks never push
//! another's out. The callers of one replica are not bounded in number (every JWT subject is
//! one), its memory must be: all lists together hold at most [`TOTAL_PER_CAP`] times that,
//! and past it the longest list forgets its oldest task (a flood forgets its own first).

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::{
    events::{Broker, Bus, StoreError},
    model::{JobId, Principal},
};

/// A store: the events' [`Broker`] and [`Bus`], and the index of tasks for `tasks/list`.
#[async_trait]
pub trait Store: Broker + Bus {
    /// Remember task `job` of `principal` for `tasks/list` (MCP 2025-11-25), newest last,
    /// within `cap` tasks of each caller (the memory store: in the replica, all callers
    /// together within four times `cap`; Redis: shared by every replica); whether an older
    /// one was forgotten for it.
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` of `principal`'s listed tasks, newest first, after `after` (a task of an
    /// earlier page); `None` if `after` is not one of theirs (or no longer listed). A task
    /// whose job has expired may be among them: the caller skips what it cannot read.
    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError>;
}

/// All callers' lists together hold at most this many times `jobs.max_listed_tasks`: no
/// caller has more than a quarter of the replica's index.
pub(super) const TOTAL_PER_CAP: usize = 4;

#[derive(Default)]
pub(super) struct TaskIndex {
    lists: Mutex<Lists>,
}

#[derive(Default)]
struct Lists {
    by_principal: HashMap<Principal, VecDeque<JobId>>,
    total: usize,
}

impl Lists {
    /// Forget the oldest task of the longest list (a scan of the callers, made only when the
    /// index is full).
    fn forget_from_longest(&mut self) {
        let longest = self
            .by_principal
            .iter()
            .max_by_key(|(_, list)| list.len())
            .map(|(p, _)| p.clone());
        let Some(longest) = longest else { return };
        if let Some(list) = self.by_principal.get_mut(&longest) {
            list.pop_front();
            self.total -= 1;
            if list.is_empty() {
                self.by_principal.remove(&longest);
            }
        }
    }
}

impl TaskIndex {
    /// Remember a task of `principal`, `capacity` (`jobs.max_listed_tasks`) kept per caller;
    /// whether an older one had to be forgotten for it.
    pub(super) fn add(&self, principal: &Principal, id: JobId, capacity: usize) -> bool {
        let capacity = capacity.max(1);
        let mut lists = self.lists.lock();
        let lists = &mut *lists;
        let own = lists.by_principal.entry(principal.clone()).or_default();
        let mut forgot = false;
        while own.len() >= capacity {
            own.pop_front();
            lists.total -= 1;
            forgot = true;
        }
        own.push_back(id);
        lists.total += 1;
        while lists.total > capacity.saturating_mul(TOTAL_PER_CAP) {
            lists.forget_from_longest();
            forgot = true;
        }
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
        let lists = self.lists.lock();
        let Some(list) = lists.by_principal.get(principal) else {
            return after.is_none().then(Vec::new);
        };
        let mut theirs = list.iter().rev().copied();
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
        assert!(index.add(&a, JobId::random(), 5));
        assert!(!index.page(&a, None, 100).unwrap().contains(&ids[0]));
    }

    /// One caller's flood of tasks forgets its own oldest, never another's: each caller has
    /// its own list, and when all of them fill the replica's bound the longest list gives.
    #[test]
    fn one_callers_tasks_never_push_anothers_out() {
        let index = TaskIndex::default();
        let (victim, flood) = (Principal::token("victim"), Principal::token("flood"));
        let kept: Vec<JobId> = (0..3).map(|_| JobId::random()).collect();
        for id in &kept {
            assert!(!index.add(&victim, *id, 4));
        }
        for _ in 0..10_000 {
            index.add(&flood, JobId::random(), 4);
        }
        assert_eq!(index.page(&victim, None, 100).unwrap().len(), 3);
        assert_eq!(index.page(&flood, None, 100).unwrap().len(), 4);
        // Many callers together stay within the replica's bound; the longest lists give.
        for i in 0..100 {
            index.add(&Principal::token(&format!("c{i}")), JobId::random(), 4);
        }
        let total = index.lists.lock().total;
        assert!(total <= 4 * TOTAL_PER_CAP, "{total}");
        let held: usize = index
            .lists
            .lock()
            .by_principal
            .values()
            .map(VecDeque::len)
            .sum();
        assert_eq!(held, total);
    }
}
