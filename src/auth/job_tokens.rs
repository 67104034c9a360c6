//! Capability tokens for job and correlation URLs.
//!
//! A browser's `EventSource` cannot send headers, so the URL itself must carry the right to
//! read: `?token=` with
//!
//! ```text
//! token = base64url_nopad( HMAC-SHA256( key = auth.job_secret, message = "<scope>:<id>" ) )
//! ```
//!
//! where `<scope>` is `job` (read one job: snapshot and events), `job-cancel` (cancel it) or
//! `correlation` (read one correlation stream), and `<id>` the job ID (32 lowercase hex
//! digits) or the correlation ID as sent in the header. The key is the secret's UTF-8 bytes.
//! Derived, not stored: any replica with the same secret verifies any token, and an
//! application backend that knows the secret mints correlation tokens itself.

use std::sync::Arc;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::{
    config::AuthConfig,
    model::{CorrelationId, JobId},
};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a random per-process key.
const RANDOM_KEY_BYTES: usize = 32;

/// What a token opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenScope {
    /// One job's snapshot and event stream.
    JobRead,
    /// Cancelling one job.
    JobCancel,
    /// Answering one job's questions (`POST /jobs/{id}/input`).
    JobInput,
    /// One correlation's event stream.
    Correlation,
    /// An MCP session of one principal: the tag in its `Mcp-Session-Id` (see
    /// `http::sessions`), so that no other principal can use the session.
    McpSession,
}

impl TokenScope {
    /// The message prefix: it separates the scopes, so a token of one never works as another.
    pub fn label(self) -> &'static str {
        match self {
            TokenScope::JobRead => "job",
            TokenScope::JobCancel => "job-cancel",
            TokenScope::JobInput => "job-input",
            TokenScope::Correlation => "correlation",
            TokenScope::McpSession => "mcp-session",
        }
    }
}

/// Mints and checks job and correlation tokens with one key.
#[derive(Clone)]
pub struct JobTokens {
    key: Arc<[u8]>,
    random: bool,
}

impl std::fmt::Debug for JobTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.random { "random" } else { "configured" };
        write!(f, "JobTokens({kind} key)")
    }
}

impl JobTokens {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            key: secret.into(),
            random: false,
        }
    }

    /// A key of this process alone: its tokens die with it.
    pub fn random() -> Self {
        let mut key = [0u8; RANDOM_KEY_BYTES];
        getrandom::fill(&mut key).expect("the operating system's random number generator failed");
        Self {
            key: key.into(),
            random: true,
        }
    }

    /// `auth.job_secret`, or a random key when none is configured.
    pub fn from_config(auth: &AuthConfig) -> Self {
        match &auth.job_secret {
            Some(secret) => Self::new(secret.value().as_bytes()),
            None => Self::random(),
        }
    }

    /// The key was made up by this process (no `auth.job_secret`).
    pub fn is_random(&self) -> bool {
        self.random
    }

    fn mac(&self, scope: TokenScope, id: &str) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        let mut mac =
            HmacSha256::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(scope.label().as_bytes());
        mac.update(b":");
        mac.update(id.as_bytes());
        mac
    }

    pub fn mint(&self, scope: TokenScope, id: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(scope, id).finalize().into_bytes())
    }

    /// Whether `token` opens `scope` of `id`. Constant-time in the token's content.
    pub fn verify(&self, scope: TokenScope, id: &str, token: &str) -> bool {
        let token = token.trim_end_matches('=');
        // 32 bytes are 43 base64 characters; anything else cannot be a token.
        if token.len() != 43 {
            return false;
        }
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        self.mac(scope, id).verify_slice(&bytes).is_ok()
    }

    pub fn job(&self, id: JobId) -> String {
        self.mint(TokenScope::JobRead, &id.to_string())
    }

    pub fn cancel(&self, id: JobId) -> String {
        self.mint(TokenScope::JobCancel, &id.to_string())
    }

    pub fn input(&self, id: JobId) -> String {
        self.mint(TokenScope::JobInput, &id.to_string())
    }

    pub fn correlation(&self, id: &CorrelationId) -> String {
        self.mint(TokenScope::Correlation, id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_one_scope_of_one_id() {
        let tokens = JobTokens::new(b"0123456789abcdef0123456789abcdef");
        let a = JobId::random();
        let b = JobId::random();
        let read = tokens.job(a);
        assert_eq!(read.len(), 43);
        assert!(tokens.verify(TokenScope::JobRead, &a.to_string(), &read));
        assert!(!tokens.verify(TokenScope::JobRead, &b.to_string(), &read));
        assert!(!tokens.verify(TokenScope::JobCancel, &a.to_string(), &read));
        assert!(!tokens.verify(TokenScope::Correlation, &a.to_string(), &read));
        let other = JobTokens::new(b"another secret, another secret!!");
        assert!(!other.verify(TokenScope::JobRead, &a.to_string(), &read));
        assert!(!tokens.verify(TokenScope::JobRead, &a.to_string(), ""));
        assert!(!tokens.verify(TokenScope::JobRead, &a.to_string(), &format!("{read}x")));
    }

    #[test]
    fn known_answers_computed_with_pythons_hmac_module() {
        // base64.urlsafe_b64encode(hmac.new(key, b"<label>:<id>", hashlib.sha256).digest())
        //     .rstrip(b"=")
        let tokens = JobTokens::new(b"0123456789abcdef0123456789abcdef");
        let job: JobId = "0123456789abcdef0123456789abcdef".parse().unwrap();
        let cid: CorrelationId = "turn-42".parse().unwrap();
        assert_eq!(
            tokens.job(job),
            "Jpn6CjHNDUDiFcEbT0nRj23yWp3P5d6R9gous_epa78"
        );
        assert_eq!(
            tokens.cancel(job),
            "S1kEihFFlCXPyz9g8sZEAnQcVWg8UO-_l-LxUiSw7sQ"
        );
        assert_eq!(
            tokens.correlation(&cid),
            "uXWCbAhvuh01By44K9M2rF4zgilSFDVZR4_C8Rt60qg"
        );
    }
}
