//! The samples (`sampling/createMessage`) and roots (`roots/list`) a job's tool asks its waiting
//! caller in rounds for (SEP-2322). They cannot wait on the job (no person has a model or
//! roots): they wait here, per job, in the replica running the call, for that caller only,
//! while it is in rounds with the job ([`JobRoundRequests`]); its retry's `inputResponses`
//! answer them by key (`sample-N`, `roots-N`), checked before they are taken. A retry that
//! reaches another replica relays its answers here through the store ([`RoundRequests`] is
//! this replica's desk for them). Bounds: `jobs.max_pending_inputs` waiting per job,
//! `jobs.input_timeout_secs` each, `jobs.max_sample_bytes` per answer; a caller that stops
//! waiting refuses what waits (a sample -32601, roots empty). docs/design/mcp-asks.md.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Weak},
    time::Duration,
};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{oneshot, watch};

// Sampling and roots are deprecated by SEP-2577 but upstreams still send them.
#[allow(deprecated)]
use rmcp::{
    ErrorData,
    model::{
        CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, InputRequest,
        InputRequests, ListRootsRequest, ListRootsResult,
    },
};

use super::{caller::Takes, handle::shown};
use crate::{
    config::JobsConfig,
    jobs::CallerRequests,
    metrics::Metrics,
    model::{AnswerVerdict, JobId},
    upstream::no_sampling,
};

/// The bounds of [`JobRoundRequests`], from `[jobs]`.
#[derive(Clone, Copy)]
struct Bounds {
    timeout: Duration,
    max_pending: usize,
    max_bytes: usize,
}

/// The jobs of this replica whose caller in rounds takes samples or roots. Weak: an entry
/// lives as long as its job's upstream call holds its [`JobRoundRequests`].
#[derive(Default)]
pub(super) struct RoundRequests {
    jobs: Mutex<HashMap<JobId, Weak<JobRoundRequests>>>,
}

impl RoundRequests {
    /// The asks of job `id`, made now: its call's sink holds them.
    pub fn open(
        &self,
        id: JobId,
        config: &JobsConfig,
        metrics: Arc<Metrics>,
    ) -> Arc<JobRoundRequests> {
        let (changed, _) = watch::channel(0);
        let asks = Arc::new(JobRoundRequests {
            state: Mutex::new(State::default()),
            changed,
            bounds: Bounds {
                timeout: Duration::from_secs(config.input_timeout_secs),
                max_pending: config.max_pending_inputs,
                max_bytes: config.max_sample_bytes,
            },
            metrics,
        });
        let mut jobs = self.jobs.lock();
        jobs.retain(|_, asks| asks.strong_count() > 0);
        jobs.insert(id, Arc::downgrade(&asks));
        asks
    }

    /// The asks of job `id`, if its call is still running here and takes any.
    pub fn get(&self, id: JobId) -> Option<Arc<JobRoundRequests>> {
        self.jobs.lock().get(&id).and_then(Weak::upgrade)
    }
}

/// Answers relayed by another replica, from the caller's retry that reached it (the caller's
/// right to the job checked there).
impl CallerRequests for RoundRequests {
    fn answer(&self, job: JobId, key: &str, value: Value) -> AnswerVerdict {
        let Some(asks) = self.get(job) else {
            return AnswerVerdict::NothingToAnswer;
        };
        match asks.answer_relayed(key, value) {
            Ok(true) => AnswerVerdict::Taken,
            Ok(false) | Err(AskError::NothingWaits(_)) => AnswerVerdict::NothingToAnswer,
            Err(AskError::TooLarge { size, limit, .. }) => AnswerVerdict::TooLarge { size, limit },
            Err(AskError::Shape {
                expected,
                method,
                error,
                ..
            }) => AnswerVerdict::Unfit {
                expected,
                method,
                error,
            },
        }
    }
}

/// One request of the tool waiting for the caller's answer.
#[allow(deprecated)]
enum Pending {
    Sample {
        request: Box<CreateMessageRequestParams>,
        answer: oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    },
    Roots {
        answer: oneshot::Sender<ListRootsResult>,
    },
}

#[derive(Default)]
struct State {
    /// What the caller in rounds takes (the latest of its requests says).
    takes: Takes,
    /// The caller's requests waiting on the job now.
    waiting: usize,
    /// The caller was answered `input_required` and has not retried yet.
    between_rounds: bool,
    pending: BTreeMap<String, Pending>,
    next: u64,
}

