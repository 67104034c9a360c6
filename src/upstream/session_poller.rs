//! Following an upstream task that another replica started, on the upstream session it was
//! created in (`model::Reattach`). rmcp 3.11's Streamable HTTP client cannot be handed an
//! existing session (its worker opens every connection with `initialize` and keeps the
//! `Mcp-Session-Id` to itself), and a server that binds tasks to their session (the TypeScript
//! SDK's, server-everything) knows the task only there. So this is the bridge's own
//! JSON-RPC-over-HTTP client for what an adopter needs: `tasks/get` and `tasks/result` (and
//! `tasks/cancel`), or the `GET` that resumes a call's stream (`stream_resume.rs`): POSTs with the task's `Mcp-Session-Id`, its
//! `MCP-Protocol-Version` and the upstream's configured headers, the answer read as JSON or as
//! an SSE stream within `limits.max_result_bytes`, as `http_client.rs` reads rmcp's.

use std::{
    sync::atomic::{AtomicI64, Ordering},
    time::Duration,
};

use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use reqwest_rmcp as reqwest;
use rmcp::ErrorData;
use serde_json::{Value, json};

use super::{
    UpstreamError,
    call_outcome::CallOutcome,
    http_client::{SESSION_HEADER, SSE_FRAMING, bounded_bytes, same_origin_redirects},
    session_asks::{self, AskCap},
    session_seen::PROTOCOL_HEADER,
    tap::CallSink,
};
use crate::{config::UpstreamConfig, model::FailureReason, model::Reattach};

/// Why a resuming `GET` gave no stream.
pub(super) enum Resume {
    /// The upstream refused it for good (404: session gone; 400, 405: no resumption).
    Gone(u16),
    /// It may work on the next try (connection refused, 5xx).
    Broken(String),
}

/// One SSE event of a resumed stream, as read.
pub(super) struct ResumedEvent {
    pub id: Option<String>,
    pub data: Option<String>,
}

/// One upstream session's task requests.
pub(super) struct SessionPoller {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// `limits.max_result_bytes`: the largest answer read.
    limit: usize,
    /// How many of the upstream's requests one stream may have answered.
    asks: AskCap,
    next_id: AtomicI64,
}

