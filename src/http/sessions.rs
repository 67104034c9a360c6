//! MCP sessions as the HTTP side sees them, in front of rmcp's session handling.
//!
//! - `DELETE /mcp` of a live session answers 200 (rmcp answers 202, which the MCP SDK clients
//!   log as "Session termination failed: 202": they expect 200 or 204, and the reference SDK
//!   servers answer 200); of a session that is closed, expired or never existed, 404, like
//!   any other request naming an unknown session.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::transport::streamable_http_server::session::{
    SessionId, SessionManager, SessionStore, local::LocalSessionManager,
};
use serde_json::json;

/// The `Mcp-Session-Id` header.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// Where the sessions are: this replica's (rmcp's session manager), and, with Redis, the
/// records any replica can restore a session from.
#[derive(Clone)]
pub struct SessionLookup {
    pub local: Arc<LocalSessionManager>,
    pub shared: Option<Arc<dyn SessionStore>>,
}

impl SessionLookup {
    /// Whether `id` names a session this bridge would serve. A shared record that cannot be
    /// read counts as none (the client initializes again).
    async fn exists(&self, id: &str) -> bool {
        let session: SessionId = id.into();
        if self.local.has_session(&session).await.unwrap_or(false) {
            return true;
        }
        match &self.shared {
            Some(store) => matches!(store.load(id).await, Ok(Some(_))),
            None => false,
        }
    }
}

/// In front of rmcp on `/mcp`: `DELETE` answered as the MCP clients expect.
pub async fn end_session(
    State(sessions): State<SessionLookup>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::DELETE {
        return next.run(request).await;
    }
    // Without the header (or with one that is not text) rmcp's own 400 says what is missing.
    let Some(id) = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return next.run(request).await;
    };
    if !sessions.exists(&id).await {
        return unknown_session();
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::ACCEPTED {
        return StatusCode::OK.into_response();
    }
    response
}

/// 404 for a session that is not (or no longer) here: the client initializes again.
pub fn unknown_session() -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": {
        "code": -32600,
        "message": "no such MCP session: it was closed, expired, or never existed here; send initialize to start a new one",
    } });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}
