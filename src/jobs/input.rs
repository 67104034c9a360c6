//! The job's input desk: questions a running job's tool asks, waiting for an answer.
//!
//! [`InputDesk::ask`] puts a question on the desk (the job's `input_required` event; status
//! `input_required`) and waits; the first answer that fits its schema, from any answer path
//! ([`InputDesk::answer`]), goes back to the tool once its `input_answered` event is recorded. A
//! question nobody answers within `jobs.input_timeout_secs` is declined. Questions wait in the
//! replica that runs the call: an answer reaching another replica is relayed here through the
//! store, checked and taken as a local one, and the verdict goes back (at most
//! `store.input_relay_timeout_ms`). The same way carries a round caller's answers to the
//! samples and roots its job's tool asked ([`InputDesk::relay_caller_answer`], [`CallerRequests`]).
//! docs/design/mcp-asks.md tells where a question comes from and who may answer it.

use std::{collections::HashMap, sync::Arc};

use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::{
    config::JobsConfig,
    events::{AnswerRequest, Relay, Relayed, RelayedAnswer},
    metrics::Metrics,
    model::AnswerVerdict,
    model::{
        EventBody, InputAction, InputAnswer, InputMismatch, InputQuestion, JobId, JobSnapshot,
    },
    store::Store,
};

/// The answer path named for a relayed answer to a caller request (no event names it: what a
/// caller answers for its own call is not on the job's channel).
const CALLER_BY: &str = "tools/call inputResponses";

/// The longest key of a caller request an answer may name (the front door's keys are
/// `sample-N` / `roots-N`, N a `u64`); a longer one answers nothing and is not relayed.
const MAX_CALLER_KEY_BYTES: usize = 64;

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
    /// Relayed to the replica running the job, which gave no verdict in time.
    #[error(
        "the answer was passed to the bridge replica running the job, which did not confirm it \
         within {waited_ms} ms (store.input_relay_timeout_ms): it was most likely not taken; \
         look at the job's status (or its input_answered event) before answering again"
    )]
    Unconfirmed { waited_ms: u64 },
    /// The replica running the job cannot be reached now; nothing was delivered.
    #[error(
        "the bridge replica running the job cannot be reached right now ({0}); the answer was \
         not delivered: try again in a few seconds"
    )]
    Unreachable(&'static str),
}

/// One question waiting for its answer.
struct Waiting {
    question: InputQuestion,
    answer: oneshot::Sender<Given>,
}

/// An answer on its way to the asking tool, with what the job's channel says of it. The asker
/// records that before the tool has the answer: a tool may end its job as soon as it has it,
/// and nothing recorded after a job's terminal event is kept.
struct Given {
    answer: InputAnswer,
    /// The answer path, for `input_answered`.
    by: String,
    /// Recorded after `input_answered`: why an unfit answer was declined.
    note: Option<EventBody>,
    /// Told once the events are recorded, so that the answer path answers after them.
    recorded: oneshot::Sender<()>,
}

/// The questions waiting in this replica, by job (`Jobs::inputs`). A `parking_lot` mutex:
/// every critical section is a map lookup, never across an `.await`.
pub struct InputDesk {
    waiting: Mutex<HashMap<JobId, Vec<Waiting>>>,
    /// Numbers question keys within the replica (a key only has to be unique per job).
    next: std::sync::atomic::AtomicU64,
    store: Arc<dyn Store>,
    config: JobsConfig,
    /// This replica, the owner of the jobs it runs.
    replica: String,
    metrics: Arc<Metrics>,
    /// Where relayed answers to what those jobs asked their callers go (the front door's).
    caller_requests: RwLock<Option<Arc<dyn CallerRequests>>>,
}

