//! A `tools/call` of an upstream tool: make it a job, start the upstream call, and answer
//! according to the tool's mode.

// MCP logging is deprecated (SEP-2577) but servers still send it; the bridge relays it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};
// Sampling and roots are deprecated by SEP-2577 but upstreams still send them; the bridge
// relays them to a waiting caller that has them.
#[allow(deprecated)]
use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequests,
        JsonObject, ListRootsResult, ProgressNotificationParam, ProgressToken,
    },
    service::{Peer, RequestContext},
};
use tokio::{sync::mpsc, time::Instant};
use tracing::Instrument;

use super::{
    Front, caller_asks, callers, catalog,
    handle::{JobHandleBody, attach_job_meta, error_result},
    quota::QuotaPermit,
    relay, rounds,
};
use crate::{
    auth::Identity,
    config::{CallLimits, CallMode},
    jobs::{Finished, Intake, JobHandle, JobSpec, Jobs, JobsError, PendingJob, Work, WorkOutcome},
    model::{
        CorrelationId, FailureReason, InputAction, JobFailure, JobId, ProgressUpdate,
        meta::MODE_META_KEY,
    },
    upstream::{CallOutcome, CallSink, Upstream, UpstreamError, UpstreamState, no_sampling},
    wait::sleep_until,
};

/// Progress updates buffered for a sync caller's own request stream. A caller that cannot
/// keep up stops getting them there; the job channel still has every one.
const MIRROR_CAPACITY: usize = 256;

/// A waiting caller's share of a call's log messages: those at or above its level.
#[allow(deprecated)]
type CallerLogs = (LoggingLevel, mpsc::Sender<LoggingMessageNotificationParam>);

/// Feeds an upstream call's notifications into its job, and its log messages also to a
/// waiting caller that gets logs (see `caller_log_level`), at or above the caller's level: the
/// upstream connection is shared, so the level is applied here, per caller, and never sent
/// upstream.
struct JobSink {
    intake: Arc<Intake>,
    caller_logs: Option<CallerLogs>,
    /// Where the tool's questions go: the waiting caller (see [`Forward`]), else the people
    /// watching the job.
    job: JobId,
    jobs: Jobs,
    forward: Forward,
    /// A waiting 2026-07-28 caller's share of the tool's samples and roots requests (see
    /// `caller_asks`), if it declared either.
    asks: Option<Arc<caller_asks::JobAsks>>,
}

/// The waiting MCP caller, while it waits, on a revision with sessions: the tool's questions
/// are sent to it as `elicitation/create` if it declared form elicitation (a 2026-07-28 caller
/// gets them in an `input_required` answer instead, see `rounds`), and the upstream's
/// `sampling/createMessage` and `roots/list` if it declared those. Emptied when the caller's
/// request is answered (its [`ForwardGuard`] drops); a question it does not take goes to the
/// job, a sample nobody takes is refused, and roots nobody gives are none.
#[derive(Clone, Default)]
struct Forward(Arc<parking_lot::Mutex<Option<Caller>>>);

/// A waiting caller's session, and what it declared it takes.
#[derive(Clone)]
struct Caller {
    peer: Peer<RoleServer>,
    questions: bool,
    sampling: bool,
    roots: bool,
}

impl Forward {
    /// The waiting caller, if it takes what `takes` says.
    fn caller(&self, takes: impl Fn(&Caller) -> bool) -> Option<Caller> {
        self.0.lock().clone().filter(|c| takes(c))
    }
}

/// Empties a [`Forward`] when the caller stops waiting, however it stops.
struct ForwardGuard(Forward);

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        self.0.0.lock().take();
    }
}

