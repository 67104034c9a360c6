//! [`Front`], the MCP server the agent talks to: rmcp's `ServerHandler`, a thin dispatch to
//! the handler of each method (a function of its own file, over the shared [`Core`]). One
//! `Front` serves every MCP session (rmcp asks a factory for a handler per session).
//!
//! Each request runs in a span by OpenTelemetry's MCP conventions ([`span_of`]): kind
//! `SERVER`, named `"{mcp.method.name} {target}"`, continuing the caller's trace. With traces
//! off only `tools/call` gets one (its jobs are its children). Nothing secret is recorded: of
//! the session ID its nonce, never its tag; names a client chose are cut to [`MAX_NAME`].

use std::sync::Arc;

use tracing::{Instrument, Span, field::Empty};

// MCP logging and resources/subscribe are deprecated but served to the clients that use them.
#[allow(deprecated)]
use rmcp::model::{SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CustomRequest, CustomResult, DiscoverResult, GetPromptRequestParams,
        GetPromptResponse, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
        InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ResultType, ServerConfig, SubscriptionFilter, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

use super::{
    caller::{self, Caller},
    capabilities, catalog,
    core::Core,
    handle::Links,
    job_tools::{self, ANSWER_JOB_INPUT, CANCEL_JOB, GET_JOB_STATUS, WAIT_FOR_JOB},
    listen_tasks,
    listeners::{FollowedTasks, Listeners},
    round_requests::RoundRequests,
    tasks, tasks_2025, tool_call, upstream_requests,
    wait_bound::WaitBounds,
};
use crate::{
    config::JobsConfig,
    jobs::{JobQuota, Jobs},
    metrics::Metrics,
    shutdown::Tasks,
    traces,
    upstream::Upstreams,
};

/// What the agent is told about this server at initialize.
const INSTRUCTIONS: &str = "Tools named <server>__<tool> run on the tool servers behind this \
bridge. A long call may answer with a job handle (job_id, events_url) instead of its result: \
call wait_for_job with that job_id to get the result, get_job_status to look without waiting, \
cancel_job to stop it, and answer_job_input to answer a question the job's tool asks \
(status input_required).";

#[derive(Clone)]
pub struct Front {
    core: Arc<Core>,
}

impl Front {
    /// `max_resource_subscriptions`: resource URIs one session or listen request may follow;
    /// `max_listen_task_ids`: task IDs one listen request may follow; `max_followed_tasks`:
    /// tasks all listen requests follow at once, and those of one principal. List changes and resource updates are fanned
    /// out to the callers by a task on `tasks` (the HTTP stage: it stops with the sessions).
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
            (usize, usize),
        ),
        metrics: Arc<Metrics>,
        wait_bounds: WaitBounds,
        tasks: &Tasks,
    ) -> Self {
        let listeners = Listeners::new(
            upstreams.clone(),
            max_resource_subscriptions,
            metrics.clone(),
            tasks.clone(),
        );
        tasks.spawn_until_stopped(listeners.clone().run());
        // Answers other replicas relay from the callers' retries come to these.
        let round_requests = Arc::new(RoundRequests::default());
        jobs.inputs().serve_caller_requests(round_requests.clone());
        let core = Core {
            listeners,
            upstreams,
            jobs,
            config,
            links,
            correlation_header,
            quota,
            max_listen_task_ids,
            followed_tasks: FollowedTasks::new(max_followed_tasks.0, max_followed_tasks.1),
            round_requests,
            metrics,
            wait_bounds,
            tasks: tasks.clone(),
        };
        Self {
            core: Arc::new(core),
        }
    }

    /// What every handler shares: the state of the `/mcp` layers in front of rmcp.
    pub fn core(&self) -> Arc<Core> {
        self.core.clone()
    }

    /// An MCP session ended (`DELETE`, idle, shutdown): its state goes. Told before rmcp
    /// cancels the session's requests, so that a sync call cut off this way leaves its job
    /// running (see `call_answer`).
    pub fn session_ended(&self, session: &str) {
        self.core.listeners.end_session(session);
        self.core.wait_bounds.forget_session(session);
    }

    /// `tools/call`: a job tool, or an upstream tool (in the request's span: the job it
    /// starts is its child).
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let core = &self.core;
        let caller = Caller::of(&context);
        let identity = caller.identity.clone();
        let mut response: CallToolResponse = match request.name.as_ref() {
            GET_JOB_STATUS => job_tools::get_job_status(core, request.arguments, &identity)
                .await?
                .into(),
            WAIT_FOR_JOB => job_tools::wait_for_job(core, request.arguments, &caller, &context.ct)
                .await?
                .into(),
            CANCEL_JOB => job_tools::cancel_job(core, request.arguments, &identity)
                .await?
                .into(),
            ANSWER_JOB_INPUT => job_tools::answer_job_input(core, request.arguments, &identity)
                .await?
                .into(),
            _ => tool_call::call_tool(core, request, context, caller, false).await?,
        };
        // An upstream on an older revision sends no `resultType`; the session-less revision's
        // clients require it. rmcp strips it again for clients on older revisions.
        match &mut response {
            CallToolResponse::Complete(result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
            }
            // A task of either revision is the caller's for `tasks/list`.
            CallToolResponse::Task(created) => {
                if let Ok(id) = created.task.task_id.parse() {
                    tasks_2025::remember_task(core, &identity, id).await;
                }
            }
            _ => {}
        }
        Ok(response)
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities::union(&self.core.upstreams))
            .with_server_info(Implementation::new(
                "mcp-progress-bridge",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let span = span_of("initialize", Target::Nothing, &context);
        context.peer.set_peer_info(request.clone());
        let answer = self.negotiate_initialize(&request);
        if let Ok(result) = &answer {
            span.record("mcp.protocol.version", result.protocol_version.as_str());
        }
        served(span, std::future::ready(answer)).await
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        serve("ping", &context, std::future::ready(Ok(()))).await
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let versions = self.supported_protocol_versions().into_owned();
        let answer = DiscoverResult::from_server_info(versions, self.get_info());
        serve("server/discover", &context, std::future::ready(Ok(answer))).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(caller::session_id);
        self.core.listeners.add_session(session, context.peer).await;
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
        let span = span_of("tools/list", Target::Nothing, &context);
        let identity = caller::identity(&context);
        let _in = span.enter();
        Ok(ListToolsResult::with_all_items(catalog::list(
            &self.core.upstreams,
            self.core.config.mode,
            &identity,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = span_of(TOOLS_CALL, Target::Tool(&request.name), &context);
        let response = served(span.clone(), self.call(request, context)).await?;
        tool_answer(&span, &response);
        Ok(response)
    }

    /// SEP-2663 `tasks/get` (rmcp refuses it to a request that did not list the extension).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let identity = caller::identity(&context);
        let task = tasks::read_task(&self.core, &request.task_id, &identity);
        serve("tasks/get", &context, task)
            .await
            .map(GetTaskResult::new)
    }
    /// SEP-2663 `tasks/update`: answers to the questions the tool asked.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let identity = caller::identity(&context);
        let responses = request.input_responses;
        let update = tasks::update_task_job(&self.core, &request.task_id, responses, &identity);
        serve("tasks/update", &context, update).await
    }

    /// SEP-2663 `tasks/cancel`: the job is cancelled, the upstream told to stop.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let identity = caller::identity(&context);
        let cancel = tasks::cancel_task_job(&self.core, &request.task_id, &identity);
        serve("tasks/cancel", &context, cancel).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let span = span_of("resources/list", Target::Nothing, &context);
        let _in = span.enter();
        upstream_requests::list_resources(&self.core)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let span = span_of("resources/templates/list", Target::Nothing, &context);
        let _in = span.enter();
        upstream_requests::list_resource_templates(&self.core)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let read = upstream_requests::read_resource(&self.core, request, &context);
        serve("resources/read", &context, read).await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let subscribe = upstream_requests::subscribe(&self.core, &request.uri, &context);
        serve("resources/subscribe", &context, subscribe).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let unsubscribe = upstream_requests::unsubscribe(&self.core, &request.uri, &context);
        serve("resources/unsubscribe", &context, unsubscribe).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let span = span_of("prompts/list", Target::Nothing, &context);
        let _in = span.enter();
        upstream_requests::list_prompts(&self.core)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let span = span_of("prompts/get", Target::Prompt(&request.name), &context);
        let get = upstream_requests::get_prompt(&self.core, request, &context);
        served(span, get).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        serve(
            "completion/complete",
            &context,
            upstream_requests::complete(&self.core, request),
        )
        .await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let span = span_of("logging/setLevel", Target::Nothing, &context);
        let _in = span.enter();
        upstream_requests::set_level(&self.core, request.level, &context)
    }

    /// `subscriptions/listen`: every list's `list_changed` the bridge advertises, and updates
    /// of the resources asked for that lead to an upstream with subscriptions (at most
    /// `max_resource_subscriptions`).
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
            let followable = self.core.listeners.followable(uris);
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
        // A task-augmented `tools/call` of a 2025-11-25 session is renamed too.
        let tool = request.params.as_ref().and_then(|p| p["name"].as_str());
        let target = match tool.filter(|_| request.method.ends_with(TOOLS_CALL)) {
            Some(tool) => Target::Tool(tool),
            None => Target::Nothing,
        };
        let span = span_of(&request.method, target, &context);
        served(span, async {
            // The task requests renamed on the way in (see `tasks_2025`).
            if let Some(answer) = tasks_2025::serve_2025(&self.core, &request, &context).await {
                return answer.map(CustomResult::new);
            }
            let method: String = request.method.chars().take(100).collect();
            Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
                None,
            ))
        })
        .await
    }

    /// Lists and resources through `listeners`; the tasks listed in the filter's `taskIds`
    /// (read and acknowledged on the wire, `listen_tasks`) followed here, until the request
    /// ends.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let span = span_of(
            "subscriptions/listen",
            Target::Nothing,
            context.request_context(),
        );
        served(span, async {
            let listeners = &self.core.listeners;
            let _registered = listeners.add_listener(context.sink().clone()).await;
            let request = context.request_context();
            let tasks = listen_tasks::listed(request);
            tokio::select! {
                _ = context.cancelled() => {}
                _ = listen_tasks::follow(&self.core, request, &tasks) => context.cancelled().await,
            }
            Ok(())
        })
        .await
    }
}

