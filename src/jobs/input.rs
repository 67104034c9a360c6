//! Questions a running job's tool asks, waiting for a person's answer.
//!
//! The upstream's `elicitation/create` waits (in rmcp's request handler, a task of its own)
//! on [`Jobs::ask`]: the question becomes the job's `input_required` event (status
//! `input_required`, the snapshot lists it), and the first answer that fits its schema, from
//! any answer path ([`Jobs::answer`]), goes back to the tool, followed by an `input_answered`
//! event. A question nobody answers within `jobs.input_timeout_secs` is declined, and the job
//! goes on. The waiting questions of a job live in this replica, the one that runs its
//! upstream call: an answer must reach it (one replica, or sticky routing, see
//! docs/tasks.md).

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::Jobs;
use crate::model::{EventBody, InputAction, InputAnswer, InputMismatch, InputQuestion, JobId};

/// Why an answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// No such job here (or it is not the caller's: the caller layer decides that first).
    #[error("no such job here")]
    UnknownJob,
    /// The job has no question waiting (none asked, or already answered, or timed out).
    #[error(
        "the job has no question waiting for an answer (it was answered already, timed out, or \
         none was asked)"
    )]
    NothingToAnswer,
    #[error("the answer does not fit the question's schema: {0}")]
    Mismatch(#[from] InputMismatch),
    #[error("the answer is {size} bytes, more than jobs.max_input_bytes ({limit})")]
    TooLarge { size: usize, limit: usize },
}

/// One question waiting for its answer.
struct Waiting {
    question: InputQuestion,
    answer: oneshot::Sender<InputAnswer>,
}

/// The questions waiting in this replica, by job. A `parking_lot` mutex: every critical
/// section is a map lookup, never across an `.await`.
#[derive(Default)]
pub(super) struct InputDesk {
    waiting: Mutex<HashMap<JobId, Vec<Waiting>>>,
    /// Numbers question keys within the replica (a key only has to be unique per job).
    next: std::sync::atomic::AtomicU64,
}

impl InputDesk {
    /// The question `answer` is for (its key, else the job's oldest), taken off the desk if
    /// the answer fits its schema. `Err(None)`: no such question waits.
    fn take_fitting(
        &self,
        id: JobId,
        answer: &InputAnswer,
    ) -> Result<Waiting, Option<InputMismatch>> {
        let mut all = self.waiting.lock();
        let of_job = all.get_mut(&id).ok_or(None)?;
        let at = match &answer.key {
            Some(key) => of_job.iter().position(|w| &w.question.key == key),
            None => (!of_job.is_empty()).then_some(0),
        }
        .ok_or(None)?;
        answer
            .check(&of_job[at].question.requested_schema)
            .map_err(Some)?;
        Ok(of_job.remove(at))
    }

    /// Drop a job's waiting questions (it ended): their askers get `cancel`.
    pub(super) fn forget(&self, id: JobId) {
        self.waiting.lock().remove(&id);
    }
}

impl Jobs {
    /// Ask the people watching job `id` a question, and wait for the answer (declined after
    /// `jobs.input_timeout_secs`, at once past `jobs.max_pending_inputs`; `cancel` if the job
    /// ends meanwhile).
    pub async fn ask(
        &self,
        id: JobId,
        message: String,
        requested_schema: serde_json::Value,
    ) -> InputAnswer {
        let desk = &self.inner.inputs;
        let config = &self.inner.config;
        let key = format!(
            "q{}",
            desk.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
        );
        let question = InputQuestion {
            key: key.clone(),
            message,
            requested_schema,
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = desk.waiting.lock();
            let of_job = waiting.entry(id).or_default();
            if of_job.len() >= config.max_pending_inputs {
                self.limit_hit("max_pending_inputs");
                return InputAnswer::decline();
            }
            of_job.push(Waiting {
                question: question.clone(),
                answer: tx,
            });
        }
        self.record(id, EventBody::InputRequired(question)).await;
        let timeout = std::time::Duration::from_secs(config.input_timeout_secs);
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => InputAnswer {
                action: InputAction::Cancel,
                content: None,
                key: None,
            },
            Err(_) => {
                self.limit_hit("input_timeout_secs");
                if self.take(id, Some(&key)).is_some() {
                    self.answered(id, &key, InputAction::Decline, "timeout")
                        .await;
                }
                InputAnswer::decline()
            }
        }
    }

    /// Give the answer to job `id`'s question (`answer.key`, else its oldest), if it fits the
    /// question's schema and `jobs.max_input_bytes`. `by` names the answer path in the
    /// `input_answered` event.
    pub async fn answer(&self, id: JobId, answer: InputAnswer, by: &str) -> Result<(), InputError> {
        let size = serde_json::to_vec(&answer).map_or(0, |v| v.len());
        let limit = self.inner.config.max_input_bytes;
        if size > limit {
            self.limit_hit("max_input_bytes");
            return Err(InputError::TooLarge { size, limit });
        }
        let waiting = match self.inner.inputs.take_fitting(id, &answer) {
            Ok(waiting) => waiting,
            Err(Some(mismatch)) => return Err(mismatch.into()),
            Err(None) => return Err(self.no_question(id).await),
        };
        let key = waiting.question.key.clone();
        let action = answer.action;
        // The asker may have timed out this instant: then the answer is not used.
        if waiting.answer.send(answer).is_err() {
            return Err(InputError::NothingToAnswer);
        }
        self.answered(id, &key, action, by).await;
        Ok(())
    }

    pub fn max_input_bytes(&self) -> usize {
        self.inner.config.max_input_bytes
    }

    fn take(&self, id: JobId, key: Option<&str>) -> Option<Waiting> {
        let mut all = self.inner.inputs.waiting.lock();
        let of_job = all.get_mut(&id)?;
        let at = of_job
            .iter()
            .position(|w| key.is_none_or(|k| w.question.key == k))?;
        Some(of_job.remove(at))
    }

    async fn no_question(&self, id: JobId) -> InputError {
        match self.snapshot(id).await {
            Ok(Some(_)) => InputError::NothingToAnswer,
            _ => InputError::UnknownJob,
        }
    }

    async fn answered(&self, id: JobId, key: &str, action: InputAction, by: &str) {
        let body = EventBody::InputAnswered {
            key: key.to_string(),
            action: action.as_str().to_string(),
            by: by.to_string(),
        };
        self.record(id, body).await;
    }

    async fn record(&self, id: JobId, body: EventBody) {
        if let Err(e) = self.inner.store.append(id, body).await {
            tracing::warn!(job = %id, error = %e, "an input event was not stored");
        }
    }

    fn limit_hit(&self, limit: &str) {
        self.inner
            .metrics
            .limit_hits
            .with_label_values(&[limit])
            .inc();
    }
}
