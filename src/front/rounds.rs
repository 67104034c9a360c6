//! A tool's questions answered by a waiting 2026-07-28 caller: multi round-trip requests
//! (SEP-2322).
//!
//! At 2026-07-28 a server cannot send a request in the middle of a call (there is no session
//! to send it on): it answers the `tools/call` with an `input_required` result carrying the
//! questions, and the client retries the same call with `inputResponses` and the
//! `requestState` it was given. The bridge's upstream call goes on meanwhile, its question
//! waiting on the job's input desk (`jobs::input`). So the first answer is
//! `input_required` with `requestState` naming the job, and a retry does not start a new job:
//! it answers the job's questions from its `inputResponses` (the same checks as every other
//! answer path) and waits for the same job, in the call's mode, as the first request would
//! have: until its result, its next question, or (auto) the budget, after which it gets the
//! job handle or the task. The state is only a handle: the job must be one the caller may see
//! (another principal's job is "unknown"), and of the tool called.
//!
//! A retry's own progress token gets no progress (the job's SSE channel has all of it).
//!
//! The upstream's `sampling/createMessage` and `roots/list` of a caller that declared them go
//! in the same rounds, next to the questions (see `caller_asks`; they wait in this replica
//! only, for this caller only). A caller that declared no elicitation gets no questions in
//! its rounds: those wait on the job for a person, as for any other caller.

use std::time::Duration;

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, InputRequests, InputRequiredResult, MetaObject,
    },
    service::RequestContext,
};

use super::{
    Front,
    call::{asked_of, kept_requests},
    caller_asks::{AskError, Takes, is_ask_key},
    job_tools::store_error,
    relay::takes_questions as caller_takes_questions,
    tasks::{answer_refused, input_requests, shown, too_many_responses},
};
use crate::{
    auth::Identity,
    config::CallMode,
    jobs::InputError,
    model::{InputAnswer, InputQuestion, JobId, JobSnapshot, JobStatus, meta::JOB_META_KEY},
};

/// How `requestState` names a job (so a state from some other server is not mistaken for a
/// job ID).
const STATE_PREFIX: &str = "mcp-progress-bridge/job:";

/// The longest single wait of a sync retry before it looks again (it waits on, like a sync
/// call, until the job ends or asks).
const SYNC_LOOK: Duration = Duration::from_secs(3600);

/// The answer path named in the job's `input_answered` events.
const BY: &str = "tools/call inputResponses";

/// Whether the caller of this request is on 2026-07-28 or later, where questions go back in
/// an `input_required` result instead of a request of their own.
pub(super) fn answers_in_rounds(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
}

/// What the caller of this request declared it takes of an upstream's samples and roots
/// requests (its session's capabilities, or at 2026-07-28 its request's `_meta`).
#[allow(deprecated)]
pub(super) fn caller_takes(context: &RequestContext<RoleServer>) -> Takes {
    let capabilities = context.client_capabilities().unwrap_or_default();
    Takes {
        sampling: capabilities.sampling.is_some(),
        roots: capabilities.roots.is_some(),
    }
}

