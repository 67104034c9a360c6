//! The bridge's own tools for the agent: look at, wait for, cancel a job, and answer its
//! tool's question.
//!
//! Everything an agent can get wrong here (a missing or malformed job ID, an unknown job, a
//! bad timeout) is answered with a tool error that says so: the model reads tool errors, while
//! protocol errors usually reach it as an opaque failure.

use std::time::Duration;

use rmcp::{
    ErrorData,
    model::{CallToolResult, JsonObject},
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use tokio_util::sync::CancellationToken;

use super::{
    caller::Caller,
    core::Core,
    handle::{error_result, json_result, store_error},
    wait_bound::Waiter,
};
use crate::{
    auth::Identity,
    jobs::InputError,
    model::{CancelAck, InputAction, InputAnswer, JobId, JobSnapshot, JobStatus},
};

pub const GET_JOB_STATUS: &str = "get_job_status";
pub const WAIT_FOR_JOB: &str = "wait_for_job";
pub const CANCEL_JOB: &str = "cancel_job";
pub const ANSWER_JOB_INPUT: &str = "answer_job_input";

/// `wait_for_job` default and maximum: the answer must come well inside the 60-100 s after
/// which agent platforms give up on a tool call.
pub(super) const WAIT_DEFAULT_SECS: f64 = 20.0;
pub(super) const WAIT_MAX_SECS: f64 = 50.0;
/// How long `cancel_job` waits to report the job's end rather than "requested".
const CANCEL_CONFIRM: Duration = Duration::from_secs(5);

/// The arguments of `get_job_status` and `cancel_job`; their `inputSchema` is derived from
/// this (see `catalog::job_tools`), so the schema and the parser cannot disagree.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct JobArgs {
    /// The job_id from the job handle a tool call returned.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    job_id: String,
}

/// The arguments of `answer_job_input`: an answer to the job's question, as
/// `POST /jobs/{id}/input` takes it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerArgs {
    /// The job_id from the job handle a tool call returned.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    job_id: String,
    /// accept (with content), decline, or cancel.
    action: InputAction,
    /// For accept: an object with the fields the question's requested_schema names.
    #[serde(default)]
    content: Option<JsonObject>,
    /// Which question (its key from get_job_status's input_requests); the oldest when left
    /// out.
    #[serde(default)]
    key: Option<String>,
}

/// The arguments of `wait_for_job`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitArgs {
    /// The job_id from the job handle a tool call returned.
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    job_id: String,
    /// How long to wait, 0 to 50 seconds (default 20).
    // Advertised as a plain number, as before: `null` is accepted (it means the default) but
    // not offered, since some model tool-callers handle a type list poorly.
    #[serde(default)]
    #[schemars(with = "f64", range(min = 0, max = 50), extend("default" = 20))]
    timeout_seconds: Option<f64>,
}

fn parse_args<T: serde::de::DeserializeOwned>(
    args: Option<JsonObject>,
) -> Result<T, CallToolResult> {
    let value = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| error_result(format!("invalid arguments: {e}")))
}

fn parse_job_id(text: &str) -> Result<JobId, CallToolResult> {
    text.parse().map_err(|_| {
        error_result(format!(
            "{text:?} is not a job ID: use the job_id (32 hex digits) from the handle a tool call returned"
        ))
    })
}

fn unknown_job(id: JobId) -> CallToolResult {
    error_result(format!(
        "no job {id}: it never existed here, or it ended and expired"
    ))
}

/// `Ok(Err(result))` is a tool error for the agent; `Err` a protocol error.
type ToolAnswer = Result<CallToolResult, ErrorData>;

pub(super) async fn get_job_status(
    core: &Core,
    args: Option<JsonObject>,
    identity: &Identity,
) -> ToolAnswer {
    let id = match parse_args::<JobArgs>(args).and_then(|a| parse_job_id(&a.job_id)) {
        Ok(id) => id,
        Err(result) => return Ok(result),
    };
    match core.visible_job(id, identity).await? {
        Some(snapshot) => Ok(json_result(
            serde_json::to_value(&snapshot).unwrap_or_default(),
        )),
        None => Ok(unknown_job(id)),
    }
}

/// `wait_for_job`: blocks until the job ends or the wait is up, no longer than the caller can
/// wait (its client's `jobs.wait_for_job_secs_by_client`, or the bound learned of it: see
/// `wait_bound`); a caller that cancels the wait is answered at once.
pub(super) async fn wait_for_job(
    core: &Core,
    args: Option<JsonObject>,
    caller: &Caller,
    cancelled: &CancellationToken,
) -> ToolAnswer {
    let identity = &caller.identity;
    let (id, asked) = match parse_args::<WaitArgs>(args).and_then(|a| {
        let id = parse_job_id(&a.job_id)?;
        let secs = a.timeout_seconds.unwrap_or(WAIT_DEFAULT_SECS);
        if !(0.0..=WAIT_MAX_SECS).contains(&secs) {
            return Err(error_result(format!(
                "timeout_seconds must be between 0 and {WAIT_MAX_SECS}, got {secs}"
            )));
        }
        Ok((id, Duration::from_secs_f64(secs)))
    }) {
        Ok(v) => v,
        Err(result) => return Ok(result),
    };
    if core.visible_job(id, identity).await?.is_none() {
        return Ok(unknown_job(id));
    }
    let declared = caller
        .client_name
        .as_ref()
        .and_then(|name| core.config.wait_for_job_secs_by_client.get(name))
        .map(|&secs| Duration::from_secs(secs));
    let waiter = Waiter::of(caller.session.as_deref(), &identity.principal);
    let ticket = core
        .wait_bounds
        .begin(waiter, id, declared.map_or(asked, |d| asked.min(d)));
    let within = ticket.within();
    let waited = tokio::select! {
        waited = core.jobs.wait(id, within) => waited.map_err(store_error)?,
        () = cancelled.cancelled() => {
            ticket.gave_up();
            return Ok(error_result("the wait was cancelled by the caller".to_string()));
        }
    };
    drop(ticket);
    let Some(snapshot) = waited else {
        return Ok(unknown_job(id));
    };
    if snapshot.status.is_terminal() {
        return Ok(core.final_result(&snapshot));
    }
    Ok(json_result(still_running(&snapshot, within)))
}

