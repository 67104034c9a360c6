//! A stdio child's stdout, with lines longer than `limits.max_result_bytes` cut out.
//!
//! rmcp's stdio reader drops a line over its cap with nothing but a log line (`async_rw.rs`,
//! `LineRead::Oversized`), so the request it answered never ends. This reader sits under
//! rmcp's: it passes each line through as it comes (nothing is held back, so a line costs no
//! more memory than rmcp's own buffer), and at the byte that takes a line over the limit it
//! ends the line instead (rmcp gets a cut, unparsable line and ignores it), skips the rest of
//! it, and puts in its place the error [`Oversize::answer`] makes for the request it answered,
//! as soon as the line's top level shows which request that is. rmcp's own cap is set above
//! the limit, so it never drops a line this reader passes.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, ReadBuf};

use super::oversize::Oversize;
use crate::rmcp_ext::{envelope::Envelope, task_support::TaskSupportMap};

/// Bytes read from the child at a time.
const CHUNK: usize = 64 * 1024;

/// rmcp's line cap for a stdio upstream: the limit and the line end, so rmcp never drops
/// what [`LineCap`] passes.
pub(super) fn rmcp_line_cap(limit: usize) -> usize {
    limit.saturating_add(1)
}

pub(super) struct LineCap<R> {
    inner: R,
    lines: Lines,
    chunk: Box<[u8]>,
    /// Bytes ready for the reader, from `out[at..]`.
    out: Vec<u8>,
    at: usize,
}

/// Where the current line stands.
struct Lines {
    oversize: Oversize,
    /// Bytes of the current line so far (without its `\n`).
    len: usize,
    envelope: Envelope,
    /// The line went over the limit: its remaining bytes are skipped.
    cut: bool,
    /// The line's request has been answered with the error.
    answered: bool,
    /// Where `tools/list` answers leave their tools' task support (`rmcp_ext/task_support.rs`).
    task_support: TaskSupportMap,
    /// The current line, while it is short enough to be sniffed for task support.
    line: Vec<u8>,
    /// The current line, too long to be sniffed, named `taskSupport` (in one of its pieces).
    declares: bool,
}

impl<R> LineCap<R> {
    #[cfg(test)]
    pub(super) fn new(inner: R, oversize: Oversize) -> Self {
        Self::with_task_support(
            inner,
            oversize,
            TaskSupportMap::new(crate::rmcp_ext::task_support::DEFAULT_MAX, None),
        )
    }

    pub(super) fn with_task_support(
        inner: R,
        oversize: Oversize,
        task_support: TaskSupportMap,
    ) -> Self {
        Self {
            inner,
            lines: Lines {
                oversize,
                len: 0,
                envelope: Envelope::default(),
                cut: false,
                answered: false,
                task_support,
                line: Vec::new(),
                declares: false,
            },
            chunk: vec![0; CHUNK].into_boxed_slice(),
            out: Vec::with_capacity(CHUNK),
            at: 0,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            this.out.clear();
            this.at = 0;
            let mut read = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            let n = read.filled().len();
            if n == 0 {
                // End of the stream: rmcp sees it as such.
                return Poll::Ready(Ok(()));
            }
            this.lines.pass(&this.chunk[..n], &mut this.out);
        }
    }
}

impl Lines {
    /// Pass `bytes` on to `out`, cutting lines over the limit.
    fn pass(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        while !bytes.is_empty() {
            let newline = memchr::memchr(b'\n', bytes);
            let (part, rest) = match newline {
                Some(at) => (&bytes[..at], &bytes[at + 1..]),
                None => (bytes, &[][..]),
            };
            self.envelope.feed(part);
            if self.len + part.len() <= self.task_support.max() {
                self.line.extend_from_slice(part);
            } else if !self.declares {
                self.declares = memchr::memmem::find(&self.line, b"\"taskSupport\"").is_some()
                    || memchr::memmem::find(part, b"\"taskSupport\"").is_some();
                self.line = Vec::new();
            }
            if !self.cut {
                let room = self.oversize.limit() - self.len;
                out.extend_from_slice(&part[..part.len().min(room)]);
                if part.len() > room {
                    // Ends the line rmcp is reading: it cannot parse it and drops it.
                    out.push(b'\n');
                    self.cut = true;
                }
            }
            self.len = self.len.saturating_add(part.len());
            if self.cut
                && !self.answered
                && let Some(request) = self.envelope.response_id()
            {
                out.extend_from_slice(&self.oversize.answer_line(request));
                self.answered = true;
            }
            if newline.is_some() {
                self.end_line(out);
            }
            bytes = rest;
        }
    }

