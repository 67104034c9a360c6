//! Capability tokens for job and correlation URLs (a browser's `EventSource` cannot send
//! headers, so the URL itself carries the right to read: `?token=`):
//!
//! ```text
//! token = "<expires>." + base64url_nopad(HMAC-SHA256(key = auth.job_secret[i],
//!                                                    message = "v2:<scope>:<expires>:<id>"))
//! ```
//!
//! `<expires>`: Unix seconds; `<scope>`: `job`, `job-cancel`, `job-input`, `correlation` (or
//! `mcp-session`, `http::sessions`); `<id>`: the job or correlation ID. Minted with the first
//! key, verified with any (rotation). An expired token is refused exactly as a wrong one is.
//! Why this shape: docs/design/auth.md.

use std::{sync::Arc, time::Duration};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::positions::Positions;
use crate::{
    config::AuthConfig,
    model::{CorrelationId, JobId, Principal, now_ms},
};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a random per-process key.
const RANDOM_KEY_BYTES: usize = 32;
/// Characters of the MAC part: 32 bytes in base64 without padding.
const MAC_CHARS: usize = 43;
/// Longest `<expires>`: `u64::MAX` has 20 digits.
const MAX_EXPIRY_DIGITS: usize = 20;
/// What separates the message's version from the first format's messages.
const MESSAGE_VERSION: &str = "v2";
/// How long a token opens its URL when nobody says otherwise (`auth.job_token_ttl_secs`'s
/// default, there for the reason given at that key).
pub const DEFAULT_TTL: Duration = Duration::from_secs(86_400);

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

/// Mints job and correlation tokens with one key and checks them against every key it holds.
#[derive(Clone)]
pub struct JobTokens {
    /// The minting key first, then keys whose tokens are still accepted. Never empty.
    keys: Arc<[Box<[u8]>]>,
    ttl: Duration,
    random: bool,
}

impl std::fmt::Debug for JobTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.random { "random" } else { "configured" };
        write!(
            f,
            "JobTokens({kind} key, {} in all, ttl {:?})",
            self.keys.len(),
            self.ttl
        )
    }
}

impl JobTokens {
    /// One key, tokens valid for [`DEFAULT_TTL`].
    pub fn new(secret: &[u8]) -> Self {
        Self::with_keys(&[secret], DEFAULT_TTL)
    }

    /// Mint with `keys[0]`, accept any of `keys`; tokens open their URL for `ttl`.
    ///
    /// # Panics
    /// With no key: the config's validation never lets that through.
    pub fn with_keys(keys: &[&[u8]], ttl: Duration) -> Self {
        assert!(!keys.is_empty(), "JobTokens needs at least one key");
        Self {
            keys: keys.iter().map(|k| Box::<[u8]>::from(*k)).collect(),
            ttl,
            random: false,
        }
    }

    /// A key of this process alone: its tokens die with it.
    pub fn random() -> Self {
        let mut key = [0u8; RANDOM_KEY_BYTES];
        getrandom::fill(&mut key).expect("the operating system's random number generator failed");
        Self {
            random: true,
            ..Self::new(&key)
        }
    }

    /// `auth.job_secret` (every entry; the first mints) and `auth.job_token_ttl_secs`, or a
    /// random key when no secret is configured.
    pub fn from_config(auth: &AuthConfig) -> Self {
        let ttl = Duration::from_secs(auth.job_token_ttl_secs);
        match &auth.job_secret {
            Some(secrets) if !secrets.is_empty() => {
                let keys: Vec<&[u8]> = secrets.iter().map(|s| s.value().as_bytes()).collect();
                Self::with_keys(&keys, ttl)
            }
            _ => Self {
                ttl,
                ..Self::random()
            },
        }
    }

    /// The key was made up by this process (no `auth.job_secret`).
    pub fn is_random(&self) -> bool {
        self.random
    }

