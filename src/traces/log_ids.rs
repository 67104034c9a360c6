//! The trace and span ids on JSON log lines, so that an operator can go from a log line to
//! its trace and back: a line written inside one of the bridge's spans carries the
//! OpenTelemetry `trace_id` and `span_id` of the innermost such span, as top-level fields
//! (the names OpenTelemetry's log data model and most log pipelines use).
//!
//! A wrapper around tracing-subscriber's JSON format rather than a formatter of its own: the
//! line is formatted as before into a buffer and the two fields are spliced in before its
//! closing brace, so every other field stays exactly as it was. The ids are read from
//! OpenTelemetry's current context, which the OpenTelemetry layer sets when one of its spans
//! is entered: it does not depend on the log filter (a span the log filter hides still gives
//! its ids). With traces off nothing is read and the line is written as it was.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_subscriber::{
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

use super::enabled;

/// A JSON event format `F` whose lines inside a span carry `trace_id` and `span_id`.
pub struct WithTraceIds<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = current_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match splice(&line, &trace_id, &span_id) {
            Some(spliced) => writer.write_str(&spliced),
            None => writer.write_str(&line),
        }
    }
}

/// The ids of the span entered on this thread, when traces are on and there is one.
fn current_ids() -> Option<(String, String)> {
    if !enabled() {
        return None;
    }
    let context = opentelemetry::Context::current();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// `line` (one JSON object and a newline) with the two ids added as its last fields; `None`
/// when it is not shaped so (left as it is).
fn splice(line: &str, trace_id: &str, span_id: &str) -> Option<String> {
    let object = line.strip_suffix('\n')?.strip_suffix('}')?;
    let separator = if object.trim_end().ends_with('{') {
        ""
    } else {
        ","
    };
    Some(format!(
        "{object}{separator}\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_are_the_last_fields_of_the_object() {
        let line = "{\"level\":\"INFO\",\"fields\":{\"message\":\"a } b\"}}\n";
        let spliced = splice(line, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
            .expect("a JSON line");
        let value: serde_json::Value = serde_json::from_str(&spliced).expect("still JSON");
        assert_eq!(value["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(value["span_id"], "00f067aa0ba902b7");
        assert_eq!(value["fields"]["message"], "a } b");
        assert!(spliced.ends_with("}\n"));
        let empty = splice("{}\n", "t", "s").expect("an empty object");
        assert_eq!(empty, "{\"trace_id\":\"t\",\"span_id\":\"s\"}\n");
        assert_eq!(splice("not json", "t", "s"), None);
    }
}
