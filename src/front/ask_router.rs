//! Where what an upstream asks goes: a question (`elicitation/create`), a sample
//! (`sampling/createMessage`) or the roots (`roots/list`); [`AskRoute`] is the one decision of
//! who answers it, made once when the request starts ([`AskRoute::for_call`]
//! for a `tools/call`, [`asking`] for a `prompts/get` or `resources/read`). [`AskRouter`]
//! carries each ask to where the route says: a waiting caller by its revision's rules, the
//! job's input desk (`jobs::input`: a person, `answer_job_input`, `tasks/update`, the client
//! of `tasks/result`), or a refusal. A call's [`RoutedSink`] hands them to its router, and its
//! reports to its job. docs/design/mcp-asks.md tells the whole way.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};
use parking_lot::Mutex;
// Sampling and roots are deprecated by SEP-2577 but upstreams still send them; the bridge
// relays them to a waiting caller that has them.
#[allow(deprecated)]
use rmcp::{
    ErrorData, RoleServer,
    model::{
        ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ListRootsRequest,
        ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
        ServerRequest,
    },
    service::{Peer, RequestContext},
};

use tokio::sync::mpsc;

use super::{
    caller::{Caller, Takes},
    core::Core,
    listeners,
    round_requests::{Attached, JobRoundRequests},
};
use crate::{
    jobs::{Intake, Jobs},
    model::{InputAction, JobId, Principal, Reattach},
    upstream::{Asking, CallSink, no_sampling},
};

/// Who answers what the upstream asks during one request.
#[derive(Clone)]
pub(super) enum AskRoute {
    /// Nobody waits on the call (async, a task, or the caller stopped waiting): a question
    /// waits on the job's input desk; a sample is refused; the roots are none.
    Desk,
    /// A caller on a handshake revision waits with its session: what it declared it takes is
    /// sent to it there; a question it fails to answer goes to the desk.
    Session {
        peer: Peer<RoleServer>,
        takes: Takes,
    },
    /// A caller on the session-less revision waits in `input_required` rounds: a question waits
    /// on the desk (its waiting request returns it in a round if it takes questions,
    /// `call_answer`), a sample or the roots wait for it in its job's round requests.
    Rounds(Option<Arc<JobRoundRequests>>),
}

impl AskRoute {
    /// The one decision for a `tools/call`: by the caller's revision, what it declared, and
    /// whether it `waits` for the call (a sync call, or auto inside its budget). With it, a
    /// caller in rounds that takes samples or roots gets its seat at the job's round requests.
    fn for_call(
        core: &Core,
        caller: &Caller,
        peer: &Peer<RoleServer>,
        waits: bool,
        job: JobId,
    ) -> (Self, Option<Attached>) {
        if !waits {
            return (Self::Desk, None);
        }
        if !caller.in_rounds {
            let peer = peer.clone();
            return (
                Self::Session {
                    peer,
                    takes: caller.takes,
                },
                None,
            );
        }
        if !caller.takes.samples_or_roots() {
            return (Self::Rounds(None), None);
        }
        let requests = core
            .round_requests
            .open(job, &core.config, core.metrics.clone());
        let seat = requests.join(caller.takes);
        (Self::Rounds(Some(requests)), Some(seat))
    }
}

/// The waiting caller's end of its route, held while it waits for the call: once it drops,
/// the router knows the caller has left.
pub(super) struct Waiter {
    router: Arc<AskRouter>,
    /// A caller in rounds that takes questions: its request returns the job's questions in an
    /// `input_required` round.
    pub questions_in_rounds: bool,
    /// A caller in rounds that takes samples or roots: its seat at the job's round requests.
    pub seat: Option<Attached>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.router.caller_left();
    }
}

/// The job whose input desk takes the questions no caller takes.
struct Desk {
    jobs: Jobs,
    job: JobId,
}

/// Carries each [`Ask`] of one request to where its [`AskRoute`] says.
pub(super) struct AskRouter {
    route: Mutex<AskRoute>,
    /// None for a `prompts/get` or `resources/read`: nobody but the caller can answer there.
    desk: Option<Desk>,
    /// How long a caller on a session is given for a question (`jobs.input_timeout_secs`).
    patience: Duration,
    /// The same bound on its samples and roots; none for a job's call (its timeout bounds it).
    sample_patience: Option<Duration>,
}

