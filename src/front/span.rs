//! The span of one MCP request. Jobs the request starts are its children (`jobs::job_span`),
//! so every log line about a job carries the MCP request id as well as the job's own fields.
//!
//! With traces on, the span continues the caller's trace: the W3C `traceparent` (and
//! `tracestate`) in the request's `_meta` (SEP-414), else in the HTTP request's headers. The
//! `_meta` one wins: it belongs to this one request, where a header may be set once for a
//! whole connection by a client library.

use rmcp::{RoleServer, service::RequestContext};

use crate::traces::{self, TraceParent};

/// The span `method` (for example `tools/call`) runs in.
pub(super) fn request_span(method: &str, context: &RequestContext<RoleServer>) -> tracing::Span {
    let span = tracing::info_span!(
        "mcp_request",
        mcp_method = method,
        mcp_request_id = %context.id,
    );
    traces::continue_from(&span, || caller_trace(context));
    span
}

/// The trace context the caller sent with the request, if any.
fn caller_trace(context: &RequestContext<RoleServer>) -> Option<TraceParent> {
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
