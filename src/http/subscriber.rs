//! One reader's stream of a job or a correlation, as frames: a consistent start (snapshot,
//! replay or reset), then the live tail, keep-alive comments while idle, and the end after
//! the terminal event. It knows no HTTP: `sse.rs` answers with its frames.
//!
//! Built from the store's `open` (a cut at `head` and a live subscription taken together). The
//! reader's position only moves forward by one: a duplicate is skipped; a gap, a lag or a
//! heartbeat ahead sends it back to history, or to a `reset` when history no longer reaches.
//! History that cannot be read is retried with backoff; an idle stream looks at history once
//! per keep-alive. A correlation stream opened with a credential shows the caller's jobs only
//! ([`JobFilter`]). Unread bytes are bounded by `limits.max_sse_buffer_bytes` ([`Outflow`]).
//! Details and reasons: docs/design/sse.md.

use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{Arc, LazyLock, Weak},
    time::Duration,
};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{limits::SubscriberPermit, serve::Outflow, state::ApiState};
use crate::{
    auth::{Identity, Positions, may_access},
    events::{
        Broker, ChannelSnapshot, LiveItem, LiveStream, Opened, StoreError, StoredEvent, sse_frame,
    },
    metrics::{Histogram, Metrics},
    model::{Channel, EventKind, JobId, JobSnapshot, Seq},
    wait::{Backoff, Pauses, sleep_until},
};

/// Pauses before reading history again after the store could not answer: short at first (a
/// Redis failover takes a moment), at most 5 s (the reader waits no longer than that past the
/// store's return). Jittered: all the readers of a job fail together and must not all come
/// back in the same instant.
const CATCH_UP: Backoff = Backoff {
    first: Duration::from_millis(200),
    cap: Duration::from_secs(5),
};

/// A correlation stream opened with a credential: whose jobs it shows, and (unless the caller
/// sees every job, as an admin does) the ids it shows them under.
pub struct Only {
    pub identity: Arc<Identity>,
    pub ids: Option<Positions>,
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

/// One reader's stream (see the module doc).
pub struct Subscriber {
    store: Arc<dyn Broker>,
    channel: Channel,
    /// The sequence number of the last event this reader has been sent.
    last: Seq,
    live: LiveStream,
    /// Frames made and not yet handed to hyper; their bytes are counted in `outflow` (and in
    /// `queued`, to take them off if the stream ends first), each live event's with when it
    /// reached the bridge (for `bridge_sse_delivery_lag_seconds`, observed when handed on).
    queue: VecDeque<(Bytes, Option<std::time::Instant>)>,
    lag: Histogram,
    queued: usize,
    /// What this reader holds unread, and the bound on it (`limits.max_sse_buffer_bytes`):
    /// past it, history is not queued but read again once the queue has gone out.
    outflow: Arc<Outflow>,
    bound: usize,
    /// History after `last` is still to be queued (held back by the bound).
    behind: bool,
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
    /// Fires at shutdown, for a stream not served by the bridge's loop. Served by the loop,
    /// the stream ends when `outflow` says its connection is closing: an atomic flag read on
    /// each poll, where a token's future takes its lock on every poll of every stream.
    shutdown: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// The stream's subscriber place, given back when it ends.
    _place: Option<SubscriberPermit>,
    /// The jobs this reader may see, when it is not all of them.
    filter: Option<JobFilter>,
    /// A shared writer holds the socket (see `serve::writers`): the live subscription is not
    /// read meanwhile, and the writer moves the position. Unread, the subscription keeps the
    /// job's newest live events alive, as many as the store's live ring holds (128 on the
    /// memory store, which holds them in history anyway; 256 on Redis, about 300 bytes each
    /// for a progress event); and a stream handed back after more events than that finds it
    /// lagged and reads history once.
    parked: bool,
    /// The writer handed the socket back with the end of a frame for the connection to write
    /// before anything this stream makes.
    rest: bool,
    /// The writer handed the socket back having seen this event, which the reader had not
    /// been sent: from history if the live subscription does not bring it (0: none).
    ahead: Seq,
    _guard: SubscriberGuard,
}

/// Most jobs a [`JobFilter`] remembers its decision on; past it, it forgets them all and
/// decides again as their events come (one snapshot read each).
const FILTER_MEMORY: usize = 4096;

/// Which jobs of a correlation one reader may see (`auth::may_access`), decided once per job;
/// and the ids it is shown ([`Positions`]), when it may not see them all.
struct JobFilter {
    identity: Arc<Identity>,
    decided: HashMap<JobId, bool>,
    ids: Option<Positions>,
}

impl JobFilter {
    fn new(only: Only) -> Self {
        Self {
            identity: only.identity,
            decided: HashMap::new(),
            ids: only.ids,
        }
    }

