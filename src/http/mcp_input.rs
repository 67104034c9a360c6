//! A first look at what is POSTed to `/mcp`, before rmcp parses it, so that every malformed
//! message gets a JSON-RPC error that says what is wrong. It rejects only what rmcp would
//! reject too; everything else passes unchanged (docs/design/http-serve.md).
//!
//! - body over `limits.max_request_bytes` → 413; not complete within
//!   `server.body_read_timeout_secs` → 408, and the connection closes
//! - not JSON, invalid UTF-8, nested deeper than 128 levels → 400, -32700
//! - a batch, not an object, no `"jsonrpc": "2.0"`, an `id` neither a string nor an `i64`, a
//!   `method` not a string → 400, -32600
//! - `tools/call` whose `params.name` is not a string or `params.arguments` not an object →
//!   400, -32602. Arguments that do not match the tool's schema go upstream: it owns its schema.
//! - a message that passes is timed to its answer's head, by method (`mcp_method_label`)

use axum::{
    Json,
    body::Body,
    extract::Request,
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{
    metrics::{HistogramVec, Metrics, Refusal, RefusedRequests, mcp_method_label},
    model::McpMessage,
};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// The middleware; `max_bytes` is `limits.max_request_bytes`, and a body past it is counted in
/// `refused`.
pub async fn check_mcp_post(
    max_bytes: usize,
    (refused, timing): (RefusedRequests, HistogramVec),
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let started = std::time::Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_bytes).await {
        Ok(bytes) => bytes,
        Err(e) if super::serve::is_body_timeout(&e) => {
            let mut response = error(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                INVALID_REQUEST,
                e.to_string(),
            );
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return response;
        }
        Err(_) => {
            refused.count(Refusal::BodySize);
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "the request body is larger than {max_bytes} bytes (limits.max_request_bytes); send a smaller message"
                ),
            );
        }
    };
    let mut parts = parts;
    let method = match checked(&bytes) {
        Ok(message) => {
            let method = mcp_method_label(message.method());
            parts.extensions.insert(message);
            method
        }
        Err(rejection) => return rejection.into_response(),
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    Metrics::observe(&timing.with_label_values(&[method]), started.elapsed());
    response
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

/// `Err` for a message rmcp would not serve.
pub fn check(bytes: &[u8]) -> Result<(), Rejection> {
    checked(bytes).map(drop)
}

/// [`check`], and the message, for the layers under this one.
fn checked(bytes: &[u8]) -> Result<McpMessage, Rejection> {
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
