//! The MCP server the agent talks to: the tool catalog, the call modes, the job tools.
//!
//! One [`Front`] value serves every MCP session (rmcp's Streamable HTTP service asks a factory
//! for a handler per session; the factory hands out clones of the same cheap handle).

mod call;
mod catalog;
pub mod handle;
mod job_tools;
mod quota;

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};

pub use catalog::{CANCEL_JOB, GET_JOB_STATUS, SEPARATOR, WAIT_FOR_JOB};
pub use handle::{JOB_META_KEY, Links};
pub use quota::JobQuota;

use crate::{config::JobsConfig, jobs::Jobs, upstream::Upstreams};

/// What the agent is told about this server at initialize.
const INSTRUCTIONS: &str = "Tools named <server>__<tool> run on the tool servers behind this \
bridge. A long call may answer with a job handle (job_id, events_url) instead of its result: \
call wait_for_job with that job_id to get the result, get_job_status to look without waiting, \
and cancel_job to stop it.";

#[derive(Clone)]
pub struct Front {
    inner: Arc<Inner>,
}

struct Inner {
    upstreams: Upstreams,
    jobs: Jobs,
    config: JobsConfig,
    links: Links,
    /// Lower-case name of the header that carries the correlation ID.
    correlation_header: String,
    /// Running jobs per MCP caller.
    quota: JobQuota,
}

impl Front {
    pub fn new(
        upstreams: Upstreams,
        jobs: Jobs,
        config: JobsConfig,
        links: Links,
        correlation_header: String,
        quota: JobQuota,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                upstreams,
                jobs,
                config,
                links,
                correlation_header,
                quota,
            }),
        }
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcp-progress-bridge",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(catalog::list(
            &self.inner.upstreams,
            self.inner.config.mode,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = match request.name.as_ref() {
            GET_JOB_STATUS => self.get_job_status(request.arguments).await?,
            WAIT_FOR_JOB => self.wait_for_job(request.arguments).await?,
            CANCEL_JOB => self.cancel_job(request.arguments).await?,
            _ => self.call_upstream(request, context).await?,
        };
        Ok(result.into())
    }
}
