//! One `tools/call` in flight on an upstream: its outcome, and the way to cancel it.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use parking_lot::Mutex;
use rmcp::{
    RoleClient, ServiceError,
    model::{
        CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
        ClientNotification, ClientRequest, CustomRequest, InputRequiredResult, InputResponses,
        JsonObject, RequestId, RequestMetaObject, ServerResult,
    },
    service::{Peer, PeerRequestOptions},
};
use tokio::sync::{oneshot, watch};
use tracing::{Instrument, Span};

use super::{
    UpstreamError,
    call_outcome::{CallOutcome, tool_result},
    input_required::{self, Bounds, Round, Stop},
    request_spans,
    session_seen::SessionSeen,
    shared::{Live, Shared},
    stream_resume::{KeepUnlessAnswered, ResumableSink},
    tap::{CallRoutes, CallSink, RouteMarker},
    task_call::{self, TaskCall, TaskLine},
};
use crate::{
    metrics::Metrics,
    model::{Durability, FailureReason},
    rmcp_ext::task_support::TaskSupport,
    traces,
};

/// How long to wait, after a connection dropped mid-call, for the supervisor to learn why
/// (a child's exit status takes a moment to be reaped).
const CLOSE_REASON_WAIT: Duration = Duration::from_secs(2);

/// A call sent upstream. Split it into the outcome (a future) and the canceller.
pub struct UpstreamCall {
    upstream: String,
    /// Open until the outcome is known or no longer awaited (see [`call_span`]).
    span: Span,
    rx: oneshot::Receiver<Result<ServerResult, ServiceError>>,
    closed: watch::Receiver<Option<String>>,
    route: RouteGuard,
    canceller: CallCanceller,
    /// Set when the upstream runs the tool only as a task: the bridge follows the task.
    task: Option<TaskCall>,
    /// To send the call again when the upstream answers `input_required`.
    resend: Resend,
    /// Set for a plain call another replica may resume (`stream_resume.rs`).
    resumable: Option<Resumable>,
    /// When the request was sent (`bridge_upstream_call_duration_seconds`).
    sent: std::time::Instant,
}

/// A plain call's resumable stream: its session, and whether its resume record was made.
struct Resumable {
    seen: SessionSeen,
    recorded: Arc<AtomicBool>,
}

/// Sends `notifications/cancelled` for one call, to the one upstream that runs it (and
/// `tasks/cancel`, once the call became an upstream task).
#[derive(Clone)]
pub struct CallCanceller {
    peer: Peer<RoleClient>,
    /// The request in flight: the first, or its latest retry after an `input_required` round.
    id: Arc<Mutex<RequestId>>,
    /// The upstream task's ID once known, for `tasks/cancel`.
    task: Option<(Arc<std::sync::OnceLock<String>>, Arc<Shared>)>,
}

/// Unroutes the call's notifications when the call is over or abandoned.
pub(super) struct RouteGuard {
    routes: Arc<CallRoutes>,
    pub(super) marker: RouteMarker,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.remove(self.marker);
    }
}

