//! The open connections of one listener: counted, and each reachable by the accept loop, which
//! tells them to close (gracefully at shutdown, at once when the shutdown overran its bound).
//!
//! Each connection waits on a [`Signal`] of its own rather than on a token shared by all: a
//! shared `CancellationToken` is a shared mutex, taken by every connection task at every wake-up
//! (once per SSE event per reader), while a connection's own `Notify` is never contended.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU8, Ordering},
    },
};

use prometheus::IntGauge;
use tokio::sync::Notify;

/// What a connection is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Close {
    /// Nothing: keep serving.
    No = 0,
    /// The bridge is stopping: finish the request in progress (an SSE stream ends on the HTTP
    /// stage's token), then close.
    Graceful = 1,
    /// The shutdown overran its bound: drop the connection now.
    Now = 2,
}

/// One connection's mailbox: what it was told last, and the wake-up that says so.
#[derive(Default)]
pub struct Signal {
    close: AtomicU8,
    wake: Notify,
}

impl Signal {
    /// Tell the connection; a stronger order is never weakened.
    fn send(&self, close: Close) {
        self.close.fetch_max(close as u8, Ordering::AcqRel);
        // A permit is stored if the connection is not waiting yet: it sees the order when it
        // does.
        self.wake.notify_one();
    }

    /// What the connection has been told.
    pub fn order(&self) -> Close {
        match self.close.load(Ordering::Acquire) {
            0 => Close::No,
            1 => Close::Graceful,
            _ => Close::Now,
        }
    }

    /// Wait for the next order.
    pub async fn changed(&self) {
        self.wake.notified().await;
    }
}

/// The open connections of one listener.
pub struct Connections {
    table: Mutex<Table>,
    /// Woken when the last connection closes.
    emptied: Notify,
    /// `bridge_connections_open{listener}`.
    open: IntGauge,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    members: HashMap<u64, Arc<Signal>>,
}

impl Connections {
    pub fn new(open: IntGauge) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(Table::default()),
            emptied: Notify::new(),
            open,
        })
    }

    /// The table; a poisoned lock is taken over (every update leaves it consistent).
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one more connection; it is counted until its [`Slot`] is dropped.
    pub fn admit(self: &Arc<Self>) -> Slot {
        let signal = Arc::new(Signal::default());
        let mut table = self.table();
        let id = table.next_id;
        table.next_id += 1;
        table.members.insert(id, signal.clone());
        drop(table);
        self.open.inc();
        Slot {
            connections: self.clone(),
            id,
            signal,
        }
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.table().members.len()
    }

    /// Tell every open connection to close.
    pub fn close_all(&self, close: Close) {
        for signal in self.table().members.values() {
            signal.send(close);
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
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.connections.table();
        table.members.remove(&self.id);
        let empty = table.members.is_empty();
        drop(table);
        self.connections.open.dec();
        if empty {
            self.connections.emptied.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counted_until_dropped_and_told_to_close() {
        let gauge = IntGauge::new("open", "open").unwrap();
        let connections = Connections::new(gauge.clone());
        let a = connections.admit();
        let b = connections.admit();
        assert_eq!((connections.len(), gauge.get()), (2, 2));
        connections.close_all(Close::Now);
        connections.close_all(Close::Graceful);
        a.signal().changed().await;
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
}
