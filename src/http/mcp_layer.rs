//! The one layer in front of rmcp on `/mcp`: each request passes its steps in order, and a
//! POST's body is read and parsed once (docs/design/http-serve.md).
//!
//! 1. the credential, then the caller's rate (`Guard::mcp_caller`: 401 or 503, 429); the
//!    [`Identity`] goes on in the request's extensions, the `Authorization` header does not;
//! 2. a POST's body, bounded in size and time, then its JSON-RPC shape ([`check`]); the parse
//!    goes on as a [`McpMessage`], and the message is timed to its answer's head, by method;
//! 3. the session ([`SessionGate::pass`]: its own principal's only; `initialize` bounded);
//! 4. a `tools/call` is held in [`McpAnswers`] until its answer is written;
//! 5. rmcp's bare `Host`/`Origin` 403 gets a hint naming the setting that admits it.

use std::{sync::Arc, time::Instant};

use axum::{
    Json,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

use super::{auth::Guard, sessions::SessionGate};
use crate::{
    auth::Identity,
    metrics::{HistogramVec, Metrics, Refusal, mcp_method_label},
    model::McpMessage,
};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// What the layer needs; a cheap handle.
#[derive(Clone)]
pub struct McpLayer {
    pub guard: Guard,
    pub sessions: SessionGate,
    pub answers: McpAnswers,
    /// `limits.max_request_bytes`; a body past it is counted in `bridge_requests_refused_total`.
    pub max_request_bytes: usize,
    /// `bridge_mcp_request_duration_seconds{method}`.
    pub timing: HistogramVec,
}

/// The middleware (see the module doc).
pub async fn layer(State(layer): State<McpLayer>, mut request: Request, next: Next) -> Response {
    let identity: Arc<Identity> = match layer.guard.mcp_caller(request.headers()).await {
        Ok(identity) => identity,
        Err(refused) => return refused,
    };
    let principal = identity.principal.clone();
    // The token has done its job: nothing downstream (handlers, logs, upstreams) sees it.
    request.headers_mut().remove(header::AUTHORIZATION);
    request.extensions_mut().insert(identity);
    if request.method() != Method::POST {
        let to_rmcp = |request| layer.to_rmcp(request, false, next);
        return layer
            .sessions
            .pass(request, &principal, None, to_rmcp)
            .await;
    }
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    let bytes = match layer.read_body(body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    let message = match check(&bytes) {
        Ok(message) => message,
        Err(rejection) => return rejection.into_response(),
    };
    let method = mcp_method_label(message.method());
    let tool_call = message.is_tool_call();
    let initialize = message.is_initialize().then_some(bytes.len());
    parts.extensions.insert(message);
    let request = Request::from_parts(parts, Body::from(bytes));
    let to_rmcp = |request| layer.to_rmcp(request, tool_call, next);
    let response = layer
        .sessions
        .pass(request, &principal, initialize, to_rmcp)
        .await;
    Metrics::observe(
        &layer.timing.with_label_values(&[method]),
        started.elapsed(),
    );
    response
}

impl McpLayer {
    /// The whole body: over `limits.max_request_bytes` → 413; not complete within
    /// `server.body_read_timeout_secs` → 408, and the connection closes.
    async fn read_body(&self, body: Body) -> Result<Bytes, Response> {
        let max_bytes = self.max_request_bytes;
        axum::body::to_bytes(body, max_bytes).await.map_err(|e| {
            if super::serve::is_body_timeout(&e) {
                let mut response = error(
                    StatusCode::REQUEST_TIMEOUT,
                    Value::Null,
                    INVALID_REQUEST,
                    e.to_string(),
                );
                (response.headers_mut()).insert(header::CONNECTION, HeaderValue::from_static("close"));
                return response;
            }
            self.guard.refused.count(Refusal::BodySize);
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "the request body is larger than {max_bytes} bytes (limits.max_request_bytes); send a smaller message"
                ),
            )
        })
    }

    /// rmcp's answer; a `tools/call` counts as under way until it is written.
    async fn to_rmcp(&self, request: Request, tool_call: bool, next: Next) -> Response {
        let held = tool_call.then(|| self.answers.tracker.token());
        let response = explain_forbidden(next.run(request).await).await;
        match held {
            Some(token) => hold_until_written(response, token),
            None => response,
        }
    }
}

fn error(status: StatusCode, id: Value, code: i64, message: String) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    (status, Json(body)).into_response()
}

/// Why a message is refused: a JSON-RPC error, answered with HTTP 400.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The request's id, when it has a usable one.
    pub id: Value,
    pub code: i64,
    pub message: String,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        error(StatusCode::BAD_REQUEST, self.id, self.code, self.message)
    }
}

