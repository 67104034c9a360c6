//! The client of a Streamable HTTP upstream: rmcp's reqwest client, with answers over
//! `limits.max_result_bytes` replaced by errors (see `oversize`; docs/design/upstream.md).
//!
//! - An answer over the bound becomes the error [`Oversize::answer`] makes for its request
//!   (rmcp alone would end it as a transport error or "stream closed"); each SSE event's data
//!   is checked against the limit to the byte.
//! - TLS: rustls on ring ([`crate::tls`]), the system's roots plus the upstream's `ca_file`.
//! - `tools/list` is sent here, not through rmcp's client, so the raw body is sniffed for
//!   `execution.taskSupport` (`rmcp_ext/task_support.rs`), which rmcp's `Tool` drops.
//! - A request's W3C trace context (`_meta.traceparent`, `tracestate`) also goes as headers.

use std::{collections::HashMap, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use http::{HeaderName, HeaderValue};
use reqwest_rmcp as reqwest;
use rmcp::{
    model::{
        ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage, RequestId,
        ServerJsonRpcMessage,
    },
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
        StreamableHttpPostResponse, StreamableHttpResponseLimits,
    },
};
use rustls::pki_types::CertificateDer;
use sse_stream::Sse;

use super::{event_ids::EventIds, oversize::Oversize, session_seen::SessionSeen};
use crate::rmcp_ext::{envelope::Envelope, task_support::TaskSupportMap};

/// Room for an SSE event's framing (`event:`, `id:`, `data: ` and line ends) above the limit.
pub(super) const SSE_FRAMING: usize = 64 * 1024;
/// Redirects followed for one request (rmcp's default client follows as many).
const MAX_REDIRECTS: usize = 10;
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

type Events = BoxStream<'static, Result<Sse, SseError>>;
type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

#[derive(Clone)]
pub(super) struct BoundedHttp {
    inner: reqwest::Client,
    oversize: Oversize,
    /// Where `tools/list` answers (SSE events and JSON bodies) leave their tools' task support
    /// (`rmcp_ext/task_support.rs`).
    task_support: TaskSupportMap,
    /// Where the session of each POST is noted (`session_seen.rs`).
    seen: SessionSeen,
    /// Where a call stream's event ids are noted (`stream_resume.rs`).
    ids: EventIds,
}

impl BoundedHttp {
    /// The client, trusting `extra_roots` besides the system's, and `config` with rmcp's own
    /// bounds set to match.
    pub(super) fn new(
        oversize: Oversize,
        task_support: TaskSupportMap,
        (seen, ids): (SessionSeen, EventIds),
        extra_roots: Vec<CertificateDer<'static>>,
        config: StreamableHttpClientTransportConfig,
    ) -> Result<(Self, StreamableHttpClientTransportConfig), reqwest::Error> {
        crate::tls::use_ring();
        // As rmcp's default client: no idle pooling (rmcp measured 40 ms stalls from
        // Delayed ACK on reused connections), redirects only within the origin.
        let mut builder = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(same_origin_redirects());
        for root in extra_roots {
            builder = builder.add_root_certificate(reqwest::Certificate::from_der(&root)?);
        }
        let inner = builder.build()?;
        let limit = oversize.limit();
        let config = config
            .max_json_response_size(limit)
            .max_sse_event_size(limit.saturating_add(SSE_FRAMING));
        Ok((
            Self {
                inner,
                oversize,
                task_support,
                seen,
                ids,
            },
            config,
        ))
    }

    fn limits(&self) -> StreamableHttpResponseLimits {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_json_response_size = self.oversize.limit();
        limits.max_sse_event_size = self.oversize.limit().saturating_add(SSE_FRAMING);
        limits
    }

    /// The answer to `request` as rmcp's client read it, oversized answers replaced.
    fn bound_answer(&self, posted: Posted, request: Option<RequestId>) -> Posted {
        match (posted, request) {
            (Err(StreamableHttpError::ResponseBodyTooLarge { .. }), Some(request)) => Ok(
                StreamableHttpPostResponse::Json(self.oversize.answer(request), None),
            ),
            (Ok(StreamableHttpPostResponse::Sse(events, session)), request) => Ok(
                StreamableHttpPostResponse::Sse(self.bound_events(events, request), session),
            ),
            (other, _) => other,
        }
    }

