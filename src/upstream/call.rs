//! One `tools/call` in flight on an upstream: its outcome, and the way to cancel it.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};
use rmcp::{
    ErrorData, RoleClient, ServiceError,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
        CancelledNotificationParam, ClientNotification, ClientRequest, JsonObject, RequestId,
        RequestMetaObject, ServerResult,
    },
    service::{Peer, PeerRequestOptions},
};
use tokio::sync::{oneshot, watch};
use tracing::{Instrument, Span};

use super::{
    Upstream, UpstreamError,
    tap::{CallRoutes, CallSink, RouteMarker},
};
use crate::{model::FailureReason, traces};

/// How long to wait, after a connection dropped mid-call, for the supervisor to learn why
/// (a child's exit status takes a moment to be reaped).
const CLOSE_REASON_WAIT: Duration = Duration::from_secs(2);

/// How an upstream call ended.
#[derive(Debug)]
pub enum CallOutcome {
    /// The upstream's result; `is_error: Some(true)` is a tool error, still a result.
    Result(CallToolResult),
    /// The upstream answered with a JSON-RPC error.
    RpcError(ErrorData),
    /// No answer: the connection dropped, or the answer was not a tool result.
    Failed {
        reason: FailureReason,
        message: String,
    },
}

/// A call sent upstream. Split it into the outcome (a future) and the canceller.
pub struct UpstreamCall {
    upstream: String,
    /// Open until the outcome is known or no longer awaited (see [`call_span`]).
    span: Span,
    rx: oneshot::Receiver<Result<ServerResult, ServiceError>>,
    closed: watch::Receiver<Option<String>>,
    route: RouteGuard,
    canceller: CallCanceller,
}

/// Sends `notifications/cancelled` for one call, to the one upstream that runs it.
#[derive(Clone)]
pub struct CallCanceller {
    peer: Peer<RoleClient>,
    id: RequestId,
}

/// Unroutes the call's notifications when the call is over or abandoned.
struct RouteGuard {
    routes: Arc<CallRoutes>,
    marker: RouteMarker,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.remove(self.marker);
    }
}

impl Upstream {
    /// Send `tools/call` for `tool` (the upstream's own name). Progress and log notifications
    /// of the call go to `sink` until the outcome is known. With traces on, the request's
    /// `_meta` carries the call's trace context (`traceparent`, `tracestate`): rmcp's client
    /// adds its `progressToken` to `_meta` and leaves the other keys alone.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        sink: Arc<dyn CallSink>,
    ) -> Result<UpstreamCall, UpstreamError> {
        let Some(live) = self.live() else {
            return Err(self.not_connected());
        };
        let route = RouteGuard {
            routes: self.inner.routes.clone(),
            marker: self.inner.routes.add(sink),
        };
        let span = call_span(self.name(), tool);
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let mut options = PeerRequestOptions::no_options();
        if let Some(trace) = traces::propagation(&span) {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(trace.traceparent);
            if let Some(state) = trace.tracestate {
                meta.set_tracestate(state);
            }
            options = options.with_meta(meta);
        }
        let mut request = CallToolRequest::new(params);
        request.extensions.insert(route.marker);
        let handle = live
            .peer
            .send_request_with_option(ClientRequest::CallToolRequest(request), options)
            .await
            .map_err(|source| UpstreamError::Send {
                name: self.name().to_string(),
                source,
            })?;
        Ok(UpstreamCall {
            upstream: self.name().to_string(),
            span,
            rx: handle.rx,
            closed: live.closed,
            route,
            canceller: CallCanceller {
                peer: live.peer,
                id: handle.id,
            },
        })
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
        } = self;
        let outcome = outcome(upstream, rx, closed, route);
        if span.is_none() {
            return (outcome.boxed(), canceller);
        }
        (traced(outcome, span).boxed(), canceller)
    }
}

