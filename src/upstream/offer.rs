//! What an upstream offers besides tools: its capabilities (from its `initialize` answer), its
//! resources, resource templates and prompts, as last listed (`listing.rs`).

use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate, ServerCapabilities};

/// The lists an upstream can change with a `notifications/*/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Resources,
    Prompts,
}

impl ListKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources => "resources",
            ListKind::Prompts => "prompts",
        }
    }
}

/// An upstream's lists besides tools, as last listed.
#[derive(Default)]
pub(super) struct Offer {
    /// What the upstream said it offers at its last `initialize`; kept while it is down, so
    /// what the bridge advertises does not flap with one upstream's restarts.
    pub capabilities: Option<ServerCapabilities>,
    pub resources: Arc<Vec<Resource>>,
    pub templates: Arc<Vec<ResourceTemplate>>,
    pub prompts: Arc<Vec<Prompt>>,
}
