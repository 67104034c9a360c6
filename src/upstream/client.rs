//! The bridge's side of an upstream session: who it says it is, and what it does with the
//! server's own notifications and requests.

use std::sync::Arc;

// Sampling and roots are deprecated by SEP-2577 but upstreams still send them.
#[allow(deprecated)]
use rmcp::{
    ClientHandler, ErrorData,
    model::{
        ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
        Implementation, ListRootsResult, ResourceUpdatedNotificationParam, RootsCapabilities,
        SamplingCapability,
    },
    service::{NotificationContext, RequestContext, RoleClient},
};
use tokio::sync::{Notify, broadcast};

use super::{shared::ResourceUpdated, tap::CallRoutes};

/// Progress and log notifications never get here in time to matter (the transport tap routes
/// them first); this handler watches for changed lists and updated resources, and passes an
/// `elicitation/create` to the call it belongs to (see `CallRoutes::input`), whose job finds a
/// person to answer; `sampling/createMessage` and `roots/list` likewise to the call, whose
/// waiting caller may answer them (else: an error, and no roots).
#[derive(Clone)]
pub(super) struct UpstreamClient {
    pub routes: Arc<CallRoutes>,
    pub upstream: String,
    pub tools_changed: Arc<Notify>,
    pub resources_changed: Arc<Notify>,
    pub prompts_changed: Arc<Notify>,
    /// Shared by all upstreams; the front fans each update out to the callers subscribed.
    pub resource_updates: broadcast::Sender<ResourceUpdated>,
}

impl ClientHandler for UpstreamClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.resources_changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.prompts_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // No receiver (no front yet, or shutting down) is not an error worth a line.
        let _ = self.resource_updates.send(ResourceUpdated {
            upstream: self.upstream.clone(),
            uri: params.uri,
        });
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.routes.input(request).await)
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.routes.sample(params).await
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(self.routes.roots().await)
    }

    /// Form elicitation: a person watching the job answers (or the waiting MCP caller).
    /// Sampling and roots: relayed to a waiting caller that has them (else an error / none).
    #[allow(deprecated)]
    fn get_info(&self) -> ClientConfig {
        let mut elicitation = ElicitationCapability::default();
        elicitation.form = Some(FormElicitationCapability::default());
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(elicitation);
        capabilities.sampling = Some(SamplingCapability::default());
        capabilities.roots = Some(RootsCapabilities::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("mcp-progress-bridge", env!("CARGO_PKG_VERSION")),
        )
    }
}
