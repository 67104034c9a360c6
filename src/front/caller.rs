//! The caller of an MCP request, as the HTTP layer verified it.

use std::sync::Arc;

use rmcp::{RoleServer, service::RequestContext};

use crate::auth::{Identity, ToolAccess};

/// The identity the HTTP layer verified for this MCP request (see `http::auth`). A request
/// that did not come through it (none in the bridge) is an anonymous caller with no rights
/// beyond its own jobs.
pub fn identity(context: &RequestContext<RoleServer>) -> Arc<Identity> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Arc<Identity>>())
        .cloned()
        .unwrap_or_else(|| Arc::new(Identity::anonymous(ToolAccess::Only(Vec::new()))))
}
