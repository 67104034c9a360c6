//! Who a request is: its principal (the owner of the jobs it starts), whether it is an admin,
//! and which upstream tools it may use. Made once per request by the authenticator and carried
//! in the request's extensions to the MCP handler and the job routes.
//!
//! [`may_access`] is the one ownership check: every entry point that shows or acts on a job
//! for an authenticated caller asks it. A job the caller may not see is answered exactly like
//! an unknown job, so its existence does not show.

use std::sync::Arc;

use globset::GlobSet;

use crate::model::{JobSnapshot, Principal};

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

/// Whether `identity` may see (read, wait for, follow, cancel) this job: it started it, or it
/// is an admin. A job without a recorded principal (made before principals existed) is an
/// admin's alone.
pub fn may_access(identity: &Identity, job: &JobSnapshot) -> bool {
    identity.admin || job.principal.as_ref() == Some(&identity.principal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobId, NewJob};

    #[test]
    fn owner_and_admin_only() {
        let job = |principal: Option<Principal>| {
            JobSnapshot::new(
                &NewJob {
                    id: JobId::random(),
                    tool: "d__t".into(),
                    upstream: "d".into(),
                    upstream_tool: "t".into(),
                    correlation_id: None,
                    owner: "r".into(),
                    principal,
                },
                0,
            )
        };
        let a = Identity {
            principal: Principal::token("a"),
            admin: false,
            tools: ToolAccess::All,
        };
        let admin = Identity {
            principal: Principal::token("ops"),
            admin: true,
            ..a.clone()
        };
        let of_a = job(Some(Principal::token("a")));
        let of_b = job(Some(Principal::token("b")));
        let legacy = job(None);
        assert!(may_access(&a, &of_a));
        assert!(!may_access(&a, &of_b));
        assert!(!may_access(&a, &legacy));
        assert!(may_access(&admin, &of_b) && may_access(&admin, &legacy));
        let same_name_other_kind = Identity {
            principal: Principal::jwt("https://idp/", "a"),
            ..a
        };
        assert!(!may_access(&same_name_other_kind, &of_a));
    }
}