/// The message, parsed once; `Err` for one rmcp would not serve: not JSON, invalid UTF-8,
/// nested deeper than 128 levels (-32700); a batch, not an object, no `"jsonrpc": "2.0"`, an
/// `id` neither a string nor an `i64`, a `method` not a string (-32600); a `tools/call` whose
/// `params.name` is not a string or `params.arguments` not an object (-32602). Arguments that
/// do not match the tool's schema go upstream: it owns its schema.
pub fn check(bytes: &[u8]) -> Result<McpMessage, Rejection> {
    let message = json_rpc_object(bytes)?;
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if message.contains_key("id") && !(id.is_string() || id.is_i64()) {
        let why = if id.is_u64() {
            "the id is too large: an integer id must fit in 64 signed bits (at most 2^63-1); use a smaller one or a string"
        } else {
            "the id must be a string or an integer"
        };
        return Err(rejected(INVALID_REQUEST, why));
    }
    let method = match message.get("method") {
        None => {
            if message.contains_key("result") || message.contains_key("error") {
                return Ok(McpMessage::new(message));
            }
            return Err(rejected(
                INVALID_REQUEST,
                "a JSON-RPC message needs a \"method\" (request, notification) or a \"result\" or \"error\" (response)",
            ));
        }
        Some(Value::String(method)) => method.as_str(),
        Some(_) => return Err(rejected(INVALID_REQUEST, "the method must be a string")),
    };
    let tool_call = method == "tools/call";
    if tool_call && let Some(problem) = tool_call_problem(message.get("params")) {
        return Err(Rejection {
            id,
            code: INVALID_PARAMS,
            message: problem.into(),
        });
    }
    Ok(McpMessage::new(message))
}

/// A rejection before the message's own id is known (or valid).
fn rejected(code: i64, message: impl Into<String>) -> Rejection {
    Rejection {
        id: Value::Null,
        code,
        message: message.into(),
    }
}

/// The body as one JSON-RPC 2.0 message object.
fn json_rpc_object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, Rejection> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        rejected(
            PARSE_ERROR,
            format!("parse error: {e}; send one JSON-RPC message as UTF-8 JSON"),
        )
    })?;
    let message = match value {
        Value::Object(message) => message,
        Value::Array(_) => {
            return Err(rejected(
                INVALID_REQUEST,
                "JSON-RPC batches are not supported by MCP over HTTP: send one message per request",
            ));
        }
        _ => {
            return Err(rejected(
                INVALID_REQUEST,
                "a JSON-RPC message must be a JSON object",
            ));
        }
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(rejected(
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 message: it needs \"jsonrpc\": \"2.0\"",
        ));
    }
    Ok(message)
}

/// What is wrong with a `tools/call`'s params, if anything.
fn tool_call_problem(params: Option<&Value>) -> Option<&'static str> {
    match params {
        Some(Value::Object(params)) => match (params.get("name"), params.get("arguments")) {
            (Some(Value::String(_)), None | Some(Value::Null) | Some(Value::Object(_))) => None,
            (Some(Value::String(_)), Some(_)) => {
                Some("tools/call: params.arguments must be a JSON object of the tool's arguments")
            }
            _ => Some("tools/call: params.name must be the name of a tool (a string)"),
        },
        _ => Some("tools/call needs params: {\"name\": <tool>, \"arguments\": {…}}"),
    }
}

/// rmcp refuses a disallowed `Host` or `Origin` with a bare "Forbidden: … is not allowed";
/// say which setting admits it.
async fn explain_forbidden(response: Response) -> Response {
    if response.status() != StatusCode::FORBIDDEN {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let hint = if text.contains("Origin") {
        " — a browser page from another origin may not call /mcp; to admit one, add it to \
         server.allowed_origins (scheme://host[:port])"
    } else if text.contains("Host") {
        " — to admit the name this bridge is reached by, add it to server.allowed_hosts (or set \
         server.public_url to it)"
    } else {
        ""
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(format!("{text}{hint}")))
}

/// The `tools/call` answers under way, so that shutdown can wait for them: ending the HTTP
/// stage ends every MCP session and its POST streams at once, and would cut off an answer
/// computed a moment before (docs/design/shutdown.md).
#[derive(Clone, Default)]
pub struct McpAnswers {
    tracker: TaskTracker,
}

impl McpAnswers {
    /// Wait until every `tools/call` answer under way has been written, at most `within`;
    /// whether they all were.
    pub async fn written(&self, within: std::time::Duration) -> bool {
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

/// `response` holding `token` until its SSE body has been sent to its end or dropped (an
/// answer that is not a stream is written already).
fn hold_until_written(response: Response, token: TaskTrackerToken) -> Response {
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(body: &str) -> Option<u16> {
        check(body.as_bytes())
            .err()
            .map(|r| r.into_response().status().as_u16())
    }

    #[test]
    fn accepts_messages_and_rejects_shapes() {
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775807,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"tools/list"}"#,
        ] {
            assert_eq!(status(ok), None, "{ok}");
        }
        for bad in [
            "",
            "{",
            "[]",
            "5",
            r#"{"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#,
        ] {
            assert_eq!(status(bad), Some(400), "{bad}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(status(&deep), Some(400));
    }
}
