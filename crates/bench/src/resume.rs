//! An SSE reader that rides through a rollout, as the JavaScript client and `watch` do: it
//! follows one job's stream through a proxy and, when the stream ends before the job's terminal
//! event, is cut, or the proxy answers 502/503/504, comes back with `Last-Event-ID` after a
//! short jittered pause. From the `id:` lines it counts the events it missed and the ones it got
//! twice, and it times the longest wait between two events.

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use tokio::time::Instant;

use crate::sse::{Frame, SseError, SseReader};

/// What one reader saw of its job.
#[derive(Debug, Default)]
pub struct Followed {
    /// Events with an `id:` (heartbeats aside), each counted once.
    pub events: u64,
    /// Events skipped over (an id further on than the next one).
    pub lost: u64,
    /// Events got again (an id at or before the reader's position).
    pub duplicated: u64,
    pub reconnects: u64,
    /// The longest time between two events.
    pub longest_gap: Duration,
    /// The upstream's steps the progress events carried: the stage of a `stage i/n` message,
    /// else the progress value. (An event the bridge never wrote leaves no hole in the `id:`
    /// line, only here.)
    pub steps: BTreeSet<u64>,
    /// The terminal event (`completed`, `failed`, `cancelled`), if one came.
    pub terminal: Option<String>,
    /// Why the reader gave up (a refusal that is no rollout's, a `reset`, the deadline).
    pub error: Option<String>,
}

/// Follow `path` at `addr` until its terminal event or `deadline`. `first` is called once, at
/// the first event.
pub async fn follow(
    addr: SocketAddr,
    path: &str,
    deadline: Instant,
    first: impl FnOnce(),
) -> Followed {
    let mut seen = Followed::default();
    let mut position = Position::default();
    let mut first = Some(first);
    loop {
        let from = (position.last > 0).then_some(position.last);
        match tokio::time::timeout_at(deadline, SseReader::open_from(addr, path, from)).await {
            Err(_) => return seen.gave_up("the deadline passed while connecting"),
            Ok(Err(e)) if !comes_back(&e) => return seen.gave_up(&e.to_string()),
            Ok(Err(_)) => {}
            Ok(Ok(mut reader)) => loop {
                let frame = match tokio::time::timeout_at(deadline, reader.next()).await {
                    Err(_) => return seen.gave_up("the deadline passed while reading"),
                    Ok(Ok(Some(frame))) => frame,
                    // Ended or cut before the terminal event: come back.
                    Ok(Ok(None) | Err(_)) => break,
                };
                if position.take(&frame, &mut seen)
                    && let Some(first) = first.take()
                {
                    first();
                }
                if seen.terminal.is_some() || seen.error.is_some() {
                    return seen;
                }
            },
        }
        seen.reconnects += 1;
        tokio::time::sleep(Duration::from_millis(100 + fastrand::u64(..200))).await;
    }
}

impl Followed {
    fn gave_up(mut self, why: &str) -> Self {
        self.error = Some(why.to_string());
        self
    }
}

/// A refusal a rollout explains (the proxy found no replica, or the replica went away while
/// answering): the reader comes back. Anything else (404, 401, 400) ends it.
fn comes_back(e: &SseError) -> bool {
    match e {
        SseError::Io(_) => true,
        SseError::Status(status, _) => matches!(status, 502..=504),
        SseError::Protocol(_) => true,
    }
}

/// Where the reader is in the job's `seq` line, and when it last moved.
#[derive(Default)]
struct Position {
    last: u64,
    at: Option<Instant>,
}

impl Position {
    /// Count `frame` into `seen`; true if it was an event of the job's line (not a status,
    /// comment or heartbeat).
    fn take(&mut self, frame: &Frame, seen: &mut Followed) -> bool {
        let Some(id) = frame.id else {
            return false;
        };
        match frame.event.as_str() {
            // A heartbeat repeats the position as its id: it moves nothing.
            "heartbeat" => return false,
            // The first connect's `status` sits just before the history that follows it.
            "status" => {
                if self.at.is_none() {
                    self.last = id;
                }
                return false;
            }
            _ => {}
        }
        let now = Instant::now();
        if let Some(at) = self.at {
            seen.longest_gap = seen.longest_gap.max(now - at);
        }
        self.at = Some(now);
        if id <= self.last {
            seen.duplicated += 1;
            return true;
        }
        seen.lost += id - self.last - 1;
        seen.events += 1;
        self.last = id;
        match frame.event.as_str() {
            "progress" => seen.steps.extend(step(&frame.data)),
            "completed" | "failed" | "cancelled" => seen.terminal = Some(frame.event.clone()),
            "reset" => seen.error = Some("a `reset`: history no longer covered the gap".into()),
            _ => {}
        }
        true
    }
}

/// The step a progress event's data reports: `i` of a `stage i/n` message, else `progress`.
fn step(data: &[u8]) -> Option<u64> {
    let data: serde_json::Value = serde_json::from_slice(data).ok()?;
    let stage = data["message"].as_str().and_then(|m| {
        let (i, _) = m.strip_prefix("stage ")?.split_once('/')?;
        i.parse().ok()
    });
    stage.or_else(|| data["progress"].as_f64().map(|p| p as u64))
}

#[cfg(test)]
mod tests {
    use super::{Followed, Position};
    use crate::sse::Frame;

    fn frame(event: &str, id: u64, data: &str) -> Frame {
        Frame {
            id: Some(id),
            event: event.into(),
            data: data.as_bytes().to_vec(),
            read_at_us: 0,
        }
    }

    #[test]
    fn holes_and_repeats_in_the_id_line_are_counted_and_heartbeats_move_nothing() {
        let (mut at, mut seen) = (Position::default(), Followed::default());
        let stage = |i: u64| format!(r#"{{"progress":{i},"message":"stage {i}/9"}}"#);
        assert!(
            !at.take(&frame("status", 3, "{}"), &mut seen),
            "status: a position"
        );
        assert!(at.take(&frame("progress", 4, &stage(1)), &mut seen));
        assert!(!at.take(&frame("heartbeat", 4, ""), &mut seen));
        // A reconnect that replays what the reader had, then one that skips two events.
        at.take(&frame("progress", 4, &stage(1)), &mut seen);
        at.take(&frame("progress", 7, &stage(4)), &mut seen);
        at.take(&frame("completed", 8, "{}"), &mut seen);
        assert_eq!((seen.events, seen.duplicated, seen.lost), (3, 1, 2));
        assert_eq!(seen.steps.iter().copied().collect::<Vec<_>>(), [1, 4]);
        assert_eq!(seen.terminal.as_deref(), Some("completed"));
    }

    #[test]
    fn a_reset_is_an_error() {
        let (mut at, mut seen) = (Position::default(), Followed::default());
        at.take(&frame("progress", 1, "{}"), &mut seen);
        at.take(&frame("reset", 9, "{}"), &mut seen);
        assert!(seen.error.is_some_and(|e| e.contains("reset")));
    }
}