    fn remember(&mut self, job: JobId, visible: bool) {
        if self.decided.len() >= FILTER_MEMORY {
            self.decided.clear();
        }
        self.decided.insert(job, visible);
    }

    /// The snapshots of a `status` or `reset` frame that this reader may see.
    fn snapshot(&mut self, snapshot: ChannelSnapshot) -> ChannelSnapshot {
        match snapshot {
            ChannelSnapshot::Correlation(jobs) => ChannelSnapshot::Correlation(
                jobs.into_iter()
                    .filter(|job| {
                        let visible = may_access(&self.identity, job);
                        self.remember(job.job_id, visible);
                        visible
                    })
                    .collect(),
            ),
            job => job,
        }
    }

    /// Whether this reader may see `event`, by its job (every correlation event names one
    /// first in its data). A job whose snapshot cannot be read (expired, or the store is
    /// reconnecting) is not shown.
    async fn admits(&mut self, store: &dyn Broker, event: &StoredEvent) -> bool {
        let Some(job) = event_job(&event.data) else {
            return false;
        };
        if let Some(&visible) = self.decided.get(&job) {
            return visible;
        }
        let visible = match store.snapshot(job).await {
            Ok(Some(snapshot)) => may_access(&self.identity, &snapshot),
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(%error, job = %job, "cannot tell whose job an event is; not shown to this reader");
                return false;
            }
        };
        self.remember(job, visible);
        visible
    }
}

/// The job an event's data names: it starts with `{"job_id":"<id>"` (job events, heartbeats
/// and `job_started` snapshots alike); anything else is read whole.
fn event_job(data: &[u8]) -> Option<JobId> {
    const HEAD: &[u8] = b"{\"job_id\":\"";
    if let Some(rest) = data.strip_prefix(HEAD)
        && let Some(id) = rest.get(..32)
    {
        return std::str::from_utf8(id).ok()?.parse().ok();
    }
    #[derive(serde::Deserialize)]
    struct Named {
        job_id: JobId,
    }
    serde_json::from_slice::<Named>(data).ok().map(|n| n.job_id)
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if self.parked
            && let Some(seat) = self.outflow.seat()
        {
            seat.take_back();
        }
        self.outflow.meter().discarded(self.queued);
        self.outflow.disarm();
    }
}