impl State {
    fn in_rounds(&self) -> bool {
        self.waiting > 0 || self.between_rounds
    }

    /// The caller is gone: what waits is refused (the senders drop).
    fn release(&mut self) {
        self.between_rounds = false;
        self.takes = Takes::default();
        self.pending.clear();
    }
}

/// The samples and roots one job's tool asks its caller in rounds for.
pub(super) struct JobRoundRequests {
    state: Mutex<State>,
    /// Bumped when a request is added: wakes the caller's waiting request.
    changed: watch::Sender<u64>,
    bounds: Bounds,
    metrics: Arc<Metrics>,
}

/// Why an answer in `inputResponses` was not taken (each a -32602 naming the key).
#[derive(Debug, thiserror::Error)]
pub(super) enum AskError {
    #[error(
        "inputResponses[{0:?}]: nothing of this job waits for it (it was answered already, \
         refused after jobs.input_timeout_secs, or refused when the caller stopped waiting): \
         call the tool again without requestState if you still need its result"
    )]
    NothingWaits(String),
    #[error(
        "inputResponses[{key:?}] is {size} bytes, more than jobs.max_sample_bytes ({limit}): \
         send a shorter answer"
    )]
    TooLarge {
        key: String,
        size: usize,
        limit: usize,
    },
    #[error(
        "inputResponses[{key:?}] is not a {expected} (the answer to {method}), nor a JSON-RPC \
         error object: {error}"
    )]
    Shape {
        key: String,
        expected: String,
        method: String,
        error: String,
    },
}

impl AskError {
    /// The error another replica's verdict on the caller's answer to `key` stands for (the
    /// same the caller gets when its retry reaches the replica running the call); `None` for
    /// `Taken`.
    pub fn of_verdict(key: &str, verdict: AnswerVerdict) -> Option<Self> {
        let key = shown(key);
        match verdict {
            AnswerVerdict::Taken => None,
            AnswerVerdict::TooLarge { size, limit } => {
                Some(AskError::TooLarge { key, size, limit })
            }
            AnswerVerdict::Unfit {
                expected,
                method,
                error,
            } => Some(AskError::Shape {
                key,
                expected,
                method,
                error,
            }),
            AnswerVerdict::NothingToAnswer
            | AnswerVerdict::UnknownJob
            | AnswerVerdict::Mismatch { .. } => Some(AskError::NothingWaits(key)),
        }
    }
}

impl From<AskError> for ErrorData {
    fn from(e: AskError) -> Self {
        ErrorData::invalid_params(e.to_string(), None)
    }
}

/// Whether `key` is one [`JobRoundRequests`] hands out (so an answer to it is never taken for an
/// answer to a question).
pub(super) fn is_ask_key(key: &str) -> bool {
    key.starts_with("sample-") || key.starts_with("roots-")
}

impl JobRoundRequests {
    /// A request of the caller waits on the job from now (until the guard drops, or is kept
    /// for the retry of an `input_required` answer); `takes` is what that request declared.
    pub fn join(self: &Arc<Self>, takes: Takes) -> Attached {
        let mut state = self.state.lock();
        state.waiting += 1;
        state.between_rounds = false;
        state.takes = takes;
        drop(state);
        Attached {
            asks: self.clone(),
            kept: false,
        }
    }

    /// The tool's sample: the caller's answer, or refused (the caller does not take samples,
    /// too many wait, it stopped waiting, or none came within `jobs.input_timeout_secs`).
    #[allow(deprecated)]
    pub async fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorData> {
        let (tx, rx) = oneshot::channel();
        let key = self.add(
            |takes| takes.sampling,
            "sample",
            Pending::Sample {
                request: Box::new(request),
                answer: tx,
            },
        );
        let Some(key) = key else {
            return Err(no_sampling());
        };
        match tokio::time::timeout(self.bounds.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(no_sampling()),
            Err(_) => {
                self.timed_out(&key);
                Err(no_sampling())
            }
        }
    }

    /// The caller's roots, or none (as [`Self::sample`] is refused).
    #[allow(deprecated)]
    pub async fn roots(&self) -> ListRootsResult {
        let (tx, rx) = oneshot::channel();
        let Some(key) = self.add(|takes| takes.roots, "roots", Pending::Roots { answer: tx })
        else {
            return ListRootsResult::default();
        };
        match tokio::time::timeout(self.bounds.timeout, rx).await {
            Ok(Ok(roots)) => roots,
            Ok(Err(_)) => ListRootsResult::default(),
            Err(_) => {
                self.timed_out(&key);
                ListRootsResult::default()
            }
        }
    }

