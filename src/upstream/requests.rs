//! Requests the front routes to the one upstream that owns a resource, prompt or completion:
//! `resources/read`, `prompts/get`, `completion/complete`, and `resources/subscribe` /
//! `unsubscribe`, which are counted here so that one upstream subscription serves every
//! caller subscribed to the same URI and is renewed when the upstream reconnects.

use std::time::Duration;

use rmcp::{
    ErrorData, ServiceError,
    model::{
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        ReadResourceRequestParams, ReadResourceResponse, ResourceContents, SubscribeRequestParams,
        UnsubscribeRequestParams,
    },
};

use super::{Upstream, UpstreamError, input_required::Asking};

/// How long one routed request may take upstream before the caller gets an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    NotConnected(#[from] UpstreamError),
    /// The upstream answered with a JSON-RPC error: passed on to the caller as it is.
    #[error("{}", .0.message)]
    Upstream(ErrorData),
    #[error("upstream {name} did not answer {method}: {source}; try again shortly")]
    Failed {
        name: String,
        method: &'static str,
        #[source]
        source: ServiceError,
    },
    #[error(
        "upstream {name} did not answer {method} within {REQUEST_TIMEOUT:?}; try again, or ask its operator why it is slow"
    )]
    Timeout { name: String, method: &'static str },
    /// The upstream answered with `input_required` and the bridge could not (or may not)
    /// answer it: a bound passed, or a sample nobody gives.
    #[error("{method} to upstream {name} needs input the bridge could not give: {message}")]
    Input {
        name: String,
        method: &'static str,
        message: String,
    },
    #[error(
        "resource {uri} of upstream {name} is {size} bytes, more than limits.max_resource_read_bytes ({limit}); the bridge does not pass it on (an operator can raise the limit)"
    )]
    TooLarge {
        name: String,
        uri: String,
        size: usize,
        limit: usize,
    },
}

impl Upstream {
    /// `resources/read` of `params.uri` (the upstream's own URI). A result larger than
    /// `limits.max_resource_read_bytes` (text and base64 blobs added up) is refused. An
    /// `input_required` answer goes as `asking` says (see `input_required`).
    pub async fn read_resource(
        &self,
        mut params: ReadResourceRequestParams,
        asking: Asking,
    ) -> Result<ReadResourceResponse, RequestError> {
        params.meta = None;
        self.with_rounds("resources/read", asking, params, |params| {
            self.read_resource_once(params)
        })
        .await
    }

    async fn read_resource_once(
        &self,
        params: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, RequestError> {
        let peer = self.peer()?;
        let uri = params.uri.clone();
        let answer = self
            .request("resources/read", peer.read_resource_once(params))
            .await?;
        if let ReadResourceResponse::Complete(result) = &answer {
            let size: usize = result.contents.iter().map(content_bytes).sum();
            let limit = self.inner.limits.max_resource_read_bytes;
            if size > limit {
                self.inner
                    .metrics
                    .limit_hits
                    .with_label_values(&["max_resource_read_bytes"])
                    .inc();
                return Err(RequestError::TooLarge {
                    name: self.name().to_string(),
                    uri,
                    size,
                    limit,
                });
            }
        }
        Ok(answer)
    }

    /// `prompts/get` of `params.name` (the upstream's own name). An `input_required` answer
    /// goes as `asking` says (see `input_required`).
    pub async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        asking: Asking,
    ) -> Result<GetPromptResponse, RequestError> {
        params.meta = None;
        self.with_rounds("prompts/get", asking, params, |params| async move {
            let peer = self.peer()?;
            self.request("prompts/get", peer.get_prompt_once(params))
                .await
        })
        .await
    }

    /// `completion/complete`, its reference already in the upstream's own terms.
    pub async fn complete(
        &self,
        mut params: CompleteRequestParams,
    ) -> Result<CompleteResult, RequestError> {
        let peer = self.peer()?;
        params.meta = None;
        self.request("completion/complete", peer.complete(params))
            .await
    }

    /// One more caller wants updates of `uri`: the first one subscribes upstream.
    pub async fn subscribe(&self, uri: &str) -> Result<(), RequestError> {
        let first = {
            let mut subscriptions = self.subscriptions();
            let count = subscriptions.entry(uri.to_string()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if !first {
            return Ok(());
        }
        let sent = match self.peer() {
            Ok(peer) => {
                #[allow(deprecated)]
                let request = peer.subscribe(SubscribeRequestParams::new(uri));
                self.request("resources/subscribe", request).await
            }
            Err(e) => Err(e),
        };
        if sent.is_err() {
            self.release(uri);
        }
        sent
    }

    /// One caller less wants updates of `uri`: the last one unsubscribes upstream.
    pub async fn unsubscribe(&self, uri: &str) {
        if !self.release(uri) {
            return;
        }
        let Ok(peer) = self.peer() else { return };
        #[allow(deprecated)]
        let request = peer.unsubscribe(UnsubscribeRequestParams::new(uri));
        if let Err(e) = self.request("resources/unsubscribe", request).await {
            tracing::debug!(upstream = %self.name(), %uri, error = %e, "unsubscribe failed");
        }
    }

    /// After a reconnect: subscribe again to every URI some caller still follows.
    pub(super) async fn resubscribe(&self) {
        let uris: Vec<String> = self.subscriptions().keys().cloned().collect();
        let Ok(peer) = self.peer() else { return };
        for uri in uris {
            #[allow(deprecated)]
            let request = peer.subscribe(SubscribeRequestParams::new(uri.clone()));
            if let Err(e) = self.request("resources/subscribe", request).await {
                tracing::warn!(upstream = %self.name(), %uri, error = %e,
                    "could not renew a resource subscription after reconnecting");
            }
        }
    }

    /// Count one subscriber of `uri` less; whether it was the last.
    fn release(&self, uri: &str) -> bool {
        let mut subscriptions = self.subscriptions();
        match subscriptions.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                subscriptions.remove(uri);
                true
            }
            None => false,
        }
    }

    fn subscriptions(
        &self,
    ) -> parking_lot::MutexGuard<'_, std::collections::HashMap<String, usize>> {
        self.inner.subscriptions.lock()
    }

    fn peer(&self) -> Result<rmcp::Peer<rmcp::RoleClient>, RequestError> {
        match self.live() {
            Some(live) => Ok(live.peer),
            None => Err(self.not_connected().into()),
        }
    }

    async fn request<T>(
        &self,
        method: &'static str,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, RequestError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(error))) => Err(RequestError::Upstream(error)),
            Ok(Err(source)) => Err(RequestError::Failed {
                name: self.name().to_string(),
                method,
                source,
            }),
            Err(_) => Err(RequestError::Timeout {
                name: self.name().to_string(),
                method,
            }),
        }
    }
}

fn content_bytes(content: &ResourceContents) -> usize {
    match content {
        ResourceContents::TextResourceContents { text, .. } => text.len(),
        ResourceContents::BlobResourceContents { blob, .. } => blob.len(),
        #[allow(unreachable_patterns)]
        _ => 0,
    }
}