impl Subscriber {
    /// The stream's start for a reader at `after` (none: a fresh reader): the retry hint, then
    /// the snapshot and the history it can still replay, or a `reset`. `only`: the jobs of a
    /// correlation this reader may see, not all of them.
    pub async fn start(
        state: &ApiState,
        channel: Channel,
        after: Option<Seq>,
        opened: Opened,
        (only, outflow): (Option<Only>, Arc<Outflow>),
        (shutdown, place): (
            Option<Pin<Box<WaitForCancellationFutureOwned>>>,
            Option<SubscriberPermit>,
        ),
    ) -> Self {
        let Opened {
            head,
            snapshot,
            backlog,
            covered,
            ended,
            live,
        } = opened;
        let mut tail = Subscriber {
            store: state.broker.clone(),
            channel,
            last: head,
            live,
            queue: VecDeque::new(),
            lag: state.metrics.delivery_lag.clone(),
            queued: 0,
            outflow,
            bound: state.max_sse_buffer_bytes,
            behind: false,
            done: false,
            retry_at: None,
            retries: CATCH_UP.pauses(),
            keep_alive: state.keep_alive,
            idle_deadline: Instant::now() + state.keep_alive,
            idle: Box::pin(tokio::time::sleep(state.keep_alive)),
            shutdown,
            _place: place,
            filter: only.map(JobFilter::new),
            parked: false,
            rest: false,
            ahead: 0,
            _guard: SubscriberGuard::new(state.metrics.clone()),
        };
        tail.push(Bytes::from_static(sse_frame::RETRY));
        tail.replay(after, head, snapshot, backlog, (covered, ended))
            .await;
        tail
    }

    /// What a reader at `after` is owed when its stream opens at `head`: the snapshot and the
    /// `backlog` still in history, or a `reset` when history does not cover `after`; the
    /// terminal event when the channel has `ended`.
    async fn replay(
        &mut self,
        after: Option<Seq>,
        head: Seq,
        snapshot: ChannelSnapshot,
        backlog: Vec<Arc<StoredEvent>>,
        (covered, ended): (bool, bool),
    ) {
        let snapshot = self.visible(snapshot);
        match after {
            None => {
                // The status event sits just before the replayed history, so a reader that
                // resumes from its id gets exactly that history again.
                let base = backlog.first().map_or(head, |e| e.seq - 1);
                for chunk in snapshot_frame(EventKind::Status, self.shown(base), &snapshot) {
                    self.push(chunk);
                }
                self.last = base;
                self.deliver_all(backlog).await;
            }
            Some(_) if !covered => self.push_reset(head, ended, &snapshot),
            Some(after) => {
                self.last = after;
                self.deliver_all(backlog).await;
            }
        }
        if ended && !self.done && !self.behind {
            self.send_terminal().await;
        }
    }

    /// The stream's frames, until it is over.
    pub fn frames(self) -> impl Stream<Item = Bytes> + Send {
        futures::stream::unfold(self, |mut tail| async move {
            let frame = tail.next_frame().await?;
            Some((frame, tail))
        })
    }

    /// The id this reader is shown for `position`.
    fn shown(&self, position: Seq) -> u64 {
        match self.filter.as_ref().and_then(|f| f.ids.as_ref()) {
            Some(ids) => ids.id(position),
            None => position,
        }
    }

    /// Queue a stored event's frame, under the id this reader is shown for it.
    fn push_event(&mut self, event: &StoredEvent) {
        let shown = self.shown(event.seq);
        if shown == event.seq {
            return self.push(event.frame.clone());
        }
        for chunk in sse_frame::with_id(&event.frame, shown) {
            self.push(chunk);
        }
    }

    /// Queue a frame, counting its bytes as held by the reader.
    fn push(&mut self, frame: Bytes) {
        self.queued += frame.len();
        self.outflow.meter().queued(frame.len());
        self.queue.push_back((frame, None));
    }

    /// Whether one more frame may be queued: the reader holds less than the bound, or
    /// nothing is queued (a frame larger than the bound goes alone).
    fn has_room(&self) -> bool {
        self.queue.is_empty() || self.outflow.meter().held() < self.bound
    }

    /// Deliver `events` (history, oldest first) while there is room; past it, the rest is
    /// read again from history once the queue has gone out.
    async fn deliver_all(&mut self, events: Vec<Arc<StoredEvent>>) {
        for event in events {
            if !self.has_room() {
                self.behind = true;
                return;
            }
            self.deliver(&event).await;
        }
    }