    /// Put `pending` on the job for the caller, if it is in rounds and takes it; its key.
    fn add(&self, takes: impl Fn(Takes) -> bool, kind: &str, pending: Pending) -> Option<String> {
        let mut state = self.state.lock();
        if !state.in_rounds() || !takes(state.takes) {
            return None;
        }
        if state.pending.len() >= self.bounds.max_pending {
            self.metrics
                .limit_hits
                .with_label_values(&["max_pending_inputs"])
                .inc();
            tracing::info!(
                "a sample or roots request was refused: jobs.max_pending_inputs already wait"
            );
            return None;
        }
        state.next += 1;
        let key = format!("{kind}-{}", state.next);
        state.pending.insert(key.clone(), pending);
        drop(state);
        self.changed.send_modify(|n| *n += 1);
        Some(key)
    }

    /// `key` was not answered in time: it goes, and a caller not waiting now has left.
    fn timed_out(&self, key: &str) {
        self.metrics
            .limit_hits
            .with_label_values(&["input_timeout_secs"])
            .inc();
        let mut state = self.state.lock();
        state.pending.remove(key);
        if state.waiting == 0 {
            state.release();
        }
    }

    /// What waits for the caller now, as `inputRequests`.
    pub fn requests(&self) -> InputRequests {
        let state = self.state.lock();
        state
            .pending
            .iter()
            .map(|(key, pending)| {
                #[allow(deprecated)]
                let request = match pending {
                    Pending::Sample { request, .. } => {
                        InputRequest::CreateMessage(CreateMessageRequest::new((**request).clone()))
                    }
                    Pending::Roots { .. } => InputRequest::ListRoots(ListRootsRequest::default()),
                };
                (key.clone(), request)
            })
            .collect()
    }

    /// What waits for the caller, once anything does (never returns while nothing does).
    pub async fn asked(&self) -> InputRequests {
        let mut changed = self.changed.subscribe();
        loop {
            let requests = self.requests();
            if !requests.is_empty() {
                return requests;
            }
            if changed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The caller's answer to `key`: `Ok(false)` if `key` is not one of these (a question's
    /// key), `Ok(true)` once it went to the tool. Checked before it is taken, so a bad answer
    /// leaves the request waiting.
    #[allow(deprecated)]
    pub fn answer(&self, key: &str, value: Value) -> Result<bool, AskError> {
        if !is_ask_key(key) {
            return Ok(false);
        }
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        if size > self.bounds.max_bytes {
            self.metrics
                .limit_hits
                .with_label_values(&["max_sample_bytes"])
                .inc();
            return Err(AskError::TooLarge {
                key: shown(key),
                size,
                limit: self.bounds.max_bytes,
            });
        }
        let mut state = self.state.lock();
        let Some(pending) = state.pending.get(key) else {
            return Err(AskError::NothingWaits(shown(key)));
        };
        let shape = |expected: &str, method: &str, error: serde_json::Error| AskError::Shape {
            key: shown(key),
            expected: expected.to_string(),
            method: method.to_string(),
            error: error.to_string(),
        };
        // Checked whole before the request leaves the map.
        enum Checked {
            Sample(Result<CreateMessageResult, ErrorData>),
            Roots(ListRootsResult),
        }
        let checked = match pending {
            Pending::Sample { .. } => Checked::Sample(match refusal(&value) {
                Some(error) => Err(error),
                None => Ok(serde_json::from_value(value)
                    .map_err(|e| shape("CreateMessageResult", "sampling/createMessage", e))?),
            }),
            Pending::Roots { .. } => Checked::Roots(match refusal(&value) {
                Some(_) => ListRootsResult::default(),
                None => serde_json::from_value(value)
                    .map_err(|e| shape("ListRootsResult", "roots/list", e))?,
            }),
        };
        let Some(pending) = state.pending.remove(key) else {
            return Err(AskError::NothingWaits(shown(key)));
        };
        drop(state);
        // A tool that stopped waiting meanwhile (its call ended) drops the answer.
        match (pending, checked) {
            (Pending::Sample { answer, .. }, Checked::Sample(result)) => {
                let _ = answer.send(result);
            }
            (Pending::Roots { answer }, Checked::Roots(roots)) => {
                let _ = answer.send(roots);
            }
            _ => {}
        }
        Ok(true)
    }

    /// [`Self::answer`], for an answer another replica relayed from the caller's retry: that
    /// retry waits on the job there, out of reach of what the tool asks next, so once nothing
    /// waits for the caller (and none of its requests waits here) it has left this replica.
    pub fn answer_relayed(&self, key: &str, value: Value) -> Result<bool, AskError> {
        let taken = self.answer(key, value)?;
        let mut state = self.state.lock();
        if taken && state.waiting == 0 && state.pending.is_empty() {
            state.release();
        }
        Ok(taken)
    }
}

/// A JSON-RPC error object (`code`, `message`) given instead of a result: the caller refuses.
fn refusal(value: &Value) -> Option<ErrorData> {
    let object = value.as_object()?;
    if !(object.contains_key("code") && object.contains_key("message")) {
        return None;
    }
    serde_json::from_value(value.clone()).ok()
}

/// A caller's request waiting on the job (see [`JobRoundRequests::join`]).
pub(super) struct Attached {
    asks: Arc<JobRoundRequests>,
    kept: bool,
}

impl Attached {
    pub fn asks(&self) -> &Arc<JobRoundRequests> {
        &self.asks
    }

    /// The request is answered `input_required`: the caller stays in rounds until its retry
    /// (or, if none comes, until what waits times out).
    pub fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut state = self.asks.state.lock();
        state.waiting = state.waiting.saturating_sub(1);
        if self.kept {
            state.between_rounds = true;
        } else if state.waiting == 0 {
            state.release();
        }
    }
}

/// What waits for the caller in rounds, once anything does (never, without a seat).
pub(super) async fn asked_of(seat: &Option<Attached>) -> InputRequests {
    match seat {
        Some(attached) => attached.asks().asked().await,
        None => std::future::pending().await,
    }
}

/// What waits for the caller now, for the `input_required` round it is answered with: it
/// stays in rounds until its retry.
pub(super) fn kept_requests(seat: &mut Option<Attached>) -> InputRequests {
    match seat {
        Some(attached) => {
            attached.keep();
            attached.asks().requests()
        }
        None => InputRequests::new(),
    }
}

#[cfg(test)]
#[allow(deprecated)]
mod tests {
    use super::*;
    use rmcp::model::SamplingMessage;
    use serde_json::json;