impl CallSink for JobSink {
    fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        let caller = self.forward.caller(|c| c.questions);
        let (jobs, job) = (self.jobs.clone(), self.job);
        async move {
            let size = serde_json::to_vec(&request).map_or(usize::MAX, |v| v.len());
            if !jobs.question_fits(job, size).await {
                return ElicitResult::new(ElicitationAction::Decline);
            }
            if let Some(caller) = caller {
                // Bounded as a person's answer is: a caller that never answers would hold the
                // question (and the tool) for ever, and nobody else could answer it.
                let asked = relay::elicit(&caller.peer, request.clone());
                match tokio::time::timeout(jobs.input_timeout(), asked).await {
                    Ok(Ok(answer)) => return answer,
                    Ok(Err(e)) => tracing::info!(%job, error = %e,
                        "the waiting caller did not take the question; the job asks instead"),
                    Err(_) => {
                        jobs.caller_left_question(job).await;
                        return ElicitResult::new(ElicitationAction::Decline);
                    }
                }
            }
            let ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } = request
            else {
                // URL elicitation: nothing a form on the job could answer.
                return ElicitResult::new(ElicitationAction::Decline);
            };
            let schema = serde_json::to_value(requested_schema).unwrap_or_default();
            let answer = jobs.ask(job, message, schema).await;
            let action = match answer.action {
                InputAction::Accept => ElicitationAction::Accept,
                InputAction::Decline => ElicitationAction::Decline,
                InputAction::Cancel => ElicitationAction::Cancel,
            };
            let mut result = ElicitResult::new(action);
            result.content = answer.content;
            result
        }
        .boxed()
    }

    #[allow(deprecated)]
    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let caller = self.forward.caller(|c| c.sampling);
        let asks = self.asks.clone();
        async move {
            let Some(caller) = caller else {
                return match asks {
                    Some(asks) => asks.sample(request).await,
                    None => Err(no_sampling()),
                };
            };
            relay::sample(&caller.peer, request).await
        }
        .boxed()
    }

    #[allow(deprecated)]
    fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        let caller = self.forward.caller(|c| c.roots);
        let asks = self.asks.clone();
        async move {
            let Some(caller) = caller else {
                return match asks {
                    Some(asks) => asks.roots().await,
                    None => ListRootsResult::default(),
                };
            };
            relay::roots(&caller.peer).await
        }
        .boxed()
    }

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
            && callers::passes(m.level, *threshold)
        {
            // A caller that cannot keep up misses log lines on its request; the job has them.
            let _ = tx.try_send(m.clone());
        }
    }
}

fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("unknown tool {name:?}: call tools/list for the tools this bridge offers"),
        None,
    )
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

/// A tool configured `sync` is listed with its output schema (see `catalog::list`), and every
/// SDK validates a result against it: a job handle would be rejected ("structured content does
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

