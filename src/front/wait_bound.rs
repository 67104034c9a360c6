//! How long a caller can wait for one `wait_for_job` answer, learned from the caller itself.
//! Some agent frameworks read every MCP answer with a short timeout (the OpenAI Agents SDK:
//! 5 s) and then call again; a wait longer than that fails there every time. A caller shows
//! its bound when it gives up on a pending wait (a `notifications/cancelled`, or simply a
//! second `wait_for_job` for the same job while the first still waits): the bound is the time
//! the first had waited, at most what that wait was allowed. Later waits of that caller answer
//! a margin before it. A retry sooner than [`MIN_BOUND`] is two waits in parallel, not a retry.
//!
//! A caller is its MCP session, else its principal. Both maps are bounded
//! (`limits.max_wait_bounds`): past it the oldest learned bound is forgotten, and a wait that
//! finds no room is not followed (`bridge_limit_hits_total{limit="max_wait_bounds"}`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus::{IntCounter, IntCounterVec};

use crate::model::{JobId, Principal};

/// Below this, a second wait is a parallel call, not a retry: nothing is learned.
pub const MIN_BOUND: Duration = Duration::from_secs(2);
/// The least time a wait answers before a learned bound (the answer must travel back).
const MIN_MARGIN: Duration = Duration::from_millis(750);
/// How long a wait the caller gave up on is remembered, waiting for its retry.
const GAVE_UP_KEPT: Duration = Duration::from_secs(120);
const LIMIT_KEY: &str = "max_wait_bounds";

/// Who waits: the MCP session, or on the session-less revision the principal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    Session(String),
    Principal(Principal),
}

impl Waiter {
    pub fn of(session: Option<&str>, principal: &Principal) -> Self {
        match session {
            Some(s) => Self::Session(s.to_string()),
            None => Self::Principal(principal.clone()),
        }
    }
}

/// The learned bounds of this replica's callers and the waits followed to learn them. Cheap
/// to clone.
#[derive(Clone)]
pub struct WaitBounds {
    inner: Arc<Inner>,
}

struct Inner {
    /// Entries of each map at most (`limits.max_wait_bounds`).
    cap: usize,
    /// A plain mutex: held for a map operation, never across an `.await`.
    state: Mutex<State>,
    learned_total: IntCounter,
    limit_hits: IntCounterVec,
}

#[derive(Default)]
struct State {
    /// A caller's bound and when it was learned (the oldest is forgotten first).
    learned: HashMap<Waiter, (Duration, Instant)>,
    /// The latest wait of a caller for a job.
    pending: HashMap<(Waiter, JobId), Pending>,
    next_ticket: u64,
}

struct Pending {
    ticket: u64,
    started: Instant,
    /// How long this wait was allowed.
    within: Duration,
    /// The caller gave up after this long (its cancel), and when.
    gave_up: Option<(Duration, Instant)>,
}

impl Pending {
    /// How long the caller waited for this one before it asked again (or gave up).
    fn waited(&self, now: Instant) -> Duration {
        self.gave_up.map_or_else(
            || now.saturating_duration_since(self.started),
            |(after, _)| after,
        )
    }
}

/// One `wait_for_job` followed: dropped when it answers (its caller waited for it), or
/// [`WaitTicket::gave_up`] when the caller cancelled it.
pub struct WaitTicket {
    inner: Arc<Inner>,
    key: Option<(Waiter, JobId)>,
    ticket: u64,
    within: Duration,
}

impl WaitTicket {
    /// How long this wait may block: what was asked, less than the caller's bound.
    pub fn within(&self) -> Duration {
        self.within
    }

    /// The caller cancelled this wait: kept for a while as the measure of its bound, should
    /// it ask again.
    pub fn gave_up(self) {
        self.gave_up_at(Instant::now());
    }

    fn gave_up_at(mut self, now: Instant) {
        let Some(key) = self.key.take() else { return };
        let mut state = self.inner.state.lock().expect("wait bounds lock");
        if let Some(p) = state
            .pending
            .get_mut(&key)
            .filter(|p| p.ticket == self.ticket)
        {
            p.gave_up = Some((now.saturating_duration_since(p.started), now));
        }
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut state = self.inner.state.lock().expect("wait bounds lock");
            if state
                .pending
                .get(&key)
                .is_some_and(|p| p.ticket == self.ticket)
            {
                state.pending.remove(&key);
            }
        }
    }
}

/// How long before `bound` a wait answers: a fifth of it, at least [`MIN_MARGIN`].
pub fn answer_within(bound: Duration) -> Duration {
    bound.saturating_sub(MIN_MARGIN.max(bound / 5))
}

