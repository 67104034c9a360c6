//! The request log, and the rules that keep secrets and clients' bytes out of every log.
//!
//! Job URLs carry capability tokens in their query string and `/mcp` requests carry bearer
//! tokens in a header, so the request log writes the method, the path without its query, the
//! status and the time taken, and never a header. rmcp logs whole MCP messages at debug and
//! trace level, and the bridge's answers hold job handles with tokens: [`secret_caps`] caps
//! those targets whatever `RUST_LOG` asks for.
//!
//! Nor may a client fill the disk through the log: rmcp logs every incoming notification,
//! whole, at info (`rmcp::service`), so that target is capped at warn; and whatever a line
//! quotes (an upstream's stderr, a peer's error, a tool name), [`CappedLines`] writes at most
//! [`MAX_LOG_LINE_BYTES`] of it.

use std::{
    io::{self, Write},
    time::Instant,
};

use axum::{extract::Request, middleware::Next, response::Response};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;

/// Log targets that would print MCP messages (and so job tokens) below these levels.
const CAPS: &[(&str, LevelFilter)] = &[
    // At info: "received notification" with the whole notification, whatever its size.
    ("rmcp::service", LevelFilter::WARN),
    (
        "rmcp::transport::streamable_http_server",
        LevelFilter::DEBUG,
    ),
    (
        "rmcp::transport::streamable_http_server::tower",
        LevelFilter::INFO,
    ),
];

/// A filter that passes everything except the secret-bearing targets below their caps. Use it
/// *together* with the level filter (`RUST_LOG` or the default), an event passing only when
/// both let it: `RUST_LOG=trace` cannot lift a cap, and a cap never lifts what `RUST_LOG` (or
/// the default `rmcp=warn`) keeps quiet. (Added as directives of an `EnvFilter` instead, the
/// caps would set those targets' levels, and switch rmcp's start-up info back on.)
pub fn secret_caps() -> Targets {
    CAPS.iter().fold(
        Targets::new().with_default(LevelFilter::TRACE),
        |caps, &(target, level)| caps.with_target(target, level),
    )
}

/// Longest log line written, in bytes; the rest of a longer one is dropped and counted.
pub const MAX_LOG_LINE_BYTES: usize = 8 * 1024;

/// Log lines to stderr, each cut at [`MAX_LOG_LINE_BYTES`]. A cut text line ends with
/// `… [N bytes cut]`; a cut JSON line becomes `{"log_line_cut_bytes": N, "head": "<start of
/// the line>"}`, so that the log stays one JSON object per line.
#[derive(Debug, Clone, Copy)]
pub struct CappedLines {
    pub json: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CappedLines {
    type Writer = CappedLine;

    fn make_writer(&'a self) -> CappedLine {
        CappedLine { json: self.json }
    }
}

/// One event's line (the formatter writes each event with one `write_all`).
pub struct CappedLine {
    json: bool,
}

impl Write for CappedLine {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let line = crate::redact::bytes(line);
        io::stderr().lock().write_all(&cap_line(&line, self.json))?;
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// `line` as written: unchanged when short enough, else cut (see [`CappedLines`]).
fn cap_line(line: &[u8], json: bool) -> std::borrow::Cow<'_, [u8]> {
    if line.len() <= MAX_LOG_LINE_BYTES {
        return line.into();
    }
    // Room for the marker, and for JSON's escaping of the head (a JSON line's `"` and `\`
    // double): the result stays under the cap.
    let keep = if json {
        (MAX_LOG_LINE_BYTES - 200) / 2
    } else {
        MAX_LOG_LINE_BYTES - 200
    };
    let head = String::from_utf8_lossy(&line[..keep]);
    // A cut through a character leaves a replacement character at the end: drop it.
    let head = head.trim_end_matches('\u{fffd}');
    let cut = line.len() - head.len();
    let text = if json {
        let marker = serde_json::json!({ "log_line_cut_bytes": cut, "head": head });
        format!("{marker}\n")
    } else {
        format!("{head}… [{cut} bytes cut]\n")
    };
    text.into_bytes().into()
}

/// One debug line per request: method, path (a query is shown only as `?…`), status, time.
pub async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = if request.uri().query().is_some() {
        "?…"
    } else {
        ""
    };
    let response = next.run(request).await;
    tracing::debug!(
        target: "mcp_progress_bridge::http::request",
        %method,
        path = %format_args!("{path}{query}"),
        status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_and_say_so() {
        let short = b"a short line\n";
        assert_eq!(&*cap_line(short, false), short);
        let long = format!("{}\n", "é".repeat(MAX_LOG_LINE_BYTES));
        let text = String::from_utf8(cap_line(long.as_bytes(), false).into_owned()).unwrap();
        assert!(text.len() <= MAX_LOG_LINE_BYTES, "{}", text.len());
        assert!(text.ends_with("bytes cut]\n"), "{text}");
        let json = String::from_utf8(cap_line(long.as_bytes(), true).into_owned()).unwrap();
        assert!(json.len() <= MAX_LOG_LINE_BYTES, "{}", json.len());
        let quotes = format!("{}\n", "\\\"".repeat(MAX_LOG_LINE_BYTES));
        assert!(cap_line(quotes.as_bytes(), true).len() <= MAX_LOG_LINE_BYTES);
        let parsed: serde_json::Value = serde_json::from_str(json.trim_end()).unwrap();
        assert!(parsed["log_line_cut_bytes"].as_u64().unwrap() > MAX_LOG_LINE_BYTES as u64);
    }
}
