//! What a connection's response stream holds for a reader that does not read, in bytes, and
//! the watch that drops that reader when it holds too much (`limits.max_sse_buffer_bytes`).
//!
//! An SSE stream is pulled: a reader that never reads stops it where it is, holding the
//! frames queued in the stream and those hyper took but has not written. The stream counts
//! those bytes here ([`held`]) and stops queuing history past the bound, so one reader holds
//! about the bound at most, plus one frame. A stopped stream cannot notice it was left
//! standing, so the connection's own task does ([`Outflow::stalled`]): once
//! [armed](Outflow::arm), it looks every keep-alive interval and closes when the stream holds
//! the bound and the socket took no byte since the last look. Details: docs/design/http-serve.md.
//!
//! [`held`]: Outflow::held

use std::{
    io,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use prometheus::IntCounter;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::Notify,
};

use super::writers::Seat;

/// Frames from this size up are counted until hyper drops them (a wrapper allocated per
/// frame); smaller ones until hyper takes them (hyper holds 16 at most: 64 KiB uncounted).
const LARGE: usize = 4096;

/// Looks in a row at which the socket has taken nothing before a reader at its bound is
/// dropped: one whole interval at least. A reader that reads can still pause: a client
/// measured in the tests took no byte for over a second while parsing a 10 MiB event.
const QUIET_LOOKS: u32 = 2;

/// One connection's outgoing bytes (see the module doc).
#[derive(Default)]
pub struct Outflow {
    /// Bytes the socket has taken, all responses together (only ever compared with itself).
    written: AtomicU64,
    /// Bytes of frames the stream made that the reader has not been sent.
    held: AtomicUsize,
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
    seat: OnceLock<Seat>,
}

#[derive(Clone)]
struct Watch {
    bound: usize,
    every: Duration,
    dropped: IntCounter,
}

impl Outflow {
    /// The bytes of frames queued or in hyper's hands, not yet written.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
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
    pub fn seat(&self) -> Option<&Seat> {
        self.seat.get()
    }

    /// Give the stream a place at a shared writer (once).
    pub fn install(&self, seat: Seat) {
        let _ = self.seat.set(seat);
    }

    /// `n` bytes were written on the connection's socket.
    pub fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A frame of `len` bytes was queued.
    pub fn queued(&self, len: usize) {
        self.held.fetch_add(len, Ordering::Relaxed);
    }

    /// Queued frames of `len` bytes in all will not be sent (the stream ended).
    pub fn discarded(&self, len: usize) {
        self.held.fetch_sub(len, Ordering::Relaxed);
    }

    /// Hand a queued frame to hyper: a small one stops counting now, a large one when hyper
    /// drops it.
    pub fn send(self: &Arc<Self>, frame: Bytes) -> Bytes {
        let len = frame.len();
        if len < LARGE {
            self.discarded(len);
            return frame;
        }
        Bytes::from_owner(Sending {
            frame,
            outflow: self.clone(),
        })
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
            let mut last = self.written.load(Ordering::Relaxed);
            let mut quiet = 0;
            loop {
                let Some(watch) = self.watch.lock().clone() else {
                    break;
                };
                tokio::time::sleep(watch.every).await;
                let written = self.written.load(Ordering::Relaxed);
                quiet = if written == last { quiet + 1 } else { 0 };
                last = written;
                if quiet >= QUIET_LOOKS && self.held() >= watch.bound && self.watch.lock().is_some()
                {
                    watch.dropped.inc();
                    return;
                }
            }
        }
    }
}

/// A large frame in hyper's hands; its bytes stop counting when hyper drops it.
struct Sending {
    frame: Bytes,
    outflow: Arc<Outflow>,
}

impl AsRef<[u8]> for Sending {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.outflow.discarded(self.frame.len());
    }
}

/// A connection's socket, counting what it writes into its [`Outflow`].
pub struct Metered {
    tcp: TcpStream,
    outflow: Arc<Outflow>,
}

impl Metered {
    pub fn new(tcp: TcpStream, outflow: Arc<Outflow>) -> Self {
        Self { tcp, outflow }
    }

    /// The socket, to be shared (written through [`Shared`]).
    pub fn into_tcp(self) -> TcpStream {
        self.tcp
    }

    fn count(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            self.outflow.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.count(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// A connection's socket shared with a writer task, counting what it writes into its
/// [`Outflow`]; written by one side at a time (see `writers`).
pub struct Shared {
    tcp: Arc<TcpStream>,
    outflow: Arc<Outflow>,
}

impl Shared {
    pub fn new(tcp: Arc<TcpStream>, outflow: Arc<Outflow>) -> Self {
        Self { tcp, outflow }
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    pub fn into_tcp(self) -> Arc<TcpStream> {
        self.tcp
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.tcp.poll_write_ready(cx))?;
            match self.tcp.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(n) => {
                    self.outflow.wrote(n);
                    return Poll::Ready(Ok(n));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Nothing: the connection's task closes the socket itself (see `serve::pump`).
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_frames_count_until_dropped_small_ones_until_taken() {
        let outflow = Arc::new(Outflow::default());
        let small = Bytes::from_static(b"id: 1\n\n");
        let large = Bytes::from(vec![b'x'; LARGE]);
        outflow.queued(small.len());
        outflow.queued(large.len());
        assert_eq!(outflow.held(), small.len() + LARGE);
        let _ = outflow.send(small);
        assert_eq!(outflow.held(), LARGE);
        let sent = outflow.send(large);
        assert_eq!((sent.len(), outflow.held()), (LARGE, LARGE));
        drop(sent);
        assert_eq!(outflow.held(), 0);
    }
}
