//! What a connection's response stream holds for a reader that does not read, in bytes, and
//! the watch that drops that reader when it holds too much (`limits.max_sse_buffer_bytes`).
//!
//! An SSE stream is pulled: a reader that never reads stops it where it is, holding the
//! frames queued in the stream and those hyper took but has not written. The stream counts
//! those bytes ([`Meter::held`]) and stops queuing history past the bound, so one reader holds
//! about the bound at most, plus one frame. A stopped stream cannot notice it was left
//! standing, so the connection's own task does ([`Outflow::stalled`]): once
//! [armed](Outflow::arm), it looks every keep-alive interval and closes when the stream holds
//! the bound and the socket took no byte since the last look. Details: docs/design/http-serve.md.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use prometheus::IntCounter;
use tokio::sync::Notify;

use super::{meter::Meter, writers::Seat};

/// Looks in a row at which the socket has taken nothing before a reader at its bound is
/// dropped: one whole interval at least. A reader that reads can still pause: a client
/// measured in the tests took no byte for over a second while parsing a 10 MiB event.
const QUIET_LOOKS: u32 = 2;

/// One connection's outgoing bytes (see the module doc).
#[derive(Default)]
pub struct Outflow {
    /// The bytes the socket has taken and those the stream holds.
    meter: Arc<Meter>,
    /// Set by the stream at its start; `None` again at its end.
    watch: Mutex<Option<Watch>>,
    armed: Notify,
    /// The connection has been told to close gracefully (shutdown): its stream ends after
    /// the frames it has queued. Set by the connection's task, which then polls the stream.
    closing: AtomicBool,
    /// The stream waiting for `closing` (see [`Outflow::poll_closing`]).
    closing_waker: AtomicWaker,
    /// The stream's place at a shared writer (`server.sse_writers`), set by the connection's
    /// task when it writes the stream itself (see `writers`).
    seat: OnceLock<Arc<Seat>>,
}

#[derive(Clone)]
struct Watch {
    bound: usize,
    every: Duration,
    dropped: IntCounter,
}

impl Outflow {
    /// The connection's byte counts.
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    /// Whether the connection has been told to close (see [`Outflow::close`]).
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The connection is closing gracefully: a stream on it ends at its next poll, once its
    /// queued frames are out.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.closing_waker.wake();
    }

    /// Ready once the connection is closing. The stream is woken by [`Outflow::close`]: it may
    /// be parked, or waiting for its next event, and no one else polls it then.
    pub fn poll_closing(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.closing.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        self.closing_waker.register(cx.waker());
        if self.closing.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// The stream's place at a shared writer, if it has one.
    pub fn seat(&self) -> Option<&Arc<Seat>> {
        self.seat.get()
    }

    /// Give the stream a place at a shared writer (once).
    pub fn install(&self, seat: Seat) {
        let _ = self.seat.set(Arc::new(seat));
    }

    /// A stream starts on this connection: drop its reader when it holds `bound` bytes or
    /// more and the socket takes nothing for `every`; count it in `dropped`.
    pub fn arm(&self, bound: usize, every: Duration, dropped: IntCounter) {
        *self.watch.lock() = Some(Watch {
            bound,
            every,
            dropped,
        });
        self.armed.notify_one();
    }

    /// The stream has ended.
    pub fn disarm(&self) {
        *self.watch.lock() = None;
    }

    /// Return when the armed stream's reader has stood still at its bound (counted); never
    /// while no stream is armed.
    pub async fn stalled(&self) {
        loop {
            self.armed.notified().await;
            let mut last = self.meter.written();
            let mut quiet = 0;
            loop {
                let Some(watch) = self.watch.lock().clone() else {
                    break;
                };
                tokio::time::sleep(watch.every).await;
                let written = self.meter.written();
                quiet = if written == last { quiet + 1 } else { 0 };
                last = written;
                if quiet >= QUIET_LOOKS
                    && self.meter.held() >= watch.bound
                    && self.watch.lock().is_some()
                {
                    watch.dropped.inc();
                    return;
                }
            }
        }
    }
}
