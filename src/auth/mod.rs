//! Who may do what: who the caller of `/mcp` is (a named static token, or a JWT of a
//! configured issuer), whether it is an admin, which tools it may use, whether it may see a
//! job (one check: [`may_access`]), and the capability tokens that open one job's (or one
//! correlation's) URLs. The HTTP side that asks them lives in `http::auth`.

mod bearer;
mod identity;
mod job_tokens;
mod jwks;
mod jwt;
mod ownership;
mod policy;
mod positions;
mod rejection;
pub mod resource;

use std::sync::{Arc, RwLock};

pub use bearer::{StaticTokens, bearer_token};
pub use identity::{Claims, Identity, ToolAccess};
pub use job_tokens::{DEFAULT_TTL as DEFAULT_JOB_TOKEN_TTL, JobTokens, TokenScope, claimed_expiry};
pub use jwks::JwksError;
pub use jwt::JwtVerifier;
pub use ownership::may_access;
pub use policy::{AccessRules, PolicyError};
pub use positions::Positions;
pub use rejection::Rejection;
pub use resource::ProtectedResource;

use crate::{config::Config, metrics::Metrics, model::Principal};

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
