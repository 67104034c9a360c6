//! The caller of one MCP request, as the HTTP layer verified it and as its request declares
//! itself: who it is, its session, its revision's way of being asked, what it takes, and the
//! trace its request continues (with traces on, the request's span, `served.rs`, continues the
//! W3C `traceparent` of the request's `_meta` (SEP-414), else of its HTTP headers).

use std::sync::Arc;

use rmcp::{RoleServer, model::ProtocolVersion, service::RequestContext};

use crate::{
    auth::{Identity, ToolAccess},
    traces::TraceParent,
};

/// The first revision without sessions: its callers are asked in `input_required` rounds.
pub const SESSIONLESS: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The identity the HTTP layer verified for this MCP request (see `http::auth`). A request
/// that did not come through it (none in the bridge) is an anonymous caller with no rights
/// beyond its own jobs.
pub fn identity(context: &RequestContext<RoleServer>) -> Arc<Identity> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Arc<Identity>>())
        .cloned()
        .unwrap_or_else(|| Arc::new(Identity::anonymous(ToolAccess::Only(Vec::new()))))
}

/// The `Mcp-Session-Id` of HTTP request parts.
pub fn session_id(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The caller's MCP session, if it has one (handshake revisions over HTTP).
pub fn session(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(session_id)
}

/// What a caller declared it takes of what an upstream asks (its session's client
/// capabilities, or on the session-less revision its request's `_meta`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Takes {
    /// Form elicitation: the tool's questions.
    pub questions: bool,
    pub sampling: bool,
    pub roots: bool,
}

impl Takes {
    /// Samples or roots (what only a caller can give: no person answers them).
    pub fn samples_or_roots(self) -> bool {
        self.sampling || self.roots
    }
}

/// The caller of a `tools/call` (or another request an upstream may ask something during),
/// read once from its request.
pub struct Caller {
    pub identity: Arc<Identity>,
    /// Its MCP session (`Mcp-Session-Id`), on handshake revisions over HTTP.
    pub session: Option<String>,
    /// It is on the session-less revision: nothing can be sent to it during its request, what
    /// it is asked goes back in an `input_required` answer (SEP-2322) and its retry answers.
    pub in_rounds: bool,
    pub takes: Takes,
    /// It listed the Tasks extension (SEP-2663): a call that goes on running is a task.
    pub wants_tasks: bool,
    /// The `clientInfo.name` its session declared at `initialize`.
    pub client_name: Option<String>,
}

impl Caller {
    #[allow(deprecated)]
    pub fn of(context: &RequestContext<RoleServer>) -> Self {
        let capabilities = context.client_capabilities().unwrap_or_default();
        let questions = capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        Self {
            identity: identity(context),
            session: session(context),
            in_rounds: context.protocol_version().is_some_and(|v| v >= SESSIONLESS),
            takes: Takes {
                questions,
                sampling: capabilities.sampling.is_some(),
                roots: capabilities.roots.is_some(),
            },
            wants_tasks: capabilities.supports_tasks(),
            client_name: context.peer.peer_info().map(|i| i.client_info.name.clone()),
        }
    }
}

/// The trace context the caller sent with the request, if any: the `_meta` one wins (it
/// belongs to this one request; a header may be set once for a whole connection).
pub(super) fn caller_trace(context: &RequestContext<RoleServer>) -> Option<TraceParent> {
    if let Some(traceparent) = context.meta.get_traceparent() {
        return Some(TraceParent {
            traceparent: traceparent.to_string(),
            tracestate: context.meta.get_tracestate().map(str::to_string),
        });
    }
    let headers = &context.extensions.get::<http::request::Parts>()?.headers;
    let header = |name| headers.get(name)?.to_str().ok().map(str::to_string);
    Some(TraceParent {
        traceparent: header("traceparent")?,
        tracestate: header("tracestate"),
    })
}
