//! What happens to a message from an upstream larger than `limits.max_result_bytes`.
//!
//! rmcp's readers drop such a message (the stdio reader silently, after logging it), and a
//! call whose answer was dropped then waits for ever, holding its job and its slot. So both
//! transports are wrapped (`line_cap` for stdio, `http_client` for Streamable HTTP): they
//! stop reading the message at the limit, learn from its top level ([`super::envelope`])
//! whether it answers one of the bridge's requests, and if so put a JSON-RPC error for that
//! id in its place. rmcp then ends the request as it ends any other, and the connection goes
//! on serving the other calls. A call that ends this way is marked on its route, so its job
//! fails with `result_too_large`, which the upstream itself cannot forge. Every such message
//! counts in `bridge_limit_hits_total{limit="max_result_bytes"}`.

use std::sync::Arc;

use rmcp::model::{ErrorData, RequestId, ServerJsonRpcMessage};

use super::tap::CallRoutes;
use crate::metrics::Metrics;

/// The metric label and config key of the limit.
pub(super) const LIMIT: &str = "max_result_bytes";

/// Reports and answers the oversized messages of one upstream connection.
#[derive(Clone)]
pub(super) struct Oversize {
    upstream: Arc<str>,
    limit: usize,
    routes: Arc<CallRoutes>,
    metrics: Arc<Metrics>,
}

impl Oversize {
    pub(super) fn new(
        upstream: &str,
        limit: usize,
        routes: Arc<CallRoutes>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            upstream: upstream.into(),
            limit,
            routes,
            metrics,
        }
    }

    /// Largest message read, in bytes.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// The answer to `request` is too large: count it, mark its call, and return the error
    /// that takes its place.
    pub(super) fn answer(&self, request: RequestId) -> ServerJsonRpcMessage {
        self.hit();
        tracing::warn!(upstream = %self.upstream, request = %request, limit = self.limit,
            "an answer larger than limits.{LIMIT} was dropped; its request fails");
        self.routes.answer_too_large(&request, self.limit);
        let message = format!(
            "the answer of upstream {} is larger than limits.{LIMIT} ({} bytes) and was dropped; \
             ask for less, or have the bridge's operator raise the limit",
            self.upstream, self.limit
        );
        ServerJsonRpcMessage::error(ErrorData::internal_error(message, None), Some(request))
    }

    /// [`Self::answer`], as one line of JSON (with its `\n`).
    pub(super) fn answer_line(&self, request: RequestId) -> Vec<u8> {
        let mut line = serde_json::to_vec(&self.answer(request)).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// A message too large that answers nothing of the bridge's (a notification, a request
    /// from the upstream, or junk): dropped.
    pub(super) fn dropped(&self) {
        self.hit();
        tracing::warn!(upstream = %self.upstream, limit = self.limit,
            "a message larger than limits.{LIMIT} that answers no request was dropped");
    }

    fn hit(&self) {
        self.metrics.limit_hits.with_label_values(&[LIMIT]).inc();
    }
}
