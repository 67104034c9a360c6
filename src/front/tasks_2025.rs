//! The MCP 2025-11-25 tasks (the experimental core feature that the Tasks extension replaced)
//! at the front door, for clients that negotiate that revision (TypeScript SDK 1.x, Python 2.x).
//! The bridge offers `capabilities.tasks` and `execution: {taskSupport: "optional"}` on every
//! upstream tool (every call is a job); a task-augmented `tools/call` answers `{task: {…}}`
//! whose `taskId` is the job ID; `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`
//! read the job, bound to the caller (another principal's task is "not found"; a client that
//! also declared the Tasks extension gets its shape). rmcp 3.11 knows none of this, so
//! [`translate`] rewrites the wire for sessions at 2025-11-25: the
//! capability and `execution` added to answers, the task requests renamed to the bridge's own
//! methods ([`PREFIX`], marked [`Tasks2025`]). [`adapt`], the one layer between the `/mcp`
//! checks and rmcp, hands it what concerns it (a `subscriptions/listen` goes to `listen_tasks`);
//! the creating session is told of status changes. Details: docs/design/tasks.md.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::Response,
};
use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CustomNotification, CustomRequest, GetTaskResult,
        ServerNotification, Task, TaskAckResult, TaskStatus,
    },
    service::{Peer, RequestContext},
};
use serde_json::{Value, json};

use super::{
    caller::{self, Caller},
    core::Core,
    listen_tasks, task_questions,
    task_questions::RELATED_TASK,
    tasks, tool_call,
};
use crate::{
    auth::Identity,
    model::{CancelAck, JobId, JobSnapshot, McpMessage},
    rmcp_ext::sse_events::{Rewrites, rewrite_events, rewrite_message},
};

/// The revision whose tasks this module speaks.
pub const REVISION: &str = "2025-11-25";
/// The bridge's own names for the renamed requests: `<PREFIX>tools/call`, `<PREFIX>tasks/get` …
pub const PREFIX: &str = "mcp-progress-bridge/2025-11-25/";
/// The task methods of 2025-11-25 that are renamed (`tasks/update` is the extension's alone).
const TASK_METHODS: [&str; 4] = ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];
/// How long `tasks/cancel` waits for the job to end before it answers with the current state.
const CANCEL_CONFIRM: Duration = Duration::from_secs(5);
/// A response event or body larger than this passes unchanged (no capability, no
/// `execution`): an `initialize` result is a few KiB, a tool list rarely more than a MiB.
const MAX_REWRITTEN: usize = 16 * 1024 * 1024;

/// The mark [`translate`] puts on a renamed request.
#[derive(Debug, Clone, Copy)]
pub struct Tasks2025;

/// The `capabilities.tasks` of 2025-11-25 the bridge declares.
fn capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// Whether the request belongs to a session at 2025-11-25.
fn session_at_2025(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key("mcp-session-id")
        && headers
            .get("mcp-protocol-version")
            .is_some_and(|v| v.as_bytes() == REVISION.as_bytes())
}

/// What to do to the answer of a request.
#[derive(Clone, Copy)]
enum Answer {
    /// `initialize`: add `capabilities.tasks` if the revision agreed is 2025-11-25.
    Initialize,
    /// `tools/list` of a session at 2025-11-25: `execution` on the upstream tools.
    ToolsList,
}

/// The layer in front of rmcp (see the module doc): it reads the message the `/mcp` check
/// parsed (`model::McpMessage`); a request no adapter concerns goes straight to rmcp.
pub async fn adapt(State(core): State<Arc<Core>>, request: Request, next: Next) -> Response {
    let Some(message) = request.extensions().get::<McpMessage>() else {
        return next.run(request).await;
    };
    if message.method() == Some(listen_tasks::LISTEN) {
        return listen_tasks::follow_tasks(core, request, next).await;
    }
    if concerns(&request, message) {
        return translate(request, next).await;
    }
    next.run(request).await
}

/// Whether [`translate`] has anything to do with this message: an `initialize` (its answer
/// may get the capability), or any message of a session at 2025-11-25.
fn concerns(request: &Request, message: &McpMessage) -> bool {
    message.is_initialize() || session_at_2025(request)
}

