//! Shared writer tasks for job event streams (`server.sse_writers`): a few tasks that write
//! each new event to every caught-up socket of its job, instead of one task per reader woken
//! for every event.
//!
//! A stream hands its socket to a writer ([`Seat::park`]) only when caught up (nothing
//! queued or held back, no retry pending, no filter, nothing left in its own subscription).
//! The writer writes an event only when it is that reader's next one, with one non-blocking
//! write; anything else (a full or partial write, a gap, a lag, an error, the job's end, a
//! keep-alive due) hands the socket back to the stream's task, which goes on from there. So a
//! reader gets each event once and in order whoever writes it; the byte bound, the stalled
//! reader drop, resume and `reset` stay the stream's. A pass yields when the task's
//! cooperative budget is spent. Details and the measurements: docs/design/http-serve.md.

use std::{
    collections::HashMap,
    io,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::{
    StreamExt,
    future::BoxFuture,
    stream::{BoxStream, FuturesUnordered},
    task::AtomicWaker,
};
use parking_lot::{Mutex, MutexGuard};
use prometheus::{Histogram, IntCounter, IntCounterVec};
use tokio::{net::TcpStream, sync::mpsc, time::Instant};
use tokio_stream::StreamMap;

use super::meter::Meter;
use crate::{
    events::{Broker, LiveItem, Opened, StoreError, StoredEvent},
    model::{Channel, Seq},
    shutdown::Tasks,
};

/// Most writer tasks (`server.sse_writers`).
pub const MAX_WRITERS: usize = 64;

/// How long the readers of a writer that could not open their job write their own events
/// before they may park again.
const HOLD_OFF: Duration = Duration::from_secs(1);

/// How often a writer forgets the parkings that are over and the jobs no reader of it follows.
const SWEEP: Duration = Duration::from_secs(30);

/// Entries in a group from which it is pruned on a join (then again at twice its size).
const PRUNE_FROM: usize = 64;

/// The writer tasks of a listener; a stream's socket goes to one of them, round robin.
pub struct Writers {
    lanes: Vec<mpsc::UnboundedSender<Park>>,
    next: AtomicUsize,
}

impl Writers {
    /// Start `count` writer tasks on the HTTP stage (none for 0: every stream writes its own).
    pub fn spawn(
        count: usize,
        http: &Tasks,
        (handbacks, written): (&IntCounterVec, &IntCounter),
        lag: &Histogram,
    ) -> Option<Arc<Self>> {
        if count == 0 {
            return None;
        }
        let counts = HandBacks {
            written: written.clone(),
            full: handbacks.with_label_values(&["full"]),
            partial: handbacks.with_label_values(&["partial"]),
            behind: handbacks.with_label_values(&["behind"]),
            error: handbacks.with_label_values(&["error"]),
            lag: lag.clone(),
        };
        let lanes = (0..count.min(MAX_WRITERS))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                http.spawn_until_stopped(run(rx, counts.clone()));
                tx
            })
            .collect();
        Some(Arc::new(Self {
            lanes,
            next: AtomicUsize::new(0),
        }))
    }

    /// A seat for a stream written on `tcp` (in HTTP/1.1 chunks when `chunked`), whose bytes
    /// count in `meter`.
    pub fn seat(&self, tcp: Arc<TcpStream>, chunked: bool, meter: Arc<Meter>) -> Seat {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
        Seat::new(self.lanes[i].clone(), (tcp, chunked), meter)
    }
}

impl Seat {
    fn new(
        lane: mpsc::UnboundedSender<Park>,
        (tcp, chunked): (Arc<TcpStream>, bool),
        meter: Arc<Meter>,
    ) -> Self {
        Self {
            lane,
            chunked,
            meter,
            state: Mutex::new(SeatState {
                tcp: Some(tcp),
                parked: false,
                epoch: 0,
                last: 0,
                ended: false,
                rest: None,
                wrote_at: None,
                ahead: 0,
                hold_off: None,
            }),
            waker: AtomicWaker::new(),
        }
    }
}

#[derive(Clone)]
struct HandBacks {
    /// Events written by a writer (one per reader).
    written: IntCounter,
    full: IntCounter,
    partial: IntCounter,
    behind: IntCounter,
    error: IntCounter,
    /// From each event's arrival to its write, per reader (`bridge_sse_delivery_lag_seconds`).
    lag: Histogram,
}

