//! The one layer between the `/mcp` checks and rmcp for what rmcp does not speak: it looks at
//! the message the check parsed (`model::McpMessage`) and hands the request to the adapter it
//! concerns, if any; every other request goes straight to rmcp.
//! - the 2025-11-25 tasks ([`tasks_2025`]): `initialize`, and requests of a session at that
//!   revision;
//! - a `subscriptions/listen` that follows tasks ([`listen_tasks`]).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::Response,
};

use super::{core::Core, listen_tasks, tasks_2025};
use crate::model::McpMessage;

/// The layer (see the module doc).
pub async fn adapt(State(core): State<Arc<Core>>, request: Request, next: Next) -> Response {
    let Some(message) = request.extensions().get::<McpMessage>() else {
        return next.run(request).await;
    };
    if message.method() == Some(listen_tasks::LISTEN) {
        return listen_tasks::follow_tasks(core, request, next).await;
    }
    if tasks_2025::concerns(&request, message) {
        return tasks_2025::translate(request, next).await;
    }
    next.run(request).await
}