impl AskRouter {
    /// The router of job `job`'s upstream call, its route decided ([`AskRoute::for_call`]),
    /// and the caller's end of it.
    pub fn for_call(
        core: &Core,
        caller: &Caller,
        peer: &Peer<RoleServer>,
        waits: bool,
        job: JobId,
    ) -> (Arc<Self>, Waiter) {
        let (route, seat) = AskRoute::for_call(core, caller, peer, waits, job);
        let jobs = core.jobs.clone();
        let router = Arc::new(Self {
            route: Mutex::new(route),
            patience: Duration::from_secs(core.config.input_timeout_secs),
            sample_patience: None,
            desk: Some(Desk { jobs, job }),
        });
        let waiter = Waiter {
            router: router.clone(),
            questions_in_rounds: waits && caller.in_rounds && caller.takes.questions,
            seat,
        };
        (router, waiter)
    }

    /// The router of a job this replica adopted: nobody waits on its call here, so what its
    /// upstream asks goes to the job's desk (a question) or is refused (a sample; no roots).
    pub fn for_adopted(jobs: &Jobs, job: JobId) -> Arc<Self> {
        Arc::new(Self {
            route: Mutex::new(AskRoute::Desk),
            patience: jobs.inputs().input_timeout(),
            sample_patience: None,
            desk: Some(Desk {
                jobs: jobs.clone(),
                job,
            }),
        })
    }

    /// The caller stopped waiting (answered, cancelled, past the budget): a session caller's
    /// questions go to the desk from now on, its samples are refused. A caller in rounds
    /// comes back with its retry: its round requests know when it has left.
    fn caller_left(&self) {
        let mut route = self.route.lock();
        if matches!(*route, AskRoute::Session { .. }) {
            *route = AskRoute::Desk;
        }
    }

    /// A sample: from a session caller that takes samples (within `sample_patience`), or the
    /// job's round requests; refused otherwise.
    #[allow(deprecated)]
    async fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorData> {
        let route = self.route.lock().clone();
        match route {
            AskRoute::Session { peer, takes } if takes.sampling => {
                let sampled = peer_sample(&peer, request);
                match self.sample_patience {
                    Some(patience) => tokio::time::timeout(patience, sampled)
                        .await
                        .unwrap_or_else(|_| Err(sample_timed_out())),
                    None => sampled.await,
                }
            }
            AskRoute::Rounds(Some(requests)) => requests.sample(request).await,
            _ => Err(no_sampling()),
        }
    }

    /// The roots, from where a sample would come; none otherwise.
    #[allow(deprecated)]
    async fn roots(&self) -> ListRootsResult {
        let route = self.route.lock().clone();
        match route {
            AskRoute::Session { peer, takes } if takes.roots => {
                let listed = peer_roots(&peer);
                match self.sample_patience {
                    Some(patience) => tokio::time::timeout(patience, listed)
                        .await
                        .unwrap_or_default(),
                    None => listed.await,
                }
            }
            AskRoute::Rounds(Some(requests)) => requests.roots().await,
            _ => ListRootsResult::default(),
        }
    }

    /// A question: past `jobs.max_question_bytes` declined unseen; to a session caller that
    /// takes questions (declined if it does not answer in time); else to the job's desk.
    async fn question(&self, request: ElicitRequestParams) -> ElicitResult {
        let route = self.route.lock().clone();
        let decline = || ElicitResult::new(ElicitationAction::Decline);
        if let Some(desk) = &self.desk {
            let size = serde_json::to_vec(&request).map_or(usize::MAX, |v| v.len());
            if !desk.jobs.inputs().question_fits(desk.job, size).await {
                return decline();
            }
        }
        if let AskRoute::Session { peer, takes } = &route
            && takes.questions
        {
            // Bounded as a person's answer is: a caller that never answers would hold the
            // question (and the tool) for ever, and nobody else could answer it.
            match tokio::time::timeout(self.patience, elicit(peer, request.clone())).await {
                Ok(Ok(answer)) => return answer,
                Ok(Err(e)) => tracing::info!(error = %e,
                    "the waiting MCP caller did not take the question; the job asks instead, if any"),
                Err(_) => {
                    match &self.desk {
                        Some(desk) => desk.jobs.inputs().caller_left_question(desk.job).await,
                        None => tracing::info!(
                            "the MCP caller did not answer a question within jobs.input_timeout_secs"
                        ),
                    }
                    return decline();
                }
            }
        }
        let Some(desk) = &self.desk else {
            return decline();
        };
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            // URL elicitation: nothing a form on the job could answer.
            return decline();
        };
        let schema = serde_json::to_value(requested_schema).unwrap_or_default();
        let answer = desk.jobs.inputs().ask(desk.job, message, schema).await;
        let action = match answer.action {
            InputAction::Accept => ElicitationAction::Accept,
            InputAction::Decline => ElicitationAction::Decline,
            InputAction::Cancel => ElicitationAction::Cancel,
        };
        let mut result = ElicitResult::new(action);
        result.content = answer.content;
        result
    }
}