impl Front {
    /// The `input_required` answer to a call whose job waits for `questions`, and for the
    /// caller's answers to `asks` (samples and roots, see `caller_asks`).
    pub(super) fn input_required(
        &self,
        id: JobId,
        questions: &[InputQuestion],
        asks: InputRequests,
    ) -> CallToolResponse {
        let links = &self.inner.links;
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

    /// A retried call (it carries `requestState`): answer the job's questions, then wait for
    /// the job as `mode` says.
    pub(super) async fn next_round(
        &self,
        mut request: CallToolRequestParams,
        mode: CallMode,
        context: &RequestContext<RoleServer>,
        identity: &Identity,
    ) -> Result<CallToolResponse, ErrorData> {
        let responses = request.input_responses.take().unwrap_or_default();
        too_many_responses(self, &responses)?;
        let state = request.request_state.as_deref().unwrap_or_default();
        let unknown = || {
            ErrorData::invalid_params(
                format!(
                    "requestState {:?} names no call of yours in flight here: call the tool \
                     again without requestState",
                    shown(state)
                ),
                None,
            )
        };
        let id: JobId = state
            .strip_prefix(STATE_PREFIX)
            .and_then(|id| id.parse().ok())
            .ok_or_else(unknown)?;
        let snapshot = self
            .visible_job(id, identity)
            .await?
            .filter(|s| s.tool == request.name)
            .ok_or_else(unknown)?;
        // Only this job's own samples and roots, of this caller's own job (checked above).
        // They wait where the call runs: a job another replica runs gets them through the
        // store, checked there, and its verdict is this retry's.
        let asks = self.inner.caller_asks.get(id);
        for (key, response) in responses {
            if is_ask_key(&key) {
                match &asks {
                    Some(asks) => {
                        asks.answer(&key, response)?;
                    }
                    None => {
                        let verdict = self
                            .inner
                            .jobs
                            .relay_caller_answer(&snapshot, &key, response)
                            .await
                            .map_err(|e| answer_refused(&key, e))?;
                        if let Some(refused) = AskError::of_verdict(&key, verdict) {
                            return Err(refused.into());
                        }
                    }
                }
                continue;
            }
            let mut answer: InputAnswer = serde_json::from_value(response).map_err(|e| {
                ErrorData::invalid_params(
                    format!(
                        "inputResponses[{:?}] is not an elicitation result: {e}",
                        shown(&key)
                    ),
                    None,
                )
            })?;
            answer.key = Some(key.clone());
            match self.inner.jobs.answer(id, answer, BY).await {
                // Timed out or answered elsewhere meanwhile: the job has gone on.
                Ok(()) | Err(InputError::NothingToAnswer | InputError::UnknownJob) => {}
                Err(e) => return Err(answer_refused(&key, e)),
            }
        }
        let as_task = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let budget = match mode {
            CallMode::Sync => None,
            CallMode::Auto => Some(Duration::from_millis(self.inner.config.sync_budget_ms)),
            CallMode::Async => Some(Duration::ZERO),
        };
        let questions = caller_takes_questions(context);
        // This request waits on the job from now: the tool's samples and roots come to it.
        let mut attached = asks.map(|asks| asks.join(caller_takes(context)));
        let turn = tokio::select! {
            turn = self.next_turn(id, budget, questions) => turn?,
            _ = asked_of(&attached), if attached.is_some() => {
                let asked = if questions { self.questions_now(id).await } else { Vec::new() };
                let requests = kept_requests(&mut attached);
                return Ok(self.input_required(id, &asked, requests));
            }
            _ = context.ct.cancelled() => {
                self.inner.jobs.cancel_local(id, "the MCP client cancelled its request".into());
                return Ok(super::handle::error_result("cancelled by the client").into());
            }
        };
        let snapshot = turn.unwrap_or(snapshot);
        Ok(match snapshot.status {
            status if status.is_terminal() => self.final_result(&snapshot).into(),
            JobStatus::InputRequired if questions && !snapshot.input_requests.is_empty() => {
                let requests = kept_requests(&mut attached);
                self.input_required(id, &snapshot.input_requests, requests)
            }
            _ => self.not_done_yet(id, &snapshot.tool, as_task),
        })
    }

    /// The job's snapshot once it ends or (if the caller takes `questions`) asks, or once
    /// `budget` (forever when `None`) has passed.
    async fn next_turn(
        &self,
        id: JobId,
        budget: Option<Duration>,
        questions: bool,
    ) -> Result<Option<JobSnapshot>, ErrorData> {
        let jobs = &self.inner.jobs;
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

    /// The questions job `id` waits for now (none if it waits for none).
    pub(super) async fn questions_now(&self, id: JobId) -> Vec<InputQuestion> {
        match self.inner.jobs.snapshot(id).await {
            Ok(Some(s)) if s.status == JobStatus::InputRequired => s.input_requests,
            _ => Vec::new(),
        }
    }

    /// The questions of job `id` once it asks any (never returns while it asks none): for a
    /// waiting caller that answers them itself.
    pub(super) async fn asked(&self, id: JobId) -> Vec<InputQuestion> {
        loop {
            match self.inner.jobs.next_turn(id, SYNC_LOOK).await {
                Ok(Some(s))
                    if s.status == JobStatus::InputRequired && !s.input_requests.is_empty() =>
                {
                    return s.input_requests;
                }
                Ok(Some(s)) if s.status == JobStatus::Running => {}
                // Ended (the caller hears it from the job's handle), gone, or unreadable.
                Ok(_) | Err(_) => std::future::pending().await,
            }
        }
    }
}