impl SessionPoller {
    /// A poller on `record`'s session of the upstream `config` describes.
    pub(super) fn new(
        config: &UpstreamConfig,
        record: &Reattach,
        (limit, asks): (usize, AskCap),
    ) -> Result<Self, UpstreamError> {
        let not = |why: String| UpstreamError::NotReattachable { why };
        let url = config
            .url
            .clone()
            .ok_or_else(|| not(format!("upstream {} has no url", config.name)))?;
        let session = record
            .session_id
            .as_deref()
            .ok_or_else(|| not("the task was made without an upstream session".into()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            if let (Ok(name), Ok(value)) = (name.parse::<HeaderName>(), value.parse()) {
                headers.insert(name, value);
            }
        }
        let value = |v: &str| HeaderValue::from_str(v).map_err(|e| not(e.to_string()));
        headers.insert(SESSION_HEADER, value(session)?);
        if let Some(protocol) = &record.protocol {
            headers.insert(PROTOCOL_HEADER, value(protocol)?);
        }
        crate::tls::use_ring();
        let mut builder = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(same_origin_redirects());
        if let Some(path) = &config.ca_file {
            let roots = crate::tls::read_ca_file(path).map_err(|e| not(e.to_string()))?;
            for root in roots {
                let root = reqwest::Certificate::from_der(&root).map_err(|e| not(e.to_string()))?;
                builder = builder.add_root_certificate(root);
            }
        }
        Ok(Self {
            client: builder.build().map_err(|e| not(e.to_string()))?,
            url,
            headers,
            limit,
            asks,
            next_id: AtomicI64::new(1),
        })
    }

    /// How many of the upstream's requests one stream of this session may have answered.
    pub(super) fn ask_cap(&self) -> &AskCap {
        &self.asks
    }

    /// `method` for task `task_id`, answered within `within` (none: no bound but the job's).
    /// A connection failure or an HTTP error is `upstream_lost` (the follower retries within
    /// `upstream_tasks.resume_within_secs`); a JSON-RPC error is the upstream's answer.
    /// What the upstream asks on the answer's stream (an adopted task's questions come on
    /// `tasks/result`) is answered through `asks`, the call's sink.
    pub(super) async fn request(
        &self,
        method: &str,
        task_id: &str,
        within: Option<Duration>,
        asks: &dyn CallSink,
    ) -> Result<Value, CallOutcome> {
        let sent = self.exchange(method, task_id, asks);
        match within {
            Some(within) => tokio::time::timeout(within, sent)
                .await
                .unwrap_or_else(|_| {
                    Err(CallOutcome::Failed {
                        reason: FailureReason::Timeout,
                        message: format!(
                            "{method} for task {task_id} got no answer in {}s",
                            within.as_secs()
                        ),
                    })
                }),
            None => sent.await,
        }
    }

    async fn exchange(
        &self,
        method: &str,
        task_id: &str,
        asks: &dyn CallSink,
    ) -> Result<Value, CallOutcome> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": {"taskId": task_id}});
        let lost = |what: String| CallOutcome::Failed {
            reason: FailureReason::UpstreamLost,
            message: format!("{method} for task {task_id} on its upstream session: {what}"),
        };
        let response = self.post(&body).await.map_err(|e| lost(e.to_string()))?;
        let status = response.status();
        if status.as_u16() == 404 {
            // Not worth waiting for: a session the upstream forgot does not come back.
            return Err(CallOutcome::Failed {
                reason: FailureReason::OwnerLost,
                message: format!(
                    "the upstream no longer knows the session task {task_id} was made in \
                     (HTTP 404 to {method}), so the replica that adopted this job cannot follow \
                     it: run the tool again"
                ),
            });
        }
        if !status.is_success() {
            return Err(lost(format!("HTTP {status}")));
        }
        let media = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            });
        let answer = match media.as_deref() {
            Some("text/event-stream") => self.answer_on_stream(response, id, asks).await,
            _ => self.answer_in_body(response).await,
        }
        .map_err(lost)?;
        match (answer.get("result"), answer.get("error")) {
            (Some(result), _) => Ok(result.clone()),
            (None, Some(error)) => match serde_json::from_value::<ErrorData>(error.clone()) {
                Ok(error) => Err(CallOutcome::RpcError(error)),
                Err(_) => Err(lost(format!("an error that is not JSON-RPC's: {error}"))),
            },
            _ => Err(lost("an answer with neither result nor error".into())),
        }
    }

    /// POST one JSON-RPC message on the session.
    async fn post(&self, body: &Value) -> Result<reqwest::Response, reqwest::Error> {
        self.client
            .post(&self.url)
            .headers(self.headers.clone())
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
    }

    /// A JSON body, read up to the limit.
    async fn answer_in_body(&self, response: reqwest::Response) -> Result<Value, String> {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            if body.len() + chunk.len() > self.limit {
                return Err(format!(
                    "the answer is larger than limits.max_result_bytes ({} bytes)",
                    self.limit
                ));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
    }

    /// The response to request `id` among the events of an SSE stream (each event within the
    /// limit). The upstream's requests on it are answered through `asks`, one at a time (the
    /// upstream waits for the answer anyway), within the poller's [`AskCap`]; notifications
    /// are passed over.
    async fn answer_on_stream(
        &self,
        response: reqwest::Response,
        id: i64,
        asks: &dyn CallSink,
    ) -> Result<Value, String> {
        let mut asked = 0;
        let max = self.limit.saturating_add(SSE_FRAMING);
        let mut events =
            sse_stream::SseStream::from_bytes_stream(bounded_bytes(response.bytes_stream(), max));
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| e.to_string())?;
            let Some(data) = event.data else { continue };
            let Ok(message) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if message.get("id").and_then(Value::as_i64) == Some(id)
                && message.get("method").is_none()
            {
                return Ok(message);
            }
            if message.get("method").is_some()
                && message.get("id").is_some()
                && self.asks.admits(asked)
                && let (Some(request_id), Some(outcome)) = (
                    message.get("id"),
                    session_asks::answer(asks, &message).await,
                )
            {
                asked += 1;
                if let Err(error) = self.respond(request_id, outcome).await {
                    tracing::warn!(%error, "could not answer the upstream's request on its session");
                }
            }
        }
        Err("the stream ended without the answer".into())
    }
}

impl SessionPoller {
    /// `GET` the session's stream after `last_event_id` (`Last-Event-ID`): the events of the
    /// call stream that id belongs to, each within the limit, until the upstream or the
    /// connection ends it.
    pub(super) async fn resume(
        &self,
        last_event_id: &str,
    ) -> Result<futures::stream::BoxStream<'static, ResumedEvent>, Resume> {
        let response = self
            .client
            .get(&self.url)
            .headers(self.headers.clone())
            .header(http::header::ACCEPT, "text/event-stream")
            .header(LAST_EVENT_ID, last_event_id)
            .send()
            .await
            .map_err(|e| Resume::Broken(e.to_string()))?;
        let status = response.status();
        if matches!(status.as_u16(), 400 | 404 | 405) {
            return Err(Resume::Gone(status.as_u16()));
        }
        if !status.is_success() {
            return Err(Resume::Broken(format!("HTTP {status}")));
        }
        let max = self.limit.saturating_add(SSE_FRAMING);
        let events =
            sse_stream::SseStream::from_bytes_stream(bounded_bytes(response.bytes_stream(), max))
                .take_while(|event| std::future::ready(event.is_ok()))
                .filter_map(|event| {
                    std::future::ready(event.ok().map(|sse| ResumedEvent {
                        id: sse.id,
                        data: sse.data,
                    }))
                });
        Ok(events.boxed())
    }

    /// Tell the upstream the call `request_id` is cancelled (`notifications/cancelled`).
    pub(super) async fn cancel_request(&self, request_id: &Value) -> Result<(), String> {
        let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "cancelled"}});
        let response = self.post(&body).await.map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", response.status()))
        }
    }
}

impl SessionPoller {
    /// Answer the upstream's request `id` (a question, a sample, the roots it asked on a
    /// resumed stream) with `outcome`, on the session.
    pub(super) async fn respond(
        &self,
        id: &Value,
        outcome: Result<Value, ErrorData>,
    ) -> Result<(), String> {
        let body = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        let response = self.post(&body).await.map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", response.status()))
        }
    }
}

/// The header a resuming `GET` names its last event in.
const LAST_EVENT_ID: &str = "last-event-id";