/// Send `tools/call` for `tool` (the upstream's own name). Progress and log notifications
/// of the call go to `sink` until the outcome is known. With traces on, the request's
/// `_meta` carries the call's trace context (`traceparent`, `tracestate`): rmcp's client
/// adds its `progressToken` to `_meta` and leaves the other keys alone.
pub(super) async fn send(
    upstream: &Arc<Shared>,
    tool: &str,
    arguments: Option<JsonObject>,
    sink: Arc<dyn CallSink>,
) -> Result<UpstreamCall, UpstreamError> {
    let Some(live) = upstream.live() else {
        return Err(upstream.not_connected());
    };
    let (as_task, durable, resumable) = plan(upstream, tool, &live);
    let sent_id = Arc::new(std::sync::OnceLock::new());
    let sink = Resumable::sink(resumable.as_ref(), upstream.name(), sink, sent_id.clone());
    let route = RouteGuard {
        routes: upstream.routes.clone(),
        marker: upstream.routes.add(sink.clone()),
    };
    let resend_arguments = arguments.clone();
    let request = first_request(tool, arguments, as_task, route.marker);
    let span = call_span(upstream, tool);
    let sent = std::time::Instant::now();
    let handle = live
        .peer
        .send_request_with_option(request, traced_options(&span))
        .await
        .map_err(|source| UpstreamError::Send {
            name: upstream.name().to_string(),
            source,
        })?;
    let _ = sent_id.set(handle.id.clone());
    span.record("jsonrpc.request.id", handle.id.to_string());
    let current = Arc::new(Mutex::new(handle.id));
    let resend = Resend {
        peer: live.peer.clone(),
        tool: tool.to_string(),
        arguments: resend_arguments,
        sink: sink.clone(),
        current: current.clone(),
        upstream: upstream.clone(),
    };
    let seen = live.seen.clone().filter(|_| durable);
    let task = as_task.then(|| TaskCall::new(upstream, sink, TaskLine::Connection(seen)));
    Ok(UpstreamCall {
        upstream: upstream.name().to_string(),
        span,
        rx: handle.rx,
        closed: live.closed,
        route,
        canceller: CallCanceller {
            peer: live.peer,
            id: current,
            task: task
                .as_ref()
                .map(|t| (t.task_id.clone(), t.upstream.clone())),
        },
        task,
        resend,
        resumable,
        sent,
    })
}

/// How a call of `tool` goes out: as a task (and whether a re-attachable one), or plain and,
/// when its stream may be resumed by another replica, [`Resumable`].
fn plan(upstream: &Shared, tool: &str, live: &Live) -> (bool, bool, Option<Resumable>) {
    let durability = upstream.durability(tool);
    let durable = durability == Durability::UpstreamTask;
    let as_task = durable || upstream.task_support(tool) == Some(TaskSupport::Required);
    let resumable = (durability == Durability::UpstreamStream && !as_task)
        .then(|| live.seen.clone())
        .flatten()
        .map(|seen| Resumable {
            seen,
            recorded: Arc::default(),
        });
    (as_task, durable, resumable)
}

impl Resumable {
    /// `sink`, with the stream's event ids made the job's resume cursor when it is resumable.
    fn sink(
        resumable: Option<&Self>,
        upstream: &str,
        sink: Arc<dyn CallSink>,
        request: Arc<std::sync::OnceLock<RequestId>>,
    ) -> Arc<dyn CallSink> {
        let Some(resumable) = resumable else {
            return sink;
        };
        Arc::new(ResumableSink {
            inner: sink,
            upstream: upstream.to_string(),
            seen: resumable.seen.clone(),
            request,
            recorded: resumable.recorded.clone(),
        })
    }
}

