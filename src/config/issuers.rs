//! `[[auth.issuers]]` and `[auth.jwt]`: the OAuth 2.1 / OpenID Connect issuers whose JWT access
//! tokens `/mcp` accepts, and the bounds on what the bridge fetches from them and reads from a
//! client. Checked here so a bad issuer stops the bridge at start, naming the key.

use serde::Deserialize;

use super::{
    ConfigError,
    bounds::{self, Bound, MIB},
};

/// JWS algorithms an issuer may be allowed: asymmetric ones only. `none` and HMAC (`HS256`…)
/// are refused: an HMAC "key" taken from a public JWKS would let anyone who reads the JWKS
/// sign tokens (the algorithm-confusion attack).
pub const JWT_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// One issuer of JWT access tokens.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The exact `iss` of its tokens (Entra ID v1: `https://sts.windows.net/{tenant}/`, v2:
    /// `https://login.microsoftonline.com/{tenant}/v2.0`).
    pub issuer: String,
    /// Where its signing keys are (JWKS). Unset: found by OpenID Connect discovery,
    /// `{issuer}/.well-known/openid-configuration`'s `jwks_uri`.
    pub jwks_url: Option<String>,
    /// Accepted `aud` values: a token must name one of them (Entra ID: the app ID URI for v1
    /// tokens, the client ID for v2 tokens).
    pub audiences: Vec<String>,
    /// Accepted `alg` values, from [`JWT_ALGORITHMS`].
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway_secs")]
    pub leeway_secs: u64,
    /// The claim that names the caller (with the issuer, the job owner): `sub`, or `oid` for
    /// Entra ID (the object ID, the same for a user or identity across applications).
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// Claims whose values are roles or groups for `auth.admin` and `auth.policies` `roles`.
    #[serde(default = "default_role_claims")]
    pub role_claims: Vec<String>,
    /// Refuse tokens of this issuer that are not access tokens: a `typ` other than `at+jwt`
    /// (RFC 9068) or `JWT`, the claims of an OpenID Connect ID token (`nonce`, `at_hash`,
    /// `c_hash`), and for Entra ID a token that names no client (`azp`, `appid`) or grants
    /// nothing (`scp`, `roles`), as its ID tokens do. `false` only for an issuer whose tokens
    /// for this audience are all access tokens but do not look it.
    #[serde(default = "default_check_token_type")]
    pub check_token_type: bool,
}

fn default_check_token_type() -> bool {
    true
}

fn default_algorithms() -> Vec<String> {
    ["RS256", "PS256", "ES256"].map(String::from).to_vec()
}

fn default_leeway_secs() -> u64 {
    60
}

fn default_subject_claim() -> String {
    "sub".into()
}

fn default_role_claims() -> Vec<String> {
    vec!["roles".into(), "groups".into()]
}

/// `[auth.jwt]`: bounds on tokens and on key fetching. Every one has a metric or a log line
/// when it is hit.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct JwtLimits {
    /// Longest bearer token read, in bytes (401 `too_large` past it). Entra ID tokens with
    /// many groups run to a few KiB.
    pub max_token_bytes: usize,
    /// Largest JWKS or discovery document read, in bytes.
    pub jwks_max_bytes: usize,
    /// Keys kept from one JWKS; the rest are ignored (and logged).
    pub jwks_max_keys: usize,
    /// Longest wait for the issuer's discovery document or JWKS, in milliseconds.
    pub jwks_timeout_ms: u64,
    /// Shortest time between two fetches of one issuer's keys: a flood of tokens with unknown
    /// key IDs causes at most one fetch per this many seconds.
    pub jwks_refresh_min_secs: u64,
    /// Keys older than this are fetched again (a key the issuer removed stops working); while
    /// the issuer is unreachable the keys already fetched go on verifying.
    pub jwks_max_age_secs: u64,
}

impl Default for JwtLimits {
    fn default() -> Self {
        Self {
            max_token_bytes: 16 * 1024,
            jwks_max_bytes: 256 * 1024,
            jwks_max_keys: 64,
            jwks_timeout_ms: 5000,
            jwks_refresh_min_secs: 30,
            jwks_max_age_secs: 3600,
        }
    }
}