fn work_outcome(outcome: CallOutcome) -> WorkOutcome {
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

/// The answer to a started call: a result, or (for a caller that listed the Tasks extension)
/// a task.
type Response = Result<CallToolResponse, ErrorData>;

impl Front {
    /// Find the tool, take the caller's quota place, create the job, send the call upstream,
    /// and answer as the call's mode says.
    pub(super) async fn call_upstream(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        identity: &Identity,
    ) -> Response {
        self.call_upstream_as(request, context, identity, false)
            .await
    }

    /// [`Self::call_upstream`]; `task_2025`: a 2025-11-25 task-augmented call (`params.task`),
    /// which starts like an `async` call and is answered with its task whatever the mode.
    pub(super) async fn call_upstream_as(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        identity: &Identity,
        task_2025: bool,
    ) -> Response {
        let name = request.name.to_string();
        // A tool the caller's policies do not allow is refused exactly like one that does
        // not exist.
        if !identity.may_use_tool(&name) {
            return Err(unknown_tool(&name));
        }
        let (upstream, tool) = match self.find_tool(&name) {
            Ok(found) => found,
            Err(answer) => return answer.map(Into::into),
        };
        let correlation_id = self.correlation_id(&context)?;
        let configured = upstream.config().mode_for(tool, self.inner.config.mode);
        let mode = match requested_mode(&request, &context)? {
            // A task's result is fetched with `tasks/result`, whole: the output schema holds.
            _ if task_2025 => CallMode::Async,
            Some(mode) => {
                refuse_handle_for_output_schema(upstream, &name, tool, configured, mode)?;
                mode
            }
            None => configured,
        };
        // A 2026-07-28 retry with the answers to the questions of a call in flight.
        if request.request_state.is_some() && !task_2025 {
            return self.next_round(request, mode, &context, identity).await;
        }
        // Held by the job's work future: given back when the upstream call ends.
        let permit = match self.inner.quota.try_start(&identity.principal) {
            Ok(permit) => permit,
            Err(full) => return Ok(error_result(full.to_string()).into()),
        };
        let spec = JobSpec {
            tool: name.clone(),
            upstream: upstream.name().to_string(),
            upstream_tool: tool.to_string(),
            correlation_id,
            principal: identity.principal.clone(),
        };
        let pending = match self.create_job(spec).await {
            Ok(pending) => pending,
            Err(answer) => return answer.map(Into::into),
        };
        let span = pending.span().clone();
        self.start_job(
            pending,
            permit,
            Call {
                request,
                upstream,
                tool,
                mode,
                task_2025,
            },
            &context,
            identity,
        )
        .instrument(span)
        .await
    }

    /// Send the call upstream and answer as `mode` says; in the job's span.
    async fn start_job(
        &self,
        pending: PendingJob,
        permit: QuotaPermit,
        call: Call<'_>,
        context: &RequestContext<RoleServer>,
        identity: &Identity,
    ) -> Response {
        let Call {
            request,
            upstream,
            tool,
            mode,
            task_2025,
        } = call;
        let name = request.name.to_string();
        // Who started what goes to the operator's log, never into the job's JSON (see
        // `model::Principal`).
        tracing::info!(principal = %identity.principal, "job created");
        // Only a caller that waits has a request to put log messages on.
        let (caller_logs, logs) = match self.caller_log_level(context) {
            Some(level) if mode != CallMode::Async => {
                let (tx, rx) = mpsc::channel(MIRROR_CAPACITY);
                (Some((level, tx)), Some(rx))
            }
            _ => (None, None),
        };
        // A caller that waits and takes form elicitation answers the tool's questions itself:
        // sent to it on its session, or at 2026-07-28 in an `input_required` answer (see
        // `rounds`).
        let forward = Forward::default();
        let waits = mode != CallMode::Async;
        let at_2026 = rounds::answers_in_rounds(context);
        let rounds = waits && at_2026 && relay::takes_questions(context);
        let takes = rounds::caller_takes(context);
        if waits && !at_2026 {
            let caller = Caller {
                peer: context.peer.clone(),
                questions: relay::takes_questions(context),
                sampling: takes.sampling,
                roots: takes.roots,
            };
            *forward.0.lock() = Some(caller);
        }
        // At 2026-07-28 a sample or the roots go back in the caller's `input_required` round.
        let asks = (waits && at_2026 && takes.any()).then(|| {
            let inner = &self.inner;
            inner
                .caller_asks
                .open(pending.id(), &inner.config, inner.metrics.clone())
                .join(takes)
        });
        let sink = Arc::new(JobSink {
            intake: pending.intake(),
            caller_logs,
            job: pending.id(),
            jobs: self.inner.jobs.clone(),
            forward: forward.clone(),
            asks: asks.as_ref().map(|a| a.asks().clone()),
        });
        let work = match self.send(upstream, tool, request.arguments, sink).await {
            Ok(work) => holding(work, permit),
            Err(failure) => return self.not_sent(pending, failure).await.map(Into::into),
        };
        let limits = upstream.config().limits_for(tool);
        // SEP-2663: a task only for a request that listed the extension.
        let as_task = task_2025
            || context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks());
        let answering = Answering {
            name,
            mode,
            logs,
            as_task,
            rounds,
            forward: ForwardGuard(forward),
            asks,
        };
        self.run(pending, work, limits, answering, context).await
    }

    /// Start the job and answer as `mode` says: at once with its handle (async), with its
    /// result (sync), or with whichever comes first of the result and the budget (auto). A
    /// caller that listed the Tasks extension gets a task where others get the handle.
    async fn run(
        &self,
        pending: PendingJob,
        work: Work,
        limits: CallLimits,
        answering: Answering,
        context: &RequestContext<RoleServer>,
    ) -> Response {
        let Answering {
            name,
            mode,
            logs,
            as_task,
            rounds,
            forward,
            asks,
        } = answering;
        let id = pending.id();
        let caller_token = context.meta.get_progress_token();
        let (mirror, progress) = match (&caller_token, mode) {
            (Some(_), CallMode::Sync | CallMode::Auto) => {
                let (tx, rx) = mpsc::channel(MIRROR_CAPACITY);
                (Some(tx), Some(rx))
            }
            _ => (None, None),
        };
        let handle = pending.start(work, limits, mirror);
        tracing::info!(%mode, "job started");
        let budget = match mode {
            CallMode::Async => return Ok(self.not_done_yet(id, &name, as_task)),
            CallMode::Sync => None,
            CallMode::Auto => Some(Duration::from_millis(self.inner.config.sync_budget_ms)),
        };
        let waiting = Waiting {
            handle,
            name,
            progress,
            logs,
            caller_token,
            budget,
            as_task,
            rounds,
            _forward: forward,
            asks,
        };
        self.answer_when_done(waiting, context).await
    }

    /// The answer to a call that goes on running: a task for a caller that listed the
    /// extension, the job handle for any other.
    pub(super) fn not_done_yet(&self, id: JobId, name: &str, as_task: bool) -> CallToolResponse {
        if as_task {
            return self.create_task_result(id).into();
        }
        let links = &self.inner.links;
        JobHandleBody::new(links, id, name)
            .into_result(links)
            .into()
    }

    /// The upstream and tool behind `<upstream>__<tool>`. A tool that is missing while its
    /// upstream is down gets a tool error saying so (the agent can try again), not "unknown".
    fn find_tool<'n>(&self, name: &'n str) -> Result<(&Upstream, &'n str), Answer> {
        let (upstream_name, tool) = catalog::split(name).ok_or_else(|| Err(unknown_tool(name)))?;
        let upstream = self
            .inner
            .upstreams
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

    async fn create_job(&self, spec: JobSpec) -> Result<PendingJob, Answer> {
        match self.inner.jobs.create(spec).await {
            Ok(pending) => Ok(pending),
            // The agent can act on these (wait, retry elsewhere): tell it as a tool error.
            Err(e @ (JobsError::AtCapacity(_) | JobsError::ShuttingDown)) => {
                Err(Ok(error_result(e.to_string())))
            }
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
        &self,
        upstream: &Upstream,
        tool: &str,
        arguments: Option<JsonObject>,
        sink: Arc<JobSink>,
    ) -> Result<Work, UpstreamError> {
        let (outcome, canceller) = upstream.call(tool, arguments, sink).await?.split();
        Ok(Work {
            outcome: outcome.map(work_outcome).boxed(),
            cancel: Box::new(move |reason| async move { canceller.cancel(&reason).await }.boxed()),
        })
    }

    /// The call never reached the upstream: the job ends failed, and the caller is told why,
    /// with the job named so it can be looked up.
    async fn not_sent(&self, pending: PendingJob, error: UpstreamError) -> Answer {
        let id = pending.id();
        let message = error.to_string();
        pending
            .fail(JobFailure {
                reason: FailureReason::UpstreamUnavailable,
                message: message.clone(),
            })
            .await;
        let mut result = error_result(message);
        attach_job_meta(&mut result, &self.inner.links, id);
        Ok(result)
    }

    /// The lowest level of log message the caller gets on its request: the request's own
    /// (2026-07-28 `_meta` logLevel, the only opt-in on that revision), else its session's
    /// (`logging/setLevel`), else, for a session that set none, every message, as a direct
    /// connection to the upstream would get them. None: no log messages on the request.
    #[allow(deprecated)]
    fn caller_log_level(&self, context: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        if let Some(level) = context.meta.log_level() {
            return Some(level);
        }
        let session = super::caller_session(context)?;
        Some(
            self.inner
                .callers
                .level(&session)
                .unwrap_or(LoggingLevel::Debug),
        )
    }

    /// The correlation ID from the request's header, if any.
    fn correlation_id(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<CorrelationId>, ErrorData> {
        let Some(parts) = context.extensions.get::<http::request::Parts>() else {
            return Ok(None);
        };
        let Some(value) = parts.headers.get(&self.inner.correlation_header) else {
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
                        self.inner.correlation_header,
                        CorrelationId::MAX_LEN
                    ),
                    None,
                )
            })
    }

    /// Wait for a sync (or auto) job, forwarding its progress on the caller's own request with
    /// the caller's token, and answer with its result; an auto job that outlasts its budget is
    /// answered with its handle instead and goes on running.
    async fn answer_when_done(
        &self,
        mut waiting: Waiting,
        context: &RequestContext<RoleServer>,
    ) -> Response {
        let links = &self.inner.links;
        let deadline = waiting.budget.map(|b| Instant::now() + b);
        // The caller's session, followed from now on if its `notifications/initialized` has
        // not been handled yet: its end is then told apart from the client's own cancel.
        let session = super::caller_session(context)
            .filter(|session| self.inner.callers.join(session, &context.peer));
        let asked = self.asked(waiting.handle.id);
        tokio::pin!(asked);
        loop {
            tokio::select! {
                biased;
                update = recv(&mut waiting.progress), if waiting.progress.is_some() => match update {
                    Some(update) => waiting.forward(context, update).await,
                    None => waiting.progress = None,
                },
                log = recv(&mut waiting.logs), if waiting.logs.is_some() => match log {
                    Some(log) => forward_log(context, log).await,
                    None => waiting.logs = None,
                },
                finished = waiting.handle.finished() => {
                    // Progress queued before the end still belongs before the answer.
                    while let Some(update) = waiting.progress.as_mut().and_then(|rx| rx.try_recv().ok()) {
                        waiting.forward(context, update).await;
                    }
                    while let Some(log) = waiting.logs.as_mut().and_then(|rx| rx.try_recv().ok()) {
                        forward_log(context, log).await;
                    }
                    return answer(&finished, links, waiting.handle.id).map(Into::into);
                }
                _ = context.ct.cancelled() => {
                    // The session ended (closed, idle): the request goes with it, the job
                    // does not. Only the client's own cancel (or shutdown) ends the job.
                    let session_ended = session
                        .as_deref()
                        .is_some_and(|session| !self.inner.callers.has_session(session));
                    if session_ended && !self.inner.jobs.is_closed() {
                        return Ok(error_result("the MCP session ended; the job goes on").into());
                    }
                    self.inner.jobs.cancel_local(waiting.handle.id, "the MCP client cancelled its request".into());
                    return Ok(error_result("cancelled by the client").into());
                }
                questions = &mut asked, if waiting.rounds => {
                    let requests = kept_requests(&mut waiting.asks);
                    return Ok(self.input_required(waiting.handle.id, &questions, requests));
                }
                _ = asked_of(&waiting.asks), if waiting.asks.is_some() => {
                    let id = waiting.handle.id;
                    let questions = if waiting.rounds { self.questions_now(id).await } else { Vec::new() };
                    let requests = kept_requests(&mut waiting.asks);
                    return Ok(self.input_required(id, &questions, requests));
                }
                _ = sleep_until(deadline), if deadline.is_some() => {
                    return Ok(self.not_done_yet(waiting.handle.id, &waiting.name, waiting.as_task));
                }
            }
        }
    }
}