    /// `events` with each event over the limit replaced: by the error for the request it
    /// answers, or by nothing. `request`: the one the stream is the answer to (none for the
    /// GET stream), blamed for an event so large that rmcp stopped reading the stream.
    fn bound_events(&self, events: Events, request: Option<RequestId>) -> Events {
        let oversize = self.oversize.clone();
        let task_support = self.task_support.clone();
        // Only a call's own stream (a POST's) is resumed by its id; the GET stream's ids
        // belong to that stream.
        let ids = request.is_some().then(|| self.ids.clone());
        events
            .map(move |event| match event {
                Ok(mut sse) => {
                    if let Some(data) = &sse.data {
                        task_support.sniff(data.as_bytes());
                    }
                    if sse
                        .data
                        .as_ref()
                        .is_some_and(|d| d.len() > oversize.limit())
                    {
                        sse.data = replace(&oversize, sse.data.as_deref().unwrap_or_default());
                    }
                    if let (Some(ids), Some(id), Some(data), Some(request)) =
                        (&ids, &sse.id, &mut sse.data, &request)
                    {
                        ids.note(id, request, data);
                    }
                    Ok(sse)
                }
                Err(error) if too_large(&error) => match &request {
                    Some(request) => Ok(Sse {
                        data: json(&oversize.answer(request.clone())),
                        ..Sse::default()
                    }),
                    None => {
                        oversize.dropped();
                        Err(error)
                    }
                },
                Err(error) => Err(error),
            })
            .boxed()
    }
}

/// The data of an oversized event: the error for the request it answers, or none.
fn replace(oversize: &Oversize, data: &str) -> Option<String> {
    let mut envelope = Envelope::default();
    envelope.feed(data.as_bytes());
    match envelope.response_id() {
        Some(request) => json(&oversize.answer(request)),
        None => {
            oversize.dropped();
            None
        }
    }
}

fn json(message: &impl serde::Serialize) -> Option<String> {
    serde_json::to_string(message).ok()
}

#[cfg(test)]
mod tests {
    use super::EventSize;

    #[test]
    fn an_event_is_measured_across_chunks_and_line_ends() {
        let mut size = EventSize::default();
        assert_eq!(size.observe(b"data: ab"), 8);
        // Two lines of 9 and 7 bytes, each with its end.
        assert_eq!(size.observe(b"c\r\ndata: d\r"), 18);
        // `\n` after `\r` is the same line end; the empty line ends the event.
        assert_eq!(size.observe(b"\n\r\ndata: e"), 18);
        assert_eq!(size.observe(b"\n\n"), 8);
        assert_eq!(size.observe(b"x"), 1);
    }
}

/// rmcp's SSE reader stopped at an event over its bound (its error type is private; its
/// message is what it says).
fn too_large(error: &SseError) -> bool {
    matches!(error, SseError::Body(e) if e.to_string().contains("exceeded the maximum size"))
}

/// A request's W3C trace context (`_meta.traceparent` and `tracestate`, set by the upstream
/// call when traces are on) as HTTP headers too: what an HTTP server's own tracing reads.
fn trace_headers(message: &ClientJsonRpcMessage, headers: &mut HashMap<HeaderName, HeaderValue>) {
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let meta = request.request.get_meta();
    for (name, value) in [
        (TRACEPARENT, meta.get_traceparent()),
        (TRACESTATE, meta.get_tracestate()),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, value);
        }
    }
}

fn is_tools_list(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::ListToolsRequest(_)))
}

