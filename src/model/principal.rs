//! Who started a job: the principal of the MCP request that created it.
//!
//! The owner check (`auth::may_access`) compares principals, so a job record must keep one; a
//! principal may be personal data (an Entra ID object ID names a person), so it is kept out of
//! every JSON the bridge shows (`GET /jobs/{id}`, SSE `status` and `job_started` events, the job
//! tools): [`super::JobSnapshot`] skips it when serialized, and the Redis store keeps it in a
//! bookkeeping field of its own.

use std::{fmt, sync::Arc};

use serde::{Deserialize, Serialize};

/// A principal in one canonical text form, compared as a whole:
///
/// - `anonymous`: every caller of an open `/mcp` (no credentials configured), one principal;
/// - `token:<name>`: a static bearer token of `auth.mcp_tokens`, by its name;
/// - `jwt:<issuer> <subject>`: a JWT's issuer and subject (issuer URLs contain no space).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Principal(Arc<str>);

const TOKEN_PREFIX: &str = "token:";
const JWT_PREFIX: &str = "jwt:";
const ANONYMOUS: &str = "anonymous";

impl Principal {
    pub fn anonymous() -> Self {
        Self(ANONYMOUS.into())
    }

    pub fn token(name: &str) -> Self {
        Self(format!("{TOKEN_PREFIX}{name}").into())
    }

    pub fn jwt(issuer: &str, subject: &str) -> Self {
        Self(format!("{JWT_PREFIX}{issuer} {subject}").into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The static token's name, for a `token:` principal.
    pub fn token_name(&self) -> Option<&str> {
        self.0.strip_prefix(TOKEN_PREFIX)
    }

    /// Issuer and subject, for a `jwt:` principal.
    pub fn jwt_parts(&self) -> Option<(&str, &str)> {
        self.0.strip_prefix(JWT_PREFIX)?.split_once(' ')
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Principal({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_never_collide_and_read_back() {
        let token = Principal::token("ci");
        let jwt = Principal::jwt("https://idp.example/", "ci");
        assert_ne!(token, jwt);
        assert_ne!(Principal::token("anonymous"), Principal::anonymous());
        assert_eq!(token.token_name(), Some("ci"));
        assert_eq!(jwt.jwt_parts(), Some(("https://idp.example/", "ci")));
        assert_eq!(jwt.token_name(), None);
        let json = serde_json::to_string(&jwt).unwrap();
        assert_eq!(json, r#""jwt:https://idp.example/ ci""#);
        assert_eq!(serde_json::from_str::<Principal>(&json).unwrap(), jwt);
    }
}