/// A call on its way upstream: the request, the upstream and its own name of the tool, and the
/// mode it is answered in.
struct Call<'a> {
    request: CallToolRequestParams,
    upstream: &'a Upstream,
    tool: &'a str,
    mode: CallMode,
    /// A 2025-11-25 task-augmented call: answered with a task (see `tasks_2025`).
    task_2025: bool,
}

/// How a started call is to be answered: the tool's name as the agent called it, the mode,
/// and the caller's share of the call's log messages (if it gets any).
struct Answering {
    name: String,
    mode: CallMode,
    #[allow(deprecated)]
    logs: Option<mpsc::Receiver<LoggingMessageNotificationParam>>,
    /// The caller listed the Tasks extension: a call that goes on running becomes a task.
    as_task: bool,
    /// The caller answers the tool's questions in `input_required` rounds (2026-07-28).
    rounds: bool,
    forward: ForwardGuard,
    /// The caller answers the tool's samples and roots in `input_required` rounds.
    asks: Option<caller_asks::Attached>,
}

struct Waiting {
    handle: JobHandle,
    name: String,
    progress: Option<mpsc::Receiver<ProgressUpdate>>,
    #[allow(deprecated)]
    logs: Option<mpsc::Receiver<LoggingMessageNotificationParam>>,
    caller_token: Option<ProgressToken>,
    budget: Option<Duration>,
    as_task: bool,
    rounds: bool,
    /// The tool's questions go to this caller while it waits (dropped with the answer).
    _forward: ForwardGuard,
    /// Its samples and roots too, at 2026-07-28 (released with the answer, unless that is an
    /// `input_required` round, which the caller retries).
    asks: Option<caller_asks::Attached>,
}

