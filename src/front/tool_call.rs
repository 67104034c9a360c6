//! A `tools/call` of an upstream tool, up to the upstream: find the tool (`<upstream>__<tool>`)
//! and its mode, take the caller's quota place, make the job, decide who answers what the tool
//! asks (`ask_router`), send the call with a `RoutedSink`, and hand the started call to
//! `call_answer`.

// MCP logging is deprecated (SEP-2577) but servers still send it; the bridge relays it.
#[allow(deprecated)]
use rmcp::model::LoggingLevel;
use std::sync::Arc;

use futures::FutureExt;
use rmcp::{
    ErrorData, RoleServer,
    model::{CallToolRequestParams, CallToolResult},
    service::RequestContext,
};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{
    ask_router::{AskRouter, RoutedSink},
    call_answer::{self, Answering, Response},
    caller::Caller,
    caller_retry,
    core::Core,
    handle::{attach_job_meta, draining_refusal, error_result},
};
use crate::{
    config::CallMode,
    jobs::{Finished, JobSpec, JobsError, PendingJob, QuotaPermit, Work},
    model::{CorrelationId, FailureReason, JobFailure, meta::MODE_META_KEY},
    upstream::{CallOutcome, Upstream, UpstreamError, UpstreamState, Upstreams},
};

/// Log messages buffered for a waiting caller's own request. A caller that cannot keep up
/// stops getting them there; the job channel still has every one.
const CALLER_LOGS_CAPACITY: usize = 256;

/// A call on its way upstream: the request, the upstream and its own name of the tool, and the
/// mode it is answered in.
struct Call<'a> {
    request: CallToolRequestParams,
    upstream: &'a Upstream,
    tool: &'a str,
    mode: CallMode,
    /// A task-augmented call of the handshake revision with tasks (`params.task`): answered
    /// with a task whatever the mode (see `tasks_2025`).
    task_2025: bool,
}

/// Find the tool, take the caller's quota place, create the job, send the call upstream, and
/// answer as the call's mode says. `task_2025`: a task-augmented call (`tasks_2025`), which
/// starts like an `async` call and is answered with its task whatever the mode.
pub(super) async fn call_tool(
    core: &Core,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
    caller: Caller,
    task_2025: bool,
) -> Response {
    let name = request.name.to_string();
    // A tool the caller's policies do not allow is refused exactly like one that does not
    // exist.
    if !caller.identity.may_use_tool(&name) {
        return Err(unknown_tool(&name));
    }
    let (upstream, tool) = match find_tool(&core.upstreams, &name) {
        Ok(found) => found,
        Err(answer) => return answer.map(Into::into),
    };
    let correlation_id = correlation_id(core, &context)?;
    let this = (upstream, name.as_str(), tool);
    let mode = call_mode(&request, &context, this, core.config.mode, task_2025)?;
    // A retry, with the answers to the questions of a call in flight (`caller_retry`).
    if request.request_state.is_some() && !task_2025 {
        return caller_retry::next_round(core, request, mode, &context, &caller).await;
    }
    // Held by the job's work future: given back when the upstream call ends.
    let permit = match core.quota.try_start(&caller.identity.principal) {
        Ok(permit) => permit,
        Err(full) => return Ok(error_result(full.to_string()).into()),
    };
    let spec = JobSpec {
        tool: name.clone(),
        upstream: upstream.name().to_string(),
        upstream_tool: tool.to_string(),
        correlation_id,
        principal: caller.identity.principal.clone(),
    };
    let pending = match create_job(core, spec).await {
        Ok(pending) => pending,
        Err(answer) => return answer.map(Into::into),
    };
    let span = pending.span().clone();
    let call = Call {
        request,
        upstream,
        tool,
        mode,
        task_2025,
    };
    start_job(core, pending, permit, call, &context, caller)
        .instrument(span)
        .await
}

/// Send the call upstream and answer as `mode` says; in the job's span.
async fn start_job(
    core: &Core,
    pending: PendingJob,
    permit: QuotaPermit,
    call: Call<'_>,
    context: &RequestContext<RoleServer>,
    caller: Caller,
) -> Response {
    let Call {
        request,
        upstream,
        tool,
        mode,
        task_2025,
    } = call;
    // Who started what goes to the operator's log, never into the job's JSON (see
    // `model::Principal`).
    tracing::info!(principal = %caller.identity.principal, "job created");
    let waits = mode != CallMode::Async;
    // Only a caller that waits has a request to put log messages on.
    let (caller_logs, logs) = match caller_log_level(core, context, &caller) {
        Some(level) if waits => {
            let (tx, rx) = mpsc::channel(CALLER_LOGS_CAPACITY);
            (Some((level, tx)), Some(rx))
        }
        _ => (None, None),
    };
    let (asks, waiter) = AskRouter::for_call(core, &caller, &context.peer, waits, pending.id());
    let sink = Arc::new(RoutedSink {
        asks,
        intake: Some(pending.intake()),
        principal: Some(caller.identity.principal.clone()),
        caller_logs,
    });
    let name = request.name.to_string();
    let work = match send(upstream, tool, request.arguments, sink).await {
        Ok(work) => holding(work, permit),
        Err(failure) => return not_sent(core, pending, failure).await.map(Into::into),
    };
    let answering = Answering {
        name,
        mode,
        logs,
        // SEP-2663: a task only for a request that listed the extension.
        as_task: task_2025 || caller.wants_tasks,
        session: caller.session,
        waiter,
    };
    let limits = upstream.config().limits_for(tool);
    call_answer::run(core, pending, (work, limits), answering, context).await
}

