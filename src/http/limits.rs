//! Limits the HTTP side enforces: open SSE streams (per channel and in total) and request
//! rates (on `/mcp` per caller; on job and correlation routes per caller or per address). Each refusal tells the client when to come back.

use std::{
    hash::Hash,
    net::IpAddr,
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use governor::{
    Quota, RateLimiter,
    clock::{Clock, DefaultClock},
    middleware::NoOpMiddleware,
    state::keyed::DashMapStateStore,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::{config::LimitsConfig, model::Principal};

/// What a refused stream is told: try again after this long.
pub const SUBSCRIBER_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Counts open SSE streams with three counted limits, all semaphores: the places of one
/// channel, of one reader (a principal, or a capability reader's address), and of the whole
/// bridge. A stream holds a [`SubscriberPermit`] (one place of each) for as long as it is open.
pub struct Subscribers {
    per_channel: usize,
    per_reader: usize,
    total_max: usize,
    total: Arc<Semaphore>,
    /// The places of each channel that has open streams. An entry goes when the last stream
    /// of its channel ends, so the map holds only channels being read.
    channels: DashMap<String, Arc<Semaphore>>,
    /// The places of each reader that has open streams, kept the same way: one principal
    /// holding made-up correlations (each its own channel) cannot take every place.
    readers: DashMap<String, Arc<Semaphore>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscribersFull {
    #[error(
        "this channel already has {0} open streams (limits.max_subscribers_per_channel); close one or retry later"
    )]
    Channel(usize),
    #[error("the bridge already serves {0} open streams (limits.max_subscribers); retry later")]
    Total(usize),
    #[error(
        "this caller already has {0} open streams (limits.max_subscribers_per_principal); close one or retry later"
    )]
    Reader(usize),
}

impl SubscribersFull {
    /// The `[limits]` key that refused.
    pub fn key(self) -> &'static str {
        match self {
            SubscribersFull::Channel(_) => "max_subscribers_per_channel",
            SubscribersFull::Total(_) => "max_subscribers",
            SubscribersFull::Reader(_) => "max_subscribers_per_principal",
        }
    }
}

impl Subscribers {
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        Arc::new(Self {
            per_channel: limits.max_subscribers_per_channel,
            per_reader: limits.subscribers_per_principal(),
            total_max: limits.max_subscribers,
            total: Arc::new(Semaphore::new(limits.max_subscribers)),
            channels: DashMap::new(),
            readers: DashMap::new(),
        })
    }

    /// Take a place for one more stream of `reader` on `channel`, or say which limit is
    /// reached.
    pub fn try_open(
        self: &Arc<Self>,
        channel: String,
        reader: String,
    ) -> Result<SubscriberPermit, SubscribersFull> {
        let total = full_as(self.total.clone().try_acquire_owned(), || {
            SubscribersFull::Total(self.total_max)
        })?;
        let mut permit = SubscriberPermit {
            subscribers: self.clone(),
            channel,
            reader,
            places: Some(vec![total]),
        };
        let (per_channel, per_reader) = (self.per_channel, self.per_reader);
        permit.take(&self.channels, true, per_channel, SubscribersFull::Channel)?;
        permit.take(&self.readers, false, per_reader, SubscribersFull::Reader)?;
        Ok(permit)
    }

    pub fn open(&self) -> usize {
        self.total_max - self.total.available_permits()
    }

    /// Remove the entries of `channel` and `reader` if no stream holds or is taking one of
    /// their places: the map's own reference is then the only one (a permit holds its
    /// semaphore too).
    fn forget_if_unused(&self, channel: &str, reader: &str) {
        self.channels
            .remove_if(channel, |_, places| Arc::strong_count(places) == 1);
        self.readers
            .remove_if(reader, |_, places| Arc::strong_count(places) == 1);
    }
}

/// A semaphore that has no place left is a full limit; it is never closed here.
fn full_as(
    taken: Result<OwnedSemaphorePermit, TryAcquireError>,
    full: impl FnOnce() -> SubscribersFull,
) -> Result<OwnedSemaphorePermit, SubscribersFull> {
    taken.map_err(|_| full())
}