impl BoundedHttp {
    /// POST a `tools/list` request and read its answer here: a JSON body is read (up to the
    /// limit), sniffed for `execution.taskSupport`, then parsed as rmcp would; an SSE stream is
    /// handed on (its events are sniffed in [`Self::bound_events`]). The other answers map to
    /// the errors rmcp's client gives for them.
    async fn post_tools_list(
        &self,
        uri: Arc<str>,
        message: &ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let mut request = self
            .inner
            .post(uri.as_ref())
            .header(http::header::ACCEPT, "text/event-stream, application/json");
        if let Some(auth) = auth_header {
            request = request.bearer_auth(auth);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        let had_session = session_id.is_some();
        if let Some(session) = session_id {
            request = request.header(SESSION_HEADER, session.as_ref());
        }
        let body = serde_json::to_vec(message)?;
        let response = request
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status.as_u16(), 202 | 204) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status.as_u16() == 404 && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = header(&response, SESSION_HEADER).map(str::to_string);
        let content_type =
            header(&response, http::header::CONTENT_TYPE.as_str()).map(str::to_ascii_lowercase);
        let media = content_type
            .as_deref()
            .map(|ct| ct.split(';').next().unwrap_or_default().trim().to_string());
        match media.as_deref() {
            Some("text/event-stream") if status.is_success() => {
                let limit = self.limits().max_sse_event_size;
                let events = sse_stream::SseStream::from_bytes_stream(bounded_bytes(
                    response.bytes_stream(),
                    limit,
                ))
                .boxed();
                Ok(StreamableHttpPostResponse::Sse(events, session))
            }
            Some("application/json") => self.read_json(response, session).await,
            _ if !status.is_success() => Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}").into(),
            )),
            _ => Err(StreamableHttpError::UnexpectedContentType(content_type)),
        }
    }

    /// A JSON answer to `tools/list`: read up to the limit, sniffed for
    /// `execution.taskSupport` if it is a success, then parsed as rmcp would.
    async fn read_json(&self, response: reqwest::Response, session: Option<String>) -> Posted {
        let status = response.status();
        let limit = self.oversize.limit();
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(StreamableHttpError::Client)?;
            if body.len() + chunk.len() > limit {
                return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            self.task_support.sniff(&body);
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session)),
            Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}: not a JSON-RPC message: {e}").into(),
            )),
        }
    }
}

/// A response header's value, if it is text.
fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The session header of Streamable HTTP.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// `bytes` (an SSE body) ended by an error once one event passes `max` bytes (its lines
/// without their ends, comments included): the error says what rmcp's own bound says, so
/// [`too_large`] knows it.
pub(super) fn bounded_bytes<S, E>(
    bytes: S,
    max: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut size = EventSize::default();
    let mut failed = false;
    bytes.scan((), move |(), chunk| {
        let item = match chunk {
            _ if failed => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
            Ok(chunk) if size.observe(&chunk) > max => {
                failed = true;
                Some(Err(std::io::Error::other(format!(
                    "SSE event exceeded the maximum size of {max} bytes"
                ))))
            }
            Ok(chunk) => Some(Ok(chunk)),
        };
        std::future::ready(item)
    })
}

/// The size of the SSE event being read: its lines' bytes, each line end counted as one; an
/// empty line ends the event (`\r\n`, `\r` and `\n` all end a line).
#[derive(Default)]
struct EventSize {
    event: usize,
    line: usize,
    after_cr: bool,
}

impl EventSize {
    /// Take in `bytes`; the largest size the event reached in them.
    fn observe(&mut self, bytes: &[u8]) -> usize {
        let mut largest = self.event + self.line;
        for &byte in bytes {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\r' | b'\n' => {
                    self.event = if self.line == 0 {
                        0
                    } else {
                        self.event + self.line + 1
                    };
                    self.line = 0;
                    self.after_cr = byte == b'\r';
                }
                _ => self.line += 1,
            }
            largest = largest.max(self.event + self.line);
        }
        largest
    }
}

fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// rmcp's redirect policy for its default client: 307 and 308 within the same origin only
/// (others would drop the body, or replay the session and headers to another host).
pub(super) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

impl StreamableHttpClient for BoundedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let limits = self.limits();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> Posted {
        self.post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        let request = request_id(&message);
        self.seen.note(session_id.as_ref(), &custom_headers);
        let mut custom_headers = custom_headers;
        trace_headers(&message, &mut custom_headers);
        if is_tools_list(&message) {
            let posted = self
                .post_tools_list(uri, &message, session_id, auth_header, custom_headers)
                .await;
            return self.bound_answer(posted, request);
        }
        let posted = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.bound_answer(posted, request)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        if self.seen.kept() {
            tracing::info!(
                "upstream session left open: another replica carries on a call made in it"
            );
            return Ok(());
        }
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        let max = self.limits().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        let events = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.bound_events(events, None))
    }
}