impl InputDesk {
    pub(super) fn new(
        store: Arc<dyn Store>,
        config: JobsConfig,
        replica: String,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            waiting: Mutex::default(),
            next: Default::default(),
            store,
            config,
            replica,
            metrics,
            caller_requests: RwLock::new(None),
        }
    }

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

    /// Ask the people watching job `id` a question, and wait for the answer (declined after
    /// `jobs.input_timeout_secs`, at once past `jobs.max_pending_inputs`; `cancel` if the job
    /// ends meanwhile).
    pub async fn ask(
        &self,
        id: JobId,
        message: String,
        requested_schema: serde_json::Value,
    ) -> InputAnswer {
        let desk = self;
        let config = &self.config;
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
            Ok(Ok(given)) => self.receive(id, &key, given).await,
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
    /// `input_answered` event. A job another replica runs gets it through the store, with the
    /// same checks there (its verdict is this answer's outcome).
    pub async fn answer(&self, id: JobId, answer: InputAnswer, by: &str) -> Result<(), InputError> {
        self.answer_noted(id, answer, by, None).await
    }

    /// [`InputDesk::answer`], with `note` recorded on the job's channel after its `input_answered`
    /// (before the tool has the answer when the job runs here).
    async fn answer_noted(
        &self,
        id: JobId,
        answer: InputAnswer,
        by: &str,
        note: Option<EventBody>,
    ) -> Result<(), InputError> {
        self.fits_size(&answer)?;
        let waiting = match self.take_fitting(id, &answer) {
            Ok(waiting) => waiting,
            Err(Some(mismatch)) => return Err(mismatch.into()),
            Err(None) => {
                return match self.store.snapshot(id).await {
                    Ok(Some(s)) if s.owner != self.replica && !s.status.is_terminal() => {
                        self.relay(&s, answer, by).await?;
                        // The owner recorded `input_answered`; the note follows from here.
                        if let Some(note) = note {
                            self.record(id, note).await;
                        }
                        Ok(())
                    }
                    Ok(Some(_)) => Err(InputError::NothingToAnswer),
                    _ => Err(InputError::UnknownJob),
                };
            }
        };
        self.give(waiting, answer, by, note).await
    }

    /// Decline question `key` of job `id` for an answer that could not be taken (`why`: it
    /// does not fit the schema, or is too large) from a path that cannot be told so (a
    /// client's reply to a request it was sent): the tool goes on with `decline`, and the
    /// job's channel says why in a `warning` log event. `Err` as [`InputDesk::answer`] when the
    /// question no longer waits.
    pub async fn decline_unfit(
        &self,
        id: JobId,
        key: &str,
        why: &InputError,
        by: &str,
    ) -> Result<(), InputError> {
        let decline = InputAnswer {
            key: Some(key.to_string()),
            ..InputAnswer::decline()
        };
        let note = bridge_warning(format!(
            "question {key} was declined: the answer from {by} was not taken ({why})"
        ));
        // Here the asker records the note (after `input_answered`) before the tool has its
        // decline: given first, the tool may end the job before the note is written.
        self.answer_noted(id, decline, by, Some(note)).await
    }

    /// Whether job `id`'s tool may ask a question of `size` bytes (its `elicitation/create`
    /// parameters as JSON) at all. Past `jobs.max_question_bytes` it is declined at once,
    /// shown to nobody (not the waiting caller, not the job's channel, snapshot or task: a
    /// tool could otherwise put megabytes on each of them, and into an agent's context); the
    /// hit is counted and the job's channel says why in a `warning` log event (written before
    /// the tool has its decline, so before the job can end).
    pub async fn question_fits(&self, id: JobId, size: usize) -> bool {
        let limit = self.config.max_question_bytes;
        if size <= limit {
            return true;
        }
        self.limit_hit("max_question_bytes");
        let note = bridge_warning(format!(
            "the tool asked a question of {size} bytes, more than jobs.max_question_bytes \
             ({limit}): it was declined without being shown"
        ));
        self.record(id, note).await;
        false
    }

    /// How long a question waits for its answer (`jobs.input_timeout_secs`), also when the
    /// waiting caller is asked it.
    pub fn input_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.config.input_timeout_secs)
    }

    /// The waiting caller was asked job `id`'s question and gave no answer within
    /// `jobs.input_timeout_secs`: the question is declined: counted, and the job's channel
    /// says so (before the tool has its decline).
    pub async fn caller_left_question(&self, id: JobId) {
        self.limit_hit("input_timeout_secs");
        let secs = self.config.input_timeout_secs;
        let note = bridge_warning(format!(
            "the waiting MCP caller was asked the tool's question and did not answer within \
             jobs.input_timeout_secs ({secs} s): it was declined"
        ));
        self.record(id, note).await;
    }

    /// Where relayed answers to the requests of this replica's jobs made of their callers go
    /// (the front door's desk; the latest one given).
    pub fn serve_caller_requests(&self, desk: Arc<dyn CallerRequests>) {
        *self.caller_requests.write() = Some(desk);
    }

    /// An answer for a job this replica runs, relayed by the replica it reached: checked and
    /// taken as a local one (never relayed on), and the verdict sent back.
    pub(super) async fn answer_relayed(&self, request: AnswerRequest) {
        let AnswerRequest {
            job_id: id,
            answer,
            by,
            reply,
        } = request;
        if reply.expired() {
            self.relay_counted("expired");
            return;
        }
        let verdict = match answer {
            RelayedAnswer::Question(answer) => self.question_answered(id, answer, &by).await,
            RelayedAnswer::CallerRequest { key, value } => {
                let desk = self.caller_requests.read().clone();
                match desk {
                    Some(desk) => desk.answer(id, &key, value),
                    None => AnswerVerdict::NothingToAnswer,
                }
            }
        };
        if let Err(e) = self.store.reply_answer(reply, verdict).await {
            tracing::warn!(job = %id, error = %e, "the verdict on a relayed answer was not sent");
        }
    }

    /// A relayed answer to a question of job `id`, running here: checked and taken as a local
    /// one; the verdict.
    async fn question_answered(&self, id: JobId, answer: InputAnswer, by: &str) -> AnswerVerdict {
        let outcome = match self.fits_size(&answer) {
            Err(e) => Err(e),
            Ok(()) => match self.take_fitting(id, &answer) {
                Ok(waiting) => self.give(waiting, answer, by, None).await,
                Err(Some(mismatch)) => Err(mismatch.into()),
                Err(None) => Err(self.no_question(id).await),
            },
        };
        match outcome {
            Ok(()) => AnswerVerdict::Taken,
            Err(InputError::Mismatch(m)) => AnswerVerdict::Mismatch {
                field: m.field,
                problem: m.problem,
            },
            Err(InputError::TooLarge { size, limit }) => AnswerVerdict::TooLarge { size, limit },
            Err(InputError::UnknownJob) => AnswerVerdict::UnknownJob,
            Err(_) => AnswerVerdict::NothingToAnswer,
        }
    }

    /// A round caller's answer (`value`, under `key`) to a sample or the roots the tool
    /// of `job` asked it for, from a retry that reached this replica while another runs the
    /// job (the caller's right to the job checked already): passed to that replica, which
    /// checks and takes it as it takes an answer from a retry of its own; its verdict
    /// (`Taken`, `TooLarge`, `Unfit`, `NothingToAnswer`). Nothing is relayed when nothing can
    /// be taken: the job ended or runs here (what waits here was looked at already), the key is
    /// longer than any the front door hands out, or the answer is past `jobs.max_sample_bytes`
    /// (the owner's bound too; counted here). `Err` when the owner gave no verdict.
    pub async fn relay_caller_answer(
        &self,
        job: &JobSnapshot,
        key: &str,
        value: Value,
    ) -> Result<AnswerVerdict, InputError> {
        if job.owner == self.replica || job.status.is_terminal() || key.len() > MAX_CALLER_KEY_BYTES
        {
            return Ok(AnswerVerdict::NothingToAnswer);
        }
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        let limit = self.config.max_sample_bytes;
        if size > limit {
            self.limit_hit("max_sample_bytes");
            return Ok(AnswerVerdict::TooLarge { size, limit });
        }
        let answer = RelayedAnswer::CallerRequest {
            key: key.to_string(),
            value,
        };
        self.relay_verdict(job, answer, CALLER_BY).await
    }

    /// Pass the answer to the replica running `job`, and take its verdict.
    async fn relay(
        &self,
        job: &JobSnapshot,
        answer: InputAnswer,
        by: &str,
    ) -> Result<(), InputError> {
        match self
            .relay_verdict(job, RelayedAnswer::Question(answer), by)
            .await?
        {
            AnswerVerdict::Taken => Ok(()),
            AnswerVerdict::UnknownJob => Err(InputError::UnknownJob),
            AnswerVerdict::Mismatch { field, problem } => {
                Err(InputError::Mismatch(InputMismatch { field, problem }))
            }
            AnswerVerdict::TooLarge { size, limit } => Err(InputError::TooLarge { size, limit }),
            AnswerVerdict::NothingToAnswer | AnswerVerdict::Unfit { .. } => {
                Err(InputError::NothingToAnswer)
            }
        }
    }

    /// Pass `answer` to the replica running `job`: its verdict, counted by outcome, or why
    /// there is none.
    async fn relay_verdict(
        &self,
        job: &JobSnapshot,
        answer: RelayedAnswer,
        by: &str,
    ) -> Result<AnswerVerdict, InputError> {
        let id = job.job_id;
        let relayed = self
            .store
            .relay_answer(Relay {
                owner: job.owner.clone(),
                job: id,
                answer,
                by: by.to_string(),
                principal: job.principal.clone(),
            })
            .await;
        let (outcome, result) = match relayed {
            Ok(Relayed::Verdict(verdict)) => {
                let outcome = match &verdict {
                    AnswerVerdict::Taken => "taken",
                    AnswerVerdict::UnknownJob => "unknown_job",
                    AnswerVerdict::NothingToAnswer => "nothing_to_answer",
                    AnswerVerdict::Mismatch { .. } => "mismatch",
                    AnswerVerdict::TooLarge { .. } => "too_large",
                    AnswerVerdict::Unfit { .. } => "unfit",
                };
                (outcome, Ok(verdict))
            }
            Ok(Relayed::Unconfirmed { waited_ms }) => {
                self.limit_hit("input_relay_timeout_ms");
                ("unconfirmed", Err(InputError::Unconfirmed { waited_ms }))
            }
            Ok(Relayed::OwnerAway) => (
                "owner_away",
                Err(InputError::Unreachable(
                    "it does not listen on its Redis channel: it may be restarting",
                )),
            ),
            Ok(Relayed::Busy { per_principal }) => {
                let (key, why) = if per_principal {
                    (
                        "max_input_relays_per_principal",
                        "too many answers to this principal's jobs wait for verdicts \
                         (limits.max_input_relays_per_principal)",
                    )
                } else {
                    (
                        "max_input_relays",
                        "too many answers wait for verdicts (limits.max_input_relays)",
                    )
                };
                self.limit_hit(key);
                ("busy", Err(InputError::Unreachable(why)))
            }
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "an answer could not be relayed");
                (
                    "store_unavailable",
                    Err(InputError::Unreachable("the job store is unreachable")),
                )
            }
        };
        self.relay_counted(outcome);
        result
    }

    /// Hand a taken question its answer; return once the asker has recorded `input_answered`
    /// (and `note`), see [`Given`].
    async fn give(
        &self,
        waiting: Waiting,
        answer: InputAnswer,
        by: &str,
        note: Option<EventBody>,
    ) -> Result<(), InputError> {
        let (recorded, on_recorded) = oneshot::channel();
        let given = Given {
            answer,
            by: by.to_string(),
            note,
            recorded,
        };
        // The asker may have timed out this instant: then the answer is not used.
        if waiting.answer.send(given).is_err() {
            return Err(InputError::NothingToAnswer);
        }
        // An error: the asker went away (its request was cancelled) with the answer in hand.
        let _ = on_recorded.await;
        Ok(())
    }

    /// The asker's side of [`InputDesk::give`]: record what the job's channel says of the answer,
    /// then hand the answer to the tool.
    async fn receive(&self, id: JobId, key: &str, given: Given) -> InputAnswer {
        let Given {
            answer,
            by,
            note,
            recorded,
        } = given;
        self.answered(id, key, answer.action, &by).await;
        if let Some(note) = note {
            self.record(id, note).await;
        }
        let _ = recorded.send(());
        answer
    }

    fn fits_size(&self, answer: &InputAnswer) -> Result<(), InputError> {
        let size = serde_json::to_vec(answer).map_or(0, |v| v.len());
        let limit = self.config.max_input_bytes;
        if size > limit {
            self.limit_hit("max_input_bytes");
            return Err(InputError::TooLarge { size, limit });
        }
        Ok(())
    }

    fn relay_counted(&self, outcome: &str) {
        self.metrics
            .input_relays
            .with_label_values(&[outcome])
            .inc();
    }

    pub fn max_input_bytes(&self) -> usize {
        self.config.max_input_bytes
    }

    fn take(&self, id: JobId, key: Option<&str>) -> Option<Waiting> {
        let mut all = self.waiting.lock();
        let of_job = all.get_mut(&id)?;
        let at = of_job
            .iter()
            .position(|w| key.is_none_or(|k| w.question.key == k))?;
        Some(of_job.remove(at))
    }

    async fn no_question(&self, id: JobId) -> InputError {
        match self.store.snapshot(id).await {
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
        if let Err(e) = self.store.append(id, body).await {
            tracing::warn!(job = %id, error = %e, "an input event was not stored");
        }
    }

    fn limit_hit(&self, limit: &str) {
        self.metrics.limit_hits.with_label_values(&[limit]).inc();
    }
}

/// A `warning` log event of the bridge's own, for a job's channel.
fn bridge_warning(text: String) -> EventBody {
    EventBody::Log {
        level: "warning".into(),
        logger: Some("mcp-progress-bridge".into()),
        data: serde_json::Value::String(text),
    }
}

/// The requests the jobs running here made of their waiting callers (samples, roots), kept
/// by the front door, which alone knows them: a relayed answer to one is taken there, checked
/// exactly as an answer from a retry that reached this replica (`jobs.max_sample_bytes`,
/// shape, first answer wins), and the verdict goes back. `Taken`, `TooLarge`, `Unfit` or
/// `NothingToAnswer` (nothing of the job waits under that key).
pub trait CallerRequests: Send + Sync + 'static {
    fn answer(&self, job: JobId, key: &str, value: Value) -> AnswerVerdict;
}