    /// How long a token minted now opens its URL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn mac(key: &[u8], scope: TokenScope, expires: &str, id: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
        for part in [MESSAGE_VERSION, scope.label(), expires] {
            mac.update(part.as_bytes());
            mac.update(b":");
        }
        mac.update(id.as_bytes());
        mac
    }

    /// When a token minted now expires (Unix seconds): now + the TTL.
    pub fn expiry(&self) -> u64 {
        unix_now().saturating_add(self.ttl.as_secs())
    }

    /// A token for `scope` of `id` that opens it until now + the TTL.
    pub fn mint(&self, scope: TokenScope, id: &str) -> String {
        self.mint_until(scope, id, self.expiry())
    }

    /// A token for `scope` of `id` that opens it until the Unix time `expires` (seconds).
    pub fn mint_until(&self, scope: TokenScope, id: &str, expires: u64) -> String {
        let expires = expires.to_string();
        let mac = Self::mac(&self.keys[0], scope, &expires, id).finalize();
        format!("{expires}.{}", URL_SAFE_NO_PAD.encode(mac.into_bytes()))
    }

    /// Whether `token` opens `scope` of `id` now. Constant-time in the MAC's content; an
    /// expired token is refused like a wrong one.
    pub fn verify(&self, scope: TokenScope, id: &str, token: &str) -> bool {
        self.verify_at(scope, id, token, unix_now())
    }

    /// As [`verify`](Self::verify), at the Unix time `now`.
    pub fn verify_at(&self, scope: TokenScope, id: &str, token: &str, now: u64) -> bool {
        let Some((expires, mac)) = token.split_once('.') else {
            return false;
        };
        // Exactly what minting writes: decimal digits, no sign, no leading zero.
        let canonical = !expires.is_empty()
            && expires.len() <= MAX_EXPIRY_DIGITS
            && expires.bytes().all(|b| b.is_ascii_digit())
            && (expires == "0" || !expires.starts_with('0'));
        let Some(expiry) = canonical.then(|| expires.parse::<u64>().ok()).flatten() else {
            return false;
        };
        let mac = mac.trim_end_matches('=');
        if mac.len() != MAC_CHARS {
            return false;
        }
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        let signed = self.keys.iter().any(|key| {
            Self::mac(key, scope, expires, id)
                .verify_slice(&bytes)
                .is_ok()
        });
        signed && now < expiry
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

    /// The event ids `principal` sees on correlation `id` opened with its credential, keyed
    /// with the first key (after a rotation, older ids read as unknown: the reader starts
    /// again with a `reset`).
    pub fn positions(&self, principal: &Principal, id: &CorrelationId) -> Positions {
        Positions::new(&self.keys[0], principal, id)
    }
}

/// The Unix time in seconds (0 before 1970: a clock that wrong refuses every token).
fn unix_now() -> u64 {
    now_ms() / 1000
}

/// The expiry a token claims (Unix seconds), whether or not it is genuine: for tools that show
/// when a URL stops working. Never a reason to trust the token.
pub fn claimed_expiry(token: &str) -> Option<u64> {
    token.split_once('.')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_opens_one_scope_of_one_id() {
        let tokens = JobTokens::new(KEY);
        let a = JobId::random();
        let b = JobId::random();
        let read = tokens.job(a);
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
        // e = "1800000000"; e + "." + base64.urlsafe_b64encode(hmac.new(key,
        //     f"v2:<label>:{e}:<id>".encode(), hashlib.sha256).digest()).rstrip(b"=")
        let tokens = JobTokens::new(KEY);
        let job = "0123456789abcdef0123456789abcdef";
        let at = 1_800_000_000;
        assert_eq!(
            tokens.mint_until(TokenScope::JobRead, job, at),
            "1800000000.Dn3B7-e_y2WgrkPCQL7A96_Oz8mFwCwGGz34-s2EkMo"
        );
        assert_eq!(
            tokens.mint_until(TokenScope::JobCancel, job, at),
            "1800000000.E-W8UCvac2FqnRuVTLOvAzTBrvTRH31D9bt4I-9M34A"
        );
        assert_eq!(
            tokens.mint_until(TokenScope::Correlation, "turn-42", at),
            "1800000000.auXFSsG8kGnN5y7FI1h8QRHGOJYphpXqKl3o8yogda0"
        );
    }

    #[test]
    fn a_token_stops_at_its_expiry_and_its_expiry_cannot_be_edited() {
        let tokens = JobTokens::new(KEY);
        let id = JobId::random().to_string();
        let token = tokens.mint_until(TokenScope::JobRead, &id, 1_000);
        assert!(tokens.verify_at(TokenScope::JobRead, &id, &token, 999));
        assert!(!tokens.verify_at(TokenScope::JobRead, &id, &token, 1_000));
        assert!(!tokens.verify(TokenScope::JobRead, &id, &token));
        let (_, mac) = token.split_once('.').unwrap();
        for edited in ["1001", "01000", "+1000", "99999999999", "", "1000 "] {
            let forged = format!("{edited}.{mac}");
            assert!(
                !tokens.verify_at(TokenScope::JobRead, &id, &forged, 0),
                "{forged}"
            );
        }
        // A token of the first format (no expiry) opens nothing.
        let old = &token[token.find('.').unwrap() + 1..];
        assert!(!tokens.verify_at(TokenScope::JobRead, &id, old, 0));
    }

    #[test]
    fn the_first_key_mints_and_every_key_verifies() {
        let old = JobTokens::new(b"the old secret, the old secret!!");
        let rotated =
            JobTokens::with_keys(&[KEY, b"the old secret, the old secret!!"], DEFAULT_TTL);
        let id = JobId::random();
        let minted_before = old.job(id);
        assert!(rotated.verify(TokenScope::JobRead, &id.to_string(), &minted_before));
        let minted_after = rotated.job(id);
        assert!(JobTokens::new(KEY).verify(TokenScope::JobRead, &id.to_string(), &minted_after));
        assert!(!old.verify(TokenScope::JobRead, &id.to_string(), &minted_after));
        let old_removed = JobTokens::new(KEY);
        assert!(!old_removed.verify(TokenScope::JobRead, &id.to_string(), &minted_before));
    }
}
