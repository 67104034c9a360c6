//! What the bridge advertises at `initialize` and `server/discover`: its own tools (always,
//! with `listChanged`: the catalog changes as upstreams come and go), and the union of what its
//! upstreams offer besides. An upstream's capabilities are kept from its last `initialize` while
//! it is down, so a restart does not make a capability flicker; `listChanged` is advertised for
//! every list, because the bridge's lists change whenever an upstream comes or goes. The
//! Tasks extension is the bridge's own (every call is a job, and a job can be a task), so it is
//! advertised whatever the upstreams offer.

use rmcp::model::{
    ExtensionCapabilities, JsonObject, PromptsCapability, ResourcesCapability, ServerCapabilities,
    TASKS_EXTENSION_ID, ToolsCapability,
};

use crate::upstream::Upstreams;

pub fn union(upstreams: &Upstreams) -> ServerCapabilities {
    let mut capabilities = ServerCapabilities::default();
    let mut tools = ToolsCapability::default();
    tools.list_changed = Some(true);
    capabilities.tools = Some(tools);
    capabilities
        .extensions
        .get_or_insert_with(ExtensionCapabilities::new)
        .insert(TASKS_EXTENSION_ID.to_string(), JsonObject::new());
    for offered in upstreams.iter().filter_map(|u| u.capabilities()) {
        if let Some(offered) = offered.resources {
            let resources = capabilities
                .resources
                .get_or_insert_with(ResourcesCapability::default);
            resources.list_changed = Some(true);
            if offered.subscribe == Some(true) {
                resources.subscribe = Some(true);
            }
        }
        if offered.prompts.is_some() {
            capabilities
                .prompts
                .get_or_insert_with(PromptsCapability::default)
                .list_changed = Some(true);
        }
        if offered.completions.is_some() {
            capabilities.completions.get_or_insert_with(JsonObject::new);
        }
        #[allow(deprecated)]
        if offered.logging.is_some() {
            capabilities.logging.get_or_insert_with(JsonObject::new);
        }
    }
    capabilities
}

/// Refuse a method no upstream offers, as a server without that capability would.
pub fn offered(
    upstreams: &Upstreams,
    method: &str,
    offers: impl Fn(&ServerCapabilities) -> bool,
) -> Result<(), rmcp::ErrorData> {
    if offers(&union(upstreams)) {
        return Ok(());
    }
    Err(rmcp::ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {method} (no upstream of this bridge offers it)"),
        None,
    ))
}
