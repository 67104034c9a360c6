//! The MCP server the agent talks to: the tool catalog, the call modes, the job tools, and
//! the resources, prompts and completions of every upstream (namespaced, routed to the owner).
//!
//! One [`Front`] value serves every MCP session (rmcp's Streamable HTTP service asks a factory
//! for a handler per session; the factory hands out clones of the same cheap handle).

mod call;
mod caller;
mod caller_asks;
mod callers;
mod capabilities;
mod catalog;
pub mod handle;
mod job_tools;
mod listen_tasks;
mod prompts;
mod quota;
mod relay;
mod resources;
mod rounds;
mod span;
mod sse_events;
mod task_questions;
mod task_status;
mod tasks;
mod tasks_2025;

use std::{sync::Arc, time::Duration};

use tracing::Instrument;

// MCP logging and resources/subscribe are deprecated for 2026-07-28 but served to clients on
// the revisions that have them.
#[allow(deprecated)]
use rmcp::model::{SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse,
        GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerConfig,
        SubscriptionFilter, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

pub use catalog::{ANSWER_JOB_INPUT, CANCEL_JOB, GET_JOB_STATUS, SEPARATOR, WAIT_FOR_JOB};
pub use handle::Links;
pub use listen_tasks::follow_tasks as follow_listened_tasks;
pub use quota::JobQuota;
pub use resources::URI_PREFIX;
pub use tasks_2025::translate as translate_2025_tasks;

use crate::{
    config::JobsConfig,
    jobs::Jobs,
    metrics::Metrics,
    shutdown::Tasks,
    upstream::{Asking, RequestError, Upstreams},
};
use callers::Callers;

/// What the agent is told about this server at initialize.
const INSTRUCTIONS: &str = "Tools named <server>__<tool> run on the tool servers behind this \
bridge. A long call may answer with a job handle (job_id, events_url) instead of its result: \
call wait_for_job with that job_id to get the result, get_job_status to look without waiting, \
cancel_job to stop it, and answer_job_input to answer a question the job's tool asks \
(status input_required).";

#[derive(Clone)]
pub struct Front {
    inner: Arc<Inner>,
}

struct Inner {
    /// MCP sessions and listen requests: told when a list changes (an upstream came or went,
    /// or changed a list) or a followed resource is updated.
    callers: Arc<Callers>,
    upstreams: Upstreams,
    jobs: Jobs,
    config: JobsConfig,
    links: Links,
    /// Lower-case name of the header that carries the correlation ID.
    correlation_header: String,
    /// Running jobs per principal.
    quota: JobQuota,
    /// Task IDs one `subscriptions/listen` request may follow (`limits.max_listen_task_ids`).
    max_listen_task_ids: usize,
    /// Places for the tasks all listen requests follow at once (`limits.max_followed_tasks`).
    followed_tasks: Arc<tokio::sync::Semaphore>,
    /// Samples and roots the tools of this replica's jobs ask their 2026-07-28 callers for.
    caller_asks: Arc<caller_asks::CallerAsks>,
    metrics: Arc<Metrics>,
    /// Where the followers of 2025-11-25 tasks (`task_status`) run: the HTTP stage, they stop
    /// with the sessions they tell.
    tasks: Tasks,
}

impl Front {
    /// `max_resource_subscriptions`: resource URIs one session or listen request may follow;
    /// `max_listen_task_ids`: task IDs one listen request may follow; `max_followed_tasks`:
    /// tasks all listen requests follow at once.
    /// List changes and resource updates are fanned out to the callers by a task on `tasks`
    /// (the HTTP stage: it stops with the sessions).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        upstreams: Upstreams,
        jobs: Jobs,
        config: JobsConfig,
        links: Links,
        correlation_header: String,
        quota: JobQuota,
        (max_resource_subscriptions, max_listen_task_ids, max_followed_tasks): (
            usize,
            usize,
            usize,
        ),
        metrics: Arc<Metrics>,
        tasks: &Tasks,
    ) -> Self {
        let callers = Callers::new(
            upstreams.clone(),
            max_resource_subscriptions,
            metrics.clone(),
            tasks.clone(),
        );
        tasks.spawn_until_stopped(callers.clone().run());
        // Answers other replicas relay from the callers' retries come to these.
        let caller_asks = Arc::new(caller_asks::CallerAsks::default());
        jobs.serve_caller_requests(caller_asks.clone());
        Self {
            inner: Arc::new(Inner {
                callers,
                upstreams,
                jobs,
                config,
                links,
                correlation_header,
                quota,
                max_listen_task_ids,
                followed_tasks: Arc::new(tokio::sync::Semaphore::new(max_followed_tasks)),
                caller_asks,
                metrics,
                tasks: tasks.clone(),
            }),
        }
    }
}

