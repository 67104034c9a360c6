//! The answers owed to `tools/call` requests on `/mcp`, so that shutdown can wait for them.
//!
//! A sync caller's answer is written on its POST's SSE stream once its job has ended. At
//! shutdown the jobs end first and the HTTP side after them, but ending the HTTP side ends
//! every MCP session (rmcp's cancellation token) and with it every POST stream, at once: an
//! answer computed a moment before was cut off (in 2 runs of 3, the caller got the SSE priming
//! event and nothing else). So each `tools/call` POST holds a token of [`McpAnswers`] until
//! its answer has been written to the end (or the client has gone), and shutdown waits for
//! them, bounded, before it stops the HTTP stage.

use std::time::Duration;

use axum::{
    body::Body,
    extract::{Request, State},
    http::header::CONTENT_TYPE,
    middleware::Next,
    response::Response,
};
use futures::StreamExt;
use tokio_util::task::TaskTracker;

use crate::model::McpMessage;

/// The `tools/call` answers under way.
#[derive(Clone, Default)]
pub struct McpAnswers {
    tracker: TaskTracker,
}

impl McpAnswers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait until every `tools/call` answer under way has been written, at most `within`;
    /// whether they all were.
    pub async fn written(&self, within: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait())
            .await
            .is_ok()
    }

    /// `tools/call` answers still being written.
    pub fn under_way(&self) -> usize {
        self.tracker.len()
    }
}

/// The middleware: a `tools/call` POST counts as under way while rmcp works on it, and an SSE
/// answer until its body has been sent to its end or dropped.
pub async fn hold_until_written(
    State(answers): State<McpAnswers>,
    request: Request,
    next: Next,
) -> Response {
    let tool_call = request
        .extensions()
        .get::<McpMessage>()
        .is_some_and(McpMessage::is_tool_call);
    if !tool_call {
        return next.run(request).await;
    }
    let token = answers.tracker.token();
    let response = next.run(request).await;
    let streamed = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        // The token lives as long as the stream: it is released when the body ends.
        let _held = &token;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