/// `work` with `permit` held until its outcome is in: the caller's quota place is given back
/// when the upstream call ends, however it ends.
fn holding(work: Work, permit: QuotaPermit) -> Work {
    Work {
        outcome: work
            .outcome
            .map(move |outcome| {
                drop(permit);
                outcome
            })
            .boxed(),
        cancel: work.cancel,
    }
}

pub(super) fn work_outcome(outcome: CallOutcome) -> Finished {
    match outcome {
        CallOutcome::Result(result) => Finished::Result(result),
        CallOutcome::RpcError(error) => Finished::RpcError(error),
        CallOutcome::Failed { reason, message } => Finished::Failed(JobFailure { reason, message }),
    }
}

/// The answer to a `tools/call`. Parts of a call return `Err(answer)` when they end it early:
/// a tool error the agent can act on, or a protocol error.
type Answer = Result<CallToolResult, ErrorData>;

/// Separates the upstream name from the tool name in the names the agent sees.
pub const SEPARATOR: &str = "__";
/// Split `<upstream>__<tool>`. Upstream names cannot contain the separator, so the first one
/// is the split point and the tool part may contain anything.
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.split_once(SEPARATOR)
        .filter(|(u, t)| !u.is_empty() && !t.is_empty())
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

async fn create_job(core: &Core, spec: JobSpec) -> Result<PendingJob, Answer> {
    match core.jobs.create(spec).await {
        Ok(pending) => Ok(pending),
        // The agent can act on these (wait, retry elsewhere): tell it as a tool error.
        Err(e @ JobsError::AtCapacity(_)) => Err(Ok(error_result(e.to_string()))),
        Err(e @ JobsError::Draining) => Err(Ok(draining_refusal(e.to_string()))),
        Err(e) => {
            tracing::warn!(error = %e, "a call could not create its job");
            Err(Err(ErrorData::internal_error(
                format!("could not create a job: {}", e.public_message()),
                None,
            )))
        }
    }
}

/// Send the call upstream, its notifications going to `sink`.
async fn send(
    upstream: &Upstream,
    tool: &str,
    arguments: Option<rmcp::model::JsonObject>,
    sink: Arc<RoutedSink>,
) -> Result<Work, UpstreamError> {
    let (outcome, canceller) = upstream.call(tool, arguments, sink).await?.split();
    Ok(Work {
        outcome: outcome.map(work_outcome).boxed(),
        cancel: Box::new(move |reason| async move { canceller.cancel(&reason).await }.boxed()),
    })
}

/// The call never reached the upstream: the job ends failed, and the caller is told why, with
/// the job named so it can be looked up.
async fn not_sent(core: &Core, pending: PendingJob, error: UpstreamError) -> Answer {
    let id = pending.id();
    let message = error.to_string();
    pending
        .fail(JobFailure {
            reason: FailureReason::UpstreamUnavailable,
            message: message.clone(),
        })
        .await;
    let mut result = error_result(message);
    attach_job_meta(&mut result, &core.links, id);
    Ok(result)
}

/// The lowest level of log message the caller gets on its request: the request's own (the
/// `_meta` logLevel, the only opt-in of the session-less revision), else its session's
/// (`logging/setLevel`), else, for a session that set none, every message, as a direct
/// connection to the upstream would get them. None: no log messages on the request.
#[allow(deprecated)]
fn caller_log_level(
    core: &Core,
    context: &RequestContext<RoleServer>,
    caller: &Caller,
) -> Option<LoggingLevel> {
    if let Some(level) = context.meta.log_level() {
        return Some(level);
    }
    let session = caller.session.as_deref()?;
    Some(core.listeners.level(session).unwrap_or(LoggingLevel::Debug))
}

/// The correlation ID from the request's header, if any.
fn correlation_id(
    core: &Core,
    context: &RequestContext<RoleServer>,
) -> Result<Option<CorrelationId>, ErrorData> {
    let Some(parts) = context.extensions.get::<http::request::Parts>() else {
        return Ok(None);
    };
    let Some(value) = parts.headers.get(&core.correlation_header) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            ErrorData::invalid_request(
                format!(
                    "the {} header must be 1 to {} characters of letters, digits and . _ : -",
                    core.correlation_header,
                    CorrelationId::MAX_LEN
                ),
                None,
            )
        })
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