    /// The next bytes to write, or `None` when the stream is over. An empty frame: the
    /// connection has the end of a frame a shared writer could not write whole to write first.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if std::mem::take(&mut self.rest) {
                return Some(Bytes::new());
            }
            if let Some((frame, born)) = self.queue.pop_front() {
                if let Some(born) = born {
                    self.lag.observe(born.elapsed().as_secs_f64());
                }
                self.queued -= frame.len();
                self.idle_deadline = Instant::now() + self.keep_alive;
                return Some(self.outflow.meter().send(frame));
            }
            if self.done {
                return None;
            }
            if self.behind && self.retry_at.is_none() {
                // The queue has gone out: the history held back by the bound comes next.
                self.catch_up().await;
                continue;
            }
            if !self.parked && self.may_park() && self.take_ready_or_park().await {
                continue;
            }
            let retry_at = self.retry_at;
            let parked = self.parked;
            // Biased: events already delivered (a job's terminal event, written before the
            // shutdown signal) go out before the stream closes for shutdown.
            let item = tokio::select! {
                biased;
                item = self.live.next(), if !parked => item,
                () = Self::handed_back(&self.outflow), if parked => {
                    self.unpark();
                    continue;
                }
                _ = sleep_until(retry_at), if retry_at.is_some() => {
                    self.catch_up().await;
                    continue;
                }
                _ = &mut self.idle => {
                    self.on_idle(parked).await;
                    continue;
                }
                () = Self::stopping(&self.outflow, &mut self.shutdown) => {
                    self.unpark();
                    self.last_look().await;
                    continue;
                }
            };
            self.on_live(item).await;
        }
    }

    /// Before parking: what the live subscription holds already is this stream's to send
    /// (read without leaving a waker behind, so events do not wake it while parked), and an
    /// event the writer saw that has not come here live is read from history (on Redis,
    /// history can be ahead of pub/sub) rather than park and be handed back. Else park.
    /// `true`: something was taken, and the stream did not park.
    async fn take_ready_or_park(&mut self) -> bool {
        let ready = {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            self.live.poll_next_unpin(&mut cx)
        };
        if let std::task::Poll::Ready(item) = ready {
            self.on_live(item).await;
            return true;
        }
        if std::mem::take(&mut self.ahead) > self.last {
            self.catch_up().await;
            return true;
        }
        self.parked = (self.outflow.seat())
            .is_some_and(|seat| seat.park(&self.channel, self.last, &self.store));
        false
    }

    /// The idle timer fired (`parked`: while a shared writer held the socket).
    async fn on_idle(&mut self, parked: bool) {
        // The writer wrote since: no keep-alive is due, and the socket stays with it (taken
        // back, a busy job's stream would find its own subscription lagged and read history at
        // every interval).
        if parked && let Some(at) = self.outflow.seat().and_then(|seat| seat.parked_wrote_at()) {
            self.idle_deadline = self.idle_deadline.max(at + self.keep_alive);
            if Instant::now() < self.idle_deadline {
                let deadline = self.idle_deadline;
                self.idle.as_mut().reset(deadline);
                return;
            }
        }
        // A keep-alive may be due: the stream takes its socket back to see.
        self.unpark();
        let now = Instant::now();
        if now >= self.idle_deadline {
            self.idle.as_mut().reset(now + self.keep_alive);
            // Idle: make sure no event went missing on its way here (see the module doc);
            // while a retry is pending, that retry does it.
            if self.retry_at.is_none() {
                self.catch_up().await;
            }
            if self.queue.is_empty() && !self.done && !self.rest {
                self.push(Bytes::from_static(sse_frame::KEEP_ALIVE));
            }
        } else {
            let deadline = self.idle_deadline;
            self.idle.as_mut().reset(deadline);
        }
    }

    /// Whether a shared writer may write this stream's events (see `serve::writers`): it is
    /// caught up, a job's (a correlation stream has a per-reader filter), and not closing.
    fn may_park(&self) -> bool {
        self.filter.is_none()
            && matches!(self.channel, Channel::Job(_))
            && self.queue.is_empty()
            && !self.done
            && !self.behind
            && !self.rest
            && self.retry_at.is_none()
            && !self.outflow.closing()
            && self.outflow.seat().is_some()
    }

    /// Take the socket back from the shared writer (if it has it), and the reader's position
    /// with it.
    fn unpark(&mut self) {
        if !std::mem::take(&mut self.parked) {
            return;
        }
        let Some(back) = self.outflow.seat().map(|seat| seat.take_back()) else {
            return;
        };
        self.last = self.last.max(back.last);
        if back.ended {
            self.done = true;
        }
        if let Some(at) = back.wrote_at {
            self.idle_deadline = self.idle_deadline.max(at + self.keep_alive);
        }
        self.rest = back.rest;
        self.ahead = back.ahead;
    }

    /// One item of the live subscription.
    async fn on_live(&mut self, item: Option<LiveItem>) {
        match item {
            Some(LiveItem::Event(event)) if event.ephemeral => {
                // A heartbeat carries the channel's position: one ahead of the reader
                // means an event went missing. Catch up first; never send an `id:` past
                // what the reader has, or a reconnect would skip the gap.
                if event.seq > self.last {
                    self.catch_up().await;
                }
                if event.seq <= self.last && !self.done && !self.behind && self.admits(&event).await
                {
                    self.push_event(&event)
                }
            }
            Some(LiveItem::Event(event)) if event.seq <= self.last => {}
            Some(LiveItem::Event(event)) if event.seq == self.last + 1 => {
                let queued = self.queue.len();
                self.deliver(&event).await;
                if self.queue.len() > queued
                    && let Some((_, born)) = self.queue.back_mut()
                {
                    *born = Some(event.born);
                }
            }
            Some(LiveItem::Event(_)) | Some(LiveItem::Lagged) => self.catch_up().await,
            // The channel is gone (expired): nothing more will come.
            None => self.done = true,
        }
    }

    /// The stream ends for shutdown: read history once and send what it holds, then end after
    /// the queued frames. A job's terminal event is written before the shutdown signal, but on
    /// the Redis store its live copy comes through pub/sub and may still be on its way.
    /// A stream that no terminal event ended says goodbye with a `retry:` (see
    /// [`sse_frame::CLOSING`]).
    async fn last_look(&mut self) {
        if !self.behind {
            self.catch_up().await;
        }
        if !self.done {
            self.push(Bytes::from_static(sse_frame::CLOSING));
        }
        self.done = true;
    }

    /// Ready once the shared writer has handed the socket back (at once without a writer).
    fn handed_back(outflow: &Outflow) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| match outflow.seat() {
            Some(seat) => seat.poll_handed_back(cx),
            None => std::task::Poll::Ready(()),
        })
    }

    /// Ready once the stream must end for shutdown: its connection is closing, or (not served
    /// by the bridge's loop) the shutdown token fired.
    fn stopping<'a>(
        outflow: &'a Outflow,
        token: &'a mut Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    ) -> impl std::future::Future<Output = ()> + 'a {
        std::future::poll_fn(move |cx| {
            if outflow.poll_closing(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            match token {
                Some(token) => token.as_mut().poll(cx),
                None => std::task::Poll::Pending,
            }
        })
    }

    /// Whether this reader may see `event` (always, without a filter).
    async fn admits(&mut self, event: &StoredEvent) -> bool {
        match &mut self.filter {
            Some(filter) => filter.admits(&*self.store, event).await,
            None => true,
        }
    }

    /// Send `event`, or pass over it when this reader may not see it: either way the reader's
    /// position moves past it.
    async fn deliver(&mut self, event: &StoredEvent) {
        if self.admits(event).await {
            self.send(event);
        } else {
            self.last = event.seq;
        }
    }

    /// The part of a channel snapshot this reader may see.
    fn visible(&mut self, snapshot: ChannelSnapshot) -> ChannelSnapshot {
        match &mut self.filter {
            Some(filter) => filter.snapshot(snapshot),
            None => snapshot,
        }
    }

    fn send(&mut self, event: &StoredEvent) {
        self.push_event(event);
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
                self.deliver_all(replay.events).await;
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

    /// History answered: no retry pending, and the next outage starts from the first pause;
    /// nothing held back (until the bound holds something back again).
    fn read_history(&mut self) {
        self.behind = false;
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
        let snapshot = self.visible(opened.snapshot);
        self.push_reset(opened.head, opened.ended, &snapshot);
        if opened.ended {
            self.send_terminal().await;
        }
    }

    /// Queue a `reset` that puts the reader at the channel's head. Every id on a stream is a
    /// position and no two frames share one: on an ended job the terminal event (sent next)
    /// holds the head, so the reset takes the position just before it, as `status` does
    /// before the history it precedes.
    fn push_reset(&mut self, head: Seq, ended: bool, snapshot: &ChannelSnapshot) {
        let at = if ended { head.saturating_sub(1) } else { head };
        for chunk in snapshot_frame(EventKind::Reset, self.shown(at), snapshot) {
            self.push(chunk);
        }
        self.last = at;
    }

    /// For a reader positioned at the end of an ended job (a fresh reader, a reset, or one
    /// that reconnected after the end): send the terminal event itself, so every client sees
    /// one and knows to stop reconnecting.
    async fn send_terminal(&mut self) {
        if !self.has_room() {
            // After the queue has gone out, from history (the terminal event is there).
            self.behind = true;
            return;
        }
        self.done = true;
        let Ok(replay) = self
            .store
            .replay(&self.channel, self.last.saturating_sub(1))
            .await
        else {
            return;
        };
        if let Some(event) = replay.events.last().filter(|e| e.is_terminal()) {
            self.push_event(event);
        }
    }
}

/// A `status` or `reset` frame with the `id:` `head`, in chunks written one after the other:
/// the `id:`/`event:` lines, the snapshot JSON (shared, see [`SnapshotData`]), the end. For a correlation, the
/// JSON `{"jobs":[…]}` around each visible job's shared snapshot.
fn snapshot_frame(kind: EventKind, head: Seq, snapshot: &ChannelSnapshot) -> Vec<Bytes> {
    let mut chunks = vec![sse_frame::head(head, kind.as_str())];
    match snapshot {
        ChannelSnapshot::Job(job) => chunks.push(SNAPSHOTS.data(job)),
        ChannelSnapshot::Correlation(jobs) => {
            chunks.push(Bytes::from_static(b"{\"jobs\":["));
            for (i, job) in jobs.iter().enumerate() {
                if i > 0 {
                    chunks.push(Bytes::from_static(b","));
                }
                chunks.push(SNAPSHOTS.data(job));
            }
            chunks.push(Bytes::from_static(b"]}"));
        }
    }
    chunks.push(Bytes::from_static(sse_frame::END));
    chunks
}

/// Every reader's `status` and `reset` frames, process-wide.
static SNAPSHOTS: LazyLock<SnapshotData> = LazyLock::new(SnapshotData::default);

/// Snapshot JSON rendered once per job state and shared by every reader that starts from that
/// state, instead of once per reader: with a large result in the snapshot, 60 readers that did
/// not read held 60 copies (a 10 MiB result took RSS from 87 to 723 MiB). Keyed by job and
/// `seq` (a snapshot at one `seq` is one state); the map holds weak references only, so a
/// rendering lives exactly as long as some reader holds it, and nothing is kept for nobody.
/// Process-wide because job IDs are: two routers in one process never share a job.
#[derive(Default)]
struct SnapshotData {
    /// A plain mutex: held to look up or insert, never while rendering or across an `.await`.
    rendered: parking_lot::Mutex<Renderings>,
}

/// The snapshot of a job at a `seq`, rendered, while some reader holds it.
type Renderings = HashMap<(JobId, Seq), Weak<[u8]>>;

/// Entries past which dead ones are swept out on insert.
const SNAPSHOT_SWEEP: usize = 1024;

impl SnapshotData {
    fn data(&self, job: &JobSnapshot) -> Bytes {
        let key = (job.job_id, job.seq);
        if let Some(data) = self.rendered.lock().get(&key).and_then(Weak::upgrade) {
            return Bytes::from_owner(data);
        }
        let fresh: Arc<[u8]> = serde_json::to_vec(job)
            .unwrap_or_else(|_| b"{}".to_vec())
            .into();
        let mut rendered = self.rendered.lock();
        // Another reader may have rendered it meanwhile: share theirs.
        if let Some(data) = rendered.get(&key).and_then(Weak::upgrade) {
            return Bytes::from_owner(data);
        }
        if rendered.len() >= SNAPSHOT_SWEEP {
            rendered.retain(|_, data| data.strong_count() > 0);
        }
        rendered.insert(key, Arc::downgrade(&fresh));
        Bytes::from_owner(fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::model::NewJob;

    fn snapshot() -> JobSnapshot {
        JobSnapshot::new(
            &NewJob {
                id: JobId::random(),
                tool: "demo__t".into(),
                upstream: "demo".into(),
                upstream_tool: "t".into(),
                correlation_id: None,
                owner: "test".into(),
                principal: None,
            },
            1000,
        )
    }

    fn joined(chunks: &[Bytes]) -> Vec<u8> {
        chunks.concat()
    }

    /// Readers starting from one state share one rendering; a new state renders anew; the
    /// chunks make exactly the frame a reader always got.
    #[test]
    fn one_rendering_of_a_snapshot_per_state_whatever_the_readers() {
        let job = snapshot();
        let channel = ChannelSnapshot::Job(Box::new(job.clone()));
        let a = snapshot_frame(EventKind::Status, 0, &channel);
        let b = snapshot_frame(EventKind::Reset, 0, &channel);
        assert_eq!(a[1].as_ptr(), b[1].as_ptr(), "shared, not copied");
        let data = serde_json::to_vec(&job).unwrap();
        assert_eq!(joined(&a), sse_frame::frame(0, "status", &data).to_vec());
        let mut next = job.clone();
        next.seq = 1;
        let c = snapshot_frame(EventKind::Status, 1, &ChannelSnapshot::Job(Box::new(next)));
        assert_ne!(a[1].as_ptr(), c[1].as_ptr());
        drop((a, b, c));
        // Nobody holds it: rendered again, not kept for nobody.
        assert!(
            SNAPSHOTS.rendered.lock()[&(job.job_id, 0)]
                .upgrade()
                .is_none()
        );
        let other = snapshot();
        let jobs = ChannelSnapshot::Correlation(vec![job.clone(), other.clone()]);
        // A correlation's reset shares each job's rendering too (one per state, not per reader).
        let one = snapshot_frame(EventKind::Reset, 7, &jobs);
        let two = snapshot_frame(EventKind::Reset, 7, &jobs);
        assert_eq!(
            one[2].as_ptr(),
            two[2].as_ptr(),
            "a correlation's job snapshot shared"
        );
        let frame = joined(&snapshot_frame(EventKind::Reset, 7, &jobs));
        let head = b"id: 7\nevent: reset\ndata: ";
        assert!(frame.starts_with(head) && frame.ends_with(b"\n\n"));
        let data: serde_json::Value =
            serde_json::from_slice(&frame[head.len()..frame.len() - 2]).unwrap();
        assert_eq!(data, json!({ "jobs": [job, other] }));
        let empty = snapshot_frame(EventKind::Status, 0, &ChannelSnapshot::Correlation(vec![]));
        assert_eq!(
            joined(&empty),
            b"id: 0\nevent: status\ndata: {\"jobs\":[]}\n\n"
        );
    }
}
