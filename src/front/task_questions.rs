//! The questions of a task (of the handshake revision with tasks) asked of the client waiting
//! on its `tasks/result`: sent on that request's stream, with `_meta[related-task]` naming the
//! task, to a client that declared form elicitation. The question waits on the job's input
//! desk meanwhile: the first answer wins, whether the client's or a person's; the client's goes
//! to the desk like any answer (`by: "tasks/result"`). An answer that does not fit is declined
//! (its request has been answered: it cannot be told), with a note on the job's channel. A
//! question answered elsewhere or timed out is withdrawn (`notifications/cancelled`); a client
//! that fails the request leaves the question to the others. docs/design/mcp-asks.md.

use std::{collections::HashMap, time::Duration};

use futures::{
    FutureExt, StreamExt,
    future::{AbortHandle, Abortable, BoxFuture},
    stream::FuturesUnordered,
};
use rmcp::{
    ErrorData, RoleServer, ServiceError,
    model::{
        CancelledNotification, CancelledNotificationParam, ClientResult, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, MetaObject,
        RequestId, RequestMetaObject, ServerRequest,
    },
    service::{PeerRequestOptions, RequestContext},
};
use serde_json::json;

use super::{caller::Caller, core::Core, handle::store_error};
use crate::{
    jobs::InputError,
    model::{InputAction, InputAnswer, InputQuestion, JobSnapshot},
};

/// The answer path named in the job's `input_answered` events.
const BY: &str = "tasks/result";
/// `_meta` key naming the task a request belongs to.
pub(super) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// How long one look at the job waits before it looks again (the job ends by its own
/// timeout; a question by `jobs.input_timeout_secs`).
const LOOK: Duration = Duration::from_secs(30);

/// A question sent to the client, not answered yet.
struct Asked {
    request: RequestId,
    abort: AbortHandle,
}

/// The client's reply to the question under its key; `None` once it is no longer waited for.
type Reply = Option<(String, Result<ElicitResult, ServiceError>)>;

/// The questions this `tasks/result` sent, by key: `Some` while the client's answer is
/// awaited, `None` once it came (or the request failed), so no question is sent twice.
type Sent = HashMap<String, Option<Asked>>;

/// Wait until the task's job ends (its `snapshot` now), asking the client of this
/// `tasks/result` every question the job waits for meanwhile, if it takes questions; then
/// the job's final snapshot. The client's cancel of its request ends the wait, not the job.
pub(super) async fn wait_asking(
    core: &Core,
    task_id: &str,
    mut snapshot: JobSnapshot,
    context: &RequestContext<RoleServer>,
    unknown: impl Fn() -> ErrorData,
) -> Result<JobSnapshot, ErrorData> {
    let id = snapshot.job_id;
    let asks = Caller::of(context).takes.questions;
    let mut sent = Sent::new();
    let mut replies: FuturesUnordered<BoxFuture<'static, Reply>> = FuturesUnordered::new();
    while !snapshot.status.is_terminal() {
        let waiting: Vec<String> = snapshot
            .input_requests
            .iter()
            .map(|q| q.key.clone())
            .collect();
        stop_asking(context, &mut sent, |key| !waiting.iter().any(|w| w == key)).await;
        if asks {
            for question in &snapshot.input_requests {
                if sent.contains_key(&question.key) {
                    continue;
                }
                let asked = ask(context, task_id, question).await;
                let entry = asked.map(|(asked, reply)| {
                    replies.push(reply);
                    asked
                });
                sent.insert(question.key.clone(), entry);
            }
        }
        tokio::select! {
            changed = core.jobs.questions_change(id, &waiting, LOOK) => {
                snapshot = changed.map_err(store_error)?.ok_or_else(&unknown)?;
            }
            Some(reply) = replies.next(), if !replies.is_empty() => {
                if let Some((key, reply)) = reply {
                    sent.insert(key.clone(), None);
                    take_reply(core, snapshot.job_id, key, reply).await;
                }
            }
            _ = context.ct.cancelled() => {
                stop_asking(context, &mut sent, |_| true).await;
                return Err(ErrorData::internal_error(
                    "tasks/result cancelled by the client; the task goes on",
                    None,
                ));
            }
        }
    }
    stop_asking(context, &mut sent, |_| true).await;
    Ok(snapshot)
}

