//! An adopted job's upstream call, carried on from this replica on the session another replica
//! made it in: the upstream task, followed (`session_poller.rs`, `task_call.rs`), or the call's
//! resumable response stream, resumed (`stream_resume.rs`); from where its job stood.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};

use super::{
    UpstreamError,
    call_outcome::CallOutcome,
    session_asks::{AskCap, NoCall},
    session_poller::SessionPoller,
    shared::Shared,
    stream_resume,
    tap::CallSink,
    task_call::{self, TaskCall, TaskLine, TaskResume},
};
use crate::{config::TransportKind, metrics::Metrics, model::Reattach};

/// A re-attached call: its outcome, and the way to cancel it.
pub struct AdoptedCall {
    pub outcome: BoxFuture<'static, CallOutcome>,
    pub canceller: AdoptedCanceller,
}

/// Cancels an adopted call on its session: `tasks/cancel` for a task, `notifications/cancelled`
/// for a resumed call.
pub struct AdoptedCanceller {
    poller: Arc<SessionPoller>,
    target: Target,
    metrics: Arc<Metrics>,
}

enum Target {
    Task(String),
    Request(serde_json::Value),
}

impl AdoptedCanceller {
    /// Ask the upstream to stop the call; its answer only acknowledges it.
    pub async fn cancel(&self) {
        match &self.target {
            Target::Task(task_id) => {
                let answer = self
                    .poller
                    .request("tasks/cancel", task_id, Some(CANCEL_WITHIN), &NoCall)
                    .await;
                let outcome = if answer.is_ok() { "ok" } else { "error" };
                self.metrics
                    .upstream_task_requests
                    .with_label_values(&["tasks/cancel", outcome])
                    .inc();
            }
            Target::Request(id) => {
                let sent = tokio::time::timeout(CANCEL_WITHIN, self.poller.cancel_request(id));
                if !matches!(sent.await, Ok(Ok(()))) {
                    tracing::debug!("the cancel of a resumed call did not reach the upstream");
                }
            }
        }
    }
}

/// How long a cancel of an adopted call may take.
const CANCEL_WITHIN: Duration = Duration::from_secs(30);

/// Carry on the call `record` names (made by another replica, on this upstream), its
/// reports going to `sink`, from where its job stood (`resume`: a task's steps).
pub(super) fn reattach(
    upstream: &Arc<Shared>,
    record: &Reattach,
    resume: TaskResume,
    sink: Arc<dyn CallSink>,
) -> Result<AdoptedCall, UpstreamError> {
    if upstream.config.transport != TransportKind::Http {
        return Err(UpstreamError::NotReattachable {
            why: format!("upstream {} is not a Streamable HTTP one", upstream.name()),
        });
    }
    let asks = AskCap {
        max: upstream.limits.tasks.max_asks_per_stream,
        metrics: upstream.metrics.clone(),
    };
    let poller = Arc::new(SessionPoller::new(
        &upstream.config,
        record,
        (upstream.limits.max_result_bytes, asks),
    )?);
    let metrics = upstream.metrics.clone();
    if let Some(cursor) = &record.stream {
        let tasks = upstream.limits.tasks;
        let bounds = (
            Duration::from_secs(tasks.resume_within_secs),
            tasks.max_event_id_bytes,
        );
        let outcome = stream_resume::follow_stream(
            upstream.name().to_string(),
            poller.clone(),
            cursor.clone(),
            sink,
            bounds,
        )
        .boxed();
        let target = Target::Request(cursor.request_id.clone());
        return Ok(AdoptedCall {
            outcome,
            canceller: AdoptedCanceller {
                poller,
                target,
                metrics,
            },
        });
    }
    let canceller = AdoptedCanceller {
        poller: poller.clone(),
        target: Target::Task(record.task_id.clone()),
        metrics,
    };
    let call = TaskCall::new(upstream, sink, TaskLine::Session(poller));
    let outcome = task_call::follow_adopted(
        upstream.name().to_string(),
        record.task_id.clone(),
        call,
        resume,
    )
    .boxed();
    Ok(AdoptedCall { outcome, canceller })
}
