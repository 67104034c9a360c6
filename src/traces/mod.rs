//! Traces over OpenTelemetry (OTLP/HTTP, protobuf), when the standard `OTEL_*` variables ask
//! for them; nothing at all otherwise.
//!
//! Each MCP request served (`front/server.rs` span_of) and sent upstream
//! (`upstream/request_spans.rs`, `upstream/call.rs`) is a span of OpenTelemetry's MCP
//! conventions; a tool call's trace is its request, `job`, the upstream call (its context sent
//! on in `_meta.traceparent`) and `terminal_event`. Only the bridge's own spans are exported:
//! no other crate's spans, no log events (a log line may quote what a client sent); JSON log
//! lines written inside a span carry its `trace_id` and `span_id` instead ([`WithTraceIds`]).
//! Off by default at no cost: without an OTLP endpoint variable [`Traces::from_env`] builds
//! nothing and [`enabled`] is false, so the request path reads and writes no trace context. A
//! leaf beside `shutdown`: span owners call [`continue_from`], [`propagation`] and [`failed`].

mod context;
mod export;
mod log_ids;

use std::{sync::atomic::Ordering, time::Duration};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::{Layer, filter::filter_fn, registry::LookupSpan};

pub use context::{
    TraceParent, continue_from, enabled, failed, propagation, rpc_error, span, tool_error,
    unanswered,
};
pub use export::TracesError;
pub use log_ids::WithTraceIds;

use crate::shutdown::Tasks;

/// How long the last export at shutdown may take. The stage that flushes waits a little more
/// (see `app`'s shutdown order).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The instrumentation scope named in every exported span.
const SCOPE: &str = env!("CARGO_PKG_NAME");

/// The trace pipeline: an OTLP/HTTP exporter behind a batch processor (its own thread, which
/// sends each batch through the bridge's HTTP client on the runtime, see `export`).
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The pipeline the `OTEL_*` environment asks for, or `None` when it asks for none (no
    /// endpoint set, `OTEL_TRACES_EXPORTER=none`, or `OTEL_SDK_DISABLED=true`). Call it inside
    /// the Tokio runtime: exports run on it. An error names the variable to fix.
    pub fn from_env() -> Result<Option<Self>, TracesError> {
        let Some(settings) = export::Settings::from_env()? else {
            return Ok(None);
        };
        let provider = export::provider(settings)?;
        Ok(Some(Self { provider }))
    }

    /// The layer that turns the bridge's spans into OpenTelemetry spans. Installing it turns
    /// [`enabled`] on.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        context::ENABLED.store(true, Ordering::Relaxed);
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SCOPE))
            // What an operator needs is the span's own fields; each of these would add
            // attributes (or work on every enter) to every span.
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_level(false)
            .with_filter(filter_fn(|meta| {
                meta.is_span() && meta.target().starts_with(env!("CARGO_CRATE_NAME"))
            }))
    }

    /// Export what is left when `tasks`' stage stops: the last stage, so that the spans of
    /// every job ended by the shutdown are in the flush.
    pub fn flush_at_shutdown(self, tasks: &Tasks) {
        let stopping = tasks.stopping().clone();
        let provider = self.provider;
        tasks.spawn(async move {
            stopping.cancelled().await;
            // Blocks until the batch thread has sent its last batch (or the bound passed).
            let flushed =
                tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                    .await;
            match flushed {
                Ok(Ok(())) => tracing::debug!("traces flushed"),
                Ok(Err(error)) => tracing::warn!(%error, "the last traces could not be exported"),
                Err(error) => tracing::warn!(%error, "the trace flush did not finish"),
            }
        });
    }
}
