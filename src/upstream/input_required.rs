//! An upstream's `input_required` answers (SEP-2322, the session-less revision): a map of
//! requests (questions, samples, roots) and an opaque `requestState`, instead of requests sent
//! during the call. [`drive`] answers each round's requests through the request's [`CallSink`]
//! (as if sent during the call on a handshake revision) and sends the request again with
//! `inputResponses` and the state echoed, round after round, within `limits.max_input_rounds`,
//! `max_input_requests_per_round` and `max_request_state_bytes`. A `tools/call` is driven so
//! (`call.rs`); a `prompts/get` or `resources/read` too, or passed on to a caller who answers
//! the rounds itself, as [`Asking`] says. A bound passed, or a sample nobody gives, stops it
//! with a message that names it.

use std::{future::Future, sync::Arc, time::Duration};

use futures::future::try_join_all;
// Sampling and roots are deprecated by SEP-2577 but upstreams still ask for them.
#[allow(deprecated)]
use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, ReadResourceRequestParams, ReadResourceResponse,
};

use super::{shared::UpstreamLimits, tap::CallSink};
use crate::{metrics::Metrics, model::FailureReason};

/// The first pause before retrying a round that carries only `requestState` (the upstream
/// asks to be called again later), doubling up to [`STATE_ONLY_CAP`]; as the SDKs do.
const STATE_ONLY_FIRST: Duration = Duration::from_millis(50);
const STATE_ONLY_CAP: Duration = Duration::from_millis(250);

/// Who answers an upstream's `input_required` answer to a `prompts/get` or `resources/read`.
pub enum Asking {
    /// The caller (on the session-less revision): the answer is passed on, bounds checked.
    PassOn,
    /// The bridge, through this sink (the caller's session, by what it declared), round after
    /// round.
    Answer(Arc<dyn CallSink>),
}

/// One answer of the upstream: final, or asking for input.
pub(super) enum Round<T> {
    Done(T),
    Asked(InputRequiredResult),
}

/// Why the rounds ended without the upstream's final answer.
pub(super) enum Stop<E> {
    /// The bridge stopped: a bound passed, or a request it could not answer.
    Stopped {
        reason: FailureReason,
        message: String,
    },
    /// Sending the request again failed.
    Failed(E),
}

/// What the rounds of one request are bounded by, and named as in messages.
pub(super) struct Bounds<'a> {
    pub limits: &'a UpstreamLimits,
    pub metrics: &'a Metrics,
    pub upstream: &'a str,
    /// The request, as messages name it ("the call", "a prompts/get").
    pub what: &'a str,
}

/// Answer `asked` and send again (`send_again(responses, state)`), round after round, until the
/// upstream answers for good or passes a bound.
pub(super) async fn drive<T, E, Fut>(
    bounds: Bounds<'_>,
    sink: &Arc<dyn CallSink>,
    mut asked: InputRequiredResult,
    mut send_again: impl FnMut(Option<InputResponses>, Option<String>) -> Fut,
) -> Result<T, Stop<E>>
where
    Fut: Future<Output = Result<Round<T>, E>>,
{
    let mut pause = STATE_ONLY_FIRST;
    let mut round = 0;
    loop {
        round += 1;
        check_round(&bounds, round, &asked).map_err(|message| Stop::Stopped {
            reason: FailureReason::UpstreamError,
            message,
        })?;
        let requests = asked.input_requests.take().unwrap_or_default();
        let responses = if requests.is_empty() {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(STATE_ONLY_CAP);
            None
        } else {
            pause = STATE_ONLY_FIRST;
            Some(fulfil(sink, bounds.upstream, requests).await?)
        };
        match send_again(responses, asked.request_state.take()).await {
            Ok(Round::Done(done)) => return Ok(done),
            Ok(Round::Asked(next)) => asked = next,
            Err(e) => return Err(Stop::Failed(e)),
        }
    }
}

/// The bounds of one `input_required` answer (`round` counts from 1): the message that says
/// which was passed, after counting the hit. `round` 0 checks only the answer itself (its
/// requests and state), for rounds the bridge does not drive.
pub(super) fn check_round(
    bounds: &Bounds<'_>,
    round: usize,
    asked: &InputRequiredResult,
) -> Result<(), String> {
    let Bounds {
        limits,
        upstream,
        what,
        ..
    } = bounds;
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
    bounds.metrics.limit_hits.with_label_values(&[limit]).inc();
    Err(message)
}

/// Every request of one round answered, all at once (a person may answer two questions in any
/// order). A sample nobody gives ends the rounds at once (the questions of the round still
/// waiting are dropped): the upstream cannot go on without it.
#[allow(deprecated)]
async fn fulfil<E>(
    sink: &Arc<dyn CallSink>,
    upstream: &str,
    requests: InputRequests,
) -> Result<InputResponses, Stop<E>> {
    let stopped = |reason, message| Stop::Stopped { reason, message };
    let answers = try_join_all(requests.into_iter().map(|(key, request)| async move {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(sink.input(request.params).await)
            }
            InputRequest::ListRoots(_) => serde_json::to_value(sink.roots().await),
            InputRequest::CreateMessage(request) => match sink.sample(request.params).await {
                Ok(sample) => serde_json::to_value(sample),
                Err(refused) => {
                    let message = format!(
                        "upstream {upstream} needs a sample (sampling/createMessage {key:?} in \
                         its input_required answer) to go on, and none was given: {}",
                        refused.message
                    );
                    return Err(stopped(FailureReason::Unsupported, message));
                }
            },
            #[allow(unreachable_patterns)]
            _ => {
                let message = format!(
                    "upstream {upstream} asked for input {key:?} of a kind the bridge does not know"
                );
                return Err(stopped(FailureReason::Unsupported, message));
            }
        };
        answer.map(|value| (key, value)).map_err(|e| {
            let message = format!("an answer for upstream {upstream} could not be written: {e}");
            stopped(FailureReason::Internal, message)
        })
    }))
    .await?;
    Ok(answers.into_iter().collect())
}

/// A request that can be sent again with the answers to its input requests.
pub(super) trait Retry: Clone {
    fn retry(&mut self, responses: Option<InputResponses>, state: Option<String>);
}

/// An answer that may be `input_required`.
pub(super) trait MaybeAsked: Sized {
    /// The completed answer, or what the upstream asks.
    fn split(self) -> Round<Self>;
    fn asked(asked: InputRequiredResult) -> Self;
}

impl Retry for GetPromptRequestParams {
    fn retry(&mut self, responses: Option<InputResponses>, state: Option<String>) {
        self.input_responses = responses;
        self.request_state = state;
    }
}

impl Retry for ReadResourceRequestParams {
    fn retry(&mut self, responses: Option<InputResponses>, state: Option<String>) {
        self.input_responses = responses;
        self.request_state = state;
    }
}

impl MaybeAsked for GetPromptResponse {
    fn split(self) -> Round<Self> {
        match self {
            GetPromptResponse::InputRequired(asked) => Round::Asked(asked),
            done => Round::Done(done),
        }
    }
    fn asked(asked: InputRequiredResult) -> Self {
        GetPromptResponse::InputRequired(asked)
    }
}

impl MaybeAsked for ReadResourceResponse {
    fn split(self) -> Round<Self> {
        match self {
            ReadResourceResponse::InputRequired(asked) => Round::Asked(asked),
            done => Round::Done(done),
        }
    }
    fn asked(asked: InputRequiredResult) -> Self {
        ReadResourceResponse::InputRequired(asked)
    }
}
