//! The span of one MCP request. Jobs the request starts are its children (`jobs::job_span`),
//! so every log line about a job carries the MCP request id as well as the job's own fields.

use rmcp::{RoleServer, service::RequestContext};

/// The span `method` (for example `tools/call`) runs in.
pub(super) fn request_span(method: &str, context: &RequestContext<RoleServer>) -> tracing::Span {
    tracing::info_span!(
        "mcp_request",
        mcp_method = method,
        mcp_request_id = %context.id,
    )
}