    fn end_line(&mut self, out: &mut Vec<u8>) {
        if self.len <= self.task_support.max() {
            self.task_support.sniff(&self.line);
        } else if self.declares {
            self.task_support.too_long();
        }
        self.declares = false;
        // Keep the buffer for the next line, unless a long one grew it.
        self.line.clear();
        if self.line.capacity() > 64 * 1024 {
            self.line = Vec::new();
        }
        if !self.cut {
            out.push(b'\n');
        } else if !self.answered {
            // Read to its end and not an answer (`pass` looked after its last byte).
            self.oversize.dropped();
        }
        self.len = 0;
        self.cut = false;
        self.answered = false;
        self.envelope.reset();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{metrics::Metrics, upstream::tap::CallRoutes};

    const LIMIT: usize = 64;

    fn lines() -> (Lines, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let routes = CallRoutes::new("t".into(), Default::default(), metrics.clone());
        let oversize = Oversize::new("t", LIMIT, routes, metrics.clone());
        let lines = LineCap::new(tokio::io::empty(), oversize).lines;
        (lines, metrics)
    }

    /// What the reader above gets for `input`, fed in pieces of `piece` bytes.
    fn passed(input: &str, piece: usize) -> (Vec<String>, u64) {
        let (mut lines, metrics) = lines();
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            lines.pass(chunk, &mut out);
        }
        let text = String::from_utf8(out).unwrap();
        let hits = metrics
            .limit_hits
            .with_label_values(&["max_result_bytes"])
            .get();
        (text.lines().map(str::to_string).collect(), hits)
    }

    fn each_piece(input: &str) -> (Vec<String>, u64) {
        let whole = passed(input, input.len());
        for piece in [1, 5, 63, 64, 65] {
            assert_eq!(passed(input, piece), whole, "in pieces of {piece}");
        }
        whole
    }

    fn big(text_len: usize, id_first: bool) -> String {
        let text = "x".repeat(text_len);
        if id_first {
            format!(r#"{{"jsonrpc":"2.0","id":4,"result":{{"text":"{text}"}}}}"#)
        } else {
            format!(r#"{{"result":{{"text":"{text}"}},"jsonrpc":"2.0","id":4}}"#)
        }
    }

    #[test]
    fn lines_within_the_limit_pass_unchanged() {
        let exact = format!("{}\n", "y".repeat(LIMIT));
        let input = format!("{{\"a\":1}}\n\n{exact}{{\"b\":2}}\n");
        let (out, hits) = each_piece(&input);
        assert_eq!(out, vec!["{\"a\":1}", "", &exact[..LIMIT], "{\"b\":2}"]);
        assert_eq!(hits, 0);
    }

    #[test]
    fn an_answer_over_the_limit_is_cut_and_replaced_by_an_error_for_its_id() {
        for id_first in [true, false] {
            let input = format!("{}\n{{\"next\":1}}\n", big(200, id_first));
            let (out, hits) = each_piece(&input);
            assert_eq!(out.len(), 3, "{out:?}");
            assert_eq!(
                out[0],
                input[..LIMIT],
                "the cut line, which rmcp cannot parse"
            );
            let error: serde_json::Value = serde_json::from_str(&out[1]).unwrap();
            assert_eq!(error["id"], 4);
            assert!(
                error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("limits.max_result_bytes (64 bytes)")
            );
            assert_eq!(out[2], "{\"next\":1}");
            assert_eq!(hits, 1);
        }
    }

    #[test]
    fn a_notification_over_the_limit_is_dropped_and_counted() {
        let note = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"id":1,"data":"{}"}}}}"#,
            "z".repeat(100)
        );
        let (out, hits) = each_piece(&format!("{note}\n{{\"next\":1}}\n"));
        assert_eq!(out, vec![note[..LIMIT].to_string(), "{\"next\":1}".into()]);
        assert_eq!(hits, 1);
    }
}
