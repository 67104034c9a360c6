//! Server-Sent Events for a job or a correlation: a consistent start (snapshot, replay or
//! reset), then the live tail, keep-alive comments while idle, and the end after the terminal
//! event.
//!
//! The stream is built from what the store's `open` returns: a cut at sequence number `head`
//! and a live subscription taken at the same moment. The reader's position (`last`) only moves
//! forward by one: a live event at or before it is a duplicate and skipped; one after a gap
//! (or a lag notice, or a heartbeat whose `id:` is ahead) sends the reader back to history,
//! and when history no longer reaches back, to a `reset` carrying the current snapshot.
//!
//! Two safety nets, both cheap: when history cannot be read (the store is reconnecting), the
//! stream stays open and the catch-up is retried with backoff, since the events are safe in
//! history; and a stream that has been idle for a keep-alive interval looks at history once
//! before the keep-alive comment. A live event that never arrived (the last one of a job, above
//! all, which no later event would reveal) is then delivered late instead of never.

use std::{collections::VecDeque, convert::Infallible, pin::Pin, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{HeaderValue, header},
    response::Response,
};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{ApiError, ApiState};
use crate::{
    metrics::Metrics,
    model::{Channel, EventKind, Seq, wire::sse_frame},
    store::{ChannelSnapshot, LiveItem, LiveStream, Opened, Store, StoreError, StoredEvent},
    wait::{Backoff, Pauses, sleep_until},
};

/// Sent first: how long a browser's EventSource waits before it reconnects.
const RETRY_FRAME: &[u8] = b"retry: 2000\n\n";
const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";
/// Pauses before reading history again after the store could not answer: short at first (a
/// Redis failover takes a moment), at most 5 s (the reader waits no longer than that past the
/// store's return). Jittered: all the readers of a job fail together and must not all come
/// back in the same instant.
const CATCH_UP: Backoff = Backoff {
    first: Duration::from_millis(200),
    cap: Duration::from_secs(5),
};

/// Open `channel` for a reader at `after` (its Last-Event-ID) and answer with the stream.
pub async fn respond(
    state: &ApiState,
    channel: Channel,
    after: Option<Seq>,
) -> Result<Response, ApiError> {
    // A correlation stream has no snapshot to start from: a fresh reader replays it whole.
    let after = match channel {
        Channel::Correlation(_) => Some(after.unwrap_or(0)),
        Channel::Job(_) => after,
    };
    // A fresh job reader gets the snapshot, then every event history still has (so a late
    // subscriber sees every step it can), then the live tail.
    let fresh = after.is_none();
    let opened = state
        .store
        .open(&channel, after.or(Some(0)))
        .await?
        .ok_or(ApiError::NotFound)?;
    if let Some(after) = after
        && after > opened.head
    {
        return Err(ApiError::BadRequest(format!(
            "Last-Event-ID {after} is ahead of this stream, whose newest event is {}; reconnect without it",
            opened.head
        )));
    }
    let tail = Tail::start(state, channel, if fresh { None } else { after }, opened).await;
    let stream = futures::stream::unfold(tail, |mut tail| async move {
        let frame = tail.next_frame().await?;
        Some((Ok::<Bytes, Infallible>(frame), tail))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Counts open streams in the `bridge_sse_subscribers` gauge for as long as it lives.
struct SubscriberGuard(Arc<Metrics>);

impl SubscriberGuard {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.sse_subscribers.inc();
        Self(metrics)
    }
}

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.0.sse_subscribers.dec();
    }
}

struct Tail {
    store: Arc<dyn Store>,
    channel: Channel,
    /// The sequence number of the last event this reader has been sent.
    last: Seq,
    live: LiveStream,
    queue: VecDeque<Bytes>,
    /// The terminal event is queued (or the channel is gone): end after the queue.
    done: bool,
    /// History could not be read for a catch-up: when to try again.
    retry_at: Option<Instant>,
    /// The pauses between those tries (reset by a successful read).
    retries: Pauses,
    keep_alive: Duration,
    /// When a keep-alive comment is due: `keep_alive` after the last frame. Sending a frame
    /// only moves this instant; the timer below is re-armed when it fires, so a busy stream
    /// touches the timer wheel once per `keep_alive`, not once per event.
    idle_deadline: Instant,
    idle: Pin<Box<Sleep>>,
    /// Fires at shutdown. A child token of the server's, registered once for the stream's
    /// life: waiting on the shared token itself would take its lock on every event of every
    /// stream (to register, and to poll).
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    _guard: SubscriberGuard,
}

impl Tail {
    async fn start(state: &ApiState, channel: Channel, after: Option<Seq>, opened: Opened) -> Self {
        let Opened {
            head,
            snapshot,
            backlog,
            covered,
            ended,
            live,
        } = opened;
        let mut tail = Tail {
            store: state.store.clone(),
            channel,
            last: head,
            live,
            queue: VecDeque::from([Bytes::from_static(RETRY_FRAME)]),
            done: false,
            retry_at: None,
            retries: CATCH_UP.pauses(),
            keep_alive: state.keep_alive,
            idle_deadline: Instant::now() + state.keep_alive,
            idle: Box::pin(tokio::time::sleep(state.keep_alive)),
            shutdown: Box::pin(state.shutdown.child_token().cancelled_owned()),
            _guard: SubscriberGuard::new(state.metrics.clone()),
        };
        match after {
            None => {
                // The status event sits just before the replayed history, so a reader that
                // resumes from its id gets exactly that history again.
                let base = backlog.first().map_or(head, |e| e.seq - 1);
                tail.queue
                    .push_back(snapshot_frame(EventKind::Status, base, &snapshot));
                tail.last = base;
                for event in backlog {
                    tail.send(&event);
                }
            }
            Some(_) if !covered => {
                tail.queue
                    .push_back(snapshot_frame(EventKind::Reset, head, &snapshot))
            }
            Some(after) => {
                tail.last = after;
                for event in backlog {
                    tail.send(&event);
                }
            }
        }
        if ended && !tail.done {
            tail.send_terminal().await;
        }
        tail
    }

