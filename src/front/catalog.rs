//! The tool catalog the agent sees: every upstream tool as `<upstream>__<tool>`, plus the
//! bridge's own job tools; and, for a call, the tool behind a name and the mode it runs in.

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer,
    handler::server::common::schema_for_input,
    model::{CallToolRequestParams, CallToolResult, JsonObject, Tool},
    service::RequestContext,
};
use schemars::JsonSchema;

use super::handle::error_result;
use super::job_tools::{
    ANSWER_JOB_INPUT, AnswerArgs, CANCEL_JOB, GET_JOB_STATUS, JobArgs, WAIT_FOR_JOB, WaitArgs,
};
use crate::{
    auth::Identity,
    config::CallMode,
    model::meta::MODE_META_KEY,
    upstream::{Upstream, UpstreamState, Upstreams},
};

/// Separates the upstream name from the tool name in the names the agent sees.
pub const SEPARATOR: &str = "__";
/// MCP tool names are at most 128 characters.
const MAX_TOOL_NAME: usize = 128;

/// Split `<upstream>__<tool>`. Upstream names cannot contain the separator, so the first one
/// is the split point and the tool part may contain anything.
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.split_once(SEPARATOR)
        .filter(|(u, t)| !u.is_empty() && !t.is_empty())
}

/// The tools `identity` may use, upstream tools first (in config order), then the job tools
/// (every caller has those). A tool its policies do not allow is absent, as if it did not
/// exist; calling it gets the unknown-tool error.
pub fn list(upstreams: &Upstreams, default_mode: CallMode, identity: &Identity) -> Vec<Tool> {
    let mut tools = Vec::new();
    for upstream in upstreams.iter() {
        for tool in upstream.tools().iter() {
            if !upstream.config().expose.tools.allows(&tool.name) {
                continue;
            }
            let name = format!("{}{SEPARATOR}{}", upstream.name(), tool.name);
            if name.len() > MAX_TOOL_NAME {
                tracing::warn!(tool = %name, "tool name longer than 128 characters: not listed");
                continue;
            }
            if !identity.may_use_tool(&name) {
                continue;
            }
            let mode = upstream.config().mode_for(&tool.name, default_mode);
            let mut tool = tool.clone();
            tool.name = Cow::Owned(name);
            // A call that may be answered with a job handle cannot promise the tool's output
            // schema: clients that validate structured content against it would reject the
            // handle. Only tools that always answer with their own result keep it.
            if mode != CallMode::Sync {
                tool.output_schema = None;
            }
            tools.push(tool);
        }
    }
    tools.extend(job_tools());
    tools
}

/// The `inputSchema` of a job tool, derived from its argument struct (JSON Schema 2020-12, the
/// wrapper's title and doc stripped, as rmcp does for its own tools).
fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // Only fails for a type that is not a JSON object: the argument structs are, and the
    // test below builds every schema.
    schema_for_input::<T>().expect("job tool arguments are a JSON object")
}

pub fn job_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            GET_JOB_STATUS,
            "Get the current status of a job started by another tool: status (running, \
             completed, failed, cancelled), progress, total, the latest message, and the result \
             or error once it has ended. Returns at once.",
            schema::<JobArgs>(),
        ),
        Tool::new(
            WAIT_FOR_JOB,
            "Wait for a job started by another tool to finish, up to timeout_seconds (default \
             20, at most 50). Returns the tool's result as if it had been called directly once \
             the job has ended; if it is still running, returns its progress and asks you to \
             call wait_for_job again.",
            schema::<WaitArgs>(),
        ),
        Tool::new(
            CANCEL_JOB,
            "Cancel a running job started by another tool. The tool server is told to stop; \
             the job ends as cancelled.",
            schema::<JobArgs>(),
        ),
        Tool::new(
            ANSWER_JOB_INPUT,
            "Answer the question a job's tool asked (get_job_status shows status \
             input_required and the question in input_requests: its message and the \
             requested_schema of the answer). action accept with content (an object with the \
             schema's fields), or decline, or cancel. Only ask the user and answer what they \
             said; the job then goes on.",
            schema::<AnswerArgs>(),
        ),
    ]
}

pub fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("unknown tool {name:?}: call tools/list for the tools this bridge offers"),
        None,
    )
}

/// The upstream and tool behind `<upstream>__<tool>`. `Err(Ok(_))`: a tool that is missing
/// while its upstream is down gets a tool error saying so (the agent can try again), not
/// "unknown".
pub fn find_tool<'u, 'n>(
    upstreams: &'u Upstreams,
    name: &'n str,
) -> Result<(&'u Upstream, &'n str), Result<CallToolResult, ErrorData>> {
    let (upstream_name, tool) = split(name).ok_or_else(|| Err(unknown_tool(name)))?;
    let upstream = upstreams
        .get(upstream_name)
        .ok_or_else(|| Err(unknown_tool(name)))?;
    // A tool the operator hid (`expose.tools`) is refused exactly like an unknown one.
    if !upstream.config().expose.tools.allows(tool) {
        return Err(Err(unknown_tool(name)));
    }
    if upstream.tools().iter().any(|t| t.name == tool) {
        return Ok((upstream, tool));
    }
    if upstream.state() == UpstreamState::Ready {
        return Err(Err(unknown_tool(name)));
    }
    let why = upstream
        .status()
        .last_error
        .unwrap_or_else(|| "not connected yet".into());
    Err(Ok(error_result(format!(
        "tool {name} is not available right now: upstream {upstream_name} is down ({why}); try again shortly"
    ))))
}