/// One open stream's places; given back when dropped (the stream ended or the client left).
pub struct SubscriberPermit {
    subscribers: Arc<Subscribers>,
    channel: String,
    reader: String,
    /// The bridge-wide place, the channel's and the reader's; an `Option` only so `drop` can
    /// give them back before it looks whether the entries are still needed.
    places: Option<Vec<OwnedSemaphorePermit>>,
}

impl SubscriberPermit {
    /// One place of this permit's channel (`channel`) or reader from `map`, whose entries
    /// have `size` places. Cloned out under the map's lock, so the entry cannot be removed
    /// while this stream is taking its place (see `drop`); a full entry has streams holding
    /// its places, so it stays.
    fn take(
        &mut self,
        map: &DashMap<String, Arc<Semaphore>>,
        channel: bool,
        size: usize,
        full: fn(usize) -> SubscribersFull,
    ) -> Result<(), SubscribersFull> {
        let key = if channel { &self.channel } else { &self.reader };
        let places = map
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(size)))
            .clone();
        let place = full_as(places.try_acquire_owned(), || full(size))?;
        if let Some(places) = &mut self.places {
            places.push(place);
        }
        Ok(())
    }
}

impl Drop for SubscriberPermit {
    fn drop(&mut self) {
        self.places = None;
        self.subscribers
            .forget_if_unused(&self.channel, &self.reader);
    }
}

/// Requests per minute, one GCRA bucket per key (a principal, or a client address) in
/// governor's keyed limiter (the whole minute's allowance may be spent at once, then it refills
/// evenly).
pub struct Rates<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    limiter: RateLimiter<K, DashMapStateStore<K>, C, NoOpMiddleware<C::Instant>>,
    clock: C,
    checks: AtomicU32,
}

/// Requests to `/mcp` per minute per principal (`limits.calls_per_minute`).
pub type CallRates = Rates<Principal>;

/// Every this many checks, the keys whose bucket has refilled completely are dropped from
/// the limiter (a fresh bucket is what they would get anyway), so the map holds only keys
/// seen within about a minute, plus at most this many new ones.
const PRUNE_EVERY: u32 = 1024;

impl<K: Hash + Eq + Clone> Rates<K> {
    /// `per_minute` requests a minute per key (0 counts as 1; config validation forbids it).
    pub fn per_minute(per_minute: u32) -> Arc<Self> {
        Arc::new(Self::with_clock(per_minute, DefaultClock::default()))
    }
}

impl CallRates {
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        Self::per_minute(limits.calls_per_minute)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Rates<K, C> {
    fn with_clock(per_minute: u32, clock: C) -> Self {
        let per_minute = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::dashmap_with_clock(Quota::per_minute(per_minute), clock.clone()),
            clock,
            checks: AtomicU32::new(0),
        }
    }

    /// `Err(wait)`: over the rate; the next request is allowed after `wait`.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune();
        }
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Keys the limiter holds state for.
    #[cfg(test)]
    fn callers(&self) -> usize {
        self.limiter.len()
    }
}

/// Requests to the job and correlation routes per minute: per principal for a reader with a
/// credential (`limits.job_requests_per_minute`), per client address for one with a capability
/// token or none (`limits.job_requests_per_minute_per_address`; an IPv6 /64 counts as one).
pub struct JobRates {
    pub per_principal: Arc<Rates<Principal>>,
    pub per_address: Arc<Rates<AddressKey>>,
}

impl JobRates {
    pub fn new(limits: &LimitsConfig) -> Arc<Self> {
        Arc::new(Self {
            per_principal: Rates::per_minute(limits.job_requests_per_minute),
            per_address: Rates::per_minute(limits.job_requests_per_minute_per_address),
        })
    }
}

/// A client address as the per-address limits count it: an IPv4 address, or an IPv6 /64 (one
/// host usually holds a whole /64 and picks a new address in it at will).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressKey {
    V4(u32),
    V6Net(u64),
}