/// `outcome` in the call's span, which records how the call ended.
async fn traced(outcome: impl Future<Output = CallOutcome>, span: Span) -> CallOutcome {
    let outcome = outcome.instrument(span.clone()).await;
    match &outcome {
        CallOutcome::Result(result) if result.is_error == Some(true) => {
            traces::failed(&span, "tool error");
        }
        CallOutcome::Result(_) => {}
        CallOutcome::RpcError(error) => traces::failed(&span, error.message.as_ref()),
        CallOutcome::Failed { message, .. } => traces::failed(&span, message.as_str()),
    }
    outcome
}

/// The span of one call sent upstream, a child of the job's span (the current one), when
/// traces are on. It ends when the outcome is known, or when the job stops waiting for it
/// (cancelled, timed out).
fn call_span(upstream: &str, tool: &str) -> Span {
    traces::span(|| tracing::info_span!("upstream_call", upstream, upstream_tool = tool))
}

async fn outcome(
    upstream: String,
    rx: oneshot::Receiver<Result<ServerResult, ServiceError>>,
    mut closed: watch::Receiver<Option<String>>,
    route: RouteGuard,
) -> CallOutcome {
    let answer = rx.await;
    let too_large = route.routes.too_large(route.marker);
    // The response is the end of the call: nothing the upstream says about it afterwards
    // belongs to it any more.
    drop(route);
    if let Some(limit) = too_large {
        return CallOutcome::Failed {
            reason: FailureReason::ResultTooLarge,
            message: format!(
                "the answer of upstream {upstream} is larger than limits.max_result_bytes \
                 ({limit} bytes) and was dropped; ask the tool for less, or have the bridge's \
                 operator raise the limit"
            ),
        };
    }
    match answer {
        Ok(Ok(result)) => tool_result(result, &upstream),
        Ok(Err(ServiceError::McpError(error))) => CallOutcome::RpcError(error),
        Ok(Err(ServiceError::TransportClosed)) | Err(_) => {
            let why =
                match tokio::time::timeout(CLOSE_REASON_WAIT, closed.wait_for(Option::is_some))
                    .await
                {
                    Ok(Ok(reason)) => reason.clone().unwrap_or_default(),
                    _ => "connection closed".to_string(),
                };
            CallOutcome::Failed {
                reason: FailureReason::UpstreamLost,
                message: format!("upstream {upstream} went away during the call: {why}"),
            }
        }
        Ok(Err(error)) => CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: format!("upstream {upstream}: {error}"),
        },
    }
}

fn tool_result(result: ServerResult, upstream: &str) -> CallOutcome {
    match result {
        ServerResult::CallToolResult(result) => CallOutcome::Result(result),
        // A server may answer a tool call with an empty object; that is an empty result.
        ServerResult::EmptyResult(_) => CallOutcome::Result(CallToolResult::default()),
        ServerResult::InputRequiredResult(_) => CallOutcome::Failed {
            reason: FailureReason::Unsupported,
            message: format!(
                "upstream {upstream} asked for user input during the call, which the bridge cannot provide"
            ),
        },
        ServerResult::CreateTaskResult(_) => CallOutcome::Failed {
            reason: FailureReason::Unsupported,
            message: format!(
                "upstream {upstream} answered with a task, which the bridge did not ask for"
            ),
        },
        ServerResult::CustomResult(custom) => {
            match serde_json::from_value::<CallToolResult>(custom.0) {
                Ok(result) => CallOutcome::Result(result),
                Err(e) => CallOutcome::Failed {
                    reason: FailureReason::UpstreamError,
                    message: format!(
                        "upstream {upstream} answered with something that is not a tool result: {e}"
                    ),
                },
            }
        }
        _ => CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message: format!(
                "upstream {upstream} answered with something that is not a tool result"
            ),
        },
    }
}

impl CallCanceller {
    /// Tell the upstream to stop. Its eventual answer, if any, is ignored by the caller.
    pub async fn cancel(&self, reason: &str) {
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(self.id.clone()), Some(reason.to_string())),
        ));
        if let Err(e) = self.peer.send_notification(notification).await {
            tracing::debug!(error = %e, "cancel did not reach the upstream (connection gone)");
        }
    }

    pub fn request_id(&self) -> &RequestId {
        &self.id
    }
}