/// Stop waiting for the client's answers to the questions `gone` names (answered
/// elsewhere, timed out, or the wait is over), and tell the client.
async fn stop_asking(
    context: &RequestContext<RoleServer>,
    sent: &mut Sent,
    gone: impl Fn(&str) -> bool,
) {
    let stopped: Vec<String> = sent
        .iter()
        .filter(|(key, asked)| asked.is_some() && gone(key))
        .map(|(key, _)| key.clone())
        .collect();
    for key in stopped {
        let Some(Some(asked)) = sent.insert(key, None) else {
            continue;
        };
        asked.abort.abort();
        let cancel = CancelledNotification::new(CancelledNotificationParam::new(
            Some(asked.request),
            Some("the question was answered elsewhere, timed out, or its task ended".into()),
        ));
        // A client that has gone misses it; its answer would be dropped anyway.
        let _ = context.peer.send_notification(cancel.into()).await;
    }
    // Keys of questions no longer waiting are never listed again (unique per job).
    sent.retain(|key, asked| asked.is_some() || !gone(key));
}

/// The client's reply, taken to the job's input desk as any answer is.
async fn take_reply(
    core: &Core,
    id: crate::model::JobId,
    key: String,
    reply: Result<ElicitResult, ServiceError>,
) {
    let jobs = &core.jobs;
    let result = match reply {
        Ok(result) => result,
        Err(e) => {
            tracing::info!(job = %id, %key, error = %e,
                    "the tasks/result client did not answer the question; it waits for others");
            return;
        }
    };
    let action = match result.action {
        ElicitationAction::Accept => InputAction::Accept,
        ElicitationAction::Decline => InputAction::Decline,
        _ => InputAction::Cancel,
    };
    let answer = InputAnswer {
        action,
        content: result.content,
        key: Some(key.clone()),
    };
    match jobs.inputs().answer(id, answer, BY).await {
        Ok(()) => {}
        Err(e @ (InputError::Mismatch(_) | InputError::TooLarge { .. })) => {
            if let Err(e) = jobs.inputs().decline_unfit(id, &key, &e, BY).await {
                tracing::info!(job = %id, %key, error = %e, "an unfit answer was not declined");
            }
        }
        // Answered first by someone else, timed out, or the job ended: this one is late.
        Err(e) => {
            tracing::info!(job = %id, %key, error = %e, "the tasks/result answer was not taken");
        }
    }
}

/// Send `question` to the client, as a request of the task `task_id`; what to keep of it,
/// and its reply. `None` if it could not be sent (the question waits for others).
async fn ask(
    context: &RequestContext<RoleServer>,
    task_id: &str,
    question: &InputQuestion,
) -> Option<(Asked, BoxFuture<'static, Reply>)> {
    let schema: ElicitationSchema = serde_json::from_value(question.requested_schema.clone())
        .inspect_err(|e| {
            tracing::info!(key = %question.key, error = %e,
            "a question whose schema is no elicitation schema is not sent to the client")
        })
        .ok()?;
    let mut meta = MetaObject::new();
    meta.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
    let params = ElicitRequestParams::FormElicitationParams {
        meta: Some(RequestMetaObject(meta)),
        message: question.message.clone(),
        requested_schema: schema,
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    // Sent from the handler itself: rmcp puts it on this request's response stream.
    let handle = context
        .peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .inspect_err(|e| tracing::info!(error = %e, "a question could not be sent to the client"))
        .ok()?;
    let request_id = handle.id.clone();
    let (abort, registration) = AbortHandle::new_pair();
    let key = question.key.clone();
    let reply = Abortable::new(handle.await_response(), registration)
        .map(move |reply| {
            let reply = reply.ok()?.and_then(|result| match result {
                ClientResult::ElicitResult(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            });
            Some((key, reply))
        })
        .boxed();
    Some((
        Asked {
            request: request_id,
            abort,
        },
        reply,
    ))
}