impl AddressKey {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4.into()),
                None => Self::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_channel: usize, total: usize, per_minute: u32) -> LimitsConfig {
        LimitsConfig {
            max_subscribers_per_channel: per_channel,
            max_subscribers: total,
            max_subscribers_per_principal: Some(total),
            calls_per_minute: per_minute,
            ..LimitsConfig::default()
        }
    }

    #[test]
    fn subscriber_places_per_channel_and_in_total() {
        let s = Subscribers::new(&limits(2, 3, 1));
        let a1 = s.try_open("a".into(), "r".into()).unwrap();
        let _a2 = s.try_open("a".into(), "r".into()).unwrap();
        assert_eq!(
            s.try_open("a".into(), "r".into()).err(),
            Some(SubscribersFull::Channel(2))
        );
        let _b1 = s.try_open("b".into(), "r".into()).unwrap();
        assert_eq!(
            s.try_open("c".into(), "r".into()).err(),
            Some(SubscribersFull::Total(3))
        );
        drop(a1);
        assert_eq!(s.open(), 2);
        let _c = s.try_open("c".into(), "r".into()).unwrap();
        assert_eq!(s.open(), 3);
    }

    #[test]
    fn call_rate_per_caller() {
        let r = CallRates::new(&limits(1, 1, 3));
        for _ in 0..3 {
            r.check(&Principal::token("0")).unwrap();
        }
        let wait = r.check(&Principal::token("0")).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        r.check(&Principal::token("1")).unwrap();
    }

    /// Callers whose bucket has refilled are forgotten, so many callers, each seen once, do
    /// not grow the limiter without end; a caller still inside its minute keeps its state.
    #[test]
    fn callers_seen_long_ago_are_dropped() {
        let clock = governor::clock::FakeRelativeClock::default();
        let r = Rates::<Principal, _>::with_clock(60, clock.clone());
        for i in 0..900 {
            r.check(&Principal::token(&i.to_string())).unwrap();
        }
        assert_eq!(r.callers(), 900);
        clock.advance(Duration::from_secs(61));
        for _ in 0..60 {
            r.check(&Principal::token("5000")).unwrap();
        }
        r.check(&Principal::token("5000")).unwrap_err();
        // Enough checks to reach the next pruning: only the busy caller is left.
        let to_prune = PRUNE_EVERY as usize - 900 - 61;
        assert_eq!(r.callers(), 901, "not pruned yet");
        for _ in 0..to_prune {
            let _ = r.check(&Principal::token("5000"));
        }
        assert_eq!(r.callers(), 1, "only the caller still inside its minute");
        let wait = r.check(&Principal::token("5000")).unwrap_err();
        assert!(wait > Duration::ZERO, "its state survived the pruning");
    }

    /// A channel's entry goes with its last stream; a refused stream leaves none behind.
    #[test]
    fn channel_entries_go_with_their_last_stream() {
        let s = Subscribers::new(&limits(1, 10, 1));
        let a = s.try_open("a".into(), "r".into()).unwrap();
        assert!(s.try_open("a".into(), "r".into()).is_err());
        assert_eq!(s.channels.len(), 1);
        drop(a);
        assert_eq!(s.channels.len(), 0);
        assert_eq!(s.open(), 0);
        let _b = s.try_open("b".into(), "r".into()).unwrap();
        assert_eq!(s.channels.len(), 1);
    }

    /// One reader holding made-up channels (each its own) stops at its share; another reader
    /// still gets in; the reader's entry goes with its last stream.
    #[test]
    fn one_reader_takes_at_most_its_share() {
        let s = Subscribers::new(&LimitsConfig {
            max_subscribers: 8,
            ..LimitsConfig::default()
        });
        let held: Vec<_> = (0..2)
            .map(|i| s.try_open(format!("made-up-{i}"), "alice".into()).unwrap())
            .collect();
        assert_eq!(
            s.try_open("made-up-9".into(), "alice".into()).err(),
            Some(SubscribersFull::Reader(2)),
            "a quarter of 8"
        );
        let bob = s.try_open("own".into(), "bob".into()).unwrap();
        assert_eq!(s.open(), 3);
        drop((held, bob));
        assert_eq!((s.channels.len(), s.readers.len(), s.open()), (0, 0, 0));
    }
}
