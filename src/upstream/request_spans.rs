//! The spans of the MCP requests the bridge sends an upstream, by OpenTelemetry's MCP
//! conventions (kind `CLIENT`, named `"{mcp.method.name} {target}"`), when traces are on: one
//! opens when the tap writes a request and ends when the tap reads its answer, when the bridge
//! cancels the request, or when the connection closes. A call's `tools/call` has its span
//! already (`call.rs`, which the tool server's span continues): it is not doubled here.
//! Bounded: at most `limits.max_upstream_request_spans` open spans per connection; past it a
//! request goes untraced and `bridge_limit_hits_total{limit="max_upstream_request_spans"}`
//! counts it.

use std::sync::Arc;

use dashmap::DashMap;
use rmcp::model::{ClientRequest, GetMeta, RequestId};
use tracing::{Span, field::Empty};

use crate::{config::TransportKind, metrics::Metrics, traces};

const LIMIT: &str = "max_upstream_request_spans";

/// `network.transport` of an upstream's requests.
pub(super) fn network_transport(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Http => "tcp",
        TransportKind::Stdio => "pipe",
    }
}

pub(super) struct RequestSpans {
    /// `network.transport`: `pipe` (stdio) or `tcp` (Streamable HTTP).
    transport: &'static str,
    /// `mcp.protocol.version`: the revision the session settled on, once known.
    protocol: parking_lot::Mutex<Option<Arc<str>>>,
    open: DashMap<RequestId, Span>,
    /// Open spans at most. The requests the bridge keeps in flight are bounded by their
    /// callers (jobs, sessions, listeners) and each has a timeout; this bound is for an
    /// upstream that never answers requests whose future was dropped.
    max_open: usize,
    metrics: Arc<Metrics>,
}

impl RequestSpans {
    pub(super) fn new(transport: &'static str, max_open: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            transport,
            protocol: parking_lot::Mutex::new(None),
            open: DashMap::new(),
            max_open: max_open.max(1),
            metrics,
        }
    }

    /// The session's revision, for the spans of its later requests.
    pub(super) fn learn_protocol(&self, version: Option<&str>) {
        *self.protocol.lock() = version.map(Arc::from);
    }

    /// The tap writes `request` with `id` (not a call's `tools/call`: see the module doc).
    pub(super) fn sent(&self, id: &RequestId, request: &ClientRequest) {
        if !traces::enabled() {
            return;
        }
        if self.open.len() >= self.max_open {
            self.metrics.limit_hits.with_label_values(&[LIMIT]).inc();
            return;
        }
        let method = request.method();
        let tool = match request {
            ClientRequest::CallToolRequest(call) => Some(call.params.name.as_ref()),
            _ => None,
        };
        let prompt = match request {
            ClientRequest::GetPromptRequest(get) => Some(get.params.name.as_str()),
            _ => None,
        };
        let name = match tool.or(prompt) {
            Some(target) => format!("{method} {target}"),
            None => method.to_string(),
        };
        let span = tracing::info_span!(
            parent: None,
            "upstream_request",
            otel.name = name,
            otel.kind = "client",
            mcp.method.name = method,
            jsonrpc.request.id = %id,
            mcp.protocol.version = self.protocol.lock().as_deref(),
            gen_ai.tool.name = tool,
            gen_ai.prompt.name = prompt,
            gen_ai.operation.name = tool.is_some().then_some("execute_tool"),
            network.transport = self.transport,
            error.type = Empty,
            rpc.response.status_code = Empty,
        );
        traces::continue_from(&span, || {
            let meta = request.get_meta();
            Some(traces::TraceParent {
                traceparent: meta.get_traceparent()?.to_string(),
                tracestate: meta.get_tracestate().map(str::to_string),
            })
        });
        self.open.insert(id.clone(), span);
    }

    /// The upstream answered `id`: with an error (`code`, `message`), or not.
    pub(super) fn answered(&self, id: &RequestId, error: Option<(i32, &str)>) {
        if self.open.is_empty() {
            return;
        }
        if let Some((_, span)) = self.open.remove(id)
            && let Some((code, message)) = error
        {
            traces::rpc_error(&span, code, message);
        }
    }

    /// The bridge cancelled `id`: no answer is awaited.
    pub(super) fn cancelled(&self, id: &RequestId) {
        if let Some((_, span)) = self.open.remove(id) {
            traces::unanswered(&span, "cancelled");
        }
    }

    /// The connection closed: no request of it will be answered.
    pub(super) fn closed(&self) {
        let ids: Vec<RequestId> = self.open.iter().map(|e| e.key().clone()).collect();
        for id in ids {
            if let Some((_, span)) = self.open.remove(&id) {
                traces::unanswered(&span, "connection_closed");
            }
        }
    }
}
