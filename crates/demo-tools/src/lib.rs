//! A demo MCP tool server: slow tools that report progress, and tools that
//! misbehave on purpose.
//!
//! Why it exists: the default config runs the bridge with nothing else
//! installed (`mcp-progress-bridge demo-tools` is spawned as a stdio child),
//! and the bridge's tests need an upstream that produces every case the
//! bridge must handle (see `tools.rs` for the list), over stdio and over
//! Streamable HTTP ([`http_router`]).
//!
//! It is an upstream like any other: nothing here knows about jobs or the
//! bridge. Tool names are plain (`slow_count`); the bridge namespaces them.

mod args;
mod asking;
mod cancellations;
mod report;
mod rounds;
mod serve;
mod tools;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    handler::server::router::tool::ToolRouter,
    model::{
        GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
        ListResourcesResult, PaginatedRequestParams, PromptsCapability, ReadResourceRequestParams,
        ReadResourceResponse, ResourcesCapability, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    tool_handler,
};

pub use asking::{PROMPT as ASKING_PROMPT, RESOURCE as ASKING_RESOURCE};
pub use cancellations::CancellationRecord;
pub use serve::{StdioError, http_router, serve_stdio};

/// The name the demo server gives in `initialize` (`serverInfo.name`).
pub const SERVER_NAME: &str = "mcp-progress-bridge-demo";

/// The demo tool server, an rmcp [`ServerHandler`].
///
/// Cloning is cheap and clones share one record of cancellations (what the
/// `cancellations` tool reports), so serve clones of one value wherever calls
/// should see each other's cancels (as [`http_router`] does across sessions).
#[derive(Debug, Clone)]
pub struct DemoTools {
    cancel_log: cancellations::CancellationLog,
    tool_router: ToolRouter<Self>,
    /// Also serve the prompt and resource that ask (`asking`; `demo-tools --asking`).
    asking: bool,
}

impl DemoTools {
    /// A server with an empty record of cancellations.
    pub fn new() -> Self {
        Self {
            cancel_log: cancellations::CancellationLog::default(),
            tool_router: Self::tool_router(),
            asking: false,
        }
    }

    /// Also serve a prompt and a resource that ask for input in `input_required` answers
    /// (protocol 2026-07-28; see `asking`).
    pub fn with_asking(mut self) -> Self {
        self.asking = true;
        self
    }
}

impl Default for DemoTools {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoTools {
    // `enable_logging` is deprecated with MCP logging (SEP-2577), but
    // `log_and_count` sends log messages, and a server must declare the
    // capability before it does.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        if self.asking {
            capabilities.prompts = Some(PromptsCapability::default());
            capabilities.resources = Some(ResourcesCapability::default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Demo tools for mcp-progress-bridge: slow tools that report progress \
             (slow_count, log_and_count, slow_count_no_total, instant_progress) and tools \
             that misbehave on purpose (fail_after, fail_rpc, ignore_cancel, hang, crash). \
             `ask` asks the person behind the client a question (elicitation); \
             `ask_in_rounds` asks in input_required rounds (protocol 2026-07-28). \
             `cancellations` lists the calls this server saw cancelled. `bench_progress` \
             stamps each notification with its send time, for the benchmark harness.",
            )
    }

    /// Accepts any level and changes nothing: the demo's only log lines are
    /// `log_and_count`'s, which exist to be seen. Answering keeps clients that
    /// call `logging/setLevel` (as they may, since logging is declared) from
    /// failing.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = if self.asking {
            asking::prompts()
        } else {
            Vec::new()
        };
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if !self.asking {
            return Err(ErrorData::invalid_params(
                "this server has no prompts",
                None,
            ));
        }
        asking::get_prompt(request, &context)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = if self.asking {
            asking::resources()
        } else {
            Vec::new()
        };
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if !self.asking {
            return Err(ErrorData::resource_not_found(
                "this server has no resources",
                None,
            ));
        }
        asking::read_resource(request, &context)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}
