//! The state the API's handlers share, and what the app hands in: where answers to jobs'
//! questions go ([`InputAnswers`]) and what `/readyz` reports besides the store
//! ([`Readiness`]).

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use serde_json::Value;

use super::auth;
use crate::{
    events::{Broker, Bus},
    metrics::Metrics,
    model::{InputAnswer, JobId},
};

/// Takes answers to the questions jobs' tools ask (the jobs stage behind it, handed in by the
/// app: this module never reaches into jobs).
pub trait InputAnswers: Send + Sync + 'static {
    /// Give `answer` to job `id`'s waiting question.
    fn answer(&self, id: JobId, answer: InputAnswer) -> BoxFuture<'_, Result<(), InputRefusal>>;
    /// Largest answer body (`jobs.max_input_bytes`).
    fn max_bytes(&self) -> usize;
}

/// Why an answer was not taken, as the HTTP answer says it.
#[derive(Debug)]
pub enum InputRefusal {
    /// No such job here: 404.
    UnknownJob,
    /// Nothing waiting (answered already, timed out, none asked): 409.
    NothingToAnswer(String),
    /// It does not fit the question's schema: 400 naming the field (in the message, and as
    /// `field`).
    Mismatch { message: String, field: String },
    /// 413.
    TooLarge(String),
    /// The job runs on another replica, which did not confirm the answer (or cannot be
    /// reached): 503.
    Undelivered(String),
}

/// Reports on the parts of the bridge `/readyz` covers besides the store.
pub trait Readiness: Send + Sync + 'static {
    /// Why they keep the replica from serving (one of the `NOT_READY_*` reasons), if they do,
    /// and a JSON description of each upstream.
    fn report(&self) -> (Option<&'static str>, Value);
    /// Whether the replica drains (shutting down): not ready, whatever the rest says.
    fn draining(&self) -> bool;
}

/// The `reason` of a `/readyz` 503 while the replica drains.
pub const NOT_READY_DRAINING: &str = "draining";
/// The `reason` of a `/readyz` 503 while the store does not answer.
pub const NOT_READY_STORE: &str = "store_unreachable";
/// The `reason` of a `/readyz` 503 before every upstream has been tried once.
pub const NOT_READY_STARTING: &str = "starting";
/// The `reason` of a `/readyz` 503 while an upstream `server.ready_requires` names is down.
pub const NOT_READY_UPSTREAM: &str = "required_upstream_down";

#[derive(Clone)]
pub struct ApiState {
    /// Where job channels are read.
    pub broker: Arc<dyn Broker>,
    /// Where a cancel goes to reach the job's replica.
    pub bus: Arc<dyn Bus>,
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<dyn Readiness>,
    /// Interval of keep-alive comments on idle SSE streams.
    pub keep_alive: Duration,
    /// Bytes one SSE reader may hold unread (`limits.max_sse_buffer_bytes`).
    pub max_sse_buffer_bytes: usize,
    /// Fired at shutdown: open SSE streams end so the server can close.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Who may open which job URL, and the stream limits (see `auth`).
    pub guard: auth::Guard,
    /// Where `POST /jobs/{id}/input` answers go (`None`: the route answers 404).
    pub inputs: Option<Arc<dyn InputAnswers>>,
}