/// The request on its way to rmcp and its answer back: see the module comment. Runs after the
/// message check (`http::mcp_layer`), so the body is one JSON-RPC message of at most
/// `limits.max_request_bytes` ([`adapt`] hands it here).
async fn translate(request: Request, next: Next) -> Response {
    let at_2025 = session_at_2025(&request);
    // The message as the message check parsed it (`http::mcp_layer`): not parsed again here.
    let Some(message) = request.extensions().get::<McpMessage>().cloned() else {
        return next.run(request).await;
    };
    let method = message.method();
    let answer = match method {
        Some("initialize") => Some(Answer::Initialize),
        Some("tools/list") if at_2025 => Some(Answer::ToolsList),
        _ => None,
    };
    let renamed = match method {
        Some("tools/call") if at_2025 => {
            let augmented = message
                .params()
                .and_then(|params| params.get("task"))
                .is_some_and(|task| !task.is_null());
            augmented.then(|| rename(&message, "tools/call"))
        }
        Some(m) if at_2025 && TASK_METHODS.contains(&m) => Some(rename(&message, m)),
        _ => None,
    };
    let request = match renamed {
        Some(renamed) => {
            let (mut parts, _) = request.into_parts();
            parts.extensions.insert(Tasks2025);
            parts.headers.remove(header::CONTENT_LENGTH);
            Request::from_parts(parts, Body::from(renamed))
        }
        None => request,
    };
    let response = next.run(request).await;
    match answer {
        Some(answer) => rewrite_response(response, answer).await,
        None => response,
    }
}

/// The message under the bridge's own name for `method`, serialized.
fn rename(message: &McpMessage, method: &str) -> Bytes {
    let mut message = message.to_value();
    message["method"] = Value::String(format!("{PREFIX}{method}"));
    Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
}

/// Apply `answer` to the JSON-RPC response in `response` (a JSON body, or an SSE stream whose
/// events each carry one message).
async fn rewrite_response(response: Response, answer: Answer) -> Response {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    let (mut parts, body) = response.into_parts();
    if content_type.starts_with(b"application/json") {
        let Ok(bytes) = axum::body::to_bytes(body, MAX_REWRITTEN).await else {
            // Too large to rewrite and no longer readable: say so rather than cut the answer.
            tracing::warn!("an MCP answer too large to add the 2025-11-25 task fields to");
            return Response::from_parts(parts, Body::empty());
        };
        let bytes = rewrite_json(&bytes, answer).unwrap_or(bytes);
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(bytes));
    }
    if !content_type.starts_with(b"text/event-stream") {
        return Response::from_parts(parts, body);
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = rewrite_events(body, MAX_REWRITTEN, Rewrites::Every, move |event| {
        rewrite_event(event, answer)
    });
    Response::from_parts(parts, body)
}

/// One SSE event with its message rewritten; `None` if it carries nothing to change.
fn rewrite_event(event: &[u8], answer: Answer) -> Option<Vec<u8>> {
    rewrite_message(event, |data| rewrite_json(data.as_bytes(), answer))
}

/// The JSON-RPC message with `answer` applied; `None` if it is not a result it applies to.
fn rewrite_json(bytes: &[u8], answer: Answer) -> Option<Bytes> {
    let mut message: Value = serde_json::from_slice(bytes).ok()?;
    let result = message.get_mut("result")?.as_object_mut()?;
    match answer {
        Answer::Initialize => {
            if result.get("protocolVersion").and_then(Value::as_str) != Some(REVISION) {
                return None;
            }
            let capabilities = result.get_mut("capabilities")?.as_object_mut()?;
            capabilities.insert("tasks".into(), capability());
        }
        Answer::ToolsList => {
            let tools = result.get_mut("tools")?.as_array_mut()?;
            for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                let upstream_tool = tool
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| tool_call::split(name).is_some());
                if upstream_tool {
                    tool.insert("execution".into(), json!({ "taskSupport": "optional" }));
                }
            }
        }
    }
    serde_json::to_vec(&message).ok().map(Bytes::from)
}

/// Unknown, malformed, expired and other callers' task IDs all get this (-32602).
fn unknown_task(task_id: &str) -> ErrorData {
    let shown: String = task_id.chars().take(64).collect();
    ErrorData::invalid_params(
        format!(
            "no task {shown:?}: it never existed here, it expired, or it is not yours; a task \
             ID is the taskId a task-augmented tools/call answered with"
        ),
        None,
    )
}

/// The `taskId` of a `tasks/get|result|cancel` request.
fn task_id_param(params: Option<&Value>) -> Result<String, ErrorData> {
    params
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ErrorData::invalid_params("params.taskId (a string) is required", None))
}

