//! The MCP messages of an SSE response rewritten as they stream, for the layers in front of rmcp
//! that add what rmcp cannot write itself (`tasks_2025`'s task fields, `listen_tasks`'
//! acknowledged `taskIds`): the body is cut into events at their blank line and each event is
//! offered to a rewriter. An event larger than the bound is not held: it and the rest of the
//! stream pass as they are.

use axum::body::{Body, Bytes};
use futures::StreamExt;

/// Whether the rewriting goes on after the first event the rewriter changed.
#[derive(Clone, Copy)]
pub enum Rewrites {
    /// Every event is offered to the rewriter.
    Every,
    /// Only up to the first one it changes; the rest of the stream passes as it is.
    First,
}

/// `body` with each SSE event (up to `max_event` bytes) replaced by what `rewrite` makes of it
/// (`None`: the event as it is).
pub fn rewrite_events(
    body: Body,
    max_event: usize,
    rewrites: Rewrites,
    mut rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>> + Send + 'static,
) -> Body {
    let mut pending: Vec<u8> = Vec::new();
    let mut passing = false;
    let stream = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        if passing {
            return Ok::<_, axum::Error>(chunk);
        }
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = memchr::memmem::find(&pending, b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            match rewrite(&event) {
                Some(rewritten) => {
                    out.extend(rewritten);
                    if matches!(rewrites, Rewrites::First) {
                        out.append(&mut pending);
                        passing = true;
                        break;
                    }
                }
                None => out.extend(event),
            }
        }
        if pending.len() > max_event {
            // One event larger than the bound: pass it and the rest of the stream as they are.
            out.append(&mut pending);
            passing = true;
        }
        Ok(Bytes::from(out))
    });
    Body::from_stream(stream)
}

/// The SSE `event` (ending with its blank line) with the message it carries (its `data:` lines,
/// joined) replaced by what `rewrite` makes of it, on one `data:` line; its other fields are
/// kept. `None` if the event carries no message, is not UTF-8, or `rewrite` changes nothing.
pub fn rewrite_message<R: AsRef<[u8]>>(
    event: &[u8],
    rewrite: impl FnOnce(&str) -> Option<R>,
) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    let rewritten = rewrite(&data.join("\n"))?;
    let rewritten = rewritten.as_ref();
    let mut out = Vec::with_capacity(event.len() + rewritten.len());
    let mut written = false;
    for line in text.lines() {
        if line.starts_with("data:") {
            if !written {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(rewritten);
                out.push(b'\n');
                written = true;
            }
        } else if !line.is_empty() {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    out.push(b'\n');
    Some(out)
}