/// The longest method, tool or prompt name a span carries (a client may send any).
const MAX_NAME: usize = 100;
pub const TOOLS_CALL: &str = "tools/call";

/// What a request names besides its method, for the span's name and attributes.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Nothing,
    Tool(&'a str),
    Prompt(&'a str),
}

/// The span a request of `method` (a 2025-11-25 task request under its own name, not the one
/// `tasks_2025` renamed it to) is served in.
pub fn span_of(method: &str, target: Target<'_>, context: &RequestContext<RoleServer>) -> Span {
    let method = cut(method.strip_prefix(tasks_2025::PREFIX).unwrap_or(method));
    if !traces::enabled() {
        if method != TOOLS_CALL {
            return Span::none();
        }
        return tracing::info_span!(
            "mcp_request",
            mcp.method.name = method,
            jsonrpc.request.id = %context.id,
        );
    }
    let (tool, prompt) = match target {
        Target::Nothing => (None, None),
        Target::Tool(tool) => (Some(cut(tool)), None),
        Target::Prompt(prompt) => (None, Some(cut(prompt))),
    };
    let name = match tool.or(prompt) {
        Some(target) => format!("{method} {target}"),
        None => method.to_string(),
    };
    let parts = context.extensions.get::<http::request::Parts>();
    let span = tracing::info_span!(
        "mcp_request",
        otel.name = name,
        otel.kind = "server",
        mcp.method.name = method,
        jsonrpc.request.id = %context.id,
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        gen_ai.tool.name = tool,
        gen_ai.prompt.name = prompt,
        gen_ai.operation.name = tool.is_some().then_some("execute_tool"),
        network.transport = "tcp",
        network.protocol.name = "http",
        network.protocol.version = parts.map(|p| http_version(p.version)),
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if let Some(version) = context.protocol_version() {
        span.record("mcp.protocol.version", version.as_str());
    }
    if let Some(session) = caller::session(context) {
        // `<nonce>.<tag>`: the tag opens the session, the nonce only names it.
        let nonce = session.split('.').next().unwrap_or_default();
        span.record("mcp.session.id", cut(nonce));
    }
    traces::continue_from(&span, || caller::caller_trace(context));
    span
}

/// `work` served in the span of a `method` request that names no tool or prompt.
async fn serve<T>(
    method: &str,
    context: &RequestContext<RoleServer>,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    served(span_of(method, Target::Nothing, context), work).await
}

/// `work` run in `span`, which records the JSON-RPC error it ends with, if any.
pub async fn served<T>(
    span: Span,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let outcome = work.instrument(span.clone()).await;
    if let Err(error) = &outcome {
        traces::rpc_error(&span, error.code.0, &error.message);
    }
    outcome
}

/// A `tools/call` answered with the tool's error (`isError`): `error.type` `tool_error`.
pub fn tool_answer(span: &Span, response: &CallToolResponse) {
    if let CallToolResponse::Complete(result) = response
        && result.is_error == Some(true)
    {
        traces::tool_error(span);
    }
}

/// At most [`MAX_NAME`] characters of `name`.
fn cut(name: &str) -> &str {
    name.char_indices()
        .nth(MAX_NAME)
        .map_or(name, |(end, _)| &name[..end])
}

fn http_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_cut_on_a_character_boundary() {
        assert_eq!(cut("tools/list"), "tools/list");
        let long = "é".repeat(150);
        assert_eq!(cut(&long).chars().count(), MAX_NAME);
    }
}