/// The mode a call of `tool` (of `upstream`, `name` as the agent called it) runs in: the one
/// the caller asked for in `_meta["mcp-progress-bridge/mode"]`, else the configured one. A
/// task-augmented call (`as_task`) runs async: its result is fetched whole, by `tasks/result`.
pub fn call_mode(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    (upstream, name, tool): (&Upstream, &str, &str),
    default_mode: CallMode,
    as_task: bool,
) -> Result<CallMode, ErrorData> {
    let configured = upstream.config().mode_for(tool, default_mode);
    match requested_mode(request, context)? {
        _ if as_task => Ok(CallMode::Async),
        Some(mode) => {
            refuse_handle_for_output_schema(upstream, name, tool, configured, mode)?;
            Ok(mode)
        }
        None => Ok(configured),
    }
}

/// The call mode the caller asked for in `_meta["mcp-progress-bridge/mode"]`, if any. It wins
/// over the configured mode for this one call; anything but `"async"`, `"sync"` or `"auto"` is
/// refused (a silently ignored typo would answer in a mode the caller does not expect).
fn requested_mode(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Option<CallMode>, ErrorData> {
    let value = request
        .meta
        .as_ref()
        .and_then(|meta| meta.get(MODE_META_KEY))
        .or_else(|| context.meta.get(MODE_META_KEY));
    let Some(value) = value else {
        return Ok(None);
    };
    let mode = match value.as_str() {
        Some("async") => CallMode::Async,
        Some("sync") => CallMode::Sync,
        Some("auto") => CallMode::Auto,
        _ => {
            return Err(ErrorData::invalid_params(
                format!(
                    "_meta[\"{MODE_META_KEY}\"] must be \"async\", \"sync\" or \"auto\", got {value}; \
                     leave it out to use the mode configured for the tool"
                ),
                None,
            ));
        }
    };
    Ok(Some(mode))
}

/// A tool configured `sync` is listed with its output schema (see [`list`]), and every SDK
/// validates a result against it: a job handle would be rejected ("structured content does
/// not match the tool's output schema"), and a handle without structured content too ("has an
/// output schema but did not return structured content"). So a per-call mode that may answer
/// with a handle is refused for such a tool, before any job starts, with what to do instead.
fn refuse_handle_for_output_schema(
    upstream: &Upstream,
    name: &str,
    tool: &str,
    configured: CallMode,
    requested: CallMode,
) -> Result<(), ErrorData> {
    let has_schema = upstream
        .tools()
        .iter()
        .any(|t| t.name == tool && t.output_schema.is_some());
    if configured != CallMode::Sync || requested == CallMode::Sync || !has_schema {
        return Ok(());
    }
    Err(ErrorData::invalid_params(
        format!(
            "tool {name} has an output schema and is configured mode = \"sync\", so it always \
             answers with its own result: _meta[\"{MODE_META_KEY}\"] = \"{requested}\" would \
             answer with a job handle, which does not match that schema. Leave \
             _meta[\"{MODE_META_KEY}\"] out (or set it to \"sync\"); to get job handles for this \
             tool, configure it with mode = \"async\" or \"auto\" (it is then listed without \
             its output schema)"
        ),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::job_tools::{WAIT_DEFAULT_SECS, WAIT_MAX_SECS};

    #[test]
    fn splits_at_the_first_separator() {
        assert_eq!(split("demo__slow_count"), Some(("demo", "slow_count")));
        assert_eq!(split("demo__a__b"), Some(("demo", "a__b")));
        assert_eq!(split("demo"), None);
        assert_eq!(split("__x"), None);
        assert_eq!(split("x__"), None);
    }

    /// The job tools' schemas, derived from their argument structs. They say what the
    /// hand-written ones said (descriptions, the job ID pattern, the timeout's bounds), plus,
    /// on purpose: the JSON Schema dialect (`$schema`, 2020-12, as rmcp writes for every
    /// tool), `additionalProperties: false` (unknown arguments were always refused), the
    /// timeout's `default` (20) and its number `format`.
    #[test]
    fn job_tool_schemas_are_derived_with_descriptions_and_bounds() {
        let job_id = serde_json::json!({
            "type": "string",
            "description": "The job_id from the job handle a tool call returned.",
            "pattern": "^[0-9a-f]{32}$"
        });
        let dialect = "https://json-schema.org/draft/2020-12/schema";
        let job_only = serde_json::json!({
            "$schema": dialect,
            "type": "object",
            "additionalProperties": false,
            "properties": { "job_id": job_id },
            "required": ["job_id"]
        });
        let wait = serde_json::json!({
            "$schema": dialect,
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "job_id": job_id,
                "timeout_seconds": {
                    "type": "number",
                    "format": "double",
                    "description": "How long to wait, 0 to 50 seconds (default 20).",
                    "minimum": 0,
                    "maximum": 50,
                    "default": 20
                }
            },
            "required": ["job_id"]
        });
        let tools = job_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [GET_JOB_STATUS, WAIT_FOR_JOB, CANCEL_JOB, ANSWER_JOB_INPUT]
        );
        for (tool, want) in tools.iter().zip([&job_only, &wait, &job_only]) {
            let got = serde_json::Value::Object((*tool.input_schema).clone());
            assert_eq!(&got, want, "{}", tool.name);
        }
        // The advertised bounds are the enforced ones.
        let timeout = &wait["properties"]["timeout_seconds"];
        assert_eq!(timeout["maximum"].as_f64(), Some(WAIT_MAX_SECS));
        assert_eq!(timeout["default"].as_f64(), Some(WAIT_DEFAULT_SECS));
    }
}