/// A task in the 2025-11-25 shape.
pub(super) fn task_2025(task: &Task) -> Value {
    let mut value = json!({
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": task.ttl_ms,
    });
    if let Some(message) = &task.status_message {
        value["statusMessage"] = json!(message);
    }
    if let Some(interval) = task.poll_interval_ms {
        value["pollInterval"] = json!(interval);
    }
    value
}

/// A request [`translate`] renamed, answered; `None` for any other custom method.
pub(super) async fn serve_2025(
    core: &Arc<Core>,
    request: &CustomRequest,
    context: &RequestContext<RoleServer>,
) -> Option<Result<Value, ErrorData>> {
    let method = request.method.strip_prefix(PREFIX)?;
    let marked = context
        .extensions
        .get::<http::request::Parts>()
        .is_some_and(|parts| parts.extensions.get::<Tasks2025>().is_some());
    if !marked {
        return None;
    }
    let identity = caller::identity(context);
    let params = request.params.as_ref();
    // A client that declared the Tasks extension gets its tasks in the extension's shape, the
    // shape its `tools/call` answered with: one session, one shape.
    let extension = context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks());
    Some(match method {
        "tools/call" => call_2025(core, params, context, &identity).await,
        "tasks/list" => list_2025(core, params, &identity).await,
        "tasks/get" | "tasks/result" | "tasks/cancel" => {
            let task_id = match task_id_param(params) {
                Ok(task_id) => task_id,
                Err(e) => return Some(Err(e)),
            };
            let to_value = |v| serde_json::to_value(v).unwrap_or_default();
            match method {
                "tasks/get" if extension => tasks::read_task(core, &task_id, &identity)
                    .await
                    .map(|task| to_value(GetTaskResult::new(task))),
                "tasks/cancel" if extension => tasks::cancel_task_job(core, &task_id, &identity)
                    .await
                    .map(|()| serde_json::to_value(TaskAckResult::new()).unwrap_or_default()),
                "tasks/get" => get_2025(core, &task_id, &identity).await,
                "tasks/result" => result_2025(core, &task_id, context, &identity).await,
                _ => cancel_2025(core, &task_id, &identity).await,
            }
        }
        _ => return None,
    })
}

/// A task-augmented `tools/call`: the job starts as an async call would, and the answer is
/// its task. A call that cannot start (unknown tool, quota, upstream down) is a JSON-RPC
/// error saying why: a 2025-11-25 client takes nothing but a task here.
async fn call_2025(
    core: &Arc<Core>,
    params: Option<&Value>,
    context: &RequestContext<RoleServer>,
    identity: &Identity,
) -> Result<Value, ErrorData> {
    let params = params.cloned().unwrap_or(Value::Null);
    check_task_param(&params)?;
    let request: CallToolRequestParams = serde_json::from_value(params)
        .map_err(|e| ErrorData::invalid_params(format!("tools/call: {e}"), None))?;
    let name = request.name.to_string();
    if tool_call::split(&name).is_none() {
        // The job tools answer at once; they are not listed with taskSupport.
        return Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("tool {name:?} does not run as a task: call it without params.task"),
            None,
        ));
    }
    let caller = Caller::of(context);
    let response = tool_call::call_tool(core, request, context.clone(), caller, true).await?;
    match response {
        CallToolResponse::Task(created) => {
            if let Ok(id) = created.task.task_id.parse::<JobId>() {
                remember_task(core, identity, id).await;
                follow_task_status(core, id, context.peer.clone(), created.task.status);
            }
            let mut answer = json!({ "task": task_2025(&created.task) });
            if let Some(meta) = created.meta {
                answer["_meta"] = serde_json::to_value(meta).unwrap_or_default();
            }
            Ok(answer)
        }
        CallToolResponse::Complete(result) => {
            let text = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join(" ");
            let data = result
                .meta
                .map(|m| serde_json::to_value(m).unwrap_or_default());
            Err(ErrorData::internal_error(
                format!("the call did not start: {text}"),
                data,
            ))
        }
        _ => Err(ErrorData::internal_error(
            "the call did not start as a task",
            None,
        )),
    }
}

/// `params.task`: an object, whose `ttl` (if any) is a whole number of milliseconds.
fn check_task_param(params: &Value) -> Result<(), ErrorData> {
    match params.get("task") {
        Some(Value::Object(task)) => match task.get("ttl") {
            None | Some(Value::Null) => {}
            Some(ttl) if ttl.is_u64() => {}
            Some(_) => {
                return Err(ErrorData::invalid_params(
                    "params.task.ttl must be a whole number of milliseconds",
                    None,
                ));
            }
        },
        _ => {
            return Err(ErrorData::invalid_params(
                "params.task must be an object ({} or {\"ttl\": <ms>})",
                None,
            ));
        }
    }
    Ok(())
}