impl WaitBounds {
    pub fn new(cap: usize, learned_total: IntCounter, limit_hits: IntCounterVec) -> Self {
        Self {
            inner: Arc::new(Inner {
                cap: cap.max(1),
                state: Mutex::new(State::default()),
                learned_total,
                limit_hits,
            }),
        }
    }

    /// The bound learned for `waiter`, if any.
    pub fn learned(&self, waiter: &Waiter) -> Option<Duration> {
        let state = self.inner.state.lock().expect("wait bounds lock");
        state.learned.get(waiter).map(|(bound, _)| *bound)
    }

    /// A wait of `waiter` for `job`, asked to block `asked`: learns from the caller's previous
    /// wait for the job if it is still pending or was given up, and answers how long this one
    /// may block.
    pub fn begin(&self, waiter: Waiter, job: JobId, asked: Duration) -> WaitTicket {
        self.begin_at(waiter, job, asked, Instant::now())
    }

    fn begin_at(&self, waiter: Waiter, job: JobId, asked: Duration, now: Instant) -> WaitTicket {
        let inner = &self.inner;
        let mut state = inner.state.lock().expect("wait bounds lock");
        let key = (waiter, job);
        if let Some(previous) = state.pending.get(&key) {
            let waited = previous.waited(now);
            if waited >= MIN_BOUND {
                let bound = waited.min(previous.within.max(MIN_BOUND));
                state.learn(inner, key.0.clone(), bound, now);
            }
        }
        let within = match state.learned.get(&key.0) {
            Some((bound, _)) => asked.min(answer_within(*bound)),
            None => asked,
        };
        state.next_ticket += 1;
        let ticket = state.next_ticket;
        let pending = Pending {
            ticket,
            started: now,
            within,
            gave_up: None,
        };
        let followed = state.follow(inner, key.clone(), pending, now);
        WaitTicket {
            inner: inner.clone(),
            key: followed.then_some(key),
            ticket,
            within,
        }
    }

    /// `session` ended: what was learned of it goes.
    pub fn forget_session(&self, session: &str) {
        let waiter = Waiter::Session(session.to_string());
        let mut state = self.inner.state.lock().expect("wait bounds lock");
        state.learned.remove(&waiter);
        state.pending.retain(|(w, _), _| w != &waiter);
    }
}

impl State {
    /// Learns `bound` for `waiter` (the shorter one, if one was learned before), forgetting
    /// the oldest bound when the map is full.
    fn learn(&mut self, inner: &Inner, waiter: Waiter, bound: Duration, now: Instant) {
        if let Some((known, at)) = self.learned.get_mut(&waiter) {
            *known = (*known).min(bound);
            *at = now;
        } else {
            if self.learned.len() >= inner.cap {
                inner.limit_hits.with_label_values(&[LIMIT_KEY]).inc();
                let oldest = self.learned.iter().min_by_key(|(_, (_, at))| *at);
                if let Some(oldest) = oldest.map(|(w, _)| w.clone()) {
                    self.learned.remove(&oldest);
                }
            }
            self.learned.insert(waiter, (bound, now));
        }
        inner.learned_total.inc();
    }

