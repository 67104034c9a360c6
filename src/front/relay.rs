//! Requests an upstream makes of the MCP caller, relayed on the caller's session: a question
//! (`elicitation/create`), a sample of its model (`sampling/createMessage`), its roots
//! (`roots/list`). Used for a waiting sync tool call (`call`, where a question the caller does
//! not take goes to the job instead) and for a `prompts/get` or `resources/read` that a
//! 2026-07-28 upstream answers with `input_required` for a caller below 2026-07-28 ([`Relay`]:
//! no job there, so the caller is the only one who can answer).

use std::time::Duration;

use futures::{FutureExt, future::BoxFuture};
// Sampling and roots are deprecated by SEP-2577 but upstreams still ask for them.
#[allow(deprecated)]
use rmcp::{
    ErrorData, RoleServer,
    model::{
        ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ListRootsRequest,
        ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, ServerRequest,
    },
    service::{Peer, RequestContext},
};

use crate::upstream::{CallSink, no_sampling};

/// Send `elicitation/create` to a peer (rmcp's typed helper is behind a feature the bridge
/// does not otherwise need).
pub(super) async fn elicit(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, rmcp::ServiceError> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await? {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Ask a peer for a sample; its own refusal goes back as it is.
#[allow(deprecated)]
pub(super) async fn sample(
    peer: &Peer<RoleServer>,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, ErrorData> {
    let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::CreateMessageResult(result)) => Ok(*result),
        Ok(_) => Err(ErrorData::internal_error(
            "the MCP caller answered sampling/createMessage with something else",
            None,
        )),
        Err(rmcp::ServiceError::McpError(e)) => Err(e),
        Err(e) => Err(ErrorData::internal_error(
            format!("the MCP caller did not answer sampling/createMessage: {e}"),
            None,
        )),
    }
}

/// Ask a peer for its roots; none when it gives none.
#[allow(deprecated)]
pub(super) async fn roots(peer: &Peer<RoleServer>) -> ListRootsResult {
    let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
    match peer.send_request(request).await {
        Ok(ClientResult::ListRootsResult(result)) => result,
        other => {
            tracing::info!(outcome = ?other.err(), "the MCP caller gave no roots");
            ListRootsResult::default()
        }
    }
}

/// Whether the caller of this request takes form elicitation requests.
pub(super) fn takes_questions(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|caps| caps.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The caller of one `prompts/get` or `resources/read`, as the answerer of its upstream's
/// `input_required` rounds: each request goes to it if it declared the capability; a question
/// it did not declare, or does not answer within `jobs.input_timeout_secs`, is declined; a
/// sample it cannot give is refused (the request then fails, saying so); roots it cannot give
/// are none. Progress and log lines of such a request have nowhere to go.
pub(super) struct Relay {
    peer: Peer<RoleServer>,
    questions: bool,
    sampling: bool,
    roots: bool,
    patience: Duration,
}

impl Relay {
    pub(super) fn of(context: &RequestContext<RoleServer>, patience: Duration) -> Self {
        let capabilities = context.client_capabilities().unwrap_or_default();
        #[allow(deprecated)]
        Self {
            peer: context.peer.clone(),
            questions: takes_questions(context),
            sampling: capabilities.sampling.is_some(),
            roots: capabilities.roots.is_some(),
            patience,
        }
    }
}

impl CallSink for Relay {
    fn progress(&self, _progress: &ProgressNotificationParam) {}

    #[allow(deprecated)]
    fn log(&self, _message: &LoggingMessageNotificationParam) {}

    fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        let (peer, asks, patience) = (self.peer.clone(), self.questions, self.patience);
        async move {
            if asks {
                match tokio::time::timeout(patience, elicit(&peer, request)).await {
                    Ok(Ok(answer)) => return answer,
                    Ok(Err(e)) => {
                        tracing::info!(error = %e, "the MCP caller did not answer a question")
                    }
                    Err(_) => tracing::info!(
                        "the MCP caller did not answer a question within jobs.input_timeout_secs"
                    ),
                }
            }
            ElicitResult::new(ElicitationAction::Decline)
        }
        .boxed()
    }

    #[allow(deprecated)]
    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let (peer, takes, patience) = (self.peer.clone(), self.sampling, self.patience);
        async move {
            if !takes {
                return Err(no_sampling());
            }
            tokio::time::timeout(patience, sample(&peer, request))
                .await
                .unwrap_or_else(|_| {
                    Err(ErrorData::internal_error(
                        "the MCP caller did not answer sampling/createMessage within \
                         jobs.input_timeout_secs",
                        None,
                    ))
                })
        }
        .boxed()
    }

    #[allow(deprecated)]
    fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        let (peer, takes, patience) = (self.peer.clone(), self.roots, self.patience);
        async move {
            if !takes {
                return ListRootsResult::default();
            }
            tokio::time::timeout(patience, roots(&peer))
                .await
                .unwrap_or_default()
        }
        .boxed()
    }
}