/// Remember a task for `tasks/list` (either revision's) in the store's index: with Redis,
/// every replica lists it. A store that cannot take it now leaves the task unlisted (it
/// runs, and is readable by `tasks/get`); the log says so.
pub(super) async fn remember_task(core: &Core, identity: &Identity, id: JobId) {
    let capacity = core.config.max_listed_tasks;
    let store = core.jobs.store();
    match store.list_task(&identity.principal, id, capacity).await {
        Ok(false) => {}
        Ok(true) => core
            .metrics
            .limit_hits
            .with_label_values(&["max_listed_tasks"])
            .inc(),
        Err(e) => {
            tracing::warn!(job = %id, error = %e, "a task was not indexed for tasks/list")
        }
    }
}

async fn task_snapshot(
    core: &Core,
    task_id: &str,
    identity: &Identity,
) -> Result<JobSnapshot, ErrorData> {
    let id: JobId = task_id.parse().map_err(|_| unknown_task(task_id))?;
    core.visible_job(id, identity)
        .await?
        .ok_or_else(|| unknown_task(task_id))
}

/// `tasks/get`: the job as a 2025-11-25 task.
async fn get_2025(core: &Core, task_id: &str, identity: &Identity) -> Result<Value, ErrorData> {
    let snapshot = task_snapshot(core, task_id, identity).await?;
    Ok(task_2025(&tasks::detailed(core, &snapshot).task))
}

/// `tasks/result`: wait until the job has ended (bounded by the job's own timeout; the
/// client's cancel ends the wait, not the job), asking the client the job's questions
/// meanwhile if it takes them (`task_questions`), then answer what the call in `sync` mode
/// answers: its result (a tool error included), or the upstream's JSON-RPC error.
async fn result_2025(
    core: &Core,
    task_id: &str,
    context: &RequestContext<RoleServer>,
    identity: &Identity,
) -> Result<Value, ErrorData> {
    let snapshot = task_snapshot(core, task_id, identity).await?;
    let snapshot =
        task_questions::wait_asking(core, task_id, snapshot, context, || unknown_task(task_id))
            .await?;
    if let Some(error) = snapshot.rpc_error.clone() {
        let error = serde_json::from_value::<ErrorData>(error).unwrap_or_else(|_| {
            ErrorData::internal_error("the upstream answered with an error", None)
        });
        return Err(error);
    }
    let mut result = serde_json::to_value(core.final_result(&snapshot)).unwrap_or_default();
    if let Some(object) = result.as_object_mut() {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
        object.remove("resultType");
    }
    Ok(result)
}

/// `tasks/cancel`: cancel the job (the upstream gets `notifications/cancelled`, and
/// `tasks/cancel` for an upstream task) and answer with the task once it has ended, or
/// as it is after a few seconds. A task that had already ended is -32602, as 2025-11-25
/// says.
async fn cancel_2025(core: &Core, task_id: &str, identity: &Identity) -> Result<Value, ErrorData> {
    let snapshot = task_snapshot(core, task_id, identity).await?;
    let jobs = &core.jobs;
    let ack = jobs
        .cancel(
            snapshot.job_id,
            "cancelled by the MCP client (tasks/cancel)".into(),
        )
        .await
        .map_err(super::handle::store_error)?;
    let now = match ack {
        CancelAck::Unknown => return Err(unknown_task(task_id)),
        CancelAck::AlreadyTerminal(snapshot) => {
            return Err(ErrorData::invalid_params(
                format!(
                    "task {task_id} has already ended ({}): nothing to cancel",
                    snapshot.status.as_str()
                ),
                None,
            ));
        }
        CancelAck::Requested(_) => jobs
            .wait(snapshot.job_id, CANCEL_CONFIRM)
            .await
            .map_err(super::handle::store_error)?
            .unwrap_or(snapshot),
    };
    Ok(task_2025(&tasks::detailed(core, &now).task))
}

