//! The MCP Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) over the bridge's jobs.
//!
//! A task is a job: its task ID is the job ID (shown only to the principal that started it,
//! `auth::may_access`), `tasks/get` is the job's snapshot in the extension's terms,
//! `tasks/cancel` is the job's cancel. Nothing is kept per task beyond the job.
//!
//! A task's result is exactly what the call would have answered: a result (a tool error and
//! the bridge's own failures included) is `completed`; an upstream JSON-RPC error is `failed`
//! with that error; a cancelled job is `cancelled`. Progress is on the job's SSE channel (its
//! `events_url` is in the task's `_meta`).

use rmcp::{
    ErrorData,
    model::{
        CallToolResult, CreateTaskResult, DetailedTask, ElicitRequest, ElicitRequestParams,
        InputRequest, InputRequests, InputResponses, JsonObject, ResultType, Task, TaskPayload,
        TaskStatus,
    },
};
use serde_json::{Value, json};

use super::{
    core::Core,
    handle::{shown, store_error},
};
use crate::{
    auth::Identity,
    jobs::InputError,
    model::{
        CancelAck, InputAnswer, InputQuestion, JobId, JobSnapshot, JobStatus, iso8601,
        meta::JOB_META_KEY, now_ms,
    },
};

/// The reason a job cancelled through `tasks/cancel` gives.
const CANCEL_REASON: &str = "cancelled by the MCP client (tasks/cancel)";

/// `inputResponses` with more answers than `jobs.max_input_responses` allows: refused whole
/// (-32602 naming the key) before any of them is read, so a request cannot make the bridge
/// look up (or, with several replicas, relay) thousands of answers.
pub(super) fn too_many_responses(core: &Core, responses: &InputResponses) -> Result<(), ErrorData> {
    let limit = core.config.max_input_responses;
    if responses.len() <= limit {
        return Ok(());
    }
    core.metrics
        .limit_hits
        .with_label_values(&["max_input_responses"])
        .inc();
    Err(ErrorData::invalid_params(
        format!(
            "inputResponses holds {} answers, more than jobs.max_input_responses ({limit}): \
             answer only the keys inputRequests asked for; nothing was taken",
            responses.len()
        ),
        None,
    ))
}

/// An answer in `inputResponses` that was not taken. A relayed answer the running replica did
/// not confirm, or could not be handed to it, is the bridge's failure, not the caller's params
/// (-32603; the message says what to do); everything else (a mismatch, too large) is -32602.
pub(super) fn answer_refused(key: &str, error: InputError) -> ErrorData {
    let message = format!("inputResponses[{:?}]: {error}", shown(key));
    match error {
        InputError::Unconfirmed { .. } | InputError::Unreachable(_) => {
            ErrorData::internal_error(message, None)
        }
        _ => ErrorData::invalid_params(message, None),
    }
}

/// `response` (an `ElicitResult`) as the answer to job `id`'s question `key`, given by `by`.
/// A question answered elsewhere or timed out meanwhile, or a job that ended, is no error: the
/// job has gone on.
pub(super) async fn answer_question(
    core: &Core,
    id: JobId,
    key: String,
    response: Value,
    by: &str,
) -> Result<(), ErrorData> {
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
    match core.jobs.inputs().answer(id, answer, by).await {
        Ok(()) | Err(InputError::NothingToAnswer | InputError::UnknownJob) => Ok(()),
        Err(e) => Err(answer_refused(&key, e)),
    }
}

/// Unknown, malformed, expired and other callers' task IDs all get this (-32602, as the
/// extension says), so a task's existence does not show to whoever may not see it.
fn unknown_task(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task {:?}: it never existed here, it expired, or it is not yours; a task \
             ID is the taskId a tools/call answered with",
            shown(task_id)
        ),
        None,
    )
}

/// The answer to a `tools/call` that becomes a task: the seed state of job `id`.
pub(super) fn create_task_result(core: &Core, id: JobId) -> CreateTaskResult {
    let now = now_ms();
    let task = Task::new(
        id.to_string(),
        TaskStatus::Working,
        iso8601(now),
        iso8601(now),
    );
    let mut meta = rmcp::model::MetaObject::new();
    meta.insert(JOB_META_KEY.to_string(), task_links(core, id));
    CreateTaskResult::new(with_timing(core, task, now, None)).with_meta(meta)
}

/// `tasks/get`: the job as a task, with its result or error once it has ended.
pub(super) async fn read_task(
    core: &Core,
    task_id: &str,
    identity: &Identity,
) -> Result<DetailedTask, ErrorData> {
    let snapshot = task_job(core, task_id, identity).await?;
    Ok(detailed(core, &snapshot))
}

/// `tasks/cancel`: cancel the job wherever it runs. Acknowledged at once; a task that has
/// already ended stays as it ended (cancellation is cooperative in the extension).
pub(super) async fn cancel_task_job(
    core: &Core,
    task_id: &str,
    identity: &Identity,
) -> Result<(), ErrorData> {
    let snapshot = task_job(core, task_id, identity).await?;
    let ack = core
        .jobs
        .cancel(snapshot.job_id, CANCEL_REASON.into())
        .await
        .map_err(store_error)?;
    match ack {
        CancelAck::Unknown => Err(unknown_task(task_id)),
        CancelAck::AlreadyTerminal(_) | CancelAck::Requested(_) => Ok(()),
    }
}

