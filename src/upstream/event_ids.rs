//! Upstream SSE event ids on a call's response stream: the HTTP client notes the id of a
//! progress or log event in its `_meta` ([`EventIds`]; a log line also the request whose stream
//! carried it), the tap hands it on (`tap.rs`), and the call's sink makes it the job's resume
//! cursor (`stream_resume.rs`).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use rmcp::model::ProgressNotificationParam;
use serde_json::Value;

/// The `_meta` key the bridge's HTTP client puts an upstream event's id under, in a progress
/// notification read from a call's response stream (`http_client.rs`). Never on the wire.
pub(super) const EVENT_ID_META: &str = "io.github.mcp-progress-bridge/upstreamEventId";

/// The `_meta` key beside [`EVENT_ID_META`] in a log line: the JSON-RPC id of the request
/// whose response stream carried it (a log line names no call of its own). Never on the wire.
pub(super) const EVENT_REQUEST_META: &str = "io.github.mcp-progress-bridge/upstreamEventRequest";

/// Whether `id` may be kept as a resume cursor: at most `max` bytes of visible ASCII (the
/// SDKs' ids are counters, UUIDs or `stream_id/counter`). Anything else is not kept.
pub(super) fn acceptable_event_id(id: &str, max: usize) -> bool {
    !id.is_empty() && id.len() <= max && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The event id the HTTP client noted on `progress`, if any.
pub(super) fn event_id(progress: &ProgressNotificationParam) -> Option<&str> {
    progress.meta.as_ref()?.get(EVENT_ID_META)?.as_str()
}

/// The `limit` label of an event id not kept (`bridge_limit_hits_total`).
const MAX_EVENT_ID: &str = "upstream_tasks.max_event_id_bytes";

/// What the HTTP client notes of a call stream's event ids: one per connection, shared with
/// the upstream (which shows whether its streams carry ids).
#[derive(Clone)]
pub(super) struct EventIds {
    pub max: usize,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Set once an id was noted (`/upstreams` `resumable_streams`).
    pub seen: Arc<AtomicBool>,
}

impl EventIds {
    /// Note event `id` in `data`, the JSON-RPC message of an event on the response stream of
    /// `request`, when it is a progress or log notification: under [`EVENT_ID_META`] in its
    /// `_meta` (a log line's also `request`, under [`EVENT_REQUEST_META`]), where the call's
    /// sink finds it. Parsing it again costs a small message's parse and write, and only on
    /// upstreams whose events have ids.
    pub(super) fn note(&self, id: &str, request: &rmcp::model::RequestId, data: &mut String) {
        if !data.contains("notifications/progress") && !data.contains("notifications/message") {
            return;
        }
        if !acceptable_event_id(id, self.max) {
            self.metrics
                .limit_hits
                .with_label_values(&[MAX_EVENT_ID])
                .inc();
            return;
        }
        let Ok(mut message) = serde_json::from_str::<Value>(data) else {
            return;
        };
        let log = message["method"] == "notifications/message";
        if message["method"] != "notifications/progress" && !log {
            return;
        }
        let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
            return;
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        let Some(meta) = meta.as_object_mut() else {
            return;
        };
        meta.insert(EVENT_ID_META.into(), Value::String(id.to_string()));
        if log {
            let request = serde_json::to_value(request).unwrap_or_default();
            meta.insert(EVENT_REQUEST_META.into(), request);
        }
        if let Ok(text) = serde_json::to_string(&message) {
            *data = text;
            self.seen.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> EventIds {
        EventIds {
            max: 16,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            seen: Arc::default(),
        }
    }

    fn request() -> rmcp::model::RequestId {
        rmcp::model::NumberOrString::Number(4)
    }

    #[test]
    fn a_log_event_carries_its_id_and_its_streams_request_in_its_meta() {
        let ids = ids();
        let mut data =
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#
                .to_string();
        ids.note("8", &request(), &mut data);
        let message: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(message["params"]["_meta"][EVENT_ID_META], "8");
        assert_eq!(message["params"]["_meta"][EVENT_REQUEST_META], 4);
        assert_eq!(message["params"]["data"], "x");
    }

    const PROGRESS: &str = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#;

    #[test]
    fn a_progress_event_carries_its_id_in_its_meta() {
        let ids = ids();
        let mut data = PROGRESS.to_string();
        ids.note("7", &request(), &mut data);
        let message: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(message["params"]["_meta"][EVENT_ID_META], "7");
        assert_eq!(message["params"]["progress"], 2);
        assert!(ids.seen.load(Ordering::Relaxed));
    }

    #[test]
    fn a_hostile_id_is_not_kept_and_is_counted() {
        let ids = ids();
        for id in [
            "x".repeat(17),
            "a b".into(),
            "a\u{7f}".into(),
            "é".into(),
            String::new(),
        ] {
            let mut data = PROGRESS.to_string();
            ids.note(&id, &request(), &mut data);
            assert_eq!(data, PROGRESS, "{id:?}");
        }
        assert!(!ids.seen.load(Ordering::Relaxed));
        let hits = ids
            .metrics
            .limit_hits
            .with_label_values(&[MAX_EVENT_ID])
            .get();
        assert_eq!(hits, 5);
    }

    #[test]
    fn other_messages_and_garbage_are_left_as_they_are() {
        let ids = ids();
        for data in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/list","params":{"data":"notifications/progress"}}"#,
            r#"notifications/progress {"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":7}}"#,
        ] {
            let mut kept = data.to_string();
            ids.note("1", &request(), &mut kept);
            assert_eq!(kept, data);
        }
    }
}
