//! The open connections of one listener: counted in total and per client address, each
//! reachable by the accept loop, which tells them to close (gracefully at shutdown, at once when
//! the shutdown overran its bound or when an idle one makes room).
//!
//! Admission ([`Connections::admit`]): past `per_address` from one address a new connection is
//! refused. At `total`, the connection idle longest (no request in progress) is closed to make
//! room; only when every one is in a request is the newcomer refused, so sockets that send
//! nothing cannot lock out `/healthz` or a caller. Each connection waits on a [`Signal`] of
//! its own (one waiter, no lock), not on a shared token, which would be a mutex taken by every
//! connection at every wake-up. Details: docs/design/http-serve.md.

use std::{
    collections::{BTreeSet, HashMap},
    net::IpAddr,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU8, Ordering},
    },
    task::Poll,
};

use futures::task::AtomicWaker;
use prometheus::IntGauge;
use tokio::{sync::Notify, time::Instant};

/// What a connection is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Close {
    /// Nothing: keep serving.
    No = 0,
    /// The bridge is stopping: finish the request in progress (an SSE stream ends once its
    /// queued frames are out), then close.
    Graceful = 1,
    /// It was idle longest when a new connection needed its place: close now.
    Evicted = 2,
    /// The shutdown overran its bound: close now.
    Now = 3,
}

/// One connection's mailbox: what it was told last, and the wake-up that says so (one
/// waiter: the connection's task).
#[derive(Default)]
pub struct Signal {
    close: AtomicU8,
    wake: AtomicWaker,
}

impl Signal {
    /// Tell the connection; a stronger order is never weakened.
    fn send(&self, close: Close) {
        self.close.fetch_max(close as u8, Ordering::AcqRel);
        self.wake.wake();
    }

    /// What the connection has been told.
    pub fn order(&self) -> Close {
        match self.close.load(Ordering::Acquire) {
            0 => Close::No,
            1 => Close::Graceful,
            2 => Close::Evicted,
            _ => Close::Now,
        }
    }

    /// Wait until the order is another than `seen` (what the caller last acted on), and
    /// return it. No lock: the waker is registered atomically, then the order read again.
    pub async fn changed(&self, seen: Close) -> Close {
        std::future::poll_fn(|cx| {
            let order = self.order();
            if order != seen {
                return Poll::Ready(order);
            }
            self.wake.register(cx.waker());
            match self.order() {
                order if order != seen => Poll::Ready(order),
                _ => Poll::Pending,
            }
        })
        .await
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every open connection is in a request: none can make room.
    Total,
    /// Its address already holds `per_address` connections.
    PerAddress,
}

/// The caps of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
}

/// The open connections of one listener.
pub struct Connections {
    caps: Caps,
    table: Mutex<Table>,
    /// Woken when the last connection closes.
    emptied: Notify,
    /// `bridge_connections_open{listener}`.
    open: IntGauge,
}

/// Where a client connects from, for the per-address cap (an IPv6 /64 counts as one).
type Origin = crate::http::limits::AddressKey;

struct Member {
    signal: Arc<Signal>,
    origin: Origin,
    /// Requests in progress (one at a time on HTTP/1, counted to stay right whatever the order
    /// of the guards' drops).
    busy: u32,
    /// Since when it has had no request in progress.
    idle_since: Instant,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    members: HashMap<u64, Member>,
    per_origin: HashMap<Origin, usize>,
    /// The idle members, oldest first.
    idle: BTreeSet<(Instant, u64)>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Member> {
        let member = self.members.remove(&id)?;
        if member.busy == 0 {
            self.idle.remove(&(member.idle_since, id));
        }
        if let Some(n) = self.per_origin.get_mut(&member.origin) {
            *n -= 1;
            if *n == 0 {
                self.per_origin.remove(&member.origin);
            }
        }
        Some(member)
    }
}

impl Connections {
    pub fn new(caps: Caps, open: IntGauge) -> Arc<Self> {
        Arc::new(Self {
            caps,
            table: Mutex::new(Table::default()),
            emptied: Notify::new(),
            open,
        })
    }

    /// The table; a poisoned lock is taken over (every update leaves it consistent).
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one more connection from `peer` (until its [`Slot`] is dropped), closing the
    /// longest-idle one if the listener is full; `Err` if it may not open. `Ok(true)`: a
    /// connection was evicted to make room. `capped`: under the per-address cap (a trusted
    /// proxy, which carries many clients, is not).
    pub fn admit(self: &Arc<Self>, peer: IpAddr, capped: bool) -> Result<(Slot, bool), Refused> {
        let origin = Origin::of(peer);
        let mut table = self.table();
        if capped && table.per_origin.get(&origin).copied().unwrap_or(0) >= self.caps.per_address {
            return Err(Refused::PerAddress);
        }
        let mut evicted = false;
        if table.members.len() >= self.caps.total {
            let Some(&(_, oldest)) = table.idle.first() else {
                return Err(Refused::Total);
            };
            if let Some(member) = table.remove(oldest) {
                member.signal.send(Close::Evicted);
                self.open.dec();
                evicted = true;
            }
        }
        let signal = Arc::new(Signal::default());
        let id = table.next_id;
        table.next_id += 1;
        let now = Instant::now();
        table.members.insert(
            id,
            Member {
                signal: signal.clone(),
                origin,
                busy: 0,
                idle_since: now,
            },
        );
        table.idle.insert((now, id));
        *table.per_origin.entry(origin).or_default() += 1;
        drop(table);
        self.open.inc();
        let slot = Slot {
            connections: self.clone(),
            id,
            signal,
        };
        Ok((slot, evicted))
    }

