//! The tool catalog the agent sees: every upstream tool as `<upstream>__<tool>`, plus the
//! bridge's own job tools (a call finds its tool in `tool_call`).

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    handler::server::common::schema_for_input,
    model::{JsonObject, Tool},
};
use schemars::JsonSchema;

use super::job_tools::{
    ANSWER_JOB_INPUT, AnswerArgs, CANCEL_JOB, GET_JOB_STATUS, JobArgs, WAIT_FOR_JOB, WaitArgs,
};
use super::tool_call::SEPARATOR;
use crate::{auth::Identity, config::CallMode, upstream::Upstreams};

/// MCP tool names are at most 128 characters.
const MAX_TOOL_NAME: usize = 128;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::job_tools::{WAIT_DEFAULT_SECS, WAIT_MAX_SECS};

    /// The job tools' schemas, derived from their argument structs: descriptions, the job ID
    /// pattern, the timeout's bounds and default, the JSON Schema dialect rmcp writes, and
    /// `additionalProperties: false` (unknown arguments are refused).
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
