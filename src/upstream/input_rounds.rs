//! A 2026-07-28 upstream's `input_required` answers to a `tools/call` (SEP-2322), driven to
//! the end.
//!
//! At 2026-07-28 a server asks for input by answering the call with `input_required`: a map
//! of requests (`elicitation/create`, `sampling/createMessage`, `roots/list`) and an opaque
//! `requestState`. The bridge answers each request the way it answers the same request sent
//! during a call on a handshake revision, through the call's [`CallSink`] (a question goes to
//! the waiting caller or to the job's people, a sample and roots to a waiting caller that has
//! them), then sends the same `tools/call` again with `inputResponses` and the `requestState`
//! echoed, for as many rounds as the upstream asks, up to `limits.max_input_rounds`. Each
//! round's requests are bounded in number (`limits.max_input_requests_per_round`) and its
//! state in size (`limits.max_request_state_bytes`); past a bound the job fails with a reason
//! that names it.

use std::{sync::Arc, time::Duration};

use futures::future::try_join_all;
use parking_lot::Mutex;
// Sampling and roots are deprecated by SEP-2577 but upstreams still ask for them.
#[allow(deprecated)]
use rmcp::{
    RoleClient,
    model::{
        CallToolRequest, CallToolRequestParams, ClientRequest, InputRequest, InputRequests,
        InputRequiredResult, InputResponses, JsonObject, RequestId, ServerResult,
    },
    service::{Peer, PeerRequestOptions},
};
use tokio::sync::watch;

use super::{
    UpstreamLimits,
    call::{CallOutcome, RouteGuard, answer, tool_result},
    tap::CallSink,
};
use crate::{metrics::Metrics, model::FailureReason};

/// The first pause before retrying a round that carries only `requestState` (the upstream
/// asks to be called again later), doubling up to [`STATE_ONLY_CAP`]; as the SDKs do.
pub(super) const STATE_ONLY_FIRST: Duration = Duration::from_millis(50);
pub(super) const STATE_ONLY_CAP: Duration = Duration::from_millis(250);

/// What a call needs to be sent again.
pub(super) struct Rounds {
    pub peer: Peer<RoleClient>,
    pub tool: String,
    pub arguments: Option<JsonObject>,
    pub sink: Arc<dyn CallSink>,
    pub limits: UpstreamLimits,
    pub metrics: Arc<Metrics>,
    /// The request now in flight (the canceller's target).
    pub current: Arc<Mutex<RequestId>>,
}

impl Rounds {
    /// Answer `asked` and retry, round after round, until the upstream gives a result, an
    /// error, or goes past a bound.
    pub(super) async fn drive(
        self,
        upstream: &str,
        mut asked: InputRequiredResult,
        closed: watch::Receiver<Option<String>>,
        route: &RouteGuard,
    ) -> CallOutcome {
        let mut round = 0;
        let mut pause = STATE_ONLY_FIRST;
        loop {
            round += 1;
            if let Err(failed) = self.check(upstream, round, &asked) {
                return failed;
            }
            let requests = asked.input_requests.take().unwrap_or_default();
            let responses = if requests.is_empty() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(STATE_ONLY_CAP);
                None
            } else {
                pause = STATE_ONLY_FIRST;
                match self.fulfil(upstream, requests).await {
                    Ok(responses) => Some(responses),
                    Err(failed) => return failed,
                }
            };
            let mut params = CallToolRequestParams::new(self.tool.clone());
            if let Some(arguments) = self.arguments.clone() {
                params = params.with_arguments(arguments);
            }
            params.input_responses = responses;
            params.request_state = asked.request_state.take();
            let mut request = CallToolRequest::new(params);
            request.extensions.insert(route.marker);
            let handle = match self
                .peer
                .send_request_with_option(
                    ClientRequest::CallToolRequest(request),
                    PeerRequestOptions::no_options(),
                )
                .await
            {
                Ok(handle) => handle,
                Err(e) => {
                    return CallOutcome::Failed {
                        reason: FailureReason::UpstreamLost,
                        message: format!(
                            "upstream {upstream}: the call could not be sent again with the \
                             answers to its input requests: {e}"
                        ),
                    };
                }
            };
            *self.current.lock() = handle.id.clone();
            match answer(upstream, handle.rx, closed.clone(), route).await {
                Ok(ServerResult::InputRequiredResult(next)) => asked = next,
                Ok(result) => return tool_result(result, upstream),
                Err(outcome) => return outcome,
            }
        }
    }

    /// The bounds of one round (`round` counts from 1).
    fn check(
        &self,
        upstream: &str,
        round: usize,
        asked: &InputRequiredResult,
    ) -> Result<(), CallOutcome> {
        check_round(
            &self.limits,
            &self.metrics,
            upstream,
            "the call",
            round,
            asked,
        )
        .map_err(|message| CallOutcome::Failed {
            reason: FailureReason::UpstreamError,
            message,
        })
    }

    async fn fulfil(
        &self,
        upstream: &str,
        requests: InputRequests,
    ) -> Result<InputResponses, CallOutcome> {
        fulfil(&self.sink, upstream, requests).await
    }
}