/// `tasks/update`: each response answers the job's question of that key (an
/// `ElicitResult`: `action`, and `content` for accept). Unknown or already answered keys
/// are ignored, as the extension says; an answer that does not fit its question's schema
/// is refused naming the field.
pub(super) async fn update_task_job(
    core: &Core,
    task_id: &str,
    responses: InputResponses,
    identity: &Identity,
) -> Result<(), ErrorData> {
    too_many_responses(core, &responses)?;
    let snapshot = task_job(core, task_id, identity).await?;
    for (key, response) in responses {
        answer_question(core, snapshot.job_id, key, response, "tasks/update").await?;
    }
    Ok(())
}

/// The job behind `task_id`, if `identity` may see it.
pub(super) async fn task_job(
    core: &Core,
    task_id: &str,
    identity: &Identity,
) -> Result<JobSnapshot, ErrorData> {
    let id: JobId = task_id.parse().map_err(|_| unknown_task(task_id))?;
    core.visible_job(id, identity)
        .await?
        .ok_or_else(|| unknown_task(task_id))
}

/// The job in the extension's terms (see the module comment for the mapping).
pub(super) fn detailed(core: &Core, snapshot: &JobSnapshot) -> DetailedTask {
    let mut task = Task::new(
        snapshot.job_id.to_string(),
        TaskStatus::Working,
        iso8601(snapshot.created_at),
        iso8601(snapshot.updated_at),
    );
    let message = match snapshot.status {
        JobStatus::Running | JobStatus::Completed => snapshot.message.clone(),
        JobStatus::InputRequired => snapshot.input_requests.first().map(|q| q.message.clone()),
        JobStatus::Failed | JobStatus::Cancelled => {
            snapshot.error.as_ref().map(|e| e.message.clone())
        }
    };
    task.status_message = message;
    let task = with_timing(core, task, snapshot.created_at, snapshot.finished_at);
    let payload = match snapshot.status {
        JobStatus::Running => TaskPayload::Working,
        JobStatus::InputRequired => TaskPayload::InputRequired {
            input_requests: input_requests(&snapshot.input_requests),
        },
        JobStatus::Cancelled => TaskPayload::Cancelled,
        JobStatus::Failed if snapshot.rpc_error.is_some() => TaskPayload::Failed {
            error: object(snapshot.rpc_error.clone().unwrap_or_default()),
        },
        JobStatus::Completed | JobStatus::Failed => TaskPayload::Completed {
            result: result_object(core.final_result(snapshot)),
        },
    };
    DetailedTask::new(task, payload)
}

/// `pollIntervalMs` from `jobs.task_poll_interval_ms`; `ttlMs` from creation to when the
/// job stops being readable: its end plus `jobs.retention_secs` (while it runs, at least
/// what has passed plus the retention; the extension lets the value change).
fn with_timing(core: &Core, task: Task, created_at: u64, finished_at: Option<u64>) -> Task {
    let config = &core.config;
    let end = finished_at.unwrap_or_else(now_ms).max(created_at);
    let ttl = end - created_at + config.retention_secs.saturating_mul(1000);
    task.with_poll_interval_ms(config.task_poll_interval_ms)
        .with_ttl_ms(ttl)
}

/// What a task's `_meta` names: the job and its live channel (the extension has no
/// progress; the job's SSE channel does).
fn task_links(core: &Core, id: JobId) -> Value {
    let links = &core.links;
    json!({
        "job_id": id,
        "events_url": links.events_url(id),
        "input_url": links.input_url(id),
    })
}

/// The job's waiting questions as the extension's `inputRequests`: each an
/// `elicitation/create` request under the question's key.
pub(super) fn input_requests(questions: &[InputQuestion]) -> InputRequests {
    questions
        .iter()
        .filter_map(|q| {
            let schema = serde_json::from_value(q.requested_schema.clone()).ok()?;
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: q.message.clone(),
                requested_schema: schema,
            };
            let request = InputRequest::Elicitation(ElicitRequest::new(params));
            Some((q.key.clone(), request))
        })
        .collect()
}

/// A tool result as the `result` of a completed task, marked complete as a 2026-07-28 caller
/// of the call itself would get it.
fn result_object(mut result: CallToolResult) -> JsonObject {
    result.result_type.get_or_insert(ResultType::COMPLETE);
    object(serde_json::to_value(result).unwrap_or_default())
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => {
            let mut map = JsonObject::new();
            map.insert("value".into(), other);
            map
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ErrorCode;

    use super::{InputError, answer_refused};

    /// A relayed answer nobody confirmed is the bridge's failure (-32603), not bad params; an
    /// answer that is too large stays the caller's (-32602). Both name the key.
    #[test]
    fn an_unconfirmed_answer_is_an_internal_error_and_a_bad_one_invalid_params() {
        for (error, code) in [
            (
                InputError::Unconfirmed { waited_ms: 5000 },
                ErrorCode::INTERNAL_ERROR,
            ),
            (
                InputError::Unreachable("no replica listens"),
                ErrorCode::INTERNAL_ERROR,
            ),
            (
                InputError::TooLarge { size: 9, limit: 8 },
                ErrorCode::INVALID_PARAMS,
            ),
        ] {
            let refused = answer_refused("q1", error);
            assert_eq!(refused.code, code, "{}", refused.message);
            assert!(
                refused.message.starts_with("inputResponses[\"q1\"]: "),
                "{}",
                refused.message
            );
        }
    }
}