impl Front {
    /// An MCP session ended (`DELETE`, idle, shutdown): its state goes. Told before rmcp
    /// cancels the session's requests, so that a sync call cut off this way leaves its job
    /// running (see `answer_when_done`).
    pub fn session_ended(&self, session: &str) {
        self.inner.callers.end_session(session);
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities::union(&self.inner.upstreams))
            .with_server_info(Implementation::new(
                "mcp-progress-bridge",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(session_id);
        self.inner.callers.add_session(session, context.peer).await;
    }

    /// The tools of this request's caller: the upstream tools its policies allow (all,
    /// without policies), and the job tools. Per request, not per session: a session's later
    /// requests may carry another token, and `tools/list_changed` makes every session ask
    /// again.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let identity = caller::identity(&context);
        Ok(ListToolsResult::with_all_items(catalog::list(
            &self.inner.upstreams,
            self.inner.config.mode,
            &identity,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let identity = caller::identity(&context);
        let span = span::request_span("tools/call", &context);
        let mut response: CallToolResponse = async {
            Ok::<_, ErrorData>(match request.name.as_ref() {
                GET_JOB_STATUS => self
                    .get_job_status(request.arguments, &identity)
                    .await?
                    .into(),
                WAIT_FOR_JOB => self
                    .wait_for_job(request.arguments, &identity)
                    .await?
                    .into(),
                CANCEL_JOB => self.cancel_job(request.arguments, &identity).await?.into(),
                ANSWER_JOB_INPUT => self
                    .answer_job_input(request.arguments, &identity)
                    .await?
                    .into(),
                _ => self.call_upstream(request, context, &identity).await?,
            })
        }
        .instrument(span)
        .await?;
        // An upstream on an older revision sends no `resultType`; a 2026-07-28 client requires
        // it. rmcp strips it again for clients on older revisions.
        match &mut response {
            CallToolResponse::Complete(result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
            }
            // A task of either revision is the caller's for `tasks/list`.
            CallToolResponse::Task(created) => {
                if let Ok(id) = created.task.task_id.parse() {
                    self.remember_task(&identity, id).await;
                }
            }
            _ => {}
        }
        Ok(response)
    }

    /// SEP-2663 `tasks/get` (rmcp refuses it to a request that did not list the extension).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let identity = caller::identity(&context);
        let task = self.read_task(&request.task_id, &identity).await?;
        Ok(GetTaskResult::new(task))
    }

    /// SEP-2663 `tasks/update`: answers to the questions the tool asked.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let identity = caller::identity(&context);
        self.update_task_job(&request.task_id, request.input_responses, &identity)
            .await
    }

    /// SEP-2663 `tasks/cancel`: the job is cancelled, the upstream told to stop.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let identity = caller::identity(&context);
        self.cancel_task_job(&request.task_id, &identity).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.offered("resources/list", |c| c.resources.is_some())?;
        Ok(ListResourcesResult::with_all_items(resources::list(
            &self.inner.upstreams,
        )))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.offered("resources/templates/list", |c| c.resources.is_some())?;
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::list_templates(&self.inner.upstreams),
        ))
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.offered("resources/read", |c| c.resources.is_some())?;
        let route = resources::route(&self.inner.upstreams, &request.uri)?;
        request.uri = route.uri.clone();
        let answer = route
            .upstream
            .read_resource(request, self.asking(&context))
            .await
            .map_err(|e| upstream_error(e, "resources/read"))?;
        let mut answer = resources::answer(&route, answer);
        if let ReadResourceResponse::Complete(result) = &mut answer {
            // As for tool results: an upstream on an older revision sends no `resultType`,
            // a 2026-07-28 client requires it; rmcp strips it again for older clients.
            result.result_type.get_or_insert(ResultType::COMPLETE);
        }
        Ok(answer)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.offered("resources/subscribe", |c| {
            c.resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        })?;
        let session = caller_session(&context).unwrap_or_default();
        self.inner
            .callers
            .subscribe(&session, &context.peer, &request.uri)
            .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.offered("resources/unsubscribe", |c| {
            c.resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        })?;
        let session = caller_session(&context).unwrap_or_default();
        self.inner.callers.unsubscribe(&session, &request.uri).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.offered("prompts/list", |c| c.prompts.is_some())?;
        Ok(ListPromptsResult::with_all_items(prompts::list(
            &self.inner.upstreams,
        )))
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.offered("prompts/get", |c| c.prompts.is_some())?;
        let (upstream, name) = prompts::route(&self.inner.upstreams, &request.name)?;
        request.name = name;
        let mut answer = upstream
            .get_prompt(request, self.asking(&context))
            .await
            .map_err(|e| upstream_error(e, "prompts/get"))?;
        if let GetPromptResponse::Complete(result) = &mut answer {
            result.result_type.get_or_insert(ResultType::COMPLETE);
        }
        Ok(answer)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.offered("completion/complete", |c| c.completions.is_some())?;
        let (upstream, request) = prompts::route_completion(&self.inner.upstreams, request)?;
        let mut answer = upstream
            .complete(request)
            .await
            .map_err(|e| upstream_error(e, "completion/complete"))?;
        answer.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(answer)
    }

    /// The level applies to this session's view only: the upstream connections are shared,
    /// so the bridge filters what it passes on (see `call.rs`) and leaves upstreams alone.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.offered("logging/setLevel", |c| c.logging.is_some())?;
        let session = caller_session(&context).unwrap_or_default();
        self.inner
            .callers
            .set_level(&session, &context.peer, request.level)
    }

    /// 2026-07-28 `subscriptions/listen`: every list's `list_changed` the bridge advertises,
    /// and updates of the resources asked for that lead to an upstream with subscriptions
    /// (at most `limits.max_resource_subscriptions`).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if let Some(uris) = &requested.resource_subscriptions {
            let followable = self.inner.callers.followable(uris);
            if !followable.is_empty() {
                accepted.resource_subscriptions = Some(followable);
            }
        }
        Some(accepted)
    }

    /// A method the bridge does not know: -32601 naming it, as JSON-RPC words it (rmcp's
    /// default names only the method). The name is the client's: at most 100 characters.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // The 2025-11-25 task requests, renamed on the way in (see `tasks_2025`).
        if let Some(answer) = self.serve_2025(&request, &context).await {
            return answer.map(CustomResult::new);
        }
        let method: String = request.method.chars().take(100).collect();
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            None,
        ))
    }

    /// Lists and resources through `callers`; the tasks listed in the filter's `taskIds` (read
    /// and acknowledged on the wire, `listen_tasks`) followed here, until the request ends.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let _registered = self
            .inner
            .callers
            .add_listener(context.sink().clone())
            .await;
        let request = context.request_context();
        let tasks = listen_tasks::listed(request);
        tokio::select! {
            _ = context.cancelled() => {}
            _ = self.follow(request, &tasks) => context.cancelled().await,
        }
        Ok(())
    }
}

