//! Who may do what: who the caller of `/mcp` is (a named static token, or a JWT of a
//! configured issuer), whether it is an admin, which tools it may use, whether it may see a
//! job (one check: [`may_access`]), and the capability tokens that open one job's (or one
//! correlation's) URLs. The HTTP side that asks them lives in `http::auth`.
//!
//! Static tokens are compared as SHA-256 digests with a constant-time equality, against every
//! configured token (no early exit), so neither the content nor the position of a match shows
//! in the response time.

mod identity;
mod job_tokens;
mod jwks;
mod jwt;
mod policy;
mod positions;
mod rejection;
pub mod resource;

use std::sync::{Arc, RwLock};

pub use identity::{Claims, Identity, ToolAccess, may_access};
pub use job_tokens::{DEFAULT_TTL as DEFAULT_JOB_TOKEN_TTL, JobTokens, TokenScope, claimed_expiry};
pub use jwks::JwksError;
pub use jwt::JwtVerifier;
pub use policy::{AccessRules, PolicyError};
pub use positions::Positions;
pub use rejection::Rejection;
pub use resource::ProtectedResource;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{
    config::{Config, McpToken},
    metrics::Metrics,
    model::Principal,
};

/// Turns a request's `Authorization` header into an [`Identity`]. One per bridge; a cheap
/// handle to share.
pub struct Authenticator {
    rules: AccessRules,
    tokens: StaticTokens,
    jwt: Option<JwtVerifier>,
    /// The identity of every caller when no credential is configured.
    open: Option<Arc<Identity>>,
    max_token_bytes: usize,
}

impl Authenticator {
    pub fn new(config: &Config, metrics: &Metrics) -> Result<Self, PolicyError> {
        let auth = &config.auth;
        let rules = AccessRules::new(auth)?;
        let tokens = StaticTokens::new(&auth.mcp_tokens, &rules);
        let jwt = JwtVerifier::new(&auth.issuers, &auth.jwt, metrics.jwks_fetches.clone());
        let open = (tokens.is_empty() && jwt.is_none())
            .then(|| Arc::new(rules.identity(Principal::anonymous(), &Claims::default())));
        Ok(Self {
            rules,
            tokens,
            jwt,
            open,
            max_token_bytes: auth.jwt.max_token_bytes,
        })
    }

    /// No credential is configured: every caller is the one anonymous principal.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The caller of a request with this `Authorization` header value (`None`: no header).
    pub async fn authenticate(
        &self,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<Identity>, Rejection> {
        if let Some(open) = &self.open {
            return Ok(open.clone());
        }
        let header = authorization.ok_or(Rejection::Missing)?;
        if header.len() > self.max_token_bytes + "Bearer ".len() {
            return Err(Rejection::TooLarge);
        }
        let token = bearer_token(header).ok_or(Rejection::NotBearer)?;
        if let Some(identity) = self.tokens.find(token) {
            return Ok(identity);
        }
        match &self.jwt {
            Some(jwt) if JwtVerifier::looks_like_jwt(token) => {
                let verified = jwt.verify(token).await?;
                let principal = Principal::jwt(&verified.issuer, &verified.subject);
                Ok(Arc::new(self.rules.identity(principal, &verified.claims)))
            }
            _ => Err(Rejection::UnknownToken),
        }
    }
}

/// The [`Authenticator`] in force. A config reload (SIGHUP) replaces it whole, so tokens,
/// issuers, admins and policies change between two requests, never within one. Whether the
/// bridge is open (no credential at all) is fixed at start: a reload may not switch it.
pub struct CurrentAuthenticator {
    /// A std lock held only to clone the `Arc`, never across an await.
    current: RwLock<Arc<Authenticator>>,
    open: bool,
}

/// Why a reload's authenticator was not put in force.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(
        "the new config {} credentials; switching between an open bridge and one that \
         authenticates needs a restart",
        if *.0 { "removes every" } else { "adds the first" }
    )]
    OpennessChanged(bool),
}

impl CurrentAuthenticator {
    pub fn new(authenticator: Authenticator) -> Self {
        Self {
            open: authenticator.is_open(),
            current: RwLock::new(Arc::new(authenticator)),
        }
    }

    fn get(&self) -> Arc<Authenticator> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Build the authenticator `config` describes and put it in force for the next request.
    pub fn replace(&self, config: &Config, metrics: &Metrics) -> Result<(), ReplaceError> {
        let next = Authenticator::new(config, metrics)?;
        if next.is_open() != self.open {
            return Err(ReplaceError::OpennessChanged(next.is_open()));
        }
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(next);
        Ok(())
    }

    /// See [`Authenticator::is_open`]; fixed for the bridge's life.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// See [`Authenticator::authenticate`], by the authenticator in force.
    pub async fn authenticate(
        &self,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<Identity>, Rejection> {
        self.get().authenticate(authorization).await
    }
}

/// The configured tokens, as digests, each with the identity it opens.
#[derive(Clone, Default)]
pub struct StaticTokens {
    entries: Vec<([u8; 32], Arc<Identity>)>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StaticTokens({} configured)", self.entries.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl StaticTokens {
    pub fn new(tokens: &[McpToken], rules: &AccessRules) -> Self {
        let entries = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                // Validation names every entry; a config built in code may not have.
                let name = match t.name.as_str() {
                    "" => format!("token-{}", i + 1),
                    name => name.to_string(),
                };
                let identity = rules.identity(
                    Principal::token(&name),
                    &Claims {
                        token_name: Some(name),
                        ..Claims::default()
                    },
                );
                (digest(t.token.value().as_bytes()), Arc::new(identity))
            })
            .collect();
        Self { entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The identity of this token, if it is one of the configured ones.
    pub fn find(&self, token: &str) -> Option<Arc<Identity>> {
        let presented = digest(token.as_bytes());
        let mut found = None;
        for (known, identity) in &self.entries {
            if bool::from(known.ct_eq(&presented)) {
                found = Some(identity.clone());
            }
        }
        found
    }
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive).
pub fn bearer_token(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AuthConfig, Secret};

    #[test]
    fn finds_the_token_by_name_and_rejects_others() {
        let rules = AccessRules::new(&AuthConfig::default()).unwrap();
        let t = StaticTokens::new(
            &[
                McpToken::named("first", Secret::literal("first-token-0123456789")),
                McpToken::named("second", Secret::literal("second-token-0123456789")),
            ],
            &rules,
        );
        let who = |token: &str| t.find(token).map(|i| i.principal.to_string());
        assert_eq!(
            who("first-token-0123456789").as_deref(),
            Some("token:first")
        );
        assert_eq!(
            who("second-token-0123456789").as_deref(),
            Some("token:second")
        );
        assert_eq!(who("first-token-012345678"), None);
        assert_eq!(bearer_token(b"bearer  second-token "), Some("second-token"));
        for bad in [&b"Basic x"[..], b"x", b"Bearer ", b"\xff\xfe"] {
            assert_eq!(bearer_token(bad), None, "{bad:?}");
        }
    }
}
