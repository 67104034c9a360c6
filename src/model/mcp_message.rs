//! A JSON-RPC message POSTed to `/mcp`, parsed once by the message check (`http::mcp_layer`)
//! and handed to the layers under it in the request's extensions, so that none of them parses
//! the body again (rmcp parses it once more, into its own types).

use std::sync::Arc;

use serde_json::{Map, Value};

/// One checked JSON-RPC 2.0 message object (a request, a notification or a response).
#[derive(Debug, Clone)]
pub struct McpMessage(Arc<Map<String, Value>>);

impl McpMessage {
    pub fn new(message: Map<String, Value>) -> Self {
        Self(Arc::new(message))
    }

    /// The method of a request or a notification; none for a response.
    pub fn method(&self) -> Option<&str> {
        self.0.get("method").and_then(Value::as_str)
    }

    pub fn is_tool_call(&self) -> bool {
        self.method() == Some("tools/call")
    }

    /// `initialize`: on the handshake revisions, it opens a session.
    pub fn is_initialize(&self) -> bool {
        self.method() == Some("initialize")
    }

    /// The message's `params`, if it has any.
    pub fn params(&self) -> Option<&Value> {
        self.0.get("params")
    }

    /// The whole message, to change a copy of it.
    pub fn to_value(&self) -> Value {
        Value::Object(Map::clone(&self.0))
    }
}