/// A stream's place at a writer: the socket, and who writes on it now.
pub struct Seat {
    lane: mpsc::UnboundedSender<Park>,
    chunked: bool,
    /// The connection's byte counts.
    meter: Arc<Meter>,
    state: Mutex<SeatState>,
    /// The stream's task, woken when the writer hands the socket back.
    waker: AtomicWaker,
}

struct SeatState {
    /// `None` once the connection's task has ended: the writer no longer writes.
    tcp: Option<Arc<TcpStream>>,
    /// The writer writes on the socket (the stream's task does not).
    parked: bool,
    /// Which parking this is: a writer's entry from an earlier one is stale.
    epoch: u64,
    /// The sequence number of the last event the reader has been sent.
    last: Seq,
    /// The job's terminal event has been written: the stream ends.
    ended: bool,
    /// The unwritten end of a frame the socket took part of, written next by the connection.
    rest: Option<Rest>,
    /// When the writer last wrote (the stream's next keep-alive counts from it).
    wrote_at: Option<Instant>,
    /// Handed back having seen this event, which the reader had not been sent (0: none).
    ahead: Seq,
    /// The stream does not park again before this instant (its writer's subscription failed).
    hold_off: Option<Instant>,
}

/// The end of a frame a writer could not write whole; the whole frame counts as held.
struct Rest {
    bytes: Bytes,
    frame: usize,
}

/// What a stream learns when it has its socket back.
pub struct Back {
    pub last: Seq,
    pub ended: bool,
    pub wrote_at: Option<Instant>,
    /// The connection has the end of a frame to write before anything the stream makes.
    pub rest: bool,
    /// An event the writer had seen and the reader had not been sent: if its own live
    /// subscription does not bring it, history does (0: none).
    pub ahead: Seq,
}

impl Seat {
    fn hand_back(&self, mut state: parking_lot::MutexGuard<'_, SeatState>) {
        state.parked = false;
        drop(state);
        self.waker.wake();
    }
}

impl Seat {
    /// Hand the socket to its writer, the reader at `last` on job channel `channel`; `false`
    /// when there is no writer (or it is gone, or the connection still has a frame's end to
    /// write, or the writer's subscription failed a moment ago): the stream writes on.
    pub fn park(self: &Arc<Self>, channel: &Channel, last: Seq, store: &Arc<dyn Broker>) -> bool {
        let epoch = {
            let mut state = self.state.lock();
            if state.tcp.is_none() || state.rest.is_some() {
                return false;
            }
            if let Some(until) = state.hold_off {
                if Instant::now() < until {
                    return false;
                }
                state.hold_off = None;
            }
            state.parked = true;
            state.epoch += 1;
            state.last = last;
            state.ended = false;
            state.wrote_at = None;
            state.ahead = 0;
            state.epoch
        };
        let park = Park {
            seat: self.clone(),
            epoch,
            last,
            channel: channel.clone(),
            store: store.clone(),
        };
        if self.lane.send(park).is_err() {
            self.state.lock().parked = false;
            return false;
        }
        true
    }

