//! A request body with a deadline: the whole body must have arrived within
//! `server.body_read_timeout_secs` of its request head, or reading it fails with
//! [`BodyTimedOut`]. hyper bounds the wait for a request head (`header_read_timeout`) but not
//! for the body: a client that sends a large `Content-Length` and then a byte now and then
//! would otherwise hold its connection, and the handler reading the body, for ever.
//!
//! The timer is made only when a read finds nothing to take (an empty or fast body never
//! allocates one).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use prometheus::IntCounter;
use tokio::time::{Instant, Sleep};

/// Reading a request body took longer than `server.body_read_timeout_secs`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {0:?} of its head (server.body_read_timeout_secs); send it in one go"
)]
pub struct BodyTimedOut(pub Duration);

/// Whether `error` (or what caused it) is a [`BodyTimedOut`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// See the module doc.
pub struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    /// `bridge_connections_closed_total{reason="body_timeout"}`.
    expired: IntCounter,
}

impl TimedBody {
    pub fn new(inner: Incoming, timeout: Duration, expired: IntCounter) -> Self {
        Self {
            inner,
            timeout,
            deadline: Instant::now() + timeout,
            timer: None,
            expired,
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            this.expired.inc();
            return Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
