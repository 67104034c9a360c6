//! The tool catalog the agent sees: every upstream tool as `<upstream>__<tool>`, plus the
//! bridge's own job tools.

use std::{borrow::Cow, sync::Arc};

use rmcp::model::{JsonObject, Tool};
use serde_json::json;

use crate::{auth::Identity, config::CallMode, upstream::Upstreams};

/// Separates the upstream name from the tool name in the names the agent sees.
pub const SEPARATOR: &str = "__";
/// MCP tool names are at most 128 characters.
const MAX_TOOL_NAME: usize = 128;

pub const GET_JOB_STATUS: &str = "get_job_status";
pub const WAIT_FOR_JOB: &str = "wait_for_job";
pub const CANCEL_JOB: &str = "cancel_job";

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

fn schema(value: serde_json::Value) -> Arc<JsonObject> {
    match value {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn job_id_property() -> serde_json::Value {
    json!({
        "type": "string",
        "description": "The job_id from the job handle a tool call returned.",
        "pattern": "^[0-9a-f]{32}$"
    })
}

pub fn job_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            GET_JOB_STATUS,
            "Get the current status of a job started by another tool: status (running, \
             completed, failed, cancelled), progress, total, the latest message, and the result \
             or error once it has ended. Returns at once.",
            schema(json!({
                "type": "object",
                "properties": { "job_id": job_id_property() },
                "required": ["job_id"]
            })),
        ),
        Tool::new(
            WAIT_FOR_JOB,
            "Wait for a job started by another tool to finish, up to timeout_seconds (default \
             20, at most 50). Returns the tool's result as if it had been called directly once \
             the job has ended; if it is still running, returns its progress and asks you to \
             call wait_for_job again.",
            schema(json!({
                "type": "object",
                "properties": {
                    "job_id": job_id_property(),
                    "timeout_seconds": {
                        "type": "number",
                        "description": "How long to wait, 0 to 50 seconds (default 20).",
                        "minimum": 0,
                        "maximum": 50
                    }
                },
                "required": ["job_id"]
            })),
        ),
        Tool::new(
            CANCEL_JOB,
            "Cancel a running job started by another tool. The tool server is told to stop; \
             the job ends as cancelled.",
            schema(json!({
                "type": "object",
                "properties": { "job_id": job_id_property() },
                "required": ["job_id"]
            })),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_first_separator() {
        assert_eq!(split("demo__slow_count"), Some(("demo", "slow_count")));
        assert_eq!(split("demo__a__b"), Some(("demo", "a__b")));
        assert_eq!(split("demo"), None);
        assert_eq!(split("__x"), None);
        assert_eq!(split("x__"), None);
    }
}