    /// Ready once the writer has handed the socket back.
    pub fn poll_handed_back(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.waker.register(cx.waker());
        if self.state.lock().parked {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// When the writer last wrote on the socket since the stream parked, while it holds it.
    pub fn parked_wrote_at(&self) -> Option<Instant> {
        let state = self.state.lock();
        state.parked.then_some(state.wrote_at).flatten()
    }

    /// Take the socket back (the writer writes no more on it) and learn where the reader is.
    pub fn take_back(&self) -> Back {
        let mut state = self.state.lock();
        state.parked = false;
        state.epoch += 1;
        Back {
            last: state.last,
            ended: state.ended,
            wrote_at: state.wrote_at,
            rest: state.rest.is_some(),
            ahead: state.ahead,
        }
    }

    /// The end of a frame the writer could not write whole, for the connection to write next
    /// (held until dropped).
    pub fn take_rest(&self) -> Option<Bytes> {
        let Rest { bytes, frame } = self.state.lock().rest.take()?;
        Some(self.meter.counted(bytes, frame))
    }

    /// The connection's task ends: no writer writes on its socket again.
    pub fn unseat(&self) {
        let mut state = self.state.lock();
        state.parked = false;
        state.tcp = None;
        if let Some(rest) = state.rest.take() {
            self.meter.discarded(rest.frame);
        }
    }
}

/// A stream's socket handed to a writer.
struct Park {
    seat: Arc<Seat>,
    epoch: u64,
    last: Seq,
    channel: Channel,
    store: Arc<dyn Broker>,
}

/// A parked stream as a writer holds it: its connection, and which parking it is.
struct Parked {
    seat: Arc<Seat>,
    epoch: u64,
}

impl Parked {
    /// The seat and its state while this parking lasts: `None` once the socket has been
    /// handed back, taken back (an entry of an earlier parking), or the connection has ended.
    fn current(&self) -> Option<(&Seat, MutexGuard<'_, SeatState>)> {
        let state = self.seat.state.lock();
        (state.parked && state.epoch == self.epoch).then_some((&*self.seat, state))
    }
}

/// The parked readers of one job at one writer.
struct Group {
    /// The last event the writer has seen; `None` while its subscription is being opened.
    at: Option<Seq>,
    /// Entries of parkings that are over stay until the next event, prune or sweep.
    seats: Vec<Parked>,
    /// Entries at the last prune: the next one comes when there are twice as many.
    pruned: usize,
}

type Opening = BoxFuture<'static, (Channel, Seq, Result<Option<Opened>, StoreError>)>;
type Live = BoxStream<'static, Option<LiveItem>>;

/// One writer task's state: the jobs its parked readers follow.
struct Writer {
    groups: HashMap<Channel, Group>,
    /// One subscription per group whose opening succeeded; `None` after its last item.
    live: StreamMap<Channel, Live>,
    opening: FuturesUnordered<Opening>,
    counts: HandBacks,
}

async fn run(mut parks: mpsc::UnboundedReceiver<Park>, counts: HandBacks) {
    let mut writer = Writer::new(counts);
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            park = parks.recv() => {
                let Some(park) = park else { return };
                writer.join(park);
            }
            Some((channel, from, opened)) = writer.opening.next(), if !writer.opening.is_empty() => {
                writer.opened(channel, from, opened).await;
            }
            Some((channel, item)) = writer.live.next(), if !writer.live.is_empty() => {
                writer.on_live(&channel, item).await;
            }
            _ = sweep.tick() => writer.sweep(),
        }
    }
}

impl Writer {
    fn new(counts: HandBacks) -> Self {
        Self {
            groups: HashMap::new(),
            live: StreamMap::new(),
            opening: FuturesUnordered::new(),
            counts,
        }
    }

    /// A stream parks: join its job's group, or open one.
    fn join(&mut self, park: Park) {
        let Park {
            seat,
            epoch,
            last,
            channel,
            store,
        } = park;
        let parked = Parked { seat, epoch };
        let Some(group) = self.groups.get_mut(&channel) else {
            self.groups.insert(
                channel.clone(),
                Group {
                    at: None,
                    seats: vec![parked],
                    pruned: 0,
                },
            );
            self.opening.push(Box::pin(async move {
                let opened = store.open(&channel, Some(last)).await;
                (channel, last, opened)
            }));
            return;
        };
        match group.at {
            // The writer has seen an event this reader has not been sent: its stream sends it.
            Some(at) if last < at => {
                if let Some((seat, mut state)) = parked.current() {
                    self.counts.behind.inc();
                    state.ahead = at;
                    seat.hand_back(state);
                }
            }
            _ => {
                if group.seats.len() >= PRUNE_FROM.max(2 * group.pruned) {
                    group.prune();
                }
                group.seats.push(parked);
            }
        }
    }

    /// A group's subscription has been opened (after `from`, the position of the reader that
    /// opened it), or could not be.
    async fn opened(
        &mut self,
        channel: Channel,
        from: Seq,
        opened: Result<Option<Opened>, StoreError>,
    ) {
        let Some(group) = self.groups.get_mut(&channel) else {
            return;
        };
        let opened = match opened {
            Ok(Some(opened)) if opened.covered => opened,
            // History no longer reaches back to `from`: each stream finds out (a `reset`).
            Ok(Some(opened)) => return self.close(&channel, opened.head, HOLD_OFF),
            // The channel is gone, or the store could not answer: the streams go on reading
            // their own subscriptions (which end, or retry history) and park again later.
            Ok(None) | Err(_) => return self.close(&channel, 0, HOLD_OFF),
        };
        group.at = Some(from);
        // Readers that joined while it opened from further on than they are: their streams
        // send the events between.
        group.seats.retain(|parked| {
            let Some((seat, mut state)) = parked.current() else {
                return false;
            };
            if state.last >= from {
                return true;
            }
            self.counts.behind.inc();
            state.ahead = from;
            seat.hand_back(state);
            false
        });
        for event in &opened.backlog {
            group.deliver(event, &self.counts).await;
        }
        if opened.ended {
            // The backlog held the terminal event: written, or the streams send it.
            return self.close(&channel, opened.head, Duration::ZERO);
        }
        let stream = opened.live.map(Some).chain(futures::stream::iter([None]));
        self.live.insert(channel, stream.boxed());
    }

