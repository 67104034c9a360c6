//! A retried `tools/call` of a caller in rounds (SEP-2322): it carries the `requestState` of
//! an `input_required` answer (`call_answer`) and `inputResponses`. It starts no new job: its
//! answers go to the job's questions (the same checks as every answer path) or to its round
//! requests (samples, roots), then it waits for the same job as the first request would have:
//! its result, its next round, or (auto) the handle or task past the budget. The state is only
//! a handle: the job must be one the caller may see, and of the tool called. A retry's own
//! progress token gets no progress (the job's SSE channel has all of it).

use std::time::Duration;

use rmcp::{
    ErrorData, RoleServer,
    model::{CallToolRequestParams, CallToolResponse, InputResponses},
    service::RequestContext,
};

use super::{
    call_answer::{STATE_PREFIX, SYNC_LOOK, input_required, not_done_yet, questions_now},
    caller::Caller,
    core::Core,
    handle::{error_result, shown, store_error},
    round_requests::{self, AskError, is_ask_key},
    tasks::{answer_question, answer_refused, too_many_responses},
};
use crate::{
    config::CallMode,
    model::{JobId, JobSnapshot, JobStatus},
};

/// The answer path named in the job's `input_answered` events.
const BY: &str = "tools/call inputResponses";

/// A retried call (it carries `requestState`): answer the job's questions and round requests,
/// then wait for the job as `mode` says.
pub(super) async fn next_round(
    core: &Core,
    mut request: CallToolRequestParams,
    mode: CallMode,
    context: &RequestContext<RoleServer>,
    caller: &Caller,
) -> Result<CallToolResponse, ErrorData> {
    let responses = request.input_responses.take().unwrap_or_default();
    too_many_responses(core, &responses)?;
    let snapshot = job_of_state(core, &request, caller).await?;
    let id = snapshot.job_id;
    // Only this job's own samples and roots, of this caller's own job (checked above).
    let requests = core.round_requests.get(id);
    take_responses(core, &snapshot, requests.as_ref(), responses).await?;
    let budget = match mode {
        CallMode::Sync => None,
        CallMode::Auto => Some(Duration::from_millis(core.config.sync_budget_ms)),
        CallMode::Async => Some(Duration::ZERO),
    };
    let questions = caller.takes.questions;
    // This request waits on the job from now: the tool's samples and roots come to it.
    let mut seat = requests.map(|requests| requests.join(caller.takes));
    let turn = tokio::select! {
        turn = next_turn(core, id, budget, questions) => turn?,
        _ = round_requests::asked_of(&seat), if seat.is_some() => {
            let asked = if questions { questions_now(core, id).await } else { Vec::new() };
            let requests = round_requests::kept_requests(&mut seat);
            return Ok(input_required(core, id, &asked, requests));
        }
        _ = context.ct.cancelled() => {
            core.jobs.cancel_local(id, "the MCP client cancelled its request".into());
            return Ok(error_result("cancelled by the client").into());
        }
    };
    let snapshot = turn.unwrap_or(snapshot);
    Ok(match snapshot.status {
        status if status.is_terminal() => core.final_result(&snapshot).into(),
        JobStatus::InputRequired if questions && !snapshot.input_requests.is_empty() => {
            let requests = round_requests::kept_requests(&mut seat);
            input_required(core, id, &snapshot.input_requests, requests)
        }
        _ => not_done_yet(core, id, &snapshot.tool, caller.wants_tasks),
    })
}

/// The job the retry's `requestState` names, if the caller may see it and it runs the tool
/// called; otherwise the same "names no call of yours" for all.
async fn job_of_state(
    core: &Core,
    request: &CallToolRequestParams,
    caller: &Caller,
) -> Result<JobSnapshot, ErrorData> {
    let state = request.request_state.as_deref().unwrap_or_default();
    let unknown = || {
        ErrorData::invalid_params(
            format!(
                "requestState {:?} names no call of yours in flight here: call the tool again \
                 without requestState",
                shown(state)
            ),
            None,
        )
    };
    let id: JobId = state
        .strip_prefix(STATE_PREFIX)
        .and_then(|id| id.parse().ok())
        .ok_or_else(unknown)?;
    core.visible_job(id, &caller.identity)
        .await?
        .filter(|s| s.tool == request.name)
        .ok_or_else(unknown)
}

/// Each answer of the retry to where it belongs: a sample's or roots' to the job's round
/// requests (`requests`, here; a job another replica runs gets them through the store, checked
/// there, and its verdict is this retry's), a question's to the job's input desk.
async fn take_responses(
    core: &Core,
    snapshot: &JobSnapshot,
    requests: Option<&std::sync::Arc<round_requests::JobRoundRequests>>,
    responses: InputResponses,
) -> Result<(), ErrorData> {
    for (key, response) in responses {
        if is_ask_key(&key) {
            match requests {
                Some(requests) => {
                    requests.answer(&key, response)?;
                }
                None => {
                    let verdict = core
                        .jobs
                        .inputs()
                        .relay_caller_answer(snapshot, &key, response)
                        .await
                        .map_err(|e| answer_refused(&key, e))?;
                    if let Some(refused) = AskError::of_verdict(&key, verdict) {
                        return Err(refused.into());
                    }
                }
            }
            continue;
        }
        answer_question(core, snapshot.job_id, key, response, BY).await?;
    }
    Ok(())
}

/// The job's snapshot once it ends or (if the caller takes `questions`) asks, or once `budget`
/// (forever when `None`) has passed.
async fn next_turn(
    core: &Core,
    id: JobId,
    budget: Option<Duration>,
    questions: bool,
) -> Result<Option<JobSnapshot>, ErrorData> {
    let jobs = &core.jobs;
    loop {
        let within = budget.unwrap_or(SYNC_LOOK);
        let snapshot = if questions {
            jobs.next_turn(id, within).await
        } else {
            jobs.wait(id, within).await
        }
        .map_err(store_error)?;
        match &snapshot {
            Some(s) if budget.is_none() && questions && s.status == JobStatus::Running => {}
            Some(s) if budget.is_none() && !questions && !s.status.is_terminal() => {}
            _ => return Ok(snapshot),
        }
    }
}
