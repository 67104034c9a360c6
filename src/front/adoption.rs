//! The jobs this replica adopted from owners whose lease lapsed (the store hands them up as
//! `events::Adopted`: it never calls into jobs or upstreams), carried on: each re-attached to
//! its upstream task or its resumable call stream (`Upstream::reattach`) and run by a job
//! runner here, its events going on the same `seq` line; what its upstream asks goes to the
//! job's input desk. One that cannot be re-attached here ends `owner_lost` at once.

use std::sync::Arc;

use futures::{FutureExt, StreamExt, stream::BoxStream};
use tracing::Instrument;

use super::{
    ask_router::{AskRouter, RoutedSink},
    tool_call::work_outcome,
};
use crate::{
    events::Adopted,
    jobs::{Jobs, PendingJob, Work},
    metrics::{AdoptionEvent, Adoptions},
    model::{FailureReason, JobFailure},
    upstream::{TaskResume, Upstreams},
};

/// Carry on every job `adopted` brings, until it ends (the store stops) or the jobs stage
/// stops.
pub async fn carry_on_adopted(
    upstreams: Upstreams,
    jobs: Jobs,
    mut adopted: BoxStream<'static, Adopted>,
    events: Adoptions,
) {
    while let Some(job) = adopted.next().await {
        let pending = jobs.adopt(&job.snapshot);
        let span = pending.span().clone();
        let asks = AskRouter::for_adopted(&jobs, job.snapshot.job_id);
        if !carry_on(&upstreams, pending, job, asks)
            .instrument(span)
            .await
        {
            events.count(AdoptionEvent::OwnerLost);
        }
    }
}

/// Carry `job` on; false when it could not be and ended `owner_lost`.
async fn carry_on(
    upstreams: &Upstreams,
    pending: PendingJob,
    job: Adopted,
    asks: Arc<AskRouter>,
) -> bool {
    let Adopted { snapshot, record } = job;
    let Some(upstream) = upstreams.get(&record.upstream) else {
        let message = format!(
            "the replica that adopted this job has no upstream {}: run the tool again",
            record.upstream
        );
        pending
            .fail(JobFailure::new(FailureReason::OwnerLost, message))
            .await;
        return false;
    };
    let resume = TaskResume {
        // The steps a task's job counts are its status messages: whole numbers.
        steps: snapshot.progress.map_or(0, |p| p.max(0.0) as u32),
        message: snapshot.message.clone(),
    };
    let intake = pending.intake();
    // Kept again by this replica (fenced at its generation): the cursor moves on from here.
    intake.reattach(record.clone());
    let sink = Arc::new(RoutedSink {
        asks,
        intake: Some(intake),
        principal: None,
        caller_logs: None,
    });
    match upstream.reattach(&record, resume, sink) {
        Ok(call) => {
            let canceller = call.canceller;
            let work = Work {
                outcome: call.outcome.map(work_outcome).boxed(),
                cancel: Box::new(move |_reason| async move { canceller.cancel().await }.boxed()),
            };
            match &record.stream {
                Some(cursor) => tracing::info!(last_event_id = %cursor.last_event_id,
                    "adopted job: resuming its upstream call stream"),
                None => tracing::info!(task = %record.task_id,
                    "adopted job: following its upstream task"),
            }
            pending.start(
                work,
                upstream.config().limits_for(&snapshot.upstream_tool),
                None,
            );
            true
        }
        Err(error) => {
            pending
                .fail(JobFailure::new(FailureReason::OwnerLost, error.to_string()))
                .await;
            false
        }
    }
}