    /// An item of a group's subscription.
    async fn on_live(&mut self, channel: &Channel, item: Option<LiveItem>) {
        let Some(group) = self.groups.get_mut(channel) else {
            self.live.remove(channel);
            return;
        };
        match item {
            Some(LiveItem::Event(event)) => {
                group.deliver(&event, &self.counts).await;
                if event.is_terminal() && !event.ephemeral {
                    // Every seat got it or was handed back: the job is over.
                    self.close(channel, 0, Duration::ZERO);
                }
            }
            // Lagged (this writer fell behind), or the channel is gone: each stream finds out
            // from its own, and parks again once caught up (the writer opens the job anew).
            Some(LiveItem::Lagged) | None => self.close(channel, 0, Duration::ZERO),
        }
    }

    /// Hand every reader of `channel` back to its stream and forget the job. `ahead`: an event
    /// the readers should read from history if their own subscriptions do not bring it (0:
    /// none); `hold_off`: how long they write their own events before they may park again
    /// (after a failure, so that every reader does not ask a failing store again at once).
    fn close(&mut self, channel: &Channel, ahead: Seq, hold_off: Duration) {
        self.live.remove(channel);
        let Some(group) = self.groups.remove(channel) else {
            return;
        };
        let until = (!hold_off.is_zero()).then(|| Instant::now() + hold_off);
        for parked in &group.seats {
            if let Some((seat, mut state)) = parked.current() {
                self.counts.behind.inc();
                state.ahead = ahead;
                state.hold_off = until;
                seat.hand_back(state);
            }
        }
    }

    /// Forget the entries of parkings that are over, and the jobs no reader follows any
    /// longer (their subscriptions with them), so that readers coming and going on an idle
    /// job do not pile up.
    fn sweep(&mut self) {
        let live = &mut self.live;
        self.groups.retain(|channel, group| {
            if group.at.is_none() {
                return true;
            }
            group.prune();
            if group.seats.is_empty() {
                live.remove(channel);
            }
            !group.seats.is_empty()
        });
    }
}

impl Group {
    /// Drop the entries of parkings that are over.
    fn prune(&mut self) {
        self.seats.retain(|parked| parked.current().is_some());
        self.pruned = self.seats.len();
    }

