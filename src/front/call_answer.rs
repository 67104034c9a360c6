//! How a started `tools/call` is answered, by its mode: at once with the job handle (or a task,
//! for a caller that listed the Tasks extension), with its result once done (its progress and
//! log lines forwarded on the caller's own request meanwhile), or, for a caller in rounds,
//! with an `input_required` round when the tool asks it something.

use std::time::Duration;

// MCP logging is deprecated (SEP-2577) but servers still send it; the bridge relays it.
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolResponse, CallToolResult, InputRequests, InputRequiredResult, MetaObject,
        ProgressNotificationParam, ProgressToken,
    },
    service::RequestContext,
};
use tokio::{sync::mpsc, time::Instant};

use super::{
    ask_router::Waiter,
    core::Core,
    handle::{JobHandleBody, Links, attach_job_meta, error_result},
    round_requests,
    tasks::{self, input_requests},
};
use crate::{
    config::{CallLimits, CallMode},
    jobs::{DrainEnd, Finished, JobHandle, PendingJob, Work},
    model::{InputQuestion, JobId, JobStatus, ProgressUpdate, meta::JOB_META_KEY},
    wait::sleep_until,
};

/// Progress updates buffered for a sync caller's own request stream. A caller that cannot
/// keep up stops getting them there; the job channel still has every one.
const MIRROR_CAPACITY: usize = 256;

/// How `requestState` names a job (so a state from some other server is not mistaken for a
/// job ID).
pub(super) const STATE_PREFIX: &str = "mcp-progress-bridge/job:";

/// The longest single wait on a job before it looks again (a sync caller waits on until the
/// job ends or asks).
pub(super) const SYNC_LOOK: Duration = Duration::from_secs(3600);

/// The answer to a started call: a result, or (for a caller that listed the Tasks extension)
/// a task.
pub(super) type Response = Result<CallToolResponse, ErrorData>;

/// How a started call is to be answered: the tool's name as the agent called it, the mode,
/// the caller's share of the call's log messages (if it gets any), and its end of the route of
/// what the tool asks.
pub(super) struct Answering {
    pub name: String,
    pub mode: CallMode,
    #[allow(deprecated)]
    pub logs: Option<mpsc::Receiver<LoggingMessageNotificationParam>>,
    /// The caller listed the Tasks extension: a call that goes on running becomes a task.
    pub as_task: bool,
    /// The caller's MCP session, if it has one.
    pub session: Option<String>,
    pub waiter: Waiter,
}

/// Start the job and answer as its mode says: at once with its handle (async), with its result
/// (sync), or with whichever comes first of the result and the budget (auto).
pub(super) async fn run(
    core: &Core,
    pending: PendingJob,
    (work, limits): (Work, CallLimits),
    answering: Answering,
    context: &RequestContext<RoleServer>,
) -> Response {
    let id = pending.id();
    let caller_token = context.meta.get_progress_token();
    let (mirror, progress) = match (&caller_token, answering.mode) {
        (Some(_), CallMode::Sync | CallMode::Auto) => {
            let (tx, rx) = mpsc::channel(MIRROR_CAPACITY);
            (Some(tx), Some(rx))
        }
        _ => (None, None),
    };
    let handle = pending.start(work, limits, mirror);
    tracing::info!(mode = %answering.mode, "job started");
    let budget = match answering.mode {
        CallMode::Async => return Ok(not_done_yet(core, id, &answering.name, answering.as_task)),
        CallMode::Sync => None,
        CallMode::Auto => Some(Duration::from_millis(core.config.sync_budget_ms)),
    };
    let waiting = Waiting {
        handle,
        progress,
        caller_token,
        budget,
        answering,
    };
    answer_when_done(core, waiting, context).await
}

/// The answer to a call that goes on running: a task for a caller that listed the extension,
/// the job handle for any other.
pub(super) fn not_done_yet(core: &Core, id: JobId, name: &str, as_task: bool) -> CallToolResponse {
    if as_task {
        return tasks::create_task_result(core, id).into();
    }
    let links = &core.links;
    JobHandleBody::new(links, id, name)
        .into_result(links)
        .into()
}

struct Waiting {
    handle: JobHandle,
    progress: Option<mpsc::Receiver<ProgressUpdate>>,
    caller_token: Option<ProgressToken>,
    budget: Option<Duration>,
    answering: Answering,
}

/// Wait for a sync (or auto) job, forwarding its progress on the caller's own request with the
/// caller's token, and answer with its result; an auto job that outlasts its budget is
/// answered with its handle instead and goes on running.
async fn answer_when_done(
    core: &Core,
    mut waiting: Waiting,
    context: &RequestContext<RoleServer>,
) -> Response {
    let id = waiting.handle.id;
    let deadline = waiting.budget.map(|b| Instant::now() + b);
    // The caller's session, followed from now on if its `notifications/initialized` has not
    // been handled yet: its end is then told apart from the client's own cancel.
    let session = (waiting.answering.session.take())
        .filter(|session| core.listeners.join(session, &context.peer));
    let in_rounds = waiting.answering.waiter.questions_in_rounds;
    let asked = asked(core, id);
    tokio::pin!(asked);
    loop {
        tokio::select! {
            biased;
            update = recv(&mut waiting.progress), if waiting.progress.is_some() => match update {
                Some(update) => forward_progress(context, &waiting.caller_token, update).await,
                None => waiting.progress = None,
            },
            log = recv(&mut waiting.answering.logs), if waiting.answering.logs.is_some() => match log {
                Some(log) => forward_log(context, log).await,
                None => waiting.answering.logs = None,
            },
            finished = waiting.handle.finished() => {
                forward_queued(context, &mut waiting).await;
                if finished.taken_over() {
                    // It goes on on another replica (this one drains): its handle, not an error.
                    let Answering { name, as_task, .. } = &waiting.answering;
                    return Ok(not_done_yet(core, id, name, *as_task));
                }
                return answer(&finished, &core.links, id, &waiting.answering.name)
                    .map(Into::into);
            }
            _ = context.ct.cancelled() => return request_cancelled(core, id, session.as_deref()),
            questions = &mut asked, if in_rounds => {
                let requests = round_requests::kept_requests(&mut waiting.answering.waiter.seat);
                return Ok(input_required(core, id, &questions, requests));
            }
            _ = round_requests::asked_of(&waiting.answering.waiter.seat), if waiting.answering.waiter.seat.is_some() => {
                let questions = if in_rounds { questions_now(core, id).await } else { Vec::new() };
                let requests = round_requests::kept_requests(&mut waiting.answering.waiter.seat);
                return Ok(input_required(core, id, &questions, requests));
            }
            _ = sleep_until(deadline), if deadline.is_some() => {
                let Answering { name, as_task, .. } = &waiting.answering;
                return Ok(not_done_yet(core, id, name, *as_task));
            }
        }
    }
}