/// A URL the bridge fetches keys from, or names as an issuer: `https://`, or `http://` on a
/// loopback host only (a test IdP), since keys fetched in the clear could be swapped. Checked
/// for the configured ones at validation, and for a `jwks_uri` found by discovery when found.
pub fn check_key_url(url: &str) -> Result<(), String> {
    let parsed =
        url::Url::parse(url).map_err(|e| format!("{url:?} is not an absolute URL ({e})"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "{url:?} must be an https:// URL (http:// only on a loopback address): signing keys \
             fetched in the clear could be replaced on the way"
        )),
    }
}

pub(super) fn validate(
    issuers: &[IssuerConfig],
    limits: &JwtLimits,
    err: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for (i, issuer) in issuers.iter().enumerate() {
        let key = |field: &str| format!("auth.issuers[{i}].{field}");
        if !seen.insert(issuer.issuer.as_str()) {
            return Err(err(
                &key("issuer"),
                format!("{:?} is listed twice; merge the two entries", issuer.issuer),
            ));
        }
        check_issuer(issuer).map_err(|(field, m)| err(&key(field), m))?;
    }
    #[rustfmt::skip]
    let bounds = [
        Bound::new("max_token_bytes", limits.max_token_bytes, 1024..=MIB),
        Bound::new("jwks_max_bytes", limits.jwks_max_bytes, 1024..=16 * MIB),
        Bound::new("jwks_max_keys", limits.jwks_max_keys, 1..=10_000),
        Bound::new("jwks_timeout_ms", limits.jwks_timeout_ms, 100..=120_000),
        Bound::new("jwks_refresh_min_secs", limits.jwks_refresh_min_secs, 0..=86_400),
        Bound::new("jwks_max_age_secs", limits.jwks_max_age_secs, 1..=7 * 86_400),
    ];
    bounds::check("auth.jwt", bounds).map_err(|(key, message)| err(&key, message))
}

/// One `[[auth.issuers]]` entry, as `(field, message)`: key URLs, audiences, algorithms, the
/// subject claim and the clock leeway.
fn check_issuer(issuer: &IssuerConfig) -> Result<(), (&'static str, String)> {
    check_key_url(&issuer.issuer).map_err(|m| ("issuer", m))?;
    if issuer.issuer.contains(' ') {
        return Err(("issuer", "an issuer has no spaces".into()));
    }
    if let Some(url) = &issuer.jwks_url {
        check_key_url(url).map_err(|m| ("jwks_url", m))?;
    }
    if issuer.audiences.is_empty() || issuer.audiences.iter().any(String::is_empty) {
        return Err((
            "audiences",
            "list the `aud` values this bridge accepts (for example its resource URL, or an \
             Entra ID app ID URI and client ID); a token for another audience must not work \
             here"
                .into(),
        ));
    }
    check_algorithms(&issuer.algorithms).map_err(|m| ("algorithms", m))?;
    if issuer.subject_claim.is_empty() {
        return Err((
            "subject_claim",
            "name the claim that identifies the caller: \"sub\" or \"oid\"".into(),
        ));
    }
    if issuer.leeway_secs > 600 {
        return Err((
            "leeway_secs",
            format!(
                "{} seconds of clock skew would keep expired tokens working; use at most 600",
                issuer.leeway_secs
            ),
        ));
    }
    Ok(())
}

/// At least one algorithm, each an asymmetric one of [`JWT_ALGORITHMS`].
fn check_algorithms(algorithms: &[String]) -> Result<(), String> {
    if algorithms.is_empty() {
        return Err(format!("name at least one of {JWT_ALGORITHMS:?}"));
    }
    for alg in algorithms {
        if !JWT_ALGORITHMS.contains(&alg.as_str()) {
            let why = if alg.starts_with("HS") || alg.eq_ignore_ascii_case("none") {
                " (symmetric and unsigned tokens are refused: anyone who can read the key \
                 set could make one)"
            } else {
                ""
            };
            return Err(format!(
                "{alg:?} is not accepted{why}; use some of {JWT_ALGORITHMS:?}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_urls_are_https_or_loopback() {
        for ok in [
            "https://login.microsoftonline.com/t/v2.0",
            "http://127.0.0.1:9000/jwks",
            "http://localhost:1/x",
            "http://[::1]:2/",
        ] {
            assert!(check_key_url(ok).is_ok(), "{ok}");
        }
        for bad in ["http://idp.example/", "ftp://127.0.0.1/", "login.example"] {
            assert!(check_key_url(bad).is_err(), "{bad}");
        }
    }
}