    /// Write `event` to every parked reader for whom it is next; hand back the others that
    /// cannot take it. Yields to the runtime when the task's budget is spent (module doc).
    // Long because: the fan-out's per-reader step (a closure sharing the event's one chunked
    // copy and the counts) and the pass over the readers are one hot path; each reader's state
    // is locked once per event.
    async fn deliver(&mut self, event: &StoredEvent, counts: &HandBacks) {
        if !event.ephemeral {
            self.at = self.at.max(Some(event.seq));
        }
        let mut chunk: Option<Bytes> = None;
        let now = Instant::now();
        let live = (!event.ephemeral).then_some(event.born);
        let mut written_to = 0;
        // An event the reader would miss if it were handed back now (not a heartbeat).
        let missed = if event.ephemeral { 0 } else { event.seq };
        let mut offer = |parked: &Parked| {
            let Some((seat, mut state)) = parked.current() else {
                return false;
            };
            let next = if event.ephemeral {
                // A heartbeat carries the channel's position: never an `id:` past the reader's.
                event.seq <= state.last
            } else if event.seq <= state.last {
                // Sent already (by the stream, before it parked).
                return true;
            } else {
                event.seq == state.last + 1
            };
            if !next {
                counts.behind.inc();
                state.ahead = event.seq;
                seat.hand_back(state);
                return false;
            }
            let bytes = if seat.chunked {
                chunk.get_or_insert_with(|| chunked(&event.frame)).clone()
            } else {
                event.frame.clone()
            };
            let written = match &state.tcp {
                Some(tcp) => tcp.try_write(&bytes),
                None => Err(io::ErrorKind::NotConnected.into()),
            };
            match written {
                Ok(n) => {
                    seat.meter.wrote(n);
                    written_to += 1;
                    if let Some(born) = live {
                        counts.lag.observe(born.elapsed().as_secs_f64());
                    }
                    state.wrote_at = Some(now);
                    if !event.ephemeral {
                        state.last = event.seq;
                        state.ended = event.is_terminal();
                    }
                    if n < bytes.len() {
                        // The reader holds the frame until its end is written (as a frame
                        // the connection writes itself), for the byte bound and the drop.
                        seat.meter.queued(bytes.len());
                        state.rest = Some(Rest {
                            bytes: bytes.slice(n..),
                            frame: bytes.len(),
                        });
                        counts.partial.inc();
                        seat.hand_back(state);
                        false
                    } else if state.ended {
                        seat.hand_back(state);
                        false
                    } else {
                        true
                    }
                }
                Err(error) => {
                    if error.kind() == io::ErrorKind::WouldBlock {
                        counts.full.inc();
                    } else {
                        counts.error.inc();
                    }
                    state.ahead = missed;
                    seat.hand_back(state);
                    false
                }
            }
        };
        // The entries kept move to the front, in order.
        let mut kept = 0;
        for i in 0..self.seats.len() {
            tokio::task::coop::consume_budget().await;
            if offer(&self.seats[i]) {
                self.seats.swap(kept, i);
                kept += 1;
            }
        }
        self.seats.truncate(kept);
        counts.written.inc_by(written_to);
    }
}

