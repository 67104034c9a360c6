//! An OTLP/HTTP trace receiver on a loopback port (POST /v1/traces, protobuf bodies decoded
//! with the OTLP types): what a bridge process exports when `OTEL_EXPORTER_OTLP_ENDPOINT` names
//! it. Each span is kept in the parts the tests compare, and each request whole as text, for
//! the tests that look for what must never be exported.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, extract::State, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value,
};
use prost::Message;
use tokio_util::sync::CancellationToken;

/// OTLP's `SpanKind` of a span the bridge serves and of one it sends.
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;

/// One span as the receiver got it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    /// OTLP's `SpanKind`: [`SERVER`], [`CLIENT`], ...
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    pub service_name: Option<String>,
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    pub endpoint: String,
    sink: Sink,
    stop: CancellationToken,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone, Default)]
struct Sink {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    requests: Arc<Mutex<usize>>,
    /// Every export request decoded, as debug text (span names, attributes of every type,
    /// events, status messages, the resource).
    texts: Arc<Mutex<Vec<String>>>,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let sink = Sink::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("receiver address");
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(sink.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await;
        });
        Self {
            endpoint: format!("http://{addr}"),
            sink,
            stop,
        }
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink.spans.lock().unwrap().clone()
    }

    /// Export requests received (decoded or not).
    pub fn requests(&self) -> usize {
        *self.sink.requests.lock().unwrap()
    }

    /// Everything received, as text.
    pub fn text(&self) -> String {
        self.sink.texts.lock().unwrap().join("\n")
    }
}

/// `POST /v1/traces`: decode the protobuf body (a body that does not decode fails the test
/// through a 400 the exporter logs, and through the spans missing).
async fn receive(State(sink): State<Sink>, body: Bytes) -> (http::StatusCode, Vec<u8>) {
    *sink.requests.lock().unwrap() += 1;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (http::StatusCode::BAD_REQUEST, Vec::new());
    };
    sink.texts.lock().unwrap().push(format!("{request:?}"));
    let mut spans = sink.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service_name = resource_spans.resource.and_then(|r| {
            r.attributes
                .into_iter()
                .find(|a| a.key == "service.name")
                .and_then(|a| text(a.value?.value?))
        });
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(ReceivedSpan {
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .into_iter()
                        .filter_map(|a| Some((a.key, text(a.value?.value?)?)))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: full success.
    (http::StatusCode::OK, Vec::new())
}

fn text(value: any_value::Value) -> Option<String> {
    match value {
        any_value::Value::StringValue(s) => Some(s),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