/// The bounds of one `input_required` answer to `what` (`round` counts from 1): the message
/// that says which was passed, after counting the hit. `round` 0 checks only the answer
/// itself (its requests and state), for rounds the bridge does not drive.
pub(super) fn check_round(
    limits: &UpstreamLimits,
    metrics: &Metrics,
    upstream: &str,
    what: &str,
    round: usize,
    asked: &InputRequiredResult,
) -> Result<(), String> {
    let requests = asked.input_requests.as_ref().map_or(0, |r| r.len());
    let state = asked.request_state.as_ref().map_or(0, String::len);
    let (limit, message) = if round > limits.max_input_rounds {
        (
            "max_input_rounds",
            format!(
                "upstream {upstream} answered {what} with input_required {round} times, \
                 more than limits.max_input_rounds ({}): the bridge stopped answering it. \
                 The upstream keeps asking; ask its operator why, or have the bridge's operator \
                 raise the limit",
                limits.max_input_rounds
            ),
        )
    } else if requests > limits.max_input_requests_per_round {
        (
            "max_input_requests_per_round",
            format!(
                "upstream {upstream} asked for {requests} inputs in one input_required \
                 answer, more than limits.max_input_requests_per_round ({}); the bridge \
                 answered none of them",
                limits.max_input_requests_per_round
            ),
        )
    } else if state > limits.max_request_state_bytes {
        (
            "max_request_state_bytes",
            format!(
                "upstream {upstream} sent a requestState of {state} bytes in its \
                 input_required answer, more than limits.max_request_state_bytes ({}); the \
                 bridge does not send it back",
                limits.max_request_state_bytes
            ),
        )
    } else {
        return Ok(());
    };
    metrics.limit_hits.with_label_values(&[limit]).inc();
    Err(message)
}

/// Every request of one round answered, all at once (a person may answer two questions in
/// any order). A sample nobody gives ends the call at once (the questions of the round
/// still waiting are dropped): the upstream cannot go on without it.
#[allow(deprecated)]
pub(super) async fn fulfil(
    sink: &Arc<dyn CallSink>,
    upstream: &str,
    requests: InputRequests,
) -> Result<InputResponses, CallOutcome> {
    let answers = try_join_all(requests.into_iter().map(|(key, request)| async move {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(sink.input(request.params).await)
            }
            InputRequest::ListRoots(_) => serde_json::to_value(sink.roots().await),
            InputRequest::CreateMessage(request) => match sink.sample(request.params).await {
                Ok(sample) => serde_json::to_value(sample),
                Err(refused) => {
                    return Err(CallOutcome::Failed {
                        reason: FailureReason::Unsupported,
                        message: format!(
                            "upstream {upstream} needs a sample (sampling/createMessage \
                             {key:?} in its input_required answer) to go on, and none was \
                             given: {}",
                            refused.message
                        ),
                    });
                }
            },
            #[allow(unreachable_patterns)]
            _ => {
                return Err(CallOutcome::Failed {
                    reason: FailureReason::Unsupported,
                    message: format!(
                        "upstream {upstream} asked for input {key:?} of a kind the bridge \
                         does not know"
                    ),
                });
            }
        };
        answer
            .map(|value| (key, value))
            .map_err(|e| CallOutcome::Failed {
                reason: FailureReason::Internal,
                message: format!("an answer for upstream {upstream} could not be written: {e}"),
            })
    }))
    .await?;
    Ok(answers.into_iter().collect())
}
