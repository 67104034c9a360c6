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

use super::{
    UpstreamError,
    input_required::{self, Asking, Bounds, MaybeAsked, Retry, Round, Stop},
    shared::Shared,
};

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

/// `resources/read` of `params.uri` (the upstream's own URI). A result larger than
/// `limits.max_resource_read_bytes` (text and base64 blobs added up) is refused. An
/// `input_required` answer goes as `asking` says (see `input_required`).
pub(super) async fn read_resource(
    upstream: &Shared,
    mut params: ReadResourceRequestParams,
    asking: Asking,
) -> Result<ReadResourceResponse, RequestError> {
    params.meta = None;
    with_rounds(upstream, "resources/read", asking, params, |params| {
        read_resource_once(upstream, params)
    })
    .await
}

async fn read_resource_once(
    upstream: &Shared,
    params: ReadResourceRequestParams,
) -> Result<ReadResourceResponse, RequestError> {
    let peer = peer(upstream)?;
    let uri = params.uri.clone();
    let answer = request(upstream, "resources/read", peer.read_resource_once(params)).await?;
    if let ReadResourceResponse::Complete(result) = &answer {
        let size: usize = result.contents.iter().map(content_bytes).sum();
        let limit = upstream.limits.max_resource_read_bytes;
        if size > limit {
            upstream
                .metrics
                .limit_hits
                .with_label_values(&["max_resource_read_bytes"])
                .inc();
            return Err(RequestError::TooLarge {
                name: upstream.name().to_string(),
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
pub(super) async fn get_prompt(
    upstream: &Shared,
    mut params: GetPromptRequestParams,
    asking: Asking,
) -> Result<GetPromptResponse, RequestError> {
    params.meta = None;
    with_rounds(
        upstream,
        "prompts/get",
        asking,
        params,
        |params| async move {
            let peer = peer(upstream)?;
            request(upstream, "prompts/get", peer.get_prompt_once(params)).await
        },
    )
    .await
}

/// `completion/complete`, its reference already in the upstream's own terms.
pub(super) async fn complete(
    upstream: &Shared,
    mut params: CompleteRequestParams,
) -> Result<CompleteResult, RequestError> {
    let peer = peer(upstream)?;
    params.meta = None;
    request(upstream, "completion/complete", peer.complete(params)).await
}

/// One more caller wants updates of `uri`: the first one subscribes upstream.
pub(super) async fn subscribe(upstream: &Shared, uri: &str) -> Result<(), RequestError> {
    let first = {
        let mut subscriptions = upstream.subscriptions.lock();
        let count = subscriptions.entry(uri.to_string()).or_insert(0);
        *count += 1;
        *count == 1
    };
    if !first {
        return Ok(());
    }
    let sent = match peer(upstream) {
        Ok(peer) => {
            #[allow(deprecated)]
            let subscribe = peer.subscribe(SubscribeRequestParams::new(uri));
            request(upstream, "resources/subscribe", subscribe).await
        }
        Err(e) => Err(e),
    };
    if sent.is_err() {
        release(upstream, uri);
    }
    sent
}

/// One caller less wants updates of `uri`: the last one unsubscribes upstream.
pub(super) async fn unsubscribe(upstream: &Shared, uri: &str) {
    if !release(upstream, uri) {
        return;
    }
    let Ok(peer) = peer(upstream) else { return };
    #[allow(deprecated)]
    let unsubscribe = peer.unsubscribe(UnsubscribeRequestParams::new(uri));
    if let Err(e) = request(upstream, "resources/unsubscribe", unsubscribe).await {
        tracing::debug!(upstream = %upstream.name(), %uri, error = %e, "unsubscribe failed");
    }
}

/// After a reconnect: subscribe again to every URI some caller still follows.
pub(super) async fn resubscribe(upstream: &Shared) {
    let uris: Vec<String> = upstream.subscriptions.lock().keys().cloned().collect();
    let Ok(peer) = peer(upstream) else { return };
    for uri in uris {
        #[allow(deprecated)]
        let subscribe = peer.subscribe(SubscribeRequestParams::new(uri.clone()));
        if let Err(e) = request(upstream, "resources/subscribe", subscribe).await {
            tracing::warn!(upstream = %upstream.name(), %uri, error = %e,
                "could not renew a resource subscription after reconnecting");
        }
    }
}

/// Count one subscriber of `uri` less; whether it was the last.
fn release(upstream: &Shared, uri: &str) -> bool {
    let mut subscriptions = upstream.subscriptions.lock();
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

fn peer(upstream: &Shared) -> Result<rmcp::Peer<rmcp::RoleClient>, RequestError> {
    match upstream.live() {
        Some(live) => Ok(live.peer),
        None => Err(upstream.not_connected().into()),
    }
}

async fn request<T>(
    upstream: &Shared,
    method: &'static str,
    request: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, RequestError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(ServiceError::McpError(error))) => Err(RequestError::Upstream(error)),
        Ok(Err(source)) => Err(RequestError::Failed {
            name: upstream.name().to_string(),
            method,
            source,
        }),
        Err(_) => Err(RequestError::Timeout {
            name: upstream.name().to_string(),
            method,
        }),
    }
}

/// Send `params` with `send`, and deal with `input_required` answers as `asking` says.
async fn with_rounds<P, R, Fut>(
    upstream: &Shared,
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
    let what = format!("a {method}");
    let bounds = Bounds {
        limits: &upstream.limits,
        metrics: &upstream.metrics,
        upstream: upstream.name(),
        what: &what,
    };
    let refused = |message: String| RequestError::Input {
        name: upstream.name().to_string(),
        method,
        message,
    };
    let sink = match asking {
        Asking::PassOn => {
            return match send(params).await?.split() {
                Round::Done(done) => Ok(done),
                Round::Asked(asked) => {
                    input_required::check_round(&bounds, 0, &asked).map_err(refused)?;
                    Ok(R::asked(asked))
                }
            };
        }
        Asking::Answer(sink) => sink,
    };
    let asked = match send(params.clone()).await?.split() {
        Round::Done(done) => return Ok(done),
        Round::Asked(asked) => asked,
    };
    let send = &send;
    let again = |responses, state| {
        params.retry(responses, state);
        let params = params.clone();
        async move { send(params).await.map(R::split) }
    };
    match input_required::drive(bounds, &sink, asked, again).await {
        Ok(done) => Ok(done),
        Err(Stop::Stopped { message, .. }) => Err(refused(message)),
        Err(Stop::Failed(e)) => Err(e),
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
