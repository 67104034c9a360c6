//! `auth.admin` and `auth.policies`, compiled: from a credential's claims to the caller's
//! admin flag and tool access.

use std::sync::Arc;

use globset::{GlobSet, GlobSetBuilder};

use super::identity::{Claims, Identity, ToolAccess};
use crate::{
    config::{AuthConfig, Callers, tool_glob},
    model::Principal,
};

#[derive(Debug, thiserror::Error)]
#[error("auth.policies[{index}].tools: {source}")]
pub struct PolicyError {
    index: usize,
    source: globset::Error,
}

struct Policy {
    everyone: bool,
    callers: Callers,
    tools: Arc<GlobSet>,
}

/// The compiled rules; one per bridge.
pub struct AccessRules {
    admin: Callers,
    policies: Vec<Policy>,
}

impl AccessRules {
    pub fn new(auth: &AuthConfig) -> Result<Self, PolicyError> {
        let mut policies = Vec::with_capacity(auth.policies.len());
        for (index, policy) in auth.policies.iter().enumerate() {
            let mut set = GlobSetBuilder::new();
            for pattern in &policy.tools {
                set.add(tool_glob(pattern).map_err(|source| PolicyError { index, source })?);
            }
            let tools = set
                .build()
                .map_err(|source| PolicyError { index, source })?;
            policies.push(Policy {
                everyone: policy.everyone,
                callers: policy.callers(),
                tools: Arc::new(tools),
            });
        }
        Ok(Self {
            admin: auth.admin.clone(),
            policies,
        })
    }

    /// The identity of a caller with these claims.
    pub fn identity(&self, principal: Principal, claims: &Claims) -> Identity {
        Identity {
            principal,
            admin: matches(&self.admin, claims),
            tools: self.tools(claims),
        }
    }

    pub fn tools(&self, claims: &Claims) -> ToolAccess {
        if self.policies.is_empty() {
            return ToolAccess::All;
        }
        ToolAccess::Only(
            self.policies
                .iter()
                .filter(|p| p.everyone || matches(&p.callers, claims))
                .map(|p| p.tools.clone())
                .collect(),
        )
    }
}

/// Whether any of `callers`' lists names this credential.
fn matches(callers: &Callers, claims: &Claims) -> bool {
    if let Some(name) = &claims.token_name
        && callers.tokens.contains(name)
    {
        return true;
    }
    let Some(issuer) = &claims.issuer else {
        return false;
    };
    if callers.issuer.as_ref().is_some_and(|i| i != issuer) {
        return false;
    }
    let any = |wanted: &[String], have: &[String]| wanted.iter().any(|w| have.contains(w));
    claims
        .subject
        .as_ref()
        .is_some_and(|s| callers.subjects.contains(s))
        || any(&callers.roles, &claims.roles)
        || any(&callers.scopes, &claims.scopes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyConfig;

    fn policy(tokens: &[&str], roles: &[&str], tools: &[&str]) -> PolicyConfig {
        PolicyConfig {
            everyone: false,
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            subjects: Vec::new(),
            roles: roles.iter().map(|s| s.to_string()).collect(),
            scopes: Vec::new(),
            issuer: None,
            tools: tools.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn jwt(roles: &[&str]) -> Claims {
        Claims {
            issuer: Some("https://idp.example/".into()),
            subject: Some("u1".into()),
            roles: roles.iter().map(|s| s.to_string()).collect(),
            ..Claims::default()
        }
    }

    #[test]
    fn policies_grant_the_union_of_what_matches_and_nothing_else() {
        let auth = AuthConfig {
            policies: vec![
                policy(&["ci"], &[], &["demo__*"]),
                policy(&[], &["Research"], &["search__query", "demo__slow_?"]),
            ],
            admin: Callers {
                roles: vec!["Bridge.Admin".into()],
                ..Callers::default()
            },
            ..AuthConfig::default()
        };
        let rules = AccessRules::new(&auth).unwrap();
        let ci = rules.identity(
            Principal::token("ci"),
            &Claims {
                token_name: Some("ci".into()),
                ..Claims::default()
            },
        );
        assert!(ci.may_use_tool("demo__anything") && !ci.may_use_tool("search__query"));
        assert!(!ci.admin);
        let researcher = rules.identity(Principal::jwt("i", "u1"), &jwt(&["Research"]));
        assert!(researcher.may_use_tool("search__query"));
        assert!(researcher.may_use_tool("demo__slow_x"));
        assert!(!researcher.may_use_tool("demo__slow_xy"));
        let nobody = rules.identity(Principal::jwt("i", "u2"), &jwt(&[]));
        assert!(!nobody.may_use_tool("demo__x"));
        let admin = rules.identity(Principal::jwt("i", "u3"), &jwt(&["Bridge.Admin"]));
        assert!(admin.admin && !admin.may_use_tool("demo__x"));
        let open = AccessRules::new(&AuthConfig::default()).unwrap();
        assert!(
            open.identity(Principal::anonymous(), &Claims::default())
                .may_use_tool("x__y")
        );
    }

    #[test]
    fn an_issuer_bound_entry_ignores_other_issuers() {
        let callers = Callers {
            subjects: vec!["u1".into()],
            issuer: Some("https://a.example/".into()),
            ..Callers::default()
        };
        assert!(!matches(&callers, &jwt(&[])));
        let mut from_a = jwt(&[]);
        from_a.issuer = Some("https://a.example/".into());
        assert!(matches(&callers, &from_a));
    }
}
