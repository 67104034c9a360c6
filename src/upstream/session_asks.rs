//! What an upstream asks on a session stream the bridge reads without rmcp (a resumed call
//! stream, an adopted task's `tasks/result` stream): each request is answered as the call's
//! sink decides (a question to where the job's questions go, a sample or the roots as the sink
//! answers them, `ping`), other methods are refused. The answer is POSTed on the session by
//! the caller.

use std::sync::Arc;

use rmcp::{ErrorData, model::ErrorCode};
use serde_json::Value;

use super::tap::CallSink;
use crate::metrics::Metrics;

/// The `limit` label of a request left unanswered past the cap (`bridge_limit_hits_total`).
const MAX_ASKS: &str = "upstream_tasks.max_asks_per_stream";

/// The most requests of the upstream answered on one stream
/// (`upstream_tasks.max_asks_per_stream`): a bound on a hostile stream.
#[derive(Clone)]
pub(super) struct AskCap {
    pub max: usize,
    pub metrics: Arc<Metrics>,
}

impl AskCap {
    /// Whether a stream with `asked` requests answered may have one more answered; a refusal
    /// is counted.
    pub(super) fn admits(&self, asked: usize) -> bool {
        if asked < self.max {
            return true;
        }
        self.metrics.limit_hits.with_label_values(&[MAX_ASKS]).inc();
        false
    }
}

/// The answer to `request` (a JSON-RPC request of the upstream), or `None` when it is no
/// request (a notification or an answer).
#[allow(deprecated)]
pub(super) async fn answer(
    sink: &dyn CallSink,
    request: &Value,
) -> Option<Result<Value, ErrorData>> {
    request.get("id")?;
    let method = request.get("method").and_then(Value::as_str)?;
    let params = request.get("params").cloned().unwrap_or_default();
    let invalid = |e: serde_json::Error| ErrorData::invalid_params(e.to_string(), None);
    let to_value = |v: Result<Value, serde_json::Error>| v.map_err(invalid);
    Some(match method {
        "elicitation/create" => match serde_json::from_value(params) {
            Ok(params) => to_value(serde_json::to_value(sink.input(params).await)),
            Err(e) => Err(invalid(e)),
        },
        "sampling/createMessage" => match serde_json::from_value(params) {
            Ok(params) => sink
                .sample(params)
                .await
                .and_then(|r| to_value(serde_json::to_value(r))),
            Err(e) => Err(invalid(e)),
        },
        "roots/list" => to_value(serde_json::to_value(sink.roots().await)),
        "ping" => Ok(Value::Object(Default::default())),
        method => Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("{method} is not answered on this stream"),
            None,
        )),
    })
}

/// The sink of a request no call waits on (`tasks/cancel`): reports are dropped, questions
/// declined, samples refused, the roots none (the defaults).
pub(super) struct NoCall;

impl CallSink for NoCall {
    fn progress(&self, _: &rmcp::model::ProgressNotificationParam) {}

    #[allow(deprecated)]
    fn log(&self, _: &rmcp::model::LoggingMessageNotificationParam) {}
}
