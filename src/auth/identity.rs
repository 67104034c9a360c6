//! Who a request is: its principal (the owner of the jobs it starts), whether it is an admin,
//! and which upstream tools it may use. Made once per request by the authenticator and carried
//! in the request's extensions to the MCP handler and the job routes.

use std::sync::Arc;

use globset::GlobSet;

use crate::model::Principal;

/// A verified caller.
#[derive(Debug, Clone)]
pub struct Identity {
    pub principal: Principal,
    /// Sees and cancels every job (`auth.admin`).
    pub admin: bool,
    pub tools: ToolAccess,
}

/// The upstream tools a caller may list and call.
#[derive(Debug, Clone)]
pub enum ToolAccess {
    /// No `auth.policies` are configured.
    All,
    /// The tool globs of every policy the caller matches (none: no upstream tool).
    Only(Vec<Arc<GlobSet>>),
}

impl Identity {
    /// The one caller of an open `/mcp`.
    pub fn anonymous(tools: ToolAccess) -> Self {
        Self {
            principal: Principal::anonymous(),
            admin: false,
            tools,
        }
    }

    /// Whether this caller may list and call the upstream tool `name` (`<upstream>__<tool>`).
    /// The bridge's own job tools are not subject to this: every caller has them.
    pub fn may_use_tool(&self, name: &str) -> bool {
        match &self.tools {
            ToolAccess::All => true,
            ToolAccess::Only(sets) => sets.iter().any(|set| set.is_match(name)),
        }
    }
}

/// What the authenticator knows about a credential, for the admin and policy matching.
#[derive(Debug, Clone, Default)]
pub struct Claims {
    /// The static token's name.
    pub token_name: Option<String>,
    /// The JWT's issuer, subject, role values and scopes.
    pub issuer: Option<String>,
    pub subject: Option<String>,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
}
