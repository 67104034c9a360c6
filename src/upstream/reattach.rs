//! An adopted job's upstream call: the task another replica made, followed from this one on
//! the session it was made in (`session_poller.rs`), from where its job stood.

use std::sync::Arc;

use futures::{FutureExt, future::BoxFuture};

use super::{
    Upstream, UpstreamError,
    call_outcome::CallOutcome,
    session_poller::SessionPoller,
    tap::CallSink,
    task_call::{self, TaskLine, TaskResume},
};
use crate::{config::TransportKind, metrics::Metrics, model::Reattach};

/// A re-attached call: its outcome, and the way to cancel its task.
pub struct AdoptedCall {
    pub outcome: BoxFuture<'static, CallOutcome>,
    pub canceller: TaskCanceller,
}

/// Sends `tasks/cancel` for an adopted task, on its session.
pub struct TaskCanceller {
    poller: Arc<SessionPoller>,
    task_id: String,
    metrics: Arc<Metrics>,
}

impl TaskCanceller {
    /// Ask the upstream to stop the task; its answer only acknowledges it.
    pub async fn cancel(&self) {
        let answer = self
            .poller
            .request("tasks/cancel", &self.task_id, Some(CANCEL_WITHIN))
            .await;
        let outcome = if answer.is_ok() { "ok" } else { "error" };
        self.metrics
            .upstream_task_requests
            .with_label_values(&["tasks/cancel", outcome])
            .inc();
    }
}

/// How long a `tasks/cancel` of an adopted task may take.
const CANCEL_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

impl Upstream {
    /// Carry on the call `record` names (an upstream task made by another replica, on this
    /// upstream), its reports going to `sink`, from where its job stood (`resume`).
    pub fn reattach(
        &self,
        record: &Reattach,
        resume: TaskResume,
        sink: Arc<dyn CallSink>,
    ) -> Result<AdoptedCall, UpstreamError> {
        if self.inner.config.transport != TransportKind::Http {
            return Err(UpstreamError::NotReattachable {
                why: format!("upstream {} is not a Streamable HTTP one", self.name()),
            });
        }
        let poller = Arc::new(SessionPoller::new(
            &self.inner.config,
            record,
            self.inner.limits.max_result_bytes,
        )?);
        let canceller = TaskCanceller {
            poller: poller.clone(),
            task_id: record.task_id.clone(),
            metrics: self.inner.metrics.clone(),
        };
        let call = self.task_call(sink, TaskLine::Session(poller));
        let outcome = task_call::follow_adopted(
            self.name().to_string(),
            record.task_id.clone(),
            call,
            resume,
        )
        .boxed();
        Ok(AdoptedCall { outcome, canceller })
    }
}
