//! The MCP server the agent talks to: the tool catalog, the call modes, the job tools.
//!
//! One [`Front`] value serves every MCP session (rmcp's Streamable HTTP service asks a factory
//! for a handler per session; the factory hands out clones of the same cheap handle).

mod call;
mod caller;
mod catalog;
pub mod handle;
mod job_tools;
mod quota;

use std::sync::Arc;

use parking_lot::Mutex;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig,
    },
    service::{NotificationContext, Peer, RequestContext},
};
use tokio::sync::watch;

pub use catalog::{CANCEL_JOB, GET_JOB_STATUS, SEPARATOR, WAIT_FOR_JOB};
pub use handle::Links;
pub use quota::JobQuota;

use crate::{config::JobsConfig, jobs::Jobs, shutdown::Tasks, upstream::Upstreams};

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
    /// MCP sessions to tell when the tool list changes (an upstream came or went, or changed
    /// its tools). Closed ones are dropped when the next change goes out.
    peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    upstreams: Upstreams,
    jobs: Jobs,
    config: JobsConfig,
    links: Links,
    /// Lower-case name of the header that carries the correlation ID.
    correlation_header: String,
    /// Running jobs per principal.
    quota: JobQuota,
}

impl Front {
    /// Tool-list changes are announced to the MCP sessions by a task on `tasks` (the HTTP
    /// stage: it stops with the sessions).
    pub fn new(
        upstreams: Upstreams,
        jobs: Jobs,
        config: JobsConfig,
        links: Links,
        correlation_header: String,
        quota: JobQuota,
        tasks: &Tasks,
    ) -> Self {
        let peers = Arc::new(Mutex::new(Vec::new()));
        tasks.spawn_until_stopped(announce_tool_changes(
            upstreams.tool_changes(),
            peers.clone(),
        ));
        Self {
            inner: Arc::new(Inner {
                peers,
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

/// Changes come in bursts (an upstream restarting goes down, comes up and lists its tools), so
/// they are gathered for a moment and announced once.
const ANNOUNCE_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// Send `notifications/tools/list_changed` to every open session whenever the catalog may have
/// changed. Ends when the upstreams are gone or the HTTP side stops.
async fn announce_tool_changes(
    mut changes: watch::Receiver<u64>,
    peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
) {
    while changes.changed().await.is_ok() {
        tokio::time::sleep(ANNOUNCE_DELAY).await;
        changes.mark_unchanged();
        let open: Vec<Peer<RoleServer>> = {
            let mut peers = peers.lock();
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in open {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(error = %e, "tools/list_changed did not reach a session");
            }
        }
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-progress-bridge",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.inner.peers.lock().push(context.peer);
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
        let mut result = match request.name.as_ref() {
            GET_JOB_STATUS => self.get_job_status(request.arguments, &identity).await?,
            WAIT_FOR_JOB => self.wait_for_job(request.arguments, &identity).await?,
            CANCEL_JOB => self.cancel_job(request.arguments, &identity).await?,
            _ => self.call_upstream(request, context, &identity).await?,
        };
        // An upstream on an older revision sends no `resultType`; a 2026-07-28 client requires
        // it. rmcp strips it again for clients on older revisions.
        result.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(result.into())
    }
}
