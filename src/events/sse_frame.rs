//! The event-stream framing (`text/event-stream`), in one place: an event's frame is
//! `id: N\nevent: KIND\ndata: JSON\n\n` (compact JSON has no raw newline, so one `data:` line
//! is always enough), plus the stream's first `retry:`, its keep-alive comment and its goodbye
//! at shutdown. Frames are made once, when an event is appended, and read back by the Redis
//! store's subscriber.

use std::ops::Range;

use bytes::Bytes;

use crate::model::Seq;

/// Sent first on every stream: how long a browser's `EventSource` waits before it reconnects.
pub const RETRY: &[u8] = b"retry: 2000\n\n";
/// Sent last on a stream the bridge ends because it is shutting down (any stream not ended by
/// its job's terminal event): its reader is to come back, with its Last-Event-ID, soon, which
/// its load balancer sends to another replica.
pub const CLOSING: &[u8] =
    b"retry: 1000\n: this replica is shutting down; reconnect with Last-Event-ID\n\n";
/// Sent on an idle stream, so that proxies and readers see it is alive.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";
/// What ends a frame, after its `data`.
pub const END: &[u8] = b"\n\n";

/// A whole frame around `data`.
pub fn frame(seq: Seq, kind: &str, data: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(data.len() + kind.len() + 40);
    frame.extend_from_slice(&head(seq, kind));
    frame.extend_from_slice(data);
    frame.extend_from_slice(END);
    Bytes::from(frame)
}

/// The start of a frame, up to its `data` (for a frame written in pieces: head, data, [`END`]).
pub fn head(seq: Seq, kind: &str) -> Bytes {
    Bytes::from(format!("id: {seq}\nevent: {kind}\ndata: "))
}

/// `frame` under another `id`, as the two chunks to write: the new `id:` line, and the rest of
/// the frame (shared, not copied).
pub fn with_id(frame: &Bytes, id: u64) -> [Bytes; 2] {
    let rest = frame
        .strip_prefix(b"id: ")
        .and_then(|r| r.iter().position(|&b| b == b'\n'))
        .map_or(0, |nl| "id: ".len() + nl + 1);
    [Bytes::from(format!("id: {id}\n")), frame.slice(rest..)]
}

/// A frame read back: its `id`, its `event` name and where its `data` is in it.
pub fn parse(frame: &[u8]) -> Option<(Seq, &[u8], Range<usize>)> {
    let rest = frame.strip_prefix(b"id: ")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let seq: Seq = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let rest = rest[nl + 1..].strip_prefix(b"event: ")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let kind = &rest[..nl];
    let rest = rest[nl + 1..].strip_prefix(b"data: ")?;
    let data_start = frame.len() - rest.len();
    let data_end = frame.len().checked_sub(END.len())?;
    if data_end < data_start || !frame.ends_with(END) {
        return None;
    }
    Some((seq, kind, data_start..data_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_it_was_made() {
        let made = frame(7, "progress", br#"{"progress":1}"#);
        assert_eq!(
            &made[..],
            b"id: 7\nevent: progress\ndata: {\"progress\":1}\n\n"
        );
        let (seq, kind, data) = parse(&made).unwrap();
        assert_eq!((seq, kind), (7, &b"progress"[..]));
        assert_eq!(&made[data], br#"{"progress":1}"#);
        assert!(parse(b"id: x\nevent: log\ndata: {}\n\n").is_none());
        assert!(parse(b"id: 1\nevent: log\ndata: {}\n").is_none());
        let [id, rest] = with_id(&made, 12345);
        assert_eq!(
            [&id[..], &rest[..]].concat(),
            b"id: 12345\nevent: progress\ndata: {\"progress\":1}\n\n"
        );
    }
}
