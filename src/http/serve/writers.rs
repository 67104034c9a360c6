//! Shared writer tasks for job event streams (`server.sse_writers`): a few tasks that write
//! each new event to every caught-up socket of its job, instead of one task per reader woken
//! for every event (issue 16: the wake-ups, and the broadcast channel's lock each re-registered
//! waker takes, were about 1.3–1.6 µs of the bridge's ~10 µs per delivery).
//!
//! A stream (`http::sse::Tail`) hands its socket to a writer ([`Outflow::park`]) only when it
//! is caught up: nothing queued, nothing held back, no retry pending, no per-reader filter (a
//! job channel, never a correlation), and nothing left in its own live subscription. From then
//! on its own task sleeps; the writer holds the stream's position and writes an event only
//! when it is the next one for that reader (`seq == last + 1`; a heartbeat only when it is not
//! ahead), with one non-blocking write. Anything else hands the socket back to the stream's
//! task, which carries on exactly as before from the position the writer reached:
//! - the socket would block (`full`), or took part of a frame (`partial`: the rest goes out
//!   first, written by the connection's own task before anything the stream makes next);
//! - the event is not the next one for this reader, the writer's subscription lagged or ended,
//!   or history could not be opened (`behind`): the stream reads its own subscription (which
//!   holds every event the writer saw) and history as it always did;
//! - a write failed (`error`), the job ended (its terminal event written: the stream ends), or
//!   the stream takes its socket back itself (a keep-alive is due, the connection closes).
//!
//! So a reader gets each event once and in order whoever writes it; the byte bound, the
//! stalled-reader drop, `Last-Event-ID` resume and `reset` stay the stream's, since a reader
//! that does not keep up is handed back at its first full socket.
//!
//! Each writer holds one live subscription per job with parked readers, opened at the first
//! one (`Store::open` after that reader's position, whose backlog closes the gap to the
//! subscription), and kept until the job ends or the subscription lags or ends.

use std::{
    collections::HashMap,
    io,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::{
    StreamExt,
    future::BoxFuture,
    stream::{BoxStream, FuturesUnordered},
    task::AtomicWaker,
};
use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec};
use tokio::{net::TcpStream, sync::mpsc, time::Instant};
use tokio_stream::StreamMap;

use super::outflow::Outflow;
use crate::{
    model::{Channel, Seq},
    shutdown::Tasks,
    store::{LiveItem, Opened, Store, StoreError, StoredEvent},
};