impl Front {
    /// Refuse a method no upstream offers, as a server without that capability would.
    fn offered(
        &self,
        method: &str,
        offers: impl Fn(&rmcp::model::ServerCapabilities) -> bool,
    ) -> Result<(), ErrorData> {
        if offers(&capabilities::union(&self.inner.upstreams)) {
            return Ok(());
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method} (no upstream of this bridge offers it)"),
            None,
        ))
    }
}

/// The `Mcp-Session-Id` of a request's HTTP parts.
fn session_id(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The caller's MCP session, if it has one (handshake revisions over HTTP).
fn caller_session(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(session_id)
}

/// An upstream's failure as the agent sees it: its own JSON-RPC errors unchanged, the bridge's
/// (not connected, timed out, too large) as internal errors that say what happened.
impl Front {
    /// Who answers an upstream's `input_required` answer to this caller's `prompts/get` or
    /// `resources/read`: a 2026-07-28 caller itself (passed on), any other through its session
    /// (the bridge drives the rounds; see `upstream::asked`).
    fn asking(&self, context: &RequestContext<RoleServer>) -> Asking {
        if rounds::answers_in_rounds(context) {
            return Asking::PassOn;
        }
        let patience = Duration::from_secs(self.inner.config.input_timeout_secs);
        Asking::Answer(Arc::new(relay::Relay::of(context, patience)))
    }
}

fn upstream_error(error: RequestError, method: &str) -> ErrorData {
    match error {
        RequestError::Upstream(error) => error,
        RequestError::Input { .. } => ErrorData::invalid_request(error.to_string(), None),
        RequestError::TooLarge { .. } => ErrorData::invalid_request(error.to_string(), None),
        other => {
            tracing::info!(%method, error = %other, "a routed request failed");
            ErrorData::internal_error(other.to_string(), None)
        }
    }
}