/// The first `tools/call` of `tool`, marked with its route (task-augmented when the tool runs
/// only as a task).
fn first_request(
    tool: &str,
    arguments: Option<JsonObject>,
    as_task: bool,
    marker: RouteMarker,
) -> ClientRequest {
    if as_task {
        let mut request =
            CustomRequest::new("tools/call", Some(task_call::call_params(tool, arguments)));
        request.extensions.insert(marker);
        return ClientRequest::CustomRequest(request);
    }
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Some(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    let mut request = CallToolRequest::new(params);
    request.extensions.insert(marker);
    ClientRequest::CallToolRequest(request)
}

/// The request's options: with traces on, its `_meta` carries the call's trace context.
fn traced_options(span: &Span) -> PeerRequestOptions {
    let options = PeerRequestOptions::no_options();
    let Some(trace) = traces::propagation(span) else {
        return options;
    };
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(trace.traceparent);
    if let Some(state) = trace.tracestate {
        meta.set_tracestate(state);
    }
    options.with_meta(meta)
}

/// What a call needs to be sent again, when the upstream answers it `input_required`.
struct Resend {
    peer: Peer<RoleClient>,
    tool: String,
    arguments: Option<JsonObject>,
    sink: Arc<dyn CallSink>,
    /// The request now in flight (the canceller's target).
    current: Arc<Mutex<RequestId>>,
    /// Its bounds and metrics.
    upstream: Arc<Shared>,
}

impl Resend {
    /// Answer `asked` and send the call again, round after round (`input_required`), until
    /// the upstream gives a result, an error, or goes past a bound.
    async fn drive(
        &self,
        upstream: &str,
        asked: InputRequiredResult,
        closed: watch::Receiver<Option<String>>,
        route: &RouteGuard,
    ) -> CallOutcome {
        let bounds = Bounds {
            limits: &self.upstream.limits,
            metrics: &self.upstream.metrics,
            upstream,
            what: "the call",
        };
        let again = |responses, state| self.again(upstream, (responses, state), &closed, route);
        match input_required::drive(bounds, &self.sink, asked, again).await {
            Ok(outcome) => outcome,
            Err(Stop::Stopped { reason, message }) => CallOutcome::Failed { reason, message },
            Err(Stop::Failed(outcome)) => outcome,
        }
    }

    /// The call sent again with the answers of a round, and the upstream's next answer.
    async fn again(
        &self,
        upstream: &str,
        (responses, state): (Option<InputResponses>, Option<String>),
        closed: &watch::Receiver<Option<String>>,
        route: &RouteGuard,
    ) -> Result<Round<CallOutcome>, CallOutcome> {
        let mut params = CallToolRequestParams::new(self.tool.clone());
        if let Some(arguments) = self.arguments.clone() {
            params = params.with_arguments(arguments);
        }
        params.input_responses = responses;
        params.request_state = state;
        let mut request = CallToolRequest::new(params);
        request.extensions.insert(route.marker);
        let request = ClientRequest::CallToolRequest(request);
        let options = PeerRequestOptions::no_options();
        let handle = self
            .peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| CallOutcome::Failed {
                reason: FailureReason::UpstreamLost,
                message: format!(
                    "upstream {upstream}: the call could not be sent again with the answers to \
                     its input requests: {e}"
                ),
            })?;
        *self.current.lock() = handle.id.clone();
        match answer(upstream, handle.rx, closed.clone(), route).await? {
            ServerResult::InputRequiredResult(next) => Ok(Round::Asked(next)),
            result => Ok(Round::Done(tool_result(result, upstream))),
        }
    }
}

impl UpstreamCall {
    pub fn split(self) -> (BoxFuture<'static, CallOutcome>, CallCanceller) {
        let UpstreamCall {
            upstream,
            span,
            rx,
            closed,
            route,
            canceller,
            task,
            resend,
            resumable,
            sent,
        } = self;
        // The outcome is held for the call's whole life, so its size is every running job's
        // memory: the rarer paths after the first answer (input rounds, 3.5 KB; following an
        // upstream task, 5.4 KB) are boxed when taken, not reserved in every call's future.
        let keep = KeepUnlessAnswered {
            recorded: resumable
                .as_ref()
                .map(|r| r.recorded.clone())
                .unwrap_or_default(),
            seen: resumable.map(|r| r.seen),
            answered: false,
        };
        let outcome = async move {
            // The guard whole, not its field: dropped with the call's future.
            let mut keep = keep;
            let first = answer(&upstream, rx, closed.clone(), &route).await;
            keep.answered = true;
            let outcome = if first.is_ok() { "ok" } else { "error" };
            let timing = (resend.upstream.metrics.upstream_call_duration)
                .with_label_values(&[upstream.as_str(), outcome]);
            Metrics::observe(&timing, sent.elapsed());
            match (first, task) {
                // The upstream asks for input (SEP-2322): answer, and call again.
                (Ok(ServerResult::InputRequiredResult(asked)), None) => {
                    let outcome = Box::pin(resend.drive(&upstream, asked, closed, &route)).await;
                    drop(route);
                    outcome
                }
                (Ok(result), None) => {
                    drop(route);
                    tool_result(result, &upstream)
                }
                // The call lives on as the task: what the upstream asks meanwhile (a question
                // it sends while the task waits in `input_required`) still belongs to it.
                (Ok(created), Some(task)) => {
                    let outcome =
                        Box::pin(task_call::follow(upstream, created, task, closed)).await;
                    drop(route);
                    outcome
                }
                (Err(outcome), _) => outcome,
            }
        };
        if span.is_none() {
            return (outcome.boxed(), canceller);
        }
        (traced(outcome, span).boxed(), canceller)
    }
}