impl Waiting {
    async fn forward(&self, context: &RequestContext<RoleServer>, update: ProgressUpdate) {
        let Some(token) = self.caller_token.clone() else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token, update.progress);
        param.total = update.total;
        param.message = update.message;
        if let Err(e) = context.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "progress did not reach the MCP client");
        }
    }
}

#[allow(deprecated)]
async fn forward_log(context: &RequestContext<RoleServer>, log: LoggingMessageNotificationParam) {
    if let Err(e) = context.peer.notify_logging_message(log).await {
        tracing::debug!(error = %e, "a log message did not reach the MCP client");
    }
}

/// What waits for the caller in rounds, once anything does.
pub(super) async fn asked_of(asks: &Option<caller_asks::Attached>) -> InputRequests {
    match asks {
        Some(attached) => attached.asks().asked().await,
        None => std::future::pending().await,
    }
}

/// What waits for the caller now, for the `input_required` round it is answered with: it
/// stays in rounds until its retry.
pub(super) fn kept_requests(asks: &mut Option<caller_asks::Attached>) -> InputRequests {
    match asks {
        Some(attached) => {
            attached.keep();
            attached.asks().requests()
        }
        None => InputRequests::new(),
    }
}

async fn recv<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The answer to a finished job, as a direct call of the upstream would have given it, with
/// the job named in `_meta`. A JSON-RPC error from the upstream is passed on unchanged.
pub(super) fn answer(
    finished: &Finished,
    links: &super::Links,
    id: JobId,
) -> Result<CallToolResult, ErrorData> {
    let mut result = match finished {
        Finished::Result(result) => result.clone(),
        Finished::RpcError(error) => return Err(error.clone()),
        Finished::Failed(failure) => error_result(failure.message.clone()),
        Finished::Cancelled(reason) => error_result(format!("the job was cancelled: {reason}")),
    };
    attach_job_meta(&mut result, links, id);
    Ok(result)
}
