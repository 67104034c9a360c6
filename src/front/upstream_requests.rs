//! The requests routed to the one upstream that owns a resource, prompt or completion, and
//! the session's own subscriptions and log level. A method no upstream offers is refused as
//! a server without that capability would.

// MCP logging and resources/subscribe are deprecated but served to the clients that use them.
#![allow(deprecated)]

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, LoggingLevel,
        ReadResourceRequestParams, ReadResourceResponse, ResultType,
    },
    service::RequestContext,
};

use super::{
    ask_router, caller, capabilities::offered, core::Core, handle::upstream_error, prompts,
    resources,
};

pub(super) fn list_resources(core: &Core) -> Result<ListResourcesResult, ErrorData> {
    offered(&core.upstreams, "resources/list", |c| c.resources.is_some())?;
    Ok(ListResourcesResult::with_all_items(resources::list(
        &core.upstreams,
    )))
}

pub(super) fn list_resource_templates(
    core: &Core,
) -> Result<ListResourceTemplatesResult, ErrorData> {
    offered(&core.upstreams, "resources/templates/list", |c| {
        c.resources.is_some()
    })?;
    Ok(ListResourceTemplatesResult::with_all_items(
        resources::list_templates(&core.upstreams),
    ))
}

pub(super) async fn read_resource(
    core: &Core,
    mut request: ReadResourceRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<ReadResourceResponse, ErrorData> {
    offered(&core.upstreams, "resources/read", |c| c.resources.is_some())?;
    let route = resources::route(&core.upstreams, &request.uri)?;
    request.uri = route.uri.clone();
    let answer = route
        .upstream
        .read_resource(request, ask_router::asking(core, context))
        .await
        .map_err(|e| upstream_error(e, "resources/read"))?;
    let mut answer = resources::answer(&route, answer);
    if let ReadResourceResponse::Complete(result) = &mut answer {
        // As for tool results: an upstream on an older revision sends no `resultType`, the
        // session-less revision's clients require it; rmcp strips it again for older ones.
        result.result_type.get_or_insert(ResultType::COMPLETE);
    }
    Ok(answer)
}

/// Whether some upstream offers resource subscriptions.
fn subscriptions_offered(core: &Core, method: &str) -> Result<(), ErrorData> {
    offered(&core.upstreams, method, |c| {
        c.resources
            .as_ref()
            .is_some_and(|r| r.subscribe == Some(true))
    })
}

pub(super) async fn subscribe(
    core: &Core,
    uri: &str,
    context: &RequestContext<RoleServer>,
) -> Result<(), ErrorData> {
    subscriptions_offered(core, "resources/subscribe")?;
    let session = caller::session(context).unwrap_or_default();
    core.listeners.subscribe(&session, &context.peer, uri).await
}

pub(super) async fn unsubscribe(
    core: &Core,
    uri: &str,
    context: &RequestContext<RoleServer>,
) -> Result<(), ErrorData> {
    subscriptions_offered(core, "resources/unsubscribe")?;
    let session = caller::session(context).unwrap_or_default();
    core.listeners.unsubscribe(&session, uri).await
}

pub(super) fn list_prompts(core: &Core) -> Result<ListPromptsResult, ErrorData> {
    offered(&core.upstreams, "prompts/list", |c| c.prompts.is_some())?;
    Ok(ListPromptsResult::with_all_items(prompts::list(
        &core.upstreams,
    )))
}

pub(super) async fn get_prompt(
    core: &Core,
    mut request: GetPromptRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<GetPromptResponse, ErrorData> {
    offered(&core.upstreams, "prompts/get", |c| c.prompts.is_some())?;
    let (upstream, name) = prompts::route(&core.upstreams, &request.name)?;
    request.name = name;
    let mut answer = upstream
        .get_prompt(request, ask_router::asking(core, context))
        .await
        .map_err(|e| upstream_error(e, "prompts/get"))?;
    if let GetPromptResponse::Complete(result) = &mut answer {
        result.result_type.get_or_insert(ResultType::COMPLETE);
    }
    Ok(answer)
}

pub(super) async fn complete(
    core: &Core,
    request: CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    offered(&core.upstreams, "completion/complete", |c| {
        c.completions.is_some()
    })?;
    let (upstream, request) = prompts::route_completion(&core.upstreams, request)?;
    let mut answer = upstream
        .complete(request)
        .await
        .map_err(|e| upstream_error(e, "completion/complete"))?;
    answer.result_type.get_or_insert(ResultType::COMPLETE);
    Ok(answer)
}

/// The level applies to this session's view only: the upstream connections are shared, so the
/// bridge filters what it passes on (see `ask_router`) and leaves upstreams alone.
pub(super) fn set_level(
    core: &Core,
    level: LoggingLevel,
    context: &RequestContext<RoleServer>,
) -> Result<(), ErrorData> {
    offered(&core.upstreams, "logging/setLevel", |c| c.logging.is_some())?;
    let session = caller::session(context).unwrap_or_default();
    core.listeners.set_level(&session, &context.peer, level)
}