/// The answer of a wait that ended before its job: where the job is, and what to do next
/// (each call waits up to `within`, so the model knows another call is expected).
fn still_running(snapshot: &JobSnapshot, within: Duration) -> serde_json::Value {
    let id = snapshot.job_id;
    json!({
        "job_id": id,
        "status": snapshot.status,
        "progress": snapshot.progress,
        "total": snapshot.total,
        "message": snapshot.message,
        "eta_ms": snapshot.eta_ms,
        "input_requests": snapshot.input_requests,
        "instructions": if snapshot.status == JobStatus::InputRequired {
            format!(
                "The job's tool asks a question (input_requests): ask the user, answer with \
                 answer_job_input (job_id \"{id}\"), then call wait_for_job again."
            )
        } else {
            format!(
                "The job is still running ({}). Call wait_for_job again with job_id \"{id}\" \
                 (each call waits up to {} s).",
                progress_phrase(snapshot),
                within.as_secs_f64().round()
            )
        },
    })
}

pub(super) async fn cancel_job(
    core: &Core,
    args: Option<JsonObject>,
    identity: &Identity,
) -> ToolAnswer {
    let id = match parse_args::<JobArgs>(args).and_then(|a| parse_job_id(&a.job_id)) {
        Ok(id) => id,
        Err(result) => return Ok(result),
    };
    if core.visible_job(id, identity).await?.is_none() {
        return Ok(unknown_job(id));
    }
    let jobs = &core.jobs;
    match jobs
        .cancel(id, "cancelled by the agent (cancel_job)".into())
        .await
        .map_err(store_error)?
    {
        CancelAck::Unknown => Ok(unknown_job(id)),
        CancelAck::AlreadyTerminal(snapshot) => Ok(json_result(json!({
            "job_id": id,
            "status": snapshot.status,
            "cancelled": false,
            "message": format!("the job had already ended ({}); nothing to cancel", snapshot.status.as_str()),
        }))),
        CancelAck::Requested(_) => {
            let snapshot = jobs.wait(id, CANCEL_CONFIRM).await.map_err(store_error)?;
            let status = snapshot.as_ref().map_or(JobStatus::Cancelled, |s| s.status);
            let message = match status {
                JobStatus::Cancelled => {
                    "the job is cancelled; the tool server was told to stop".to_string()
                }
                JobStatus::Running => "cancel requested; the job has not stopped yet".to_string(),
                other => format!(
                    "the job ended {} before the cancel took effect",
                    other.as_str()
                ),
            };
            Ok(json_result(json!({
                "job_id": id,
                "status": status,
                "cancelled": status == JobStatus::Cancelled,
                "message": message,
            })))
        }
    }
}

/// `answer_job_input`: the job's question answered (the same checks as every answer
/// path: the schema, `jobs.max_input_bytes`, first answer wins). Another caller's job is
/// unknown.
pub(super) async fn answer_job_input(
    core: &Core,
    args: Option<JsonObject>,
    identity: &Identity,
) -> ToolAnswer {
    let (id, answer) = match parse_args::<AnswerArgs>(args).and_then(|a| {
        let id = parse_job_id(&a.job_id)?;
        let answer = InputAnswer {
            action: a.action,
            content: a.content.map(serde_json::Value::Object),
            key: a.key,
        };
        Ok((id, answer))
    }) {
        Ok(v) => v,
        Err(result) => return Ok(result),
    };
    if core.visible_job(id, identity).await?.is_none() {
        return Ok(unknown_job(id));
    }
    let action = answer.action;
    match core
        .jobs
        .inputs()
        .answer(id, answer, ANSWER_JOB_INPUT)
        .await
    {
        Ok(()) => Ok(json_result(json!({
            "job_id": id,
            "answered": true,
            "action": action,
            "message": format!(
                "answered ({}); the job goes on: call wait_for_job with job_id \"{id}\" for its result",
                action.as_str()
            ),
        }))),
        Err(InputError::UnknownJob) => Ok(unknown_job(id)),
        Err(e @ InputError::NothingToAnswer) => Ok(error_result(format!(
            "{e}: call get_job_status with job_id \"{id}\" to see whether it asks anything"
        ))),
        Err(e @ (InputError::Mismatch(_) | InputError::TooLarge { .. })) => {
            Ok(error_result(format!("{e}; answer again")))
        }
        Err(e @ (InputError::Unconfirmed { .. } | InputError::Unreachable(_))) => {
            Ok(error_result(e.to_string()))
        }
    }
}

fn progress_phrase(snapshot: &JobSnapshot) -> String {
    let mut phrase = match (snapshot.progress, snapshot.total) {
        (Some(p), Some(t)) => format!("{p} of {t}"),
        (Some(p), None) => format!("progress {p}"),
        _ => "no progress reported yet".to_string(),
    };
    if let Some(message) = &snapshot.message {
        phrase.push_str(": ");
        phrase.push_str(message);
    }
    phrase
}