    fn asks(timeout_secs: u64) -> Arc<JobRoundRequests> {
        let config = JobsConfig {
            input_timeout_secs: timeout_secs,
            ..JobsConfig::default()
        };
        RoundRequests::default().open(JobId::random(), &config, Arc::new(Metrics::new()))
    }

    fn params() -> CreateMessageRequestParams {
        CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hi")], 10)
    }

    const ALL: Takes = Takes {
        questions: false,
        sampling: true,
        roots: true,
    };

    #[tokio::test]
    async fn a_sample_goes_to_the_caller_in_rounds_and_its_answer_back() {
        let asks = asks(30);
        let attached = asks.join(ALL);
        let tool = tokio::spawn({
            let asks = asks.clone();
            async move { asks.sample(params()).await }
        });
        let requests = asks.asked().await;
        let key = requests.keys().next().unwrap().clone();
        assert!(key.starts_with("sample-"));
        let error = asks
            .answer(
                &key,
                json!({"role": "assistant", "content": {"type": "text", "text": "x"}}),
            )
            .unwrap_err()
            .to_string();
        assert!(error.contains("model"), "{error}");
        let answer = CreateMessageResult::new(SamplingMessage::assistant_text("yes"), "m".into());
        assert!(
            asks.answer(&key, serde_json::to_value(&answer).unwrap())
                .unwrap()
        );
        assert_eq!(tool.await.unwrap().unwrap(), answer);
        assert!(matches!(
            asks.answer(&key, json!({})),
            Err(AskError::NothingWaits(_))
        ));
        drop(attached);
    }

