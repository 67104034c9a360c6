//! Reading the bridge's SSE streams (job and correlation channels) with reqwest-eventsource,
//! as a browser's `EventSource` would, but without reconnecting: each read is one stream.

use std::time::Duration;

use futures::StreamExt;
use reqwest_eventsource::{Event, EventSource};
use serde_json::Value;

use super::wait::WAIT;

/// One SSE event as a reader sees it.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: String,
    pub event: String,
    pub data: Value,
}

impl SseEvent {
    pub fn seq(&self) -> u64 {
        self.id
            .parse()
            .unwrap_or_else(|_| panic!("event id {:?} is not a number", self.id))
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.event.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// `event["field"]` reads a field of the event's JSON data.
impl std::ops::Index<&str> for SseEvent {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        &self.data[key]
    }
}

/// Open an SSE stream (optionally resuming after `last_event_id`) and read events until
/// `stop` says enough or the stream ends. The stream is not reconnected.
pub async fn read_sse(
    url: &str,
    last_event_id: Option<u64>,
    stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    read_sse_request(request, stop).await
}

pub async fn read_sse_request(
    request: reqwest::RequestBuilder,
    stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    read_sse_request_within(WAIT, request, stop).await
}

/// [`read_sse_request`] with its own bound, for a test whose readers all live for the whole
/// test (a thousand of them on a shared two-core machine take a while to open).
pub async fn read_sse_request_within(
    bound: Duration,
    request: reqwest::RequestBuilder,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let mut source = EventSource::new(request).expect("an SSE request");
    let mut events = Vec::new();
    tokio::time::timeout(bound, async {
        while let Some(item) = source.next().await {
            match item {
                Ok(Event::Open) => {}
                Ok(Event::Message(m)) => {
                    let data =
                        serde_json::from_str(&m.data).unwrap_or(Value::String(m.data.clone()));
                    let event = SseEvent {
                        id: m.id,
                        event: m.event,
                        data,
                    };
                    let enough = stop(&event);
                    events.push(event);
                    if enough {
                        break;
                    }
                }
                Err(reqwest_eventsource::Error::StreamEnded) => break,
                Err(reqwest_eventsource::Error::InvalidStatusCode(status, response)) => {
                    let body = response.text().await.unwrap_or_default();
                    panic!("SSE stream failed: {status}: {body}")
                }
                Err(e) => panic!("SSE stream failed: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out: SSE events"));
    source.close();
    events
}

/// Read a job's stream from the start until its terminal event.
pub async fn read_job_events(events_url: &str) -> Vec<SseEvent> {
    read_sse(events_url, None, SseEvent::is_terminal).await
}

/// The `progress` values of the progress events, in order.
pub fn progress_values(events: &[SseEvent]) -> Vec<f64> {
    events
        .iter()
        .filter(|e| e.event == "progress")
        .map(|e| e.data["progress"].as_f64().expect("progress is a number"))
        .collect()
}

/// Events in order with consecutive ids, each progress once: what every reader must see.
pub fn assert_consecutive(events: &[SseEvent]) {
    let ids: Vec<u64> = events.iter().map(SseEvent::seq).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "ids are consecutive: {ids:?}"
    );
}
