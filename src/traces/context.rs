//! W3C Trace Context in and out: the caller's `traceparent` continued by a span, a span's
//! context handed on to the tool server. Each function does nothing when traces are off.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicBool, Ordering},
};

use opentelemetry::{
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::{Status, TraceContextExt},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether spans are exported (set once, when the layer is installed). Read on the request
/// path so that with traces off it costs one relaxed load.
pub(super) static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// A W3C trace context as it travels: the `traceparent` and `tracestate` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl Extractor for TraceParent {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(&self.traceparent),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// Make `span` (not started yet) a child of the caller's span, when the caller sent a valid
/// `traceparent`; a missing or malformed one leaves `span` the root of a new trace. `parent` is
/// only asked for when traces are on.
pub fn continue_from(span: &Span, parent: impl FnOnce() -> Option<TraceParent>) {
    if !enabled() {
        return;
    }
    let Some(parent) = parent() else {
        return;
    };
    let context = TraceContextPropagator::new().extract(&parent);
    if !context.span().span_context().is_valid() {
        return;
    }
    // Fails only for a span the layer does not see (filtered out): it stays a root.
    let _ = span.set_parent(context);
}

/// `span`'s context to pass on to the next hop; `None` when traces are off or the span is not
/// recorded.
pub fn propagation(span: &Span) -> Option<TraceParent> {
    if !enabled() {
        return None;
    }
    let mut fields = Fields(HashMap::new());
    TraceContextPropagator::new().inject_context(&span.context(), &mut fields);
    let traceparent = fields.0.remove(TRACEPARENT)?;
    Some(TraceParent {
        traceparent,
        tracestate: fields.0.remove(TRACESTATE).filter(|s| !s.is_empty()),
    })
}

/// The span `make` makes when traces are on; with traces off, none (`Span::none()`): for the
/// spans that exist for traces alone.
pub fn span(make: impl FnOnce() -> Span) -> Span {
    if enabled() { make() } else { Span::none() }
}

/// Mark `span` failed, with why (its OpenTelemetry status; the logs say it already).
pub fn failed(span: &Span, why: impl Into<String>) {
    if enabled() {
        let why: String = why.into();
        span.set_status(Status::error(crate::redact::text(&why).into_owned()));
    }
}

/// An MCP span's request answered with a JSON-RPC error: `error.type` and
/// `rpc.response.status_code` are its code, the status its message (redacted), as
/// OpenTelemetry's MCP conventions ask. The span must declare both fields.
pub fn rpc_error(span: &Span, code: i32, message: &str) {
    if enabled() {
        let code = code.to_string();
        span.record("error.type", code.as_str());
        span.record("rpc.response.status_code", code.as_str());
        failed(span, message);
    }
}

/// An MCP span's `tools/call` answered with a tool error (`isError`): `error.type` is
/// `tool_error`, as OpenTelemetry's MCP conventions ask.
pub fn tool_error(span: &Span) {
    if enabled() {
        span.record("error.type", "tool_error");
        failed(span, "tool error");
    }
}

/// An MCP span's request that was never answered: cancelled, or its connection lost.
pub fn unanswered(span: &Span, why: &'static str) {
    if enabled() {
        span.record("error.type", why);
        failed(span, why);
    }
}

struct Fields(HashMap<String, String>);

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_the_w3c_format_says() {
        let parent = TraceParent {
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            tracestate: Some("vendor=value".into()),
        };
        let context = TraceContextPropagator::new().extract(&parent);
        let span = context.span();
        let span_context = span.span_context();
        assert!(span_context.is_valid());
        assert!(span_context.is_remote());
        assert_eq!(
            span_context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(span_context.trace_state().header(), "vendor=value");
        let bad = TraceParent {
            traceparent: "00-00000000000000000000000000000000-b7ad6b7169203331-01".into(),
            tracestate: None,
        };
        let context = TraceContextPropagator::new().extract(&bad);
        assert!(!context.span().span_context().is_valid());
    }

    #[test]
    fn with_traces_off_nothing_is_read_or_written() {
        assert!(!enabled());
        let span = tracing::info_span!("off");
        let mut asked = false;
        continue_from(&span, || {
            asked = true;
            None
        });
        assert!(!asked, "the caller's headers are not even looked at");
        assert_eq!(propagation(&span), None);
    }
}
