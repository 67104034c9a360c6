//! The one ownership check. Every entry point that shows or acts on a job for an
//! authenticated caller asks it: the MCP job tools, bearer-authenticated job URLs, the
//! correlation stream (job by job), and MCP tasks later. A job the caller may not see is
//! answered exactly like an unknown job, so its existence does not show.

use super::Identity;
use crate::model::JobSnapshot;

/// Whether `identity` may see (read, wait for, follow, cancel) this job: it started it, or it
/// is an admin. A job without a recorded principal (made before principals existed) is an
/// admin's alone.
pub fn may_access(identity: &Identity, job: &JobSnapshot) -> bool {
    identity.admin || job.principal.as_ref() == Some(&identity.principal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        auth::ToolAccess,
        model::{JobId, NewJob, Principal},
    };

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