    /// Follows a wait, replacing the caller's previous one for the job; false when the map is
    /// full even of waits given up long ago.
    fn follow(&mut self, inner: &Inner, key: (Waiter, JobId), wait: Pending, now: Instant) -> bool {
        if !self.pending.contains_key(&key) && self.pending.len() >= inner.cap {
            self.pending.retain(|_, p| {
                p.gave_up
                    .is_none_or(|(_, at)| now.saturating_duration_since(at) < GAVE_UP_KEPT)
            });
            if self.pending.len() >= inner.cap {
                inner.limit_hits.with_label_values(&[LIMIT_KEY]).inc();
                return false;
            }
        }
        self.pending.insert(key, wait);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASKED: Duration = Duration::from_secs(20);

    fn bounds(cap: usize) -> (WaitBounds, IntCounter, IntCounterVec) {
        let learned = IntCounter::new("learned", "learned").unwrap();
        let hits = IntCounterVec::new(prometheus::Opts::new("hits", "hits"), &["limit"]).unwrap();
        (
            WaitBounds::new(cap, learned.clone(), hits.clone()),
            learned,
            hits,
        )
    }

    fn session(name: &str) -> Waiter {
        Waiter::of(Some(name), &Principal::anonymous())
    }

    fn secs(s: f64) -> Duration {
        Duration::from_millis((s * 1000.0).round() as u64)
    }

    #[test]
    fn a_retry_while_the_first_wait_is_pending_teaches_the_bound() {
        let (bounds, learned, _) = bounds(16);
        let (job, t0) = (JobId::random(), Instant::now());
        let first = bounds.begin_at(session("a"), job, ASKED, t0);
        assert_eq!(
            first.within(),
            ASKED,
            "nothing learned yet: the wait asked for"
        );
        // The client gave up after 5 s (no cancel sent) and asked again.
        let second = bounds.begin_at(session("a"), job, ASKED, t0 + secs(5.0));
        assert_eq!(bounds.learned(&session("a")), Some(secs(5.0)));
        assert_eq!(second.within(), secs(4.0), "a fifth of the bound before it");
        assert_eq!(learned.get(), 1);
        // Another session, another caller: nothing learned of it.
        let other = bounds.begin_at(session("b"), job, ASKED, t0 + secs(5.0));
        assert_eq!(other.within(), ASKED);
    }

    #[test]
    fn a_cancelled_wait_measures_the_bound_when_the_caller_asks_again() {
        let (bounds, _, _) = bounds(16);
        let (job, t0) = (JobId::random(), Instant::now());
        bounds
            .begin_at(session("a"), job, ASKED, t0)
            .gave_up_at(t0 + secs(5.0));
        // The model took 3 s to ask again: the cancel, not the retry, is the measure.
        let retry = bounds.begin_at(session("a"), job, ASKED, t0 + secs(8.0));
        assert_eq!(bounds.learned(&session("a")), Some(secs(5.0)));
        assert_eq!(retry.within(), secs(4.0));
    }

    #[test]
    fn a_bound_too_long_is_lowered_by_the_next_give_up() {
        let (bounds, _, _) = bounds(16);
        let (job, t0) = (JobId::random(), Instant::now());
        let _first = bounds.begin_at(session("a"), job, ASKED, t0);
        // Retry after 8 s (5 s timeout + 3 s of model): learned 8 s, next waits 6.4 s.
        let second = bounds.begin_at(session("a"), job, ASKED, t0 + secs(8.0));
        assert_eq!(second.within(), secs(6.4));
        // That one is given up too (the client still times out at 5 s): the bound is now at
        // most what that wait was allowed, and shrinks until the answers come in time.
        let third = bounds.begin_at(session("a"), job, ASKED, t0 + secs(16.0));
        assert_eq!(bounds.learned(&session("a")), Some(secs(6.4)));
        assert!(third.within() < secs(6.4));
    }

    #[test]
    fn parallel_waits_and_answered_waits_teach_nothing() {
        let (bounds, learned, _) = bounds(16);
        let (job, t0) = (JobId::random(), Instant::now());
        let first = bounds.begin_at(session("a"), job, ASKED, t0);
        let parallel = bounds.begin_at(session("a"), job, ASKED, t0 + secs(0.5));
        assert_eq!(parallel.within(), ASKED);
        drop((first, parallel));
        // Answered (the tickets dropped): the next wait, however late, is no retry.
        let later = bounds.begin_at(session("a"), job, ASKED, t0 + secs(30.0));
        assert_eq!(later.within(), ASKED);
        assert_eq!(learned.get(), 0);
        assert_eq!(bounds.learned(&session("a")), None);
    }

    #[test]
    fn a_short_bound_still_leaves_a_wait() {
        assert_eq!(answer_within(MIN_BOUND), secs(1.25));
        assert_eq!(answer_within(secs(60.0)), secs(48.0));
    }

    #[test]
    fn a_hostile_caller_cannot_grow_the_maps_past_the_cap() {
        let (bounds, _, hits) = bounds(4);
        let t0 = Instant::now();
        let mut held = Vec::new();
        for i in 0..100 {
            let waiter = session(&format!("s{i}"));
            let job = JobId::random();
            held.push(bounds.begin_at(waiter.clone(), job, ASKED, t0));
            held.push(bounds.begin_at(waiter, job, ASKED, t0 + secs(5.0)));
        }
        let state = bounds.inner.state.lock().unwrap();
        assert!(
            state.pending.len() <= 4,
            "{} waits followed",
            state.pending.len()
        );
        assert!(
            state.learned.len() <= 4,
            "{} bounds kept",
            state.learned.len()
        );
        assert!(hits.with_label_values(&[LIMIT_KEY]).get() > 0);
    }

    #[test]
    fn an_ended_session_is_forgotten() {
        let (bounds, _, _) = bounds(16);
        let (job, t0) = (JobId::random(), Instant::now());
        let _first = bounds.begin_at(session("a"), job, ASKED, t0);
        let _second = bounds.begin_at(session("a"), job, ASKED, t0 + secs(5.0));
        bounds.forget_session("a");
        assert_eq!(bounds.learned(&session("a")), None);
        assert!(bounds.inner.state.lock().unwrap().pending.is_empty());
    }
}
