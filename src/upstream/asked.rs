//! `prompts/get` and `resources/read` answered with `input_required` by a 2026-07-28 upstream
//! (SEP-2322): the prompt or resource needs an answer first.
//!
//! Unlike a tool call there is no job here, so nobody but the caller can answer. What the
//! caller's revision allows decides the way ([`Asking`]):
//! - a caller at 2026-07-28 speaks the same rounds: the `input_required` answer goes to it as
//!   it came and its retry (same prompt or URI, with `inputResponses` and the `requestState`)
//!   is routed like any request, to the same upstream. The bridge keeps nothing between the
//!   two; it checks each answer against `limits.max_input_requests_per_round` and
//!   `limits.max_request_state_bytes` (the caller's own SDK bounds the rounds it drives).
//! - a caller below 2026-07-28 cannot be sent `input_required` (rmcp refuses to), so the
//!   bridge drives the rounds: each request is answered through a [`CallSink`] (the front's
//!   relay to the caller's session, by what it declared), and the request is sent again with
//!   `inputResponses` and the `requestState` echoed, up to `limits.max_input_rounds`, as a
//!   tool call's rounds are (`input_rounds`).
//!
//! A bound passed or a sample nobody gives is an error to the caller that names it.

use std::{future::Future, sync::Arc};

use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, InputRequiredResult, InputResponses,
    ReadResourceRequestParams, ReadResourceResponse,
};

use super::{
    Upstream,
    call::CallOutcome,
    input_rounds::{STATE_ONLY_CAP, STATE_ONLY_FIRST, check_round, fulfil},
    requests::RequestError,
    tap::CallSink,
};

/// Who answers an upstream's `input_required` answer to a `prompts/get` or `resources/read`.
pub enum Asking {
    /// The caller (at 2026-07-28): the answer is passed on, bounds checked.
    PassOn,
    /// The bridge, through this sink (the caller's session, by what it declared), round after
    /// round.
    Answer(Arc<dyn CallSink>),
}

/// A request that can be sent again with the answers to its input requests.
pub(super) trait Retry: Clone {
    fn retry(&mut self, responses: Option<InputResponses>, state: Option<String>);
}

/// An answer that may be `input_required`.
pub(super) trait MaybeAsked: Sized {
    /// The completed answer, or what the upstream asks.
    fn split(self) -> Result<Self, InputRequiredResult>;
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
    fn split(self) -> Result<Self, InputRequiredResult> {
        match self {
            GetPromptResponse::InputRequired(asked) => Err(asked),
            done => Ok(done),
        }
    }
    fn asked(asked: InputRequiredResult) -> Self {
        GetPromptResponse::InputRequired(asked)
    }
}

impl MaybeAsked for ReadResourceResponse {
    fn split(self) -> Result<Self, InputRequiredResult> {
        match self {
            ReadResourceResponse::InputRequired(asked) => Err(asked),
            done => Ok(done),
        }
    }
    fn asked(asked: InputRequiredResult) -> Self {
        ReadResourceResponse::InputRequired(asked)
    }
}

impl Upstream {
    /// Send `params` with `send`, and deal with `input_required` answers as `asking` says.
    pub(super) async fn with_rounds<P, R, Fut>(
        &self,
        method: &'static str,
        asking: Asking,
        mut params: P,
        send: impl Fn(P) -> Fut,
    ) -> Result<R, RequestError>
    where
        P: Retry,
        R: MaybeAsked,
        Fut: Future<Output = Result<R, RequestError>>,
    {
        let limits = &self.inner.limits;
        let metrics = &self.inner.metrics;
        let what = format!("a {method}");
        let refused = |message: String| RequestError::Input {
            name: self.name().to_string(),
            method,
            message,
        };
        let sink = match asking {
            Asking::PassOn => {
                return match send(params).await?.split() {
                    Ok(done) => Ok(done),
                    Err(asked) => {
                        check_round(limits, metrics, self.name(), &what, 0, &asked)
                            .map_err(refused)?;
                        Ok(R::asked(asked))
                    }
                };
            }
            Asking::Answer(sink) => sink,
        };
        let mut pause = STATE_ONLY_FIRST;
        let mut round = 0;
        loop {
            let mut asked = match send(params.clone()).await?.split() {
                Ok(done) => return Ok(done),
                Err(asked) => asked,
            };
            round += 1;
            check_round(limits, metrics, self.name(), &what, round, &asked).map_err(refused)?;
            let requests = asked.input_requests.take().unwrap_or_default();
            let responses = if requests.is_empty() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(STATE_ONLY_CAP);
                None
            } else {
                pause = STATE_ONLY_FIRST;
                match fulfil(&sink, self.name(), requests).await {
                    Ok(responses) => Some(responses),
                    Err(CallOutcome::Failed { message, .. }) => return Err(refused(message)),
                    Err(_) => {
                        return Err(refused(
                            "the bridge could not answer the upstream's input requests".into(),
                        ));
                    }
                }
            };
            params.retry(responses, asked.request_state.take());
        }
    }
}