/// `tasks/list`: the caller's tasks in the store's index (with Redis, created through any
/// replica) and still retained,
/// newest first, `jobs.task_list_page_size` at a time; `nextCursor` is the last task ID
/// of the page. A cursor that is not one of the caller's listed tasks is -32602.
async fn list_2025(
    core: &Core,
    params: Option<&Value>,
    identity: &Identity,
) -> Result<Value, ErrorData> {
    let bad_cursor = || {
        ErrorData::invalid_params(
            "params.cursor is not a cursor this bridge gave you: leave it out for the first page",
            None,
        )
    };
    let after = match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor.parse::<JobId>().map_err(|_| bad_cursor())?),
        Some(_) => return Err(bad_cursor()),
    };
    let page_size = core.config.task_list_page_size.max(1);
    let ids = core
        .jobs
        .store()
        .listed_tasks(&identity.principal, after, page_size)
        .await
        .map_err(|e| super::handle::store_error(e.into()))?
        .ok_or_else(bad_cursor)?;
    let mut tasks = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(snapshot) = core.visible_job(*id, identity).await? {
            tasks.push(task_2025(&tasks::detailed(core, &snapshot).task));
        }
    }
    let mut answer = json!({ "tasks": tasks });
    if ids.len() == page_size
        && let Some(last) = ids.last()
    {
        answer["nextCursor"] = json!(last.to_string());
    }
    Ok(answer)
}

/// The notification of a task's new status (optional in 2025-11-25; clients that do not
/// listen ignore it).
const STATUS_METHOD: &str = "notifications/tasks/status";
/// How long one notification may take to be handed to the session before the follower gives
/// up on the session (a client that does not read its stream).
const STATUS_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Tell the session behind `peer` of task `id`'s status changes from now on; `told` is the
/// status its creation answer gave. One follower per task (at most `jobs.max_jobs`): it ends
/// with the job, with the session (nothing is queued for a session that does not take a
/// notification), or at shutdown. Past `jobs.max_task_status_notifications` changes only the
/// end is sent.
fn follow_task_status(core: &Arc<Core>, id: JobId, peer: Peer<RoleServer>, told: TaskStatus) {
    let follower = tell_status_changes(core.clone(), id, peer, told);
    core.tasks.spawn_until_stopped(follower);
}

async fn tell_status_changes(
    core: Arc<Core>,
    id: JobId,
    peer: Peer<RoleServer>,
    mut told: TaskStatus,
) {
    let Ok(Some(mut changes)) = core.jobs.status_changes(id).await else {
        return;
    };
    let cap = core.config.max_task_status_notifications;
    let mut sent = 0usize;
    let mut capped = false;
    while let Some(snapshot) = changes.next().await {
        let task = tasks::detailed(&core, &snapshot).task;
        if task.status == told {
            continue;
        }
        if !snapshot.status.is_terminal() && sent >= cap {
            if !capped {
                capped = true;
                core.metrics
                    .limit_hits
                    .with_label_values(&["max_task_status_notifications"])
                    .inc();
            }
            continue;
        }
        let notification = ServerNotification::CustomNotification(CustomNotification::new(
            STATUS_METHOD,
            Some(task_2025(&task)),
        ));
        let delivered =
            tokio::time::timeout(STATUS_SEND_TIMEOUT, peer.send_notification(notification)).await;
        if !matches!(delivered, Ok(Ok(()))) {
            tracing::debug!(job = %id, "the session that created the task is gone: no more status notifications");
            return;
        }
        sent += 1;
        told = task.status;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_at_2025_gets_the_tasks_capability() {
        let body = br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"b","version":"1"}}}"#;
        let out: Value =
            serde_json::from_slice(&rewrite_json(body, Answer::Initialize).unwrap()).unwrap();
        assert_eq!(out["result"]["capabilities"]["tasks"], capability());
        assert_eq!(out["result"]["capabilities"]["tools"], json!({}));
        // Another revision: untouched.
        let older = br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#;
        assert!(rewrite_json(older, Answer::Initialize).is_none());
    }

    #[test]
    fn upstream_tools_are_listed_optional_and_job_tools_not() {
        let event = b"id: 3\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"demo__slow\",\"inputSchema\":{}},{\"name\":\"wait_for_job\",\"inputSchema\":{}}]}}\n\n";
        let out = rewrite_event(event, Answer::ToolsList).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("id: 3\ndata: "), "{text}");
        assert!(text.ends_with("}\n\n"), "{text}");
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let message: Value = serde_json::from_str(data).unwrap();
        let tools = &message["result"]["tools"];
        assert_eq!(tools[0]["execution"], json!({ "taskSupport": "optional" }));
        assert!(tools[1].get("execution").is_none());
        // An event without a result (a priming event, a notification) is left alone.
        assert!(rewrite_event(b"id: 0\ndata: \n\n", Answer::ToolsList).is_none());
    }
}
