//! How an upstream `tools/call` ended ([`CallOutcome`]), and the upstream's final answer read
//! as one.

use rmcp::{
    ErrorData,
    model::{CallToolResult, ServerResult},
};

use crate::model::FailureReason;

/// How an upstream call ended.
#[derive(Debug)]
pub enum CallOutcome {
    /// The upstream's result; `is_error: Some(true)` is a tool error, still a result.
    Result(CallToolResult),
    /// The upstream answered with a JSON-RPC error.
    RpcError(ErrorData),
    /// No answer: the connection dropped, or the answer was not a tool result.
    Failed {
        reason: FailureReason,
        message: String,
    },
}

/// The upstream's final answer to a call (or to its task's `tasks/result`) as its outcome.
pub(super) fn tool_result(result: ServerResult, upstream: &str) -> CallOutcome {
    match result {
        ServerResult::CallToolResult(result) => CallOutcome::Result(result),
        // A server may answer a tool call with an empty object; that is an empty result.
        ServerResult::EmptyResult(_) => CallOutcome::Result(CallToolResult::default()),
        // Only an upstream task's result gets here with it (a plain call's rounds are driven
        // in `input_required`), and a task's result is final.
        ServerResult::InputRequiredResult(_) => CallOutcome::Failed {
            reason: FailureReason::Unsupported,
            message: format!(
                "upstream {upstream} answered its task's result with input_required, which the \
                 bridge does not answer there"
            ),
        },
        ServerResult::CreateTaskResult(_) => CallOutcome::Failed {
            reason: FailureReason::Unsupported,
            message: format!(
                "upstream {upstream} answered with a task, which the bridge did not ask for"
            ),
        },
        // `input_required` whose requests rmcp could not read (a method other than
        // elicitation, sampling and roots, or a malformed one).
        ServerResult::CustomResult(custom) if custom.0["resultType"] == "input_required" => {
            CallOutcome::Failed {
                reason: FailureReason::Unsupported,
                message: format!(
                    "upstream {upstream} answered with input_required carrying requests the \
                     bridge cannot read (it answers elicitation/create, sampling/createMessage \
                     and roots/list)"
                ),
            }
        }
        ServerResult::CustomResult(custom) => {
            match serde_json::from_value::<CallToolResult>(custom.0) {
                Ok(result) => CallOutcome::Result(result),
                Err(e) => CallOutcome::Failed {
                    reason: FailureReason::UpstreamError,
                    message: format!(
                        "upstream {upstream} answered with something that is not a tool result: {e}"
                    ),
                },
            }
        }
        _ => CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: format!(
                "upstream {upstream} answered with something that is not a tool result"
            ),
        },
    }
}