    /// Connections open now (an evicted one no longer counts, though it may take a moment to
    /// close).
    pub fn len(&self) -> usize {
        self.table().members.len()
    }

    /// Tell every open connection to close.
    pub fn close_all(&self, close: Close) {
        for member in self.table().members.values() {
            member.signal.send(close);
        }
    }

    /// Return when no connection is open.
    pub async fn all_closed(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.len() == 0 {
                return;
            }
            emptied.await;
        }
    }

    fn started(&self, id: u64) {
        let mut table = self.table();
        let Table { members, idle, .. } = &mut *table;
        if let Some(member) = members.get_mut(&id) {
            if member.busy == 0 {
                idle.remove(&(member.idle_since, id));
            }
            member.busy += 1;
        }
    }

    fn ended(&self, id: u64) {
        let mut table = self.table();
        let Table { members, idle, .. } = &mut *table;
        if let Some(member) = members.get_mut(&id) {
            member.busy = member.busy.saturating_sub(1);
            if member.busy == 0 {
                member.idle_since = Instant::now();
                idle.insert((member.idle_since, id));
            }
        }
    }
}

/// One open connection's place in the table.
pub struct Slot {
    connections: Arc<Connections>,
    id: u64,
    signal: Arc<Signal>,
}

impl Slot {
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// A request has started on this connection; it is not idle until the guard is dropped
    /// (with the response body, once written).
    pub fn busy(&self) -> Busy {
        self.connections.started(self.id);
        Busy {
            connections: self.connections.clone(),
            id: self.id,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.connections.table();
        let removed = table.remove(self.id).is_some();
        let empty = table.members.is_empty();
        drop(table);
        if removed {
            self.connections.open.dec();
        }
        if empty {
            self.connections.emptied.notify_waiters();
        }
    }
}

/// A request in progress on a connection (see [`Slot::busy`]).
pub struct Busy {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.connections.ended(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(total: usize, per_address: usize) -> (Arc<Connections>, IntGauge) {
        let gauge = IntGauge::new("open", "open").unwrap();
        let caps = Caps { total, per_address };
        (Connections::new(caps, gauge.clone()), gauge)
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn counted_until_dropped_and_told_to_close() {
        let (connections, gauge) = connections(10, 10);
        let (a, _) = connections.admit(ip(1), true).unwrap();
        let (b, _) = connections.admit(ip(1), true).unwrap();
        assert_eq!((connections.len(), gauge.get()), (2, 2));
        connections.close_all(Close::Now);
        connections.close_all(Close::Graceful);
        assert_eq!(a.signal().changed(Close::No).await, Close::Now);
        assert_eq!(a.signal().order(), Close::Now, "never weakened");
        drop(a);
        let waiting = tokio::spawn({
            let connections = connections.clone();
            async move { connections.all_closed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(b);
        waiting.await.unwrap();
        assert_eq!((connections.len(), gauge.get()), (0, 0));
    }

    #[tokio::test]
    async fn per_address_cap_refuses_and_the_oldest_idle_makes_room() {
        let (connections, gauge) = connections(3, 2);
        let (a, _) = connections.admit(ip(1), true).unwrap();
        let (_b, _) = connections.admit(ip(1), true).unwrap();
        assert_eq!(
            connections.admit(ip(1), true).err(),
            Some(Refused::PerAddress),
            "a third from one address"
        );
        // The same /64 counts as one address; a v4-mapped address as its IPv4 one.
        let v6 = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, last]);
        let (c, _) = connections.admit(v6(1), true).unwrap();
        let _busy = c.busy();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(
            connections.admit(mapped, true).err(),
            Some(Refused::PerAddress)
        );
        // Full: `a` has been idle longest and goes; `c` is in a request and stays.
        let (_d, evicted) = connections.admit(v6(2), true).unwrap();
        assert!(evicted);
        assert_eq!(a.signal().order(), Close::Evicted);
        assert_eq!(c.signal().order(), Close::No);
        assert_eq!((connections.len(), gauge.get()), (3, 3));
        drop(a);
        assert_eq!(gauge.get(), 3, "an evicted slot is not counted twice");
        assert_eq!(
            connections.admit(v6(3), true).err(),
            Some(Refused::PerAddress),
            "same /64 as c and d"
        );
    }

    #[tokio::test]
    async fn refused_when_every_connection_is_in_a_request() {
        let (connections, _) = connections(2, 10);
        let (a, _) = connections.admit(ip(1), true).unwrap();
        let (b, _) = connections.admit(ip(2), true).unwrap();
        let busy_a = a.busy();
        let _busy_b = b.busy();
        assert_eq!(connections.admit(ip(3), true).err(), Some(Refused::Total));
        drop(busy_a);
        let (_c, evicted) = connections.admit(ip(3), true).unwrap();
        assert!(evicted, "a became idle when its request ended");
        assert_eq!(a.signal().order(), Close::Evicted);
    }
}
