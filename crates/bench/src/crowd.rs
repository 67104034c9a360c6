//! A crowd of SSE readers: each follows one job's stream to its terminal event and checks it
//! got every event in order. Used by the fan-out (one job, many readers; against the bridge
//! and the floor alike), the many-jobs scenario (readers attached to every job) and the soak.
//!
//! Latency is timed only for progress events sent after [`Crowd::mark_all_in`]: earlier ones
//! measure the connect burst, not the fan-out. The last progress event is kept apart: it shares
//! its moment with the terminal event and with every connection closing, so it says more
//! about the close than about the delivery.

use std::{
    net::SocketAddr,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{
    sync::{Notify, Semaphore},
    task::JoinHandle,
};

use crate::{
    sse::{Frame, SseReader},
    stats::{Samples, now_us, sent_at_us},
};

/// Readers connecting at once (the rest wait their turn): a burst of 10,000 connects would
/// only measure the listen backlog.
const CONNECTING: usize = 256;
/// Longest the readers may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// What one reader saw.
pub struct Seen {
    /// Latencies of the timed progress events before the last one (µs).
    before_last: Vec<u64>,
    /// Latency of the last progress event, if timed.
    last: Option<u64>,
    progress: u64,
    /// Bytes of the terminal event's data.
    terminal_bytes: usize,
    completed: bool,
    error: Option<String>,
}

impl Seen {
    fn new(events: u64) -> Self {
        Self {
            before_last: Vec::with_capacity(events as usize),
            last: None,
            progress: 0,
            terminal_bytes: 0,
            completed: false,
            error: None,
        }
    }

    fn failed(error: String) -> Self {
        let mut seen = Self::new(0);
        seen.error = Some(error);
        seen
    }
}

/// What every reader shares: counters for the connect phase, the gate that limits connects in
/// flight, and the time the last reader was in.
struct Shared {
    connected: AtomicUsize,
    failed: AtomicUsize,
    changed: Notify,
    gate: Semaphore,
    all_in_at: OnceLock<u64>,
}

/// The latencies every reader measured, and what the largest terminal event weighed.
pub struct Delivered {
    /// Progress events before the last one.
    pub before_last: Samples,
    /// Every progress event.
    pub all: Samples,
    pub deliveries: usize,
    pub largest_terminal: usize,
}

pub struct Crowd {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<Seen>>,
    events: u64,
}

impl Crowd {
    /// `per_path` readers on each of `paths` at `addr`, each job sending `events` progress
    /// events before `completed`.
    pub fn spawn(addr: SocketAddr, paths: &[String], per_path: usize, events: u64) -> Self {
        let shared = Arc::new(Shared {
            connected: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            changed: Notify::new(),
            gate: Semaphore::new(CONNECTING),
            all_in_at: OnceLock::new(),
        });
        let mut tasks = Vec::with_capacity(paths.len() * per_path);
        for path in paths {
            for _ in 0..per_path {
                let (shared, path) = (shared.clone(), path.clone());
                tasks.push(tokio::spawn(read_job(shared, addr, path, events)));
            }
        }
        Self {
            shared,
            tasks,
            events,
        }
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Wait until every reader has its `status` event; fails (stopping the others) if one
    /// could not subscribe.
    pub async fn wait_connected(&mut self) -> Result<(), String> {
        let readers = self.len();
        let shared = self.shared.clone();
        let wait = async {
            loop {
                let notified = shared.changed.notified();
                let settled = shared.connected.load(Ordering::Relaxed)
                    + shared.failed.load(Ordering::Relaxed);
                if settled >= readers {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(CONNECT_TIMEOUT, wait).await.is_err() {
            self.abort();
            return Err(format!(
                "only {} of {readers} readers connected in {} s",
                shared.connected.load(Ordering::Relaxed),
                CONNECT_TIMEOUT.as_secs()
            ));
        }
        let failed = shared.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self.first_error().await;
        Err(format!(
            "{failed} of {readers} readers could not subscribe (first error: {first})"
        ))
    }

    /// From now on, progress events are timed.
    pub fn mark_all_in(&self) {
        let _ = self.shared.all_in_at.set(now_us());
    }

    fn abort(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// The first error of the readers that have ended; the others are stopped.
    async fn first_error(&mut self) -> String {
        let mut first = None;
        for t in std::mem::take(&mut self.tasks) {
            if !t.is_finished() {
                t.abort();
                continue;
            }
            if let Ok(Seen { error: Some(e), .. }) = t.await {
                first.get_or_insert(e);
            }
        }
        first.unwrap_or_default()
    }

    /// Wait (at most `within`) for every reader to reach its terminal event, and check that
    /// each got every event.
    pub async fn finish(mut self, within: Duration) -> Result<Delivered, String> {
        let readers = self.len();
        let tasks = std::mem::take(&mut self.tasks);
        let all = match tokio::time::timeout(within, collect(tasks)).await {
            Ok(all) => all,
            Err(_) => return Err(format!("{readers} readers did not all finish in time")),
        };
        check_all_delivered(&all, self.events)
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.abort();
    }
}

/// One reader: subscribe (counted), then follow the job to its end.
async fn read_job(shared: Arc<Shared>, addr: SocketAddr, path: String, events: u64) -> Seen {
    let reader = subscribe(&shared, addr, &path).await;
    let counter = if reader.is_ok() {
        &shared.connected
    } else {
        &shared.failed
    };
    counter.fetch_add(1, Ordering::Relaxed);
    shared.changed.notify_one();
    match reader {
        Ok(reader) => follow(reader, &shared, events).await,
        Err(e) => Seen::failed(e),
    }
}

/// Open the stream (the gate keeps the connects in flight few) and read its `status` event.
async fn subscribe(shared: &Shared, addr: SocketAddr, path: &str) -> Result<SseReader, String> {
    let _permit = shared.gate.acquire().await;
    let mut reader = SseReader::open(addr, path)
        .await
        .map_err(|e| e.to_string())?;
    match reader.next().await {
        Ok(Some(f)) if f.event == "status" => Ok(reader),
        other => Err(format!("no status event first: {other:?}")),
    }
}

/// Read until the terminal event, checking that ids follow each other.
async fn follow(mut reader: SseReader, shared: &Shared, events: u64) -> Seen {
    let mut seen = Seen::new(events);
    let mut last = 0u64;
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                seen.error = Some("the stream ended before `completed`".into());
                return seen;
            }
            Err(e) => {
                seen.error = Some(e.to_string());
                return seen;
            }
        };
        match position(&frame.event, frame.id, last) {
            Ok(next) => last = next,
            Err(e) => {
                seen.error = Some(e);
                return seen;
            }
        }
        match frame.event.as_str() {
            "progress" => record(&mut seen, &frame, shared, events),
            "completed" => {
                seen.completed = true;
                seen.terminal_bytes = frame.data.len();
                return seen;
            }
            "failed" | "cancelled" | "reset" => {
                seen.error = Some(format!(
                    "the stream ended with `{}` after {} of {events} progress events: {}",
                    frame.event,
                    seen.progress,
                    excerpt(&frame.data)
                ));
                return seen;
            }
            _ => {}
        }
    }
}

/// The reader's position after `event` with `id`, or why the stream broke the rules. An event
/// moves it by exactly one: an id at or before it is a duplicate, one further on a gap. A
/// heartbeat repeats the position the reader has as its `id:` (by design; it is live-only and
/// moves nothing): it is no duplicate, but one ahead of the reader would mean an event was
/// skipped.
fn position(event: &str, id: Option<u64>, last: u64) -> Result<u64, String> {
    let Some(id) = id else {
        return Ok(last);
    };
    if event == "heartbeat" {
        if id > last {
            return Err(format!(
                "a heartbeat at {id} is ahead of the reader at {last}: an event was skipped"
            ));
        }
        return Ok(last);
    }
    if id <= last {
        return Err(format!(
            "duplicate event: `{event}` {id} again, the reader is at {last}"
        ));
    }
    if id != last + 1 {
        return Err(format!("gap: `{event}` {id} follows {last}"));
    }
    Ok(id)
}

fn record(seen: &mut Seen, frame: &Frame, shared: &Shared, events: u64) {
    seen.progress += 1;
    let all_in = shared.all_in_at.get().copied().unwrap_or(u64::MAX);
    let Some(sent) = sent_at_us(&frame.data).filter(|sent| *sent >= all_in) else {
        return;
    };
    let latency = frame.read_at_us.saturating_sub(sent);
    if seen.progress == events {
        seen.last = Some(latency);
    } else {
        seen.before_last.push(latency);
    }
}

fn excerpt(data: &[u8]) -> String {
    String::from_utf8_lossy(&data[..data.len().min(200)]).into_owned()
}

/// Every reader got every progress event and `completed`: the latencies of all of them.
fn check_all_delivered(all: &[Seen], events: u64) -> Result<Delivered, String> {
    let mut out = Delivered {
        before_last: Samples::default(),
        all: Samples::default(),
        deliveries: 0,
        largest_terminal: 0,
    };
    let mut short = 0usize;
    let mut first_error = None;
    for seen in all {
        if seen.error.is_some() || !seen.completed || seen.progress != events {
            short += 1;
            first_error.get_or_insert_with(|| {
                seen.error.clone().unwrap_or_else(|| {
                    format!(
                        "{} of {events} progress events, completed: {}",
                        seen.progress, seen.completed
                    )
                })
            });
        }
        out.before_last.extend(seen.before_last.iter().copied());
        out.all.extend(seen.before_last.iter().copied());
        out.all.extend(seen.last);
        out.deliveries += seen.progress as usize;
        out.largest_terminal = out.largest_terminal.max(seen.terminal_bytes);
    }
    if short > 0 {
        return Err(format!(
            "{short} of {} readers did not get every event (first: {})",
            all.len(),
            first_error.unwrap_or_default()
        ));
    }
    Ok(out)
}

async fn collect(tasks: Vec<JoinHandle<Seen>>) -> Vec<Seen> {
    let mut all = Vec::with_capacity(tasks.len());
    for t in tasks {
        all.push(
            t.await
                .unwrap_or_else(|_| Seen::failed("reader task panicked".into())),
        );
    }
    all
}

#[cfg(test)]
mod tests {
    use super::position;

    #[test]
    fn a_heartbeat_repeating_the_position_is_no_duplicate() {
        assert_eq!(position("progress", Some(33), 32), Ok(33));
        // The case the last 10,000-reader run failed on: a heartbeat carrying the position
        // the readers already had (`event 33 follows 33`).
        assert_eq!(position("heartbeat", Some(33), 33), Ok(33));
        assert_eq!(position("heartbeat", Some(30), 33), Ok(33));
        assert_eq!(position("status", None, 33), Ok(33));
    }

    #[test]
    fn duplicates_gaps_and_a_heartbeat_ahead_are_errors() {
        let duplicate = position("progress", Some(33), 33).unwrap_err();
        assert!(duplicate.starts_with("duplicate event"), "{duplicate}");
        let gap = position("progress", Some(35), 33).unwrap_err();
        assert!(gap.starts_with("gap"), "{gap}");
        let ahead = position("heartbeat", Some(34), 33).unwrap_err();
        assert!(ahead.contains("ahead"), "{ahead}");
    }
}
