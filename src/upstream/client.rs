//! The bridge's side of an upstream session: who it says it is, and what it does with the
//! server's own notifications and requests.

use std::sync::Arc;

use rmcp::{
    ClientHandler,
    model::{ClientCapabilities, ClientConfig, Implementation},
    service::{NotificationContext, RoleClient},
};
use tokio::sync::Notify;

/// Progress and log notifications never get here in time to matter (the transport tap routes
/// them first); this handler only watches for a changed tool list. Server-initiated requests
/// (sampling, elicitation, roots) get rmcp's defaults: the bridge has no user to ask.
#[derive(Clone)]
pub(super) struct UpstreamClient {
    pub tools_changed: Arc<Notify>,
}

impl ClientHandler for UpstreamClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-progress-bridge", env!("CARGO_PKG_VERSION")),
        )
    }
}
