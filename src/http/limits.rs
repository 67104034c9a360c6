//! Limits the HTTP side enforces: open SSE streams (per channel and in total) and the request
//! rate on `/mcp` per caller. Each refusal tells the client when to come back.

use std::{
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use governor::{
    Quota, RateLimiter,
    clock::{Clock, DefaultClock},
    state::{InMemoryState, NotKeyed},
};

use crate::{config::LimitsConfig, model::Principal};

/// What a refused stream is told: try again after this long.
pub const SUBSCRIBER_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Counts open SSE streams. A stream holds a [`SubscriberPermit`] for as long as it is open.
pub struct Subscribers {
    per_channel: usize,
    total_max: usize,
    total: AtomicUsize,
    /// Open streams by channel key; entries go when their count drops to zero.
    channels: DashMap<String, usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscribersFull {
    #[error(
        "this channel already has {0} open streams (limits.max_subscribers_per_channel); close one or retry later"
    )]
    Channel(usize),
    #[error("the bridge already serves {0} open streams (limits.max_subscribers); retry later")]
    Total(usize),
}

impl Subscribers {
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        Arc::new(Self {
            per_channel: limits.max_subscribers_per_channel,
            total_max: limits.max_subscribers,
            total: AtomicUsize::new(0),
            channels: DashMap::new(),
        })
    }

    /// Take a place for one more stream on `channel`, or say which limit is reached.
    pub fn try_open(
        self: &Arc<Self>,
        channel: String,
    ) -> Result<SubscriberPermit, SubscribersFull> {
        let total_max = self.total_max;
        self.total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < total_max).then_some(n + 1)
            })
            .map_err(|_| SubscribersFull::Total(total_max))?;
        let mut count = self.channels.entry(channel.clone()).or_insert(0);
        if *count >= self.per_channel {
            drop(count);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(SubscribersFull::Channel(self.per_channel));
        }
        *count += 1;
        drop(count);
        Ok(SubscriberPermit {
            subscribers: self.clone(),
            channel,
        })
    }

    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

/// One open stream's place; given back when dropped (the stream ended or the client left).
pub struct SubscriberPermit {
    subscribers: Arc<Subscribers>,
    channel: String,
}

impl Drop for SubscriberPermit {
    fn drop(&mut self) {
        self.subscribers
            .channels
            .remove_if_mut(&self.channel, |_, count| {
                *count = count.saturating_sub(1);
                *count == 0
            });
        self.subscribers.total.fetch_sub(1, Ordering::AcqRel);
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock>;

/// Requests per minute on `/mcp`, one bucket per principal (GCRA: the whole minute's allowance
/// may be spent at once, then it refills evenly).
pub struct CallRates {
    quota: Quota,
    clock: DefaultClock,
    limiters: DashMap<Principal, Arc<Limiter>>,
}

impl CallRates {
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        let per_minute = NonZeroU32::new(limits.calls_per_minute).unwrap_or(NonZeroU32::MIN);
        Arc::new(Self {
            quota: Quota::per_minute(per_minute),
            clock: DefaultClock::default(),
            limiters: DashMap::new(),
        })
    }

    /// `Err(wait)`: over the rate; the next request is allowed after `wait`.
    pub fn check(&self, caller: &Principal) -> Result<(), Duration> {
        let limiter = self
            .limiters
            .entry(caller.clone())
            .or_insert_with(|| {
                Arc::new(RateLimiter::direct_with_clock(
                    self.quota,
                    self.clock.clone(),
                ))
            })
            .clone();
        limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_channel: usize, total: usize, per_minute: u32) -> LimitsConfig {
        LimitsConfig {
            max_subscribers_per_channel: per_channel,
            max_subscribers: total,
            calls_per_minute: per_minute,
            ..LimitsConfig::default()
        }
    }

    #[test]
    fn subscriber_places_per_channel_and_in_total() {
        let s = Subscribers::new(&limits(2, 3, 1));
        let a1 = s.try_open("a".into()).unwrap();
        let _a2 = s.try_open("a".into()).unwrap();
        assert_eq!(
            s.try_open("a".into()).err(),
            Some(SubscribersFull::Channel(2))
        );
        let _b1 = s.try_open("b".into()).unwrap();
        assert_eq!(
            s.try_open("c".into()).err(),
            Some(SubscribersFull::Total(3))
        );
        drop(a1);
        assert_eq!(s.open(), 2);
        let _c = s.try_open("c".into()).unwrap();
        assert_eq!(s.open(), 3);
    }

    #[test]
    fn call_rate_per_caller() {
        let r = CallRates::new(&limits(1, 1, 3));
        let (a, b) = (Principal::token("a"), Principal::token("b"));
        for _ in 0..3 {
            r.check(&a).unwrap();
        }
        let wait = r.check(&a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        r.check(&b).unwrap();
    }
}