/// Most writer tasks (`server.sse_writers`).
pub const MAX_WRITERS: usize = 64;

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

    /// A seat for a stream written on `tcp` (in HTTP/1.1 chunks when `chunked`).
    pub fn seat(&self, tcp: Arc<TcpStream>, chunked: bool) -> Seat {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
        Seat {
            lane: self.lanes[i].clone(),
            chunked,
            state: Mutex::new(SeatState {
                tcp: Some(tcp),
                parked: false,
                epoch: 0,
                last: 0,
                ended: false,
                rest: None,
                wrote_at: None,
                ahead: 0,
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
}

/// A stream's place at a writer: the socket, and who writes on it now.
pub struct Seat {
    lane: mpsc::UnboundedSender<Park>,
    chunked: bool,
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
    /// Handed back because the writer had seen this event and the reader had not been sent
    /// the one before (0: not so).
    ahead: Seq,
}

/// The end of a frame a writer could not write whole; the whole frame counts as held.
struct Rest {
    bytes: Bytes,
    frame: usize,
}

/// The end of a frame, counted as held (the whole frame) until dropped.
struct Holding {
    rest: Bytes,
    frame: usize,
    outflow: Arc<Outflow>,
}

impl AsRef<[u8]> for Holding {
    fn as_ref(&self) -> &[u8] {
        &self.rest
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.outflow.discarded(self.frame);
    }
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

impl Outflow {
    /// Hand the socket to its writer, the reader at `last` on job channel `channel`; `false`
    /// when there is no writer (or it is gone, or the connection still has a frame's end to
    /// write): the stream writes on.
    pub fn park(self: &Arc<Self>, channel: &Channel, last: Seq, store: &Arc<dyn Store>) -> bool {
        let Some(seat) = self.seat() else {
            return false;
        };
        let epoch = {
            let mut state = seat.state.lock();
            if state.tcp.is_none() || state.rest.is_some() {
                return false;
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
            outflow: self.clone(),
            epoch,
            last,
            channel: channel.clone(),
            store: store.clone(),
        };
        if seat.lane.send(park).is_err() {
            seat.state.lock().parked = false;
            return false;
        }
        true
    }

    /// Ready once the writer has handed the socket back.
    pub fn poll_handed_back(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(seat) = self.seat() else {
            return Poll::Ready(());
        };
        seat.waker.register(cx.waker());
        if seat.state.lock().parked {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// Take the socket back (the writer writes no more on it) and learn where the reader is.
    pub fn take_back(&self) -> Option<Back> {
        let seat = self.seat()?;
        let mut state = seat.state.lock();
        state.parked = false;
        state.epoch += 1;
        Some(Back {
            last: state.last,
            ended: state.ended,
            wrote_at: state.wrote_at,
            rest: state.rest.is_some(),
            ahead: state.ahead,
        })
    }

    /// The end of a frame the writer could not write whole, for the connection to write next
    /// (held until dropped).
    pub fn take_rest(self: &Arc<Self>) -> Option<Bytes> {
        let Rest { bytes, frame } = self.seat()?.state.lock().rest.take()?;
        Some(Bytes::from_owner(Holding {
            rest: bytes,
            frame,
            outflow: self.clone(),
        }))
    }

    /// The connection's task ends: no writer writes on its socket again.
    pub fn unseat(&self) {
        if let Some(seat) = self.seat() {
            let mut state = seat.state.lock();
            state.parked = false;
            state.tcp = None;
            if let Some(rest) = state.rest.take() {
                self.discarded(rest.frame);
            }
        }
    }
}

/// A stream's socket handed to a writer.
struct Park {
    outflow: Arc<Outflow>,
    epoch: u64,
    last: Seq,
    channel: Channel,
    store: Arc<dyn Store>,
}

/// The parked readers of one job at one writer.
struct Group {
    /// The last event the writer has seen; `None` while its subscription is being opened.
    at: Option<Seq>,
    seats: Vec<(Arc<Outflow>, u64)>,
}

type Opening = BoxFuture<'static, (Channel, Seq, Result<Option<Opened>, StoreError>)>;
type Live = BoxStream<'static, Option<LiveItem>>;

async fn run(mut parks: mpsc::UnboundedReceiver<Park>, counts: HandBacks) {
    let mut groups: HashMap<Channel, Group> = HashMap::new();
    let mut live: StreamMap<Channel, Live> = StreamMap::new();
    let mut opening: FuturesUnordered<Opening> = FuturesUnordered::new();
    loop {
        tokio::select! {
            park = parks.recv() => {
                let Some(park) = park else { return };
                join(&mut groups, &mut opening, park, &counts);
            }
            Some((channel, from, opened)) = opening.next(), if !opening.is_empty() => {
                let Some(group) = groups.get_mut(&channel) else { continue };
                match opened {
                    Ok(Some(opened)) if opened.covered && !opened.ended => {
                        group.at = Some(from);
                        for event in &opened.backlog {
                            deliver(group, event, &counts);
                        }
                        let stream = opened.live.map(Some).chain(futures::stream::iter([None]));
                        live.insert(channel, stream.boxed());
                    }
                    _ => {
                        if let Some(group) = groups.remove(&channel) {
                            hand_all_back(group, &counts);
                        }
                    }
                }
            }
            Some((channel, item)) = live.next(), if !live.is_empty() => {
                let Some(group) = groups.get_mut(&channel) else {
                    live.remove(&channel);
                    continue;
                };
                match item {
                    Some(LiveItem::Event(event)) => {
                        deliver(group, &event, &counts);
                        if event.is_terminal() && !event.ephemeral {
                            // Every seat got it or was handed back: the job is over.
                            if let Some(group) = groups.remove(&channel) {
                                hand_all_back(group, &counts);
                            }
                            live.remove(&channel);
                        }
                    }
                    // Lagged, or the channel is gone: each stream finds out from its own.
                    Some(LiveItem::Lagged) | None => {
                        if let Some(group) = groups.remove(&channel) {
                            hand_all_back(group, &counts);
                        }
                        live.remove(&channel);
                    }
                }
            }
        }
    }
}

fn join(
    groups: &mut HashMap<Channel, Group>,
    opening: &mut FuturesUnordered<Opening>,
    park: Park,
    counts: &HandBacks,
) {
    let Park {
        outflow,
        epoch,
        last,
        channel,
        store,
    } = park;
    match groups.get_mut(&channel) {
        // The writer has seen an event this reader has not been sent: its stream has it.
        Some(group) if group.at.is_some_and(|at| last < at) => {
            if let Some(seat) = outflow.seat() {
                let mut state = seat.state.lock();
                if state.parked && state.epoch == epoch {
                    counts.behind.inc();
                    state.ahead = group.at.unwrap_or(0);
                    seat.hand_back(state);
                }
            }
        }
        Some(group) => group.seats.push((outflow, epoch)),
        None => {
            groups.insert(
                channel.clone(),
                Group {
                    at: None,
                    seats: vec![(outflow, epoch)],
                },
            );
            opening.push(Box::pin(async move {
                let opened = store.open(&channel, Some(last)).await;
                (channel, last, opened)
            }));
        }
    }
}

fn hand_all_back(group: Group, counts: &HandBacks) {
    for (outflow, epoch) in group.seats {
        if let Some(seat) = outflow.seat() {
            let state = seat.state.lock();
            if state.parked && state.epoch == epoch {
                counts.behind.inc();
                seat.hand_back(state);
            }
        }
    }
}

/// Write `event` to every parked reader of `group` for whom it is next; hand back the others
/// that cannot take it.
fn deliver(group: &mut Group, event: &StoredEvent, counts: &HandBacks) {
    if !event.ephemeral {
        group.at = group.at.max(Some(event.seq));
    }
    let mut chunk: Option<Bytes> = None;
    let now = Instant::now();
    let mut written_to = 0;
    group.seats.retain(|(outflow, epoch)| {
        let Some(seat) = outflow.seat() else {
            return false;
        };
        let mut state = seat.state.lock();
        if !state.parked || state.epoch != *epoch {
            return false;
        }
        let next = if event.ephemeral {
            event.seq <= state.last
        } else if event.seq <= state.last {
            // Sent already (by the stream, before it parked).
            return true;
        } else {
            event.seq == state.last + 1
        };
        if !next || state.tcp.is_none() {
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
                outflow.wrote(n);
                written_to += 1;
                state.wrote_at = Some(now);
                if !event.ephemeral {
                    state.last = event.seq;
                    state.ended = event.is_terminal();
                }
                if n < bytes.len() {
                    // The reader holds the frame until its end is written (as a frame
                    // the connection writes itself), for the byte bound and the drop.
                    outflow.queued(bytes.len());
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
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                counts.full.inc();
                seat.hand_back(state);
                false
            }
            Err(_) => {
                counts.error.inc();
                seat.hand_back(state);
                false
            }
        }
    });
    counts.written.inc_by(written_to);
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

    #[test]
    fn a_chunk_is_what_the_connection_writes() {
        let frame = Bytes::from_static(b"data: x\n\n");
        assert_eq!(&chunked(&frame)[..], b"9\r\ndata: x\n\n\r\n");
        let big = Bytes::from(vec![b'x'; 300]);
        assert!(chunked(&big).starts_with(b"12C\r\n"));
    }
}
