//! The bearer tokens of `/mcp`.
//!
//! Tokens are compared as SHA-256 digests with a constant-time equality, against every
//! configured token (no early exit), so neither the content nor the position of a match shows
//! in the response time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Secret;

/// Who made an MCP request: the index of the token it presented, or anyone when `/mcp` is
/// open. Limits (running jobs, call rate) are kept per caller. Never holds the token itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Caller {
    Token(usize),
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BearerError {
    #[error(
        "this endpoint needs `Authorization: Bearer <token>` with one of the bridge's auth.mcp_tokens"
    )]
    Missing,
    #[error(
        "the bearer token is not one of the bridge's auth.mcp_tokens; check the token the client sends"
    )]
    Invalid,
}

/// The configured `/mcp` tokens, as digests.
#[derive(Clone, Default)]
pub struct McpTokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for McpTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "McpTokens({} configured)", self.digests.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl McpTokens {
    pub fn new(tokens: &[Secret]) -> Self {
        Self {
            digests: tokens
                .iter()
                .map(|t| digest(t.value().as_bytes()))
                .collect(),
        }
    }

    /// No tokens configured: `/mcp` is open.
    pub fn is_open(&self) -> bool {
        self.digests.is_empty()
    }

    /// Which configured token this is, if any.
    pub fn find(&self, token: &str) -> Option<usize> {
        let presented = digest(token.as_bytes());
        let mut found = None;
        for (i, known) in self.digests.iter().enumerate() {
            if bool::from(known.ct_eq(&presented)) {
                found = Some(i);
            }
        }
        found
    }

    /// The caller of a request with this `Authorization` header value (`None`: no header).
    /// When no tokens are configured everyone is [`Caller::Open`], whatever they send.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<Caller, BearerError> {
        if self.is_open() {
            return Ok(Caller::Open);
        }
        let token =
            bearer_token(authorization.ok_or(BearerError::Missing)?).ok_or(BearerError::Invalid)?;
        self.find(token)
            .map(Caller::Token)
            .ok_or(BearerError::Invalid)
    }

    /// A valid token was presented (never true when none are configured).
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        !self.is_open() && matches!(self.check(authorization), Ok(Caller::Token(_)))
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

    fn tokens() -> McpTokens {
        McpTokens::new(&[
            Secret::literal("first-token-0123456789"),
            Secret::literal("second-token-0123456789"),
        ])
    }

    #[test]
    fn finds_the_token_and_rejects_others() {
        let t = tokens();
        assert_eq!(
            t.check(Some(b"Bearer first-token-0123456789")),
            Ok(Caller::Token(0))
        );
        assert_eq!(
            t.check(Some(b"bearer  second-token-0123456789 ")),
            Ok(Caller::Token(1))
        );
        assert_eq!(t.check(None), Err(BearerError::Missing));
        for bad in [
            &b"Bearer first-token-012345678"[..],
            b"Basic first-token-0123456789",
            b"first-token-0123456789",
            b"Bearer ",
            b"\xff\xfe",
        ] {
            assert_eq!(t.check(Some(bad)), Err(BearerError::Invalid), "{bad:?}");
        }
        assert!(!McpTokens::default().admits(Some(b"Bearer x")));
        assert_eq!(McpTokens::default().check(None), Ok(Caller::Open));
    }
}