    #[tokio::test]
    async fn without_a_caller_in_rounds_a_sample_is_refused_and_roots_are_none() {
        let asks = asks(30);
        assert!(asks.sample(params()).await.is_err());
        let attached = asks.join(Takes {
            questions: false,
            sampling: false,
            roots: true,
        });
        assert!(asks.sample(params()).await.is_err());
        drop(attached);
        assert!(asks.roots().await.roots.is_empty());
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_refuses_what_waits() {
        let asks = asks(30);
        let attached = asks.join(ALL);
        let tool = tokio::spawn({
            let asks = asks.clone();
            async move { asks.roots().await }
        });
        asks.asked().await;
        drop(attached);
        assert!(tool.await.unwrap().roots.is_empty());
        assert!(asks.requests().is_empty());
    }

    #[tokio::test]
    async fn between_rounds_a_request_waits_for_the_retry_at_most_the_timeout() {
        let asks = asks(1);
        let mut attached = asks.join(ALL);
        attached.keep();
        drop(attached);
        let started = std::time::Instant::now();
        assert!(asks.sample(params()).await.is_err());
        assert!(started.elapsed() >= Duration::from_millis(900));
        // The round was never retried: the caller has left.
        assert!(asks.roots().await.roots.is_empty());
        assert!(started.elapsed() < Duration::from_millis(1900));
    }

    /// Another replica relays the caller's answers (its retry waits on the job there): each
    /// is checked as a local one, the verdict says how it went, and once nothing waits the
    /// caller has left this replica: the tool's next sample is refused at once.
    #[tokio::test]
    async fn relayed_answers_are_checked_and_end_the_callers_rounds_here() {
        let desk = RoundRequests::default();
        let id = JobId::random();
        let config = JobsConfig {
            input_timeout_secs: 30,
            max_sample_bytes: 1024,
            ..JobsConfig::default()
        };
        let asks = desk.open(id, &config, Arc::new(Metrics::new()));
        let mut attached = asks.join(ALL);
        attached.keep();
        drop(attached);
        let tool = tokio::spawn({
            let asks = asks.clone();
            async move { asks.sample(params()).await }
        });
        let key = asks.asked().await.keys().next().unwrap().clone();
        let verdict = desk.answer(id, &key, json!({"role": "assistant"}));
        assert!(
            matches!(&verdict, AnswerVerdict::Unfit { expected, error, .. }
                if expected == "CreateMessageResult" && error.contains("model")),
            "{verdict:?}"
        );
        let big = json!({"model": "m", "role": "assistant",
            "content": {"type": "text", "text": "x".repeat(2000)}});
        assert!(matches!(
            desk.answer(id, &key, big),
            AnswerVerdict::TooLarge { limit: 1024, .. }
        ));
        assert_eq!(
            desk.answer(JobId::random(), &key, json!({})),
            AnswerVerdict::NothingToAnswer
        );
        let answer = CreateMessageResult::new(SamplingMessage::assistant_text("yes"), "m".into());
        let value = serde_json::to_value(&answer).unwrap();
        assert_eq!(desk.answer(id, &key, value.clone()), AnswerVerdict::Taken);
        assert_eq!(tool.await.unwrap().unwrap(), answer);
        assert_eq!(desk.answer(id, &key, value), AnswerVerdict::NothingToAnswer);
        let next = tokio::time::timeout(Duration::from_secs(10), asks.sample(params()))
            .await
            .expect("refused at once, not after jobs.input_timeout_secs");
        assert!(next.is_err());
        // The verdicts stand for the errors a retry on this replica gets.
        let error = AskError::of_verdict(
            &key,
            AnswerVerdict::TooLarge {
                size: 2000,
                limit: 1024,
            },
        )
        .unwrap();
        assert!(matches!(error, AskError::TooLarge { .. }));
        assert!(AskError::of_verdict(&key, AnswerVerdict::Taken).is_none());
    }

    #[tokio::test]
    async fn a_large_answer_and_an_error_answer() {
        let config = JobsConfig {
            max_sample_bytes: 1024,
            ..JobsConfig::default()
        };
        let asks =
            RoundRequests::default().open(JobId::random(), &config, Arc::new(Metrics::new()));
        let _attached = asks.join(ALL);
        let tool = tokio::spawn({
            let asks = asks.clone();
            async move { asks.sample(params()).await }
        });
        let key = asks.asked().await.keys().next().unwrap().clone();
        let big = json!({"model": "m", "role": "assistant",
            "content": {"type": "text", "text": "x".repeat(2000)}});
        assert!(matches!(
            asks.answer(&key, big),
            Err(AskError::TooLarge { .. })
        ));
        asks.answer(&key, json!({"code": -1, "message": "user said no"}))
            .unwrap();
        let refused = tool.await.unwrap().unwrap_err();
        assert_eq!(refused.message, "user said no");
    }
}
