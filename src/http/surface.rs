//! The whole HTTP surface in one place, each part behind its checks: `/mcp` behind its one
//! layer (`mcp_layer`), the job API (whose guard is on its own routes),
//! the admin routes behind the bearer token (or apart, for the admin listener), and the
//! request log around everything.

use axum::{Router, middleware};

use super::{
    access_log, auth,
    mcp_layer::{self, McpLayer},
};

/// The routers to serve: the main one, and the admin one when it has a listener of its own.
pub struct Surface {
    pub main: Router,
    pub admin: Option<Router>,
}

/// `mcp` is the MCP service nested at `/mcp`, behind `layer`; `api` the job API; `admin` the
/// operational routes, merged behind the bearer token unless `admin_apart`.
pub fn assemble(
    mcp: Router,
    api: Router,
    admin: Router,
    layer: McpLayer,
    admin_apart: bool,
) -> Surface {
    let guard = layer.guard.clone();
    let mcp = mcp.route_layer(middleware::from_fn_with_state(layer, mcp_layer::layer));
    let mut main = mcp.merge(api);
    let admin = if admin_apart {
        Some(admin.layer(middleware::from_fn(access_log::log_request)))
    } else {
        main =
            main.merge(admin.route_layer(middleware::from_fn_with_state(guard, auth::admin_guard)));
        None
    };
    Surface {
        main: main.layer(middleware::from_fn(access_log::log_request)),
        admin,
    }
}

/// Say at start what is open: loudly, when `/mcp` takes anyone.
pub fn announce(guard: &auth::Guard, config: &crate::config::Config) {
    if guard.authn.is_open() {
        tracing::warn!(
            listen = %config.server.listen,
            "/mcp IS OPEN: no auth.mcp_tokens or auth.issuers are configured, so anyone who \
             can reach this address can call every tool. Set one before exposing the bridge. \
             Meanwhile /upstreams and /metrics answer loopback clients only (or serve them on \
             server.admin_listen)"
        );
    }
    if let Some(resource) = &guard.resource {
        tracing::info!(
            resource = %resource.resource,
            metadata = %resource.metadata_url,
            issuers = config.auth.issuers.len(),
            "JWT access tokens accepted on /mcp; Protected Resource Metadata served"
        );
    }
    if guard.job_tokens.is_random() {
        tracing::info!(
            "no auth.job_secret: job URLs are signed with a key of this process alone; set \
             auth.job_secret to keep them valid across restarts and replicas"
        );
    }
    if !config.auth.require_job_tokens {
        tracing::warn!(
            "auth.require_job_tokens = false: anyone who knows a job ID can read and cancel it"
        );
    }
}
