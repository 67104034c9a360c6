//! The static bearer tokens of `/mcp` (`auth.mcp_tokens`), each with its name.
//!
//! Tokens are compared as SHA-256 digests with a constant-time equality, against every
//! configured token (no early exit), so neither the content nor the position of a match shows
//! in the response time.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{AccessRules, Claims, Identity};
use crate::{config::McpToken, model::Principal};

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