    /// The next bytes to write, or `None` when the stream is over.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.queue.pop_front() {
                self.idle_deadline = Instant::now() + self.keep_alive;
                return Some(frame);
            }
            if self.done {
                return None;
            }
            let retry_at = self.retry_at;
            // Biased: events already delivered (a job's terminal event, written before the
            // shutdown signal) go out before the stream closes for shutdown.
            let item = tokio::select! {
                biased;
                item = self.live.next() => item,
                _ = sleep_until(retry_at), if retry_at.is_some() => {
                    self.catch_up().await;
                    continue;
                }
                _ = &mut self.idle => {
                    let now = Instant::now();
                    if now >= self.idle_deadline {
                        self.idle.as_mut().reset(now + self.keep_alive);
                        // Idle: make sure no event went missing on its way here (see the
                        // module doc); while a retry is pending, that retry does it.
                        if self.retry_at.is_none() {
                            self.catch_up().await;
                        }
                        if self.queue.is_empty() && !self.done {
                            self.queue.push_back(Bytes::from_static(KEEP_ALIVE_FRAME));
                        }
                    } else {
                        let deadline = self.idle_deadline;
                        self.idle.as_mut().reset(deadline);
                    }
                    continue;
                }
                _ = &mut self.shutdown => return None,
            };
            match item {
                Some(LiveItem::Event(event)) if event.ephemeral => {
                    // A heartbeat carries the channel's position: one ahead of the reader
                    // means an event went missing. Catch up first; never send an `id:` past
                    // what the reader has, or a reconnect would skip the gap.
                    if event.seq > self.last {
                        self.catch_up().await;
                    }
                    if event.seq <= self.last && !self.done {
                        self.queue.push_back(event.frame.clone())
                    }
                }
                Some(LiveItem::Event(event)) if event.seq <= self.last => {}
                Some(LiveItem::Event(event)) if event.seq == self.last + 1 => self.send(&event),
                Some(LiveItem::Event(_)) | Some(LiveItem::Lagged) => self.catch_up().await,
                // The channel is gone (expired): nothing more will come.
                None => self.done = true,
            }
        }
    }

    fn send(&mut self, event: &StoredEvent) {
        self.queue.push_back(event.frame.clone());
        self.last = event.seq;
        // A job's stream ends with its terminal event; a correlation's goes on (more jobs may
        // join it) until the reader leaves.
        if event.is_terminal() && matches!(self.channel, Channel::Job(_)) {
            self.done = true;
        }
    }

    /// Fill a gap from history, or reset the reader when history no longer has it.
    async fn catch_up(&mut self) {
        match self.store.replay(&self.channel, self.last).await {
            Ok(replay) if replay.covered => {
                self.read_history();
                for event in replay.events {
                    self.send(&event);
                }
            }
            Ok(_) => self.reset().await,
            Err(error) => self.retry_later(&error),
        }
    }

    /// The store could not answer (Redis is reconnecting). The stream stays open, with its
    /// keep-alives, as through any outage: what the reader misses is in history, read later.
    fn retry_later(&mut self, error: &StoreError) {
        if self.retry_at.is_none() {
            tracing::warn!(%error, "history unavailable for a reader that is behind; retrying");
        }
        self.retry_at = Some(Instant::now() + self.retries.next_pause());
    }

    /// History answered: no retry pending, and the next outage starts from the first pause.
    fn read_history(&mut self) {
        self.retry_at = None;
        self.retries.reset();
    }

    async fn reset(&mut self) {
        let opened = match self.store.open(&self.channel, None).await {
            Ok(Some(opened)) => opened,
            Ok(None) => {
                // The channel is gone (expired): nothing more will come.
                self.done = true;
                return;
            }
            Err(error) => return self.retry_later(&error),
        };
        self.read_history();
        self.queue.push_back(snapshot_frame(
            EventKind::Reset,
            opened.head,
            &opened.snapshot,
        ));
        self.last = opened.head;
        if opened.ended {
            self.send_terminal().await;
        }
    }

    /// For a reader positioned at the end of an ended job (a fresh reader, a reset, or one
    /// that reconnected after the end): send the terminal event itself, so every client sees
    /// one and knows to stop reconnecting.
    async fn send_terminal(&mut self) {
        self.done = true;
        let Ok(replay) = self
            .store
            .replay(&self.channel, self.last.saturating_sub(1))
            .await
        else {
            return;
        };
        if let Some(event) = replay.events.last().filter(|e| e.is_terminal()) {
            self.queue.push_back(event.frame.clone());
        }
    }
}

/// A `status` or `reset` frame: the job snapshot, or the snapshots of a correlation's jobs.
fn snapshot_frame(kind: EventKind, head: Seq, snapshot: &ChannelSnapshot) -> Bytes {
    let data = match snapshot {
        ChannelSnapshot::Job(job) => serde_json::to_vec(job),
        ChannelSnapshot::Correlation(jobs) => serde_json::to_vec(&json!({ "jobs": jobs })),
    }
    .unwrap_or_else(|_| b"{}".to_vec());
    sse_frame(head, kind.as_str(), &data)
}