/// `outcome` in the call's span, which records how the call ended. Combinators, not an
/// `async fn`, which would keep `outcome` twice (its argument, and the future it awaits).
fn traced(
    outcome: impl Future<Output = CallOutcome>,
    span: Span,
) -> impl Future<Output = CallOutcome> {
    outcome
        .instrument(span.clone())
        .inspect(move |outcome| match outcome {
            CallOutcome::Result(result) if result.is_error == Some(true) => {
                traces::tool_error(&span);
            }
            CallOutcome::Result(_) => {}
            CallOutcome::RpcError(error) => traces::rpc_error(&span, error.code.0, &error.message),
            CallOutcome::Failed { message, .. } => {
                span.record("error.type", "_OTHER");
                traces::failed(&span, message.as_str());
            }
        })
}

/// The span of one call sent upstream, a child of the job's span (the current one), when
/// traces are on: the `CLIENT` span of OpenTelemetry's MCP conventions for its
/// `tools/call` (the tap opens none for it), whose context the tool server gets. It ends
/// when the outcome is known, or when the job stops waiting for it (cancelled, timed out).
fn call_span(upstream: &Shared, tool: &str) -> Span {
    traces::span(|| {
        let transport = request_spans::network_transport(upstream.config.transport);
        tracing::info_span!(
            "upstream_call",
            otel.name = format!("tools/call {tool}"),
            otel.kind = "client",
            upstream = upstream.name(),
            mcp.method.name = "tools/call",
            jsonrpc.request.id = tracing::field::Empty,
            mcp.protocol.version = upstream.protocol(),
            gen_ai.tool.name = tool,
            gen_ai.operation.name = "execute_tool",
            network.transport = transport,
            error.type = tracing::field::Empty,
            rpc.response.status_code = tracing::field::Empty,
        )
    })
}

/// The upstream's answer to the request, or how the call ended without one.
pub(super) async fn answer(
    upstream: &str,
    rx: oneshot::Receiver<Result<ServerResult, ServiceError>>,
    mut closed: watch::Receiver<Option<String>>,
    route: &RouteGuard,
) -> Result<ServerResult, CallOutcome> {
    let answer = rx.await;
    let too_large = route.routes.too_large(route.marker);
    // The response is the end of a plain call: nothing the upstream says about it afterwards
    // belongs to it any more, so the caller drops the route at once (a task call keeps it).
    if let Some(limit) = too_large {
        return Err(CallOutcome::Failed {
            reason: FailureReason::ResultTooLarge,
            message: format!(
                "the answer of upstream {upstream} is larger than limits.max_result_bytes \
                 ({limit} bytes) and was dropped; ask the tool for less, or have the bridge's \
                 operator raise the limit"
            ),
        });
    }
    match answer {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(ServiceError::McpError(error))) => Err(CallOutcome::RpcError(error)),
        Ok(Err(ServiceError::TransportClosed)) | Err(_) => {
            let why =
                match tokio::time::timeout(CLOSE_REASON_WAIT, closed.wait_for(Option::is_some))
                    .await
                {
                    Ok(Ok(reason)) => reason.clone().unwrap_or_default(),
                    _ => "connection closed".to_string(),
                };
            Err(CallOutcome::Failed {
                reason: FailureReason::UpstreamLost,
                message: format!("upstream {upstream} went away during the call: {why}"),
            })
        }
        Ok(Err(error)) => Err(CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: format!("upstream {upstream}: {error}"),
        }),
    }
}

impl CallCanceller {
    /// Tell the upstream to stop. Its eventual answer, if any, is ignored by the caller.
    pub async fn cancel(&self, reason: &str) {
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(self.request_id()), Some(reason.to_string())),
        ));
        if let Err(e) = self.peer.send_notification(notification).await {
            tracing::debug!(error = %e, "cancel did not reach the upstream (connection gone)");
        }
        // The call became a task upstream: cancelling the request no longer stops it.
        if let Some((id, upstream)) = &self.task
            && let Some(id) = id.get()
        {
            // On the connection of the moment: the task may have outlived the first one.
            let peer = upstream.live_peer().unwrap_or_else(|| self.peer.clone());
            task_call::cancel(&peer, &upstream.metrics, id).await;
        }
    }

    /// The request in flight now.
    pub fn request_id(&self) -> RequestId {
        self.id.lock().clone()
    }
}
