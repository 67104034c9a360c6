//! The answer of the stream routes: open a job's or a correlation's channel for a reader at
//! its Last-Event-ID, and answer with the [`Subscriber`]'s frames as an event stream. What the
//! stream sends, and when: `subscriber.rs`. Details and reasons: docs/design/sse.md.

use std::{convert::Infallible, sync::Arc};

use axum::{
    body::Body,
    http::{HeaderValue, header},
    response::Response,
};
use bytes::Bytes;
use futures::StreamExt;

use super::{
    error::ApiError,
    limits::SubscriberPermit,
    serve::{DirectStream, Outflow},
    state::ApiState,
    subscriber::{Only, Subscriber},
};
use crate::model::{Channel, Seq};

/// What a stream holds for its life besides its state, handed in by the handler.
pub struct Held {
    /// The connection's outgoing bytes (see [`Outflow`]), when it is served by the bridge's
    /// own loop; the stream also ends when that connection is told to close.
    pub outflow: Option<Arc<Outflow>>,
    /// The stream's subscriber place (`limits.max_subscribers[_per_channel]`), given back
    /// when the stream ends.
    pub place: Option<SubscriberPermit>,
}

/// Open `channel` for a reader at `after` (its Last-Event-ID) and answer with the stream;
/// `only`: the jobs of a correlation this caller may see, not all of them.
pub async fn respond(
    state: &ApiState,
    channel: Channel,
    after: Option<Seq>,
    only: Option<Only>,
    held: Held,
) -> Result<Response, ApiError> {
    // A correlation stream has no snapshot to start from: a fresh reader replays it whole.
    let after = match channel {
        Channel::Correlation(_) => Some(after.unwrap_or(0)),
        Channel::Job(_) => after,
    };
    // A fresh job reader gets the snapshot, then every event history still has (so a late
    // subscriber sees every step it can), then the live tail.
    let fresh = after.is_none();
    let opened = state
        .broker
        .open(&channel, after.or(Some(0)))
        .await?
        .ok_or(ApiError::NotFound)?;
    if let Some(after) = after
        && after > opened.head
    {
        return Err(ahead(after, opened.head, only.as_ref()));
    }
    // Served by the bridge's loop, the stream ends when its connection is told to close (a
    // flag that wakes it, see `Outflow::close`); otherwise on the shutdown token.
    let shutdown = match &held.outflow {
        Some(_) => None,
        None => Some(Box::pin(state.shutdown.clone().cancelled_owned())),
    };
    let outflow = held.outflow.unwrap_or_default();
    outflow.arm(
        state.max_sse_buffer_bytes,
        state.keep_alive,
        state
            .metrics
            .sse_readers_dropped
            .with_label_values(&["buffer"]),
    );
    let subscriber = Subscriber::start(
        state,
        channel,
        if fresh { None } else { after },
        opened,
        (only, outflow),
        (shutdown, held.place),
    )
    .await;
    Ok(event_stream(subscriber))
}

/// A Last-Event-ID past the stream's newest event (`head`). A reader with ids of its own is
/// not told the position: it counts others' events.
fn ahead(after: Seq, head: Seq, only: Option<&Only>) -> ApiError {
    ApiError::BadRequest(match only.and_then(|o| o.ids.as_ref()) {
        Some(_) => {
            "Last-Event-ID is not the id of an event this stream sent; reconnect without it".into()
        }
        None => format!(
            "Last-Event-ID {after} is ahead of this stream, whose newest event is {head}; reconnect without it"
        ),
    })
}

/// The response whose body is `subscriber`'s frames, with the headers of an event stream.
fn event_stream(subscriber: Subscriber) -> Response {
    let frames = subscriber.frames().map(Ok::<Bytes, Infallible>);
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    // The bridge's loop may write it on the socket itself (see `serve::direct`).
    response.extensions_mut().insert(DirectStream);
    response
}