/// `frame` in an HTTP/1.1 chunk of its own, as the connection writes it (`direct::Out`).
fn chunked(frame: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(frame.len() + 12);
    out.extend_from_slice(format!("{:X}\r\n", frame.len()).as_bytes());
    out.extend_from_slice(frame);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        events::ChannelSnapshot,
        model::{EventKind, JobId},
        store::memory::MemoryStore,
    };

    fn counts() -> HandBacks {
        let counter = || IntCounter::new("c", "c").unwrap();
        HandBacks {
            written: counter(),
            full: counter(),
            partial: counter(),
            behind: counter(),
            error: counter(),
            lag: Histogram::with_opts(prometheus::HistogramOpts::new("h", "h")).unwrap(),
        }
    }

    /// A connection's seat at a writer whose lane is `parks`, and the other end of its socket.
    async fn seated() -> (Arc<Seat>, mpsc::UnboundedReceiver<Park>, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reader = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let (lane, parks) = mpsc::unbounded_channel();
        let seat = Seat::new(lane, (Arc::new(tcp), true), Arc::default());
        (Arc::new(seat), parks, reader)
    }

    /// A store, a job's channel, and a writer that already follows the job from its start
    /// (its group in place at event 0, nobody parked yet).
    fn following_a_new_job() -> (Arc<dyn Broker>, Channel, Writer) {
        let store: Arc<dyn Broker> = Arc::new(MemoryStore::new(100, 60));
        let channel = Channel::Job(JobId::random());
        let mut writer = Writer::new(counts());
        writer.groups.insert(
            channel.clone(),
            Group {
                at: Some(0),
                seats: Vec::new(),
                pruned: 0,
            },
        );
        (store, channel, writer)
    }

    fn handed_back(seat: &Seat) -> Option<Back> {
        let parked = seat.state.lock().parked;
        (!parked).then(|| seat.take_back())
    }

    /// A reader that parks again and again on a job with no events (a keep-alive takes the
    /// socket back each time), or readers that come and go: the writer does not pile up
    /// their entries, and forgets the job once nobody is parked on it.
    #[tokio::test]
    async fn parkings_that_are_over_do_not_pile_up() {
        let (seat, mut parks, _reader) = seated().await;
        let (store, channel, mut writer) = following_a_new_job();
        for _ in 0..10_000 {
            assert!(seat.park(&channel, 0, &store));
            writer.join(parks.try_recv().unwrap());
            seat.take_back();
        }
        let seats = writer.groups[&channel].seats.len();
        assert!(seats <= PRUNE_FROM, "{seats} entries kept");
        writer.sweep();
        assert!(writer.groups.is_empty(), "nobody parked: the job forgotten");
    }

    /// Readers that parked while the writer opened the job from further on than they are get
    /// their socket back at once, told to read the events between.
    #[tokio::test]
    async fn a_reader_behind_where_the_writer_opened_is_handed_back() {
        let (ahead, mut parks, _a) = seated().await;
        let (behind, mut behind_parks, _b) = seated().await;
        let store: Arc<dyn Broker> = Arc::new(MemoryStore::new(100, 60));
        let channel = Channel::Job(JobId::random());
        let mut writer = Writer::new(counts());
        assert!(ahead.park(&channel, 5, &store));
        writer.join(parks.try_recv().unwrap());
        assert!(behind.park(&channel, 3, &store));
        writer.join(behind_parks.try_recv().unwrap());
        let opened = Opened {
            head: 5,
            snapshot: ChannelSnapshot::Correlation(Vec::new()),
            backlog: Vec::new(),
            covered: true,
            ended: false,
            live: futures::stream::pending().boxed(),
        };
        writer.opened(channel.clone(), 5, Ok(Some(opened))).await;
        assert!(handed_back(&ahead).is_none(), "caught up: stays parked");
        let back = handed_back(&behind).expect("handed back");
        assert_eq!((back.last, back.ahead), (3, 5));
    }

    /// When the writer cannot open the job, its readers go on with their own tasks and do not
    /// park again at once (every reader would ask a failing store again).
    #[tokio::test]
    async fn a_failed_opening_holds_its_readers_off() {
        let (seat, mut parks, _reader) = seated().await;
        let store: Arc<dyn Broker> = Arc::new(MemoryStore::new(100, 60));
        let channel = Channel::Job(JobId::random());
        let mut writer = Writer::new(counts());
        assert!(seat.park(&channel, 0, &store));
        writer.join(parks.try_recv().unwrap());
        let (channel, from, opened) = writer.opening.next().await.unwrap();
        assert!(matches!(opened, Ok(None)), "no such job");
        writer.opened(channel.clone(), from, opened).await;
        assert!(handed_back(&seat).is_some());
        assert!(!seat.park(&channel, 0, &store), "held off");
        tokio::time::sleep(HOLD_OFF).await;
        assert!(seat.park(&channel, 0, &store), "parks again later");
    }

    /// A pass over many readers gives the thread back before it ends (one poll held up the
    /// thread's other tasks and the runtime's I/O for the whole pass), and each reader still
    /// gets the event once, whole, and stays parked for the next.
    #[tokio::test]
    async fn a_long_pass_yields_and_still_writes_each_reader_once() {
        const READERS: usize = 300;
        let (store, channel, mut writer) = following_a_new_job();
        let mut seated_readers = Vec::new();
        for _ in 0..READERS {
            let (seat, mut parks, reader) = seated().await;
            assert!(seat.park(&channel, 0, &store));
            writer.join(parks.try_recv().unwrap());
            seated_readers.push((seat, reader));
        }
        let event = StoredEvent::render(1, EventKind::Progress, Bytes::from_static(b"{}"), false);
        let group = writer.groups.get_mut(&channel).unwrap();
        // A fresh poll, with the task's whole budget.
        tokio::task::yield_now().await;
        let mut pass = std::pin::pin!(group.deliver(&event, &writer.counts));
        assert!(
            futures::poll!(pass.as_mut()).is_pending(),
            "the pass yields before its end"
        );
        pass.await;
        assert_eq!(writer.counts.written.get(), READERS as u64);
        let frame = chunked(&event.frame);
        for (seat, reader) in &mut seated_readers {
            let mut got = vec![0; frame.len()];
            tokio::io::AsyncReadExt::read_exact(reader, &mut got)
                .await
                .unwrap();
            assert_eq!(got, frame, "the event, whole");
            let more = reader.try_read(&mut [0; 64]);
            assert!(
                more.is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
                "once"
            );
            assert!(handed_back(seat).is_none(), "still parked");
        }
    }

    #[test]
    fn a_chunk_is_what_the_connection_writes() {
        let frame = Bytes::from_static(b"data: x\n\n");
        assert_eq!(&chunked(&frame)[..], b"9\r\ndata: x\n\n\r\n");
        let big = Bytes::from(vec![b'x'; 300]);
        assert!(chunked(&big).starts_with(b"12C\r\n"));
    }
}
