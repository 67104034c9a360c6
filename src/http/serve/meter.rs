//! A connection's bytes: those the socket has taken, and those of frames made for its reader
//! and not yet written ("held"); and the socket wrappers that count what they write. The
//! counts are shared by the connection's task, its stream, and a shared writer.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

/// Frames from this size up are counted until hyper drops them (a wrapper allocated per
/// frame); smaller ones until hyper takes them (hyper holds 16 at most: 64 KiB uncounted).
const LARGE: usize = 4096;

/// One connection's byte counts (see the module doc).
#[derive(Default)]
pub struct Meter {
    /// Bytes the socket has taken, all responses together (only ever compared with itself).
    written: AtomicU64,
    /// Bytes of frames the stream made that the reader has not been sent.
    held: AtomicUsize,
}

impl Meter {
    /// The bytes of frames queued or in hyper's hands, not yet written.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The bytes the socket has taken so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
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
        self.counted(frame, len)
    }

    /// `bytes`, with `held` bytes counted as held until dropped (the end of a frame counts as
    /// the whole frame).
    pub fn counted(self: &Arc<Self>, bytes: Bytes, held: usize) -> Bytes {
        Bytes::from_owner(Counted {
            bytes,
            held,
            meter: self.clone(),
        })
    }
}

/// Bytes in hyper's hands; they stop counting when hyper drops them.
struct Counted {
    bytes: Bytes,
    held: usize,
    meter: Arc<Meter>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.meter.discarded(self.held);
    }
}

/// A connection's socket, counting what it writes into its [`Meter`].
pub struct Metered {
    tcp: TcpStream,
    meter: Arc<Meter>,
}

impl Metered {
    pub fn new(tcp: TcpStream, meter: Arc<Meter>) -> Self {
        Self { tcp, meter }
    }

    /// The socket, to be shared (written through [`Shared`]).
    pub fn into_tcp(self) -> TcpStream {
        self.tcp
    }

    fn count(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            self.meter.wrote(*n);
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
/// [`Meter`]; written by one side at a time (see `writers`).
pub struct Shared {
    tcp: Arc<TcpStream>,
    meter: Arc<Meter>,
}

impl Shared {
    pub fn new(tcp: Arc<TcpStream>, meter: Arc<Meter>) -> Self {
        Self { tcp, meter }
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
                    self.meter.wrote(n);
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
        let meter = Arc::new(Meter::default());
        let small = Bytes::from_static(b"id: 1\n\n");
        let large = Bytes::from(vec![b'x'; LARGE]);
        meter.queued(small.len());
        meter.queued(large.len());
        assert_eq!(meter.held(), small.len() + LARGE);
        let _ = meter.send(small);
        assert_eq!(meter.held(), LARGE);
        let sent = meter.send(large);
        assert_eq!((sent.len(), meter.held()), (LARGE, LARGE));
        drop(sent);
        assert_eq!(meter.held(), 0);
    }
}