/// The caller's request is cancelled. The session ended (closed, idle; during a drain too):
/// the request goes with it, the job does not. Only the client's own cancel ends the job.
fn request_cancelled(core: &Core, id: JobId, session: Option<&str>) -> Response {
    if session.is_some_and(|session| !core.listeners.has_session(session)) {
        return Ok(error_result("the MCP session ended; the job goes on").into());
    }
    core.jobs
        .cancel_local(id, "the MCP client cancelled its request".into());
    Ok(error_result("cancelled by the client").into())
}

/// Progress and log lines queued before the job's end: they still belong before the answer.
async fn forward_queued(context: &RequestContext<RoleServer>, waiting: &mut Waiting) {
    while let Some(update) = waiting.progress.as_mut().and_then(|rx| rx.try_recv().ok()) {
        forward_progress(context, &waiting.caller_token, update).await;
    }
    while let Some(log) = waiting
        .answering
        .logs
        .as_mut()
        .and_then(|rx| rx.try_recv().ok())
    {
        forward_log(context, log).await;
    }
}

async fn forward_progress(
    context: &RequestContext<RoleServer>,
    token: &Option<ProgressToken>,
    update: ProgressUpdate,
) {
    let Some(token) = token.clone() else {
        return;
    };
    let mut param = ProgressNotificationParam::new(token, update.progress);
    param.total = update.total;
    param.message = update.message;
    if let Err(e) = context.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "progress did not reach the MCP client");
    }
}

#[allow(deprecated)]
async fn forward_log(context: &RequestContext<RoleServer>, log: LoggingMessageNotificationParam) {
    if let Err(e) = context.peer.notify_logging_message(log).await {
        tracing::debug!(error = %e, "a log message did not reach the MCP client");
    }
}

async fn recv<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The answer to a finished job, as a direct call of the upstream would have given it, with
/// the job named in `_meta`. A JSON-RPC error from the upstream is passed on unchanged. A job
/// this replica cancelled as it shut down is answered with its handle, which says so.
fn answer(
    finished: &Finished,
    links: &Links,
    id: JobId,
    tool: &str,
) -> Result<CallToolResult, ErrorData> {
    let mut result = match finished {
        Finished::Result(result) => result.clone(),
        Finished::RpcError(error) => return Err(error.clone()),
        Finished::Failed(failure) => error_result(failure.message.clone()),
        Finished::Cancelled(reason) if DrainEnd::cancelled_by_drain(reason) => {
            return Ok(
                JobHandleBody::cancelled_by_drain(links, id, tool, reason).into_result(links)
            );
        }
        Finished::Cancelled(reason) => error_result(format!("the job was cancelled: {reason}")),
    };
    attach_job_meta(&mut result, links, id);
    Ok(result)
}

/// The `input_required` answer (SEP-2322) to a call whose job waits for `questions`, and for
/// the caller's answers to `asks` (samples and roots, see `round_requests`); its
/// `requestState` names the job, for the retry (`caller_retry`).
pub(super) fn input_required(
    core: &Core,
    id: JobId,
    questions: &[InputQuestion],
    asks: InputRequests,
) -> CallToolResponse {
    let links = &core.links;
    let mut meta = MetaObject::new();
    meta.insert(
        JOB_META_KEY.to_string(),
        serde_json::json!({
            "job_id": id,
            "events_url": links.events_url(id),
            "input_url": links.input_url(id),
        }),
    );
    let mut requests = input_requests(questions);
    requests.extend(asks);
    InputRequiredResult::new(Some(requests), Some(format!("{STATE_PREFIX}{id}")))
        .with_meta(meta)
        .into()
}

/// The questions job `id` waits for now (none if it waits for none).
pub(super) async fn questions_now(core: &Core, id: JobId) -> Vec<InputQuestion> {
    match core.jobs.snapshot(id).await {
        Ok(Some(s)) if s.status == JobStatus::InputRequired => s.input_requests,
        _ => Vec::new(),
    }
}

/// The questions of job `id` once it asks any (never returns while it asks none): for a
/// waiting caller that answers them itself.
async fn asked(core: &Core, id: JobId) -> Vec<InputQuestion> {
    loop {
        match core.jobs.next_turn(id, SYNC_LOOK).await {
            Ok(Some(s)) if s.status == JobStatus::InputRequired && !s.input_requests.is_empty() => {
                return s.input_requests;
            }
            Ok(Some(s)) if s.status == JobStatus::Running => {}
            // Ended (the caller hears it from the job's handle), gone, or unreadable.
            Ok(_) | Err(_) => std::future::pending().await,
        }
    }
}
