//! The span each MCP request the bridge serves runs in, by OpenTelemetry's MCP conventions:
//! kind `SERVER`, named `"{mcp.method.name} {target}"` (the tool or prompt), continuing the
//! caller's trace. Every handler of `server.rs` opens one with [`of`] and runs in it with
//! [`served`], which records a JSON-RPC error; `tools/call` adds [`tool_answer`].
//! With traces off only `tools/call` gets a span (the log lines of the job it starts carry its
//! request id, and jobs are its children) and every other request none: one relaxed load.
//! Nothing secret is recorded: of the session ID its nonce, never its tag (`http::sessions`);
//! names a client chose (method, tool, prompt) are cut to [`MAX_NAME`] characters.

use rmcp::{ErrorData, RoleServer, model::CallToolResponse, service::RequestContext};
use tracing::{Instrument, Span, field::Empty};

use super::{caller, tasks_2025};
use crate::traces;

/// The longest method, tool or prompt name a span carries (a client may send any).
const MAX_NAME: usize = 100;
pub const TOOLS_CALL: &str = "tools/call";

/// What a request names besides its method, for the span's name and attributes.
#[derive(Clone, Copy, Default)]
pub struct Target<'a> {
    pub tool: Option<&'a str>,
    pub prompt: Option<&'a str>,
}

impl<'a> Target<'a> {
    pub fn tool(name: &'a str) -> Self {
        Self {
            tool: Some(name),
            prompt: None,
        }
    }

    pub fn prompt(name: &'a str) -> Self {
        Self {
            tool: None,
            prompt: Some(name),
        }
    }
}

/// The span a request of `method` (a 2025-11-25 task request under its own name, not the one
/// `tasks_2025` renamed it to) is served in.
pub fn of(method: &str, target: Target<'_>, context: &RequestContext<RoleServer>) -> Span {
    let method = cut(method.strip_prefix(tasks_2025::PREFIX).unwrap_or(method));
    if !traces::enabled() {
        if method != TOOLS_CALL {
            return Span::none();
        }
        return tracing::info_span!(
            "mcp_request",
            mcp.method.name = method,
            jsonrpc.request.id = %context.id,
        );
    }
    let (tool, prompt) = (target.tool.map(cut), target.prompt.map(cut));
    let name = match tool.or(prompt) {
        Some(target) => format!("{method} {target}"),
        None => method.to_string(),
    };
    let parts = context.extensions.get::<http::request::Parts>();
    let span = tracing::info_span!(
        "mcp_request",
        otel.name = name,
        otel.kind = "server",
        mcp.method.name = method,
        jsonrpc.request.id = %context.id,
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        gen_ai.tool.name = tool,
        gen_ai.prompt.name = prompt,
        gen_ai.operation.name = tool.is_some().then_some("execute_tool"),
        network.transport = "tcp",
        network.protocol.name = "http",
        network.protocol.version = parts.map(|p| http_version(p.version)),
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if let Some(version) = context.protocol_version() {
        span.record("mcp.protocol.version", version.as_str());
    }
    if let Some(session) = caller::session(context) {
        // `<nonce>.<tag>`: the tag opens the session, the nonce only names it.
        let nonce = session.split('.').next().unwrap_or_default();
        span.record("mcp.session.id", cut(nonce));
    }
    traces::continue_from(&span, || caller::caller_trace(context));
    span
}

/// `work` run in `span`, which records the JSON-RPC error it ends with, if any.
pub async fn served<T>(
    span: Span,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let outcome = work.instrument(span.clone()).await;
    if let Err(error) = &outcome {
        traces::rpc_error(&span, error.code.0, &error.message);
    }
    outcome
}

/// A `tools/call` answered with the tool's error (`isError`): `error.type` `tool_error`.
pub fn tool_answer(span: &Span, response: &CallToolResponse) {
    if let CallToolResponse::Complete(result) = response
        && result.is_error == Some(true)
    {
        traces::tool_error(span);
    }
}

/// At most [`MAX_NAME`] characters of `name`.
fn cut(name: &str) -> &str {
    name.char_indices()
        .nth(MAX_NAME)
        .map_or(name, |(end, _)| &name[..end])
}

fn http_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_cut_on_a_character_boundary() {
        assert_eq!(cut("tools/list"), "tools/list");
        let long = "é".repeat(150);
        assert_eq!(cut(&long).chars().count(), MAX_NAME);
    }
}