/// Who answers an upstream's `input_required` answer to this caller's `prompts/get` or
/// `resources/read` (no job there: only the caller can answer). A caller in rounds gets it
/// passed on; any other is asked on its session, by what it declared, the bridge driving the
/// rounds (`upstream::asked`).
pub(super) fn asking(core: &Core, context: &RequestContext<RoleServer>) -> Asking {
    let caller = Caller::of(context);
    if caller.in_rounds {
        return Asking::PassOn;
    }
    let patience = Duration::from_secs(core.config.input_timeout_secs);
    let router = AskRouter {
        route: Mutex::new(AskRoute::Session {
            peer: context.peer.clone(),
            takes: caller.takes,
        }),
        desk: None,
        patience,
        sample_patience: Some(patience),
    };
    Asking::Answer(Arc::new(RoutedSink {
        asks: Arc::new(router),
        intake: None,
        principal: None,
        caller_logs: None,
    }))
}

/// A waiting caller's share of a call's log messages: those at or above its level.
#[allow(deprecated)]
pub(super) type CallerLogs = (LoggingLevel, mpsc::Sender<LoggingMessageNotificationParam>);

/// Where an upstream request's notifications and asks go: its job's intake (none for a
/// `prompts/get` or `resources/read`), a waiting caller's share of the log lines (at or above
/// its level: the upstream connection is shared, so the level is applied here, never sent
/// upstream), and its [`AskRouter`].
pub(super) struct RoutedSink {
    pub asks: Arc<AskRouter>,
    pub intake: Option<Arc<Intake>>,
    /// Whose call it is; none where nobody known waits on it (an adopted job, a request).
    pub principal: Option<Principal>,
    pub caller_logs: Option<CallerLogs>,
}

impl CallSink for RoutedSink {
    fn progress(&self, p: &ProgressNotificationParam) {
        if let Some(intake) = &self.intake {
            intake.progress(p.progress, p.total, p.message.clone());
        }
    }

    #[allow(deprecated)]
    fn log(&self, m: &LoggingMessageNotificationParam) {
        if let Some(intake) = &self.intake {
            let level = serde_json::to_value(m.level)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "info".into());
            intake.log(level, m.logger.clone(), m.data.clone());
        }
        if let Some((threshold, tx)) = &self.caller_logs
            && listeners::passes(m.level, *threshold)
        {
            // A caller that cannot keep up misses log lines on its request; the job has them.
            let _ = tx.try_send(m.clone());
        }
    }

    fn input(&self, request: ElicitRequestParams) -> BoxFuture<'static, ElicitResult> {
        let router = self.asks.clone();
        async move { router.question(request).await }.boxed()
    }

    #[allow(deprecated)]
    fn sample(
        &self,
        request: CreateMessageRequestParams,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let router = self.asks.clone();
        async move { router.sample(request).await }.boxed()
    }

    #[allow(deprecated)]
    fn roots(&self) -> BoxFuture<'static, ListRootsResult> {
        let router = self.asks.clone();
        async move { router.roots().await }.boxed()
    }

    fn principal(&self) -> Option<Principal> {
        self.principal.clone()
    }

    fn reattach(&self, record: Reattach) {
        if let Some(intake) = &self.intake {
            intake.reattach(record);
        }
    }

    fn stream_cursor(&self, event_id: &str) {
        if let Some(intake) = &self.intake {
            intake.stream_cursor(event_id);
        }
    }
}

/// Send `elicitation/create` to a peer (rmcp's typed helper is behind a feature the bridge
/// does not otherwise need).
async fn elicit(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, rmcp::ServiceError> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await? {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Ask a peer for a sample; its own refusal goes back as it is.
#[allow(deprecated)]
async fn peer_sample(
    peer: &Peer<RoleServer>,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, ErrorData> {
    let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::CreateMessageResult(result)) => Ok(*result),
        Ok(_) => Err(ErrorData::internal_error(
            "the MCP caller answered sampling/createMessage with something else",
            None,
        )),
        Err(rmcp::ServiceError::McpError(e)) => Err(e),
        Err(e) => Err(ErrorData::internal_error(
            format!("the MCP caller did not answer sampling/createMessage: {e}"),
            None,
        )),
    }
}

fn sample_timed_out() -> ErrorData {
    ErrorData::internal_error(
        "the MCP caller did not answer sampling/createMessage within jobs.input_timeout_secs",
        None,
    )
}

/// Ask a peer for its roots; none when it gives none.
#[allow(deprecated)]
async fn peer_roots(peer: &Peer<RoleServer>) -> ListRootsResult {
    let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
    match peer.send_request(request).await {
        Ok(ClientResult::ListRootsResult(result)) => result,
        other => {
            tracing::info!(outcome = ?other.err(), "the MCP caller gave no roots");
            ListRootsResult::default()
        }
    }
}
