//! SSE responses written on the socket by the bridge itself, after routing, so an open
//! stream does not keep hyper's ~16 KiB of buffers for the connection's whole life.
//!
//! The loop reads a connection's first request head itself ([`read_head`]); a plain `GET` of
//! an event stream goes through the same router as any request (logs, guards, limits), and a
//! response marked [`DirectStream`] is written by [`Pump`] (chunked for HTTP/1.1, delimited
//! by the close for HTTP/1.0, `connection: close`). Anything else (another request, a head
//! over [`MAX_HEAD`] or not strictly parsed, an answer that is not a stream) goes to hyper
//! with the bytes already read replayed ([`Rewind`]); the router does not run twice. The
//! bounds stay those of every connection: the head timeout, the metered socket (byte bound,
//! stalled-reader drop), the stream's own keep-alives. Details: docs/design/http-serve.md.

use std::{
    future::poll_fn,
    io::{self, IoSlice},
    pin::Pin,
    task::{Context, Poll, ready},
    time::SystemTime,
};

use axum::body::Body;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri, Version, header};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::Instant,
};

use super::meter::Metered;

/// Largest request head read here; a longer one goes to hyper, whose own limits apply.
pub const MAX_HEAD: usize = 16 * 1024;
/// The head buffer's first size (a browser's EventSource request, cookies included, fits).
const FIRST_READ: usize = 2048;
/// Most header lines parsed here (hyper's default too); more go to hyper.
const MAX_HEADERS: usize = 100;

/// Marks a response whose body is an event stream the loop may write itself (set by the SSE
/// handler).
#[derive(Debug, Clone, Copy)]
pub struct DirectStream;

/// A connection's first request head, as read by [`read_head`]. (Large only while it is read:
/// a value per connection, moved once.)
#[allow(clippy::large_enum_variant)]
pub enum First {
    /// A `GET` of an event stream: the request to route, and the bytes it came in (replayed
    /// to hyper if the answer is not a stream).
    Stream(Request<Body>, Bytes),
    /// Anything else: hyper serves the connection, these bytes first.
    Other(Bytes),
    /// The client closed, or the read failed, before a head.
    Closed,
    /// The head was not complete by the deadline.
    TimedOut,
}

/// Read the first request head of `tcp`, complete by `deadline`. Reading stops as soon as the
/// bytes cannot be a stream request, or are more than [`MAX_HEAD`].
pub async fn read_head(tcp: &TcpStream, deadline: Instant) -> First {
    let mut buf = BytesMut::with_capacity(FIRST_READ);
    loop {
        match tokio::time::timeout_at(deadline, read_some(tcp, &mut buf)).await {
            Err(_) => return First::TimedOut,
            Ok(Ok(0)) | Ok(Err(_)) => return First::Closed,
            Ok(Ok(_)) => {}
        }
        match look(&buf) {
            Look::More if buf.len() < MAX_HEAD => {
                if buf.len() == buf.capacity() {
                    buf.reserve(buf.len().min(MAX_HEAD - buf.len()));
                }
            }
            Look::More | Look::Other => return First::Other(buf.freeze()),
            Look::Stream(request) => return First::Stream(request, buf.freeze()),
        }
    }
}

/// Read what the socket has into `buf`'s spare room (which is never empty here).
async fn read_some(tcp: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        tcp.readable().await?;
        match tcp.try_read_buf(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            read => return read,
        }
    }
}

#[allow(clippy::large_enum_variant)]
enum Look {
    More,
    Other,
    Stream(Request<Body>),
}

/// What the bytes read so far are.
fn look(buf: &[u8]) -> Look {
    const GET: &[u8] = b"GET /";
    let n = buf.len().min(GET.len());
    if buf[..n] != GET[..n] {
        return Look::Other;
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(buf) {
        Ok(httparse::Status::Partial) => Look::More,
        // Bytes past the head (a body, a pipelined request): hyper's.
        Ok(httparse::Status::Complete(len)) if len == buf.len() => {
            stream_request(&parsed).map_or(Look::Other, Look::Stream)
        }
        Ok(httparse::Status::Complete(_)) | Err(_) => Look::Other,
    }
}

/// Whether `path` (before its query) is an event stream's.
fn is_stream_path(path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let mut parts = path.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(""), Some("jobs" | "correlations"), Some(id), Some("events"), None) if !id.is_empty()
    )
}

