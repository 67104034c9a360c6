//! Reading the bridge's SSE streams (job and correlation channels) with reqwest-eventsource,
//! as a browser's `EventSource` would, but without reconnecting: each read is one stream; or
//! on a raw socket, every byte seen ([`raw_sse_reader`]).

use std::{net::SocketAddr, time::Duration};

use futures::StreamExt;
use reqwest_eventsource::{Event, EventSource};
use serde_json::Value;
use tokio::{io::AsyncWriteExt, net::TcpStream};

use super::wait::{WAIT, within};

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

/// A reader of the SSE stream at `path` on a raw socket to `to`, its HTTP/1.1 request sent;
/// with `receive_buffer`, a small kernel receive buffer, so that its socket fills early.
pub async fn raw_sse_reader(to: SocketAddr, path: &str, receive_buffer: Option<u32>) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    let mut tcp = within("connect", socket.connect(to)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nAccept: text/event-stream\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp
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
    let mut events = Vec::new();
    let ended = tokio::time::timeout(bound, read_stream(request, &mut stop, &mut events))
        .await
        .unwrap_or_else(|_| panic!("timed out: SSE events"));
    match ended {
        Ended::Refused { status, body, .. } => panic!("SSE stream failed: {status}: {body}"),
        Ended::Failed(error) => panic!("SSE stream failed: {error}"),
        Ended::Read => events,
    }
}

/// [`read_sse_request_within`] for a reader that, like the bridge's JavaScript client, opens a
/// refused stream again: a 503 before the first event (no subscriber place yet, the job store
/// slow to answer on a starved machine) is retried after its `Retry-After`, and a connection
/// that fails before the first event after a second, until `bound`.
/// Any other refusal fails the test.
pub async fn read_sse_request_patiently(
    bound: Duration,
    request: reqwest::RequestBuilder,
    mut stop: impl FnMut(&SseEvent) -> bool,
) -> Vec<SseEvent> {
    let mut events = Vec::new();
    tokio::time::timeout(bound, async {
        loop {
            let attempt = request
                .try_clone()
                .expect("an SSE request without a streamed body");
            match read_stream(attempt, &mut stop, &mut events).await {
                Ended::Refused {
                    status,
                    retry_after,
                    ..
                } if status == reqwest::StatusCode::SERVICE_UNAVAILABLE && events.is_empty() => {
                    tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await
                }
                // A connection refused or reset before the first event (a full accept
                // queue on a starved machine) is opened again too, as EventSource does.
                Ended::Failed(_) if events.is_empty() => {
                    tokio::time::sleep(Duration::from_secs(1)).await
                }
                Ended::Failed(error) => panic!("SSE stream failed: {error}"),
                Ended::Refused { status, body, .. } => {
                    panic!("SSE stream failed: {status}: {body}")
                }
                Ended::Read => return,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out: SSE events"));
    events
}

/// How one stream ended.
enum Ended {
    /// `stop` said enough, or the stream ended.
    Read,
    /// The connection failed (refused, reset) before or while reading.
    Failed(String),
    /// The bridge refused the stream.
    Refused {
        status: reqwest::StatusCode,
        retry_after: Option<Duration>,
        body: String,
    },
}

/// Read one stream into `events` until `stop` says enough or it ends.
async fn read_stream(
    request: reqwest::RequestBuilder,
    stop: &mut impl FnMut(&SseEvent) -> bool,
    events: &mut Vec<SseEvent>,
) -> Ended {
    let mut source = EventSource::new(request).expect("an SSE request");
    let ended = loop {
        match source.next().await {
            None | Some(Err(reqwest_eventsource::Error::StreamEnded)) => break Ended::Read,
            Some(Ok(Event::Open)) => {}
            Some(Ok(Event::Message(m))) => {
                let data = serde_json::from_str(&m.data).unwrap_or(Value::String(m.data.clone()));
                let event = SseEvent {
                    id: m.id,
                    event: m.event,
                    data,
                };
                let enough = stop(&event);
                events.push(event);
                if enough {
                    break Ended::Read;
                }
            }
            Some(Err(reqwest_eventsource::Error::InvalidStatusCode(status, response))) => {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .map(Duration::from_secs);
                let body = response.text().await.unwrap_or_default();
                break Ended::Refused {
                    status,
                    retry_after,
                    body,
                };
            }
            Some(Err(reqwest_eventsource::Error::Transport(e))) => {
                break Ended::Failed(format!("{e:?}"));
            }
            Some(Err(e)) => panic!("SSE stream failed: {e}"),
        }
    };
    source.close();
    ended
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
