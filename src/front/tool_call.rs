//! A `tools/call` of an upstream tool, up to the upstream: find the tool and its mode, take the
//! caller's quota place, make the job, decide who answers what the tool asks (`ask_router`),
//! send the call with a [`JobSink`], and hand the started call to `call_answer`.

// MCP logging is deprecated (SEP-2577) but servers still send it; the bridge relays it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use std::sync::Arc;

use futures::{FutureExt, future::BoxFuture};
#[allow(deprecated)]
use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResult, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequestParams, ElicitResult, ListRootsResult, ProgressNotificationParam,
    },
    service::RequestContext,
};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{
    ask_router::AskRouter,
    call_answer::{self, Answering, Response},
    caller::Caller,
    caller_retry, catalog,
    core::Core,
    handle::{attach_job_meta, draining_refusal, error_result},
    listeners,
    quota::QuotaPermit,
};
use crate::{
    config::CallMode,
    jobs::{Intake, JobSpec, JobsError, PendingJob, Work, WorkOutcome},
    model::{CorrelationId, FailureReason, JobFailure, Principal},
    upstream::{CallOutcome, CallSink, Upstream, UpstreamError},
};

/// Log messages buffered for a waiting caller's own request. A caller that cannot keep up
/// stops getting them there; the job channel still has every one.
const CALLER_LOGS_CAPACITY: usize = 256;

/// A waiting caller's share of a call's log messages: those at or above its level.
#[allow(deprecated)]
type CallerLogs = (LoggingLevel, mpsc::Sender<LoggingMessageNotificationParam>);

/// Feeds an upstream call's notifications into its job, and its log messages also to a
/// waiting caller that gets logs (see [`caller_log_level`]), at or above the caller's level:
/// the upstream connection is shared, so the level is applied here, per caller, and never
/// sent upstream. What the tool asks goes to the call's [`AskRouter`].
struct JobSink {
    intake: Arc<Intake>,
    principal: Principal,
    caller_logs: Option<CallerLogs>,
    asks: Arc<AskRouter>,
}

impl CallSink for JobSink {
    fn progress(&self, p: &ProgressNotificationParam) {
        self.intake.progress(p.progress, p.total, p.message.clone());
    }

    #[allow(deprecated)]
    fn log(&self, m: &LoggingMessageNotificationParam) {
        let level = serde_json::to_value(m.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "info".into());
        self.intake.log(level, m.logger.clone(), m.data.clone());
        if let Some((threshold, tx)) = &self.caller_logs
            && listeners::passes(m.level, *threshold)
        {
            // A caller that cannot keep up misses log lines on its request; the job has them.
            let _ = tx.try_send(m.clone());
        }
    }

    fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        self.asks.ask_question(request)
    }

    #[allow(deprecated)]
    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        self.asks.ask_sample(request)
    }

    #[allow(deprecated)]
    fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        self.asks.ask_roots()
    }

    fn principal(&self) -> Option<Principal> {
        Some(self.principal.clone())
    }

    fn reattach(&self, record: crate::model::Reattach) {
        self.intake.reattach(record);
    }

    fn stream_cursor(&self, event_id: &str) {
        self.intake.stream_cursor(event_id);
    }
}

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
        return Err(catalog::unknown_tool(&name));
    }
    let (upstream, tool) = match catalog::find_tool(&core.upstreams, &name) {
        Ok(found) => found,
        Err(answer) => return answer.map(Into::into),
    };
    let correlation_id = correlation_id(core, &context)?;
    let this = (upstream, name.as_str(), tool);
    let mode = catalog::call_mode(&request, &context, this, core.config.mode, task_2025)?;
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
    let sink = Arc::new(JobSink {
        intake: pending.intake(),
        principal: caller.identity.principal.clone(),
        caller_logs,
        asks,
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

pub(super) fn work_outcome(outcome: CallOutcome) -> WorkOutcome {
    match outcome {
        CallOutcome::Result(result) => WorkOutcome::Result(result),
        CallOutcome::RpcError(error) => WorkOutcome::RpcError(error),
        CallOutcome::Failed { reason, message } => {
            WorkOutcome::Failed(JobFailure { reason, message })
        }
    }
}

/// The answer to a `tools/call`. Parts of a call return `Err(answer)` when they end it early:
/// a tool error the agent can act on, or a protocol error.
type Answer = Result<CallToolResult, ErrorData>;

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
    sink: Arc<JobSink>,
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