/// The request to route, if it is a `GET` of an event stream with no body that this module
/// can take whole; `None` leaves it to hyper.
fn stream_request(parsed: &httparse::Request<'_, '_>) -> Option<Request<Body>> {
    let (Some("GET"), Some(path), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return None;
    };
    if !is_stream_path(path) {
        return None;
    }
    let uri: Uri = path.parse().ok()?;
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = match version {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        _ => return None,
    };
    let headers = request.headers_mut();
    for line in parsed.headers.iter() {
        let name = HeaderName::from_bytes(line.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(line.value).ok()?;
        let body = (name == header::CONTENT_LENGTH && value != "0")
            || name == header::TRANSFER_ENCODING
            || name == header::UPGRADE;
        if body {
            return None;
        }
        headers.append(name, value);
    }
    Some(request)
}

/// The response head of a stream written here: the router's status and headers, the `date`
/// hyper would add, the framing, and `connection: close`.
pub fn response_head(response: &Response<Body>, chunked: bool, http10: bool) -> Bytes {
    let status = response.status();
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    let headers = response.headers();
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    Bytes::from(head)
}

/// One piece of a stream on its way to the socket: the response head, a frame (in its chunk
/// when chunked), or the last chunk; `done` bytes of it written.
pub struct Out {
    size: [u8; 18],
    size_len: u8,
    data: Bytes,
    chunked: bool,
    done: usize,
}

impl Out {
    /// Bytes written as they are (the response head, the last chunk).
    pub fn raw(data: Bytes) -> Self {
        Self {
            size: [0; 18],
            size_len: 0,
            data,
            chunked: false,
            done: 0,
        }
    }

    /// A body frame: in a chunk of its own when `chunked`.
    pub fn frame(data: Bytes, chunked: bool) -> Self {
        let mut out = Self::raw(data);
        if chunked {
            use std::io::Write;
            let mut size = &mut out.size[..];
            let _ = write!(size, "{:X}\r\n", out.data.len());
            out.size_len = (18 - size.len()) as u8;
            out.chunked = true;
        }
        out
    }

    fn pieces(&self) -> [&[u8]; 3] {
        let tail: &[u8] = if self.chunked { b"\r\n" } else { b"" };
        [&self.size[..self.size_len as usize], &self.data, tail]
    }

    fn len(&self) -> usize {
        self.pieces().iter().map(|p| p.len()).sum()
    }

    /// Write what is left of it (one `writev` when the socket takes it all).
    pub fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        tcp: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let len = self.len();
            if self.done >= len {
                return Poll::Ready(Ok(()));
            }
            let mut slices = [IoSlice::new(&[]); 3];
            let mut n = 0;
            let mut skip = self.done;
            for piece in self.pieces() {
                if skip >= piece.len() {
                    skip -= piece.len();
                    continue;
                }
                slices[n] = IoSlice::new(&piece[skip..]);
                skip = 0;
                n += 1;
            }
            match ready!(Pin::new(&mut *tcp).poll_write_vectored(cx, &slices[..n])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(written) => self.done += written,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Write `out` whole.
pub async fn write_out<W: AsyncWrite + Unpin>(tcp: &mut W, out: &mut Out) -> io::Result<()> {
    poll_fn(|cx| out.poll_write(tcp, cx)).await
}

/// Ready when the reader has closed its side (or the socket failed). Bytes it sends meanwhile
/// are read and dropped: a stream's reader has nothing more to say.
pub async fn reader_left(tcp: &TcpStream) {
    poll_fn(|cx| {
        loop {
            match tcp.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {}
            }
            let mut sink = [0u8; 256];
            match tcp.try_read(&mut sink) {
                Ok(0) => return Poll::Ready(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Poll::Ready(()),
            }
        }
    })
    .await
}

/// A socket with bytes already read from it put back in front (for hyper, after
/// [`read_head`] read them).
pub struct Rewind {
    read: Bytes,
    inner: Metered,
}

impl Rewind {
    pub fn new(read: Bytes, inner: Metered) -> Self {
        Self { read, inner }
    }
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read[..n]);
            this.read.advance(n);
            if this.read.is_empty() {
                // Give the head's buffer back now, not with the connection.
                this.read = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looked(head: &str) -> &'static str {
        match look(head.as_bytes()) {
            Look::More => "more",
            Look::Other => "other",
            Look::Stream(_) => "stream",
        }
    }

    #[test]
    fn only_a_plain_get_of_a_stream_is_taken() {
        let get =
            |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\nhost: x\r\n{extra}\r\n");
        assert_eq!(looked(&get("/jobs/abc/events?token=t", "")), "stream");
        assert_eq!(looked(&get("/correlations/c/events", "")), "stream");
        assert_eq!(looked("GET /jobs/abc/events HTTP/1.0\r\n\r\n"), "stream");
        assert_eq!(
            looked(&get("/jobs/abc/events", "content-length: 0\r\n")),
            "stream"
        );
        for other in [
            get("/jobs/abc", ""),
            get("/jobs//events", ""),
            get("/jobs/abc/events/x", ""),
            get("/mcp", ""),
            get("/jobs/abc/events", "content-length: 5\r\n"),
            get("/jobs/abc/events", "transfer-encoding: chunked\r\n"),
            "POST /jobs/abc/events HTTP/1.1\r\n\r\n".into(),
            "HEAD /jobs/abc/events HTTP/1.1\r\n\r\n".into(),
            "GET http://x/jobs/abc/events HTTP/1.1\r\n\r\n".into(),
            // A pipelined request behind the head.
            format!("{}GET / HTTP/1.1\r\n\r\n", get("/jobs/abc/events", "")),
            "GET /jobs/abc/events HTTP/1.1\r\nbad header\r\n\r\n".into(),
        ] {
            assert_eq!(looked(&other), "other", "{other:?}");
        }
        // Split anywhere, a head is read on until it is whole; a first byte that is not
        // `GET /` is handed on at once.
        let whole = get("/jobs/abc/events", "accept: text/event-stream\r\n");
        for cut in 1..whole.len() {
            assert_eq!(looked(&whole[..cut]), "more", "{cut}");
        }
        assert_eq!(looked("P"), "other");
        assert_eq!(looked("GE"), "more");
    }

    #[test]
    fn frames_are_chunked_for_http11_only() {
        let mut out = Out::frame(Bytes::from_static(b"data: x\n\n"), true);
        assert_eq!(out.pieces().concat(), b"9\r\ndata: x\n\n\r\n");
        out.done = 3;
        assert_eq!(out.len(), 14);
        let raw = Out::frame(Bytes::from(vec![b'x'; 300]), false);
        assert_eq!(raw.len(), 300);
        let big = Out::frame(Bytes::from(vec![b'x'; 300]), true);
        assert_eq!(big.pieces()[0], b"12C\r\n");
    }

    #[test]
    fn the_head_keeps_the_routers_headers_and_closes() {
        let mut response = Response::new(Body::empty());
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("https://app.example"),
        );
        let head = String::from_utf8(response_head(&response, true, false).to_vec()).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-type: text/event-stream\r\n"));
        assert!(head.contains("\r\naccess-control-allow-origin: https://app.example\r\n"));
        assert!(head.contains("\r\ndate: "));
        assert!(head.ends_with("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"));
        let old = String::from_utf8(response_head(&response, false, true).to_vec()).unwrap();
        assert!(old.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(!old.contains("transfer-encoding"));
    }
}
