//! JWT access tokens of the configured issuers (`auth.issuers`), verified with the
//! `jsonwebtoken` crate.
//!
//! The order matters. The header and the payload's `iss` are read first, unverified, only to
//! choose the issuer and its key; nothing else of an unverified token is believed. The
//! algorithm must be one the issuer allows, and of the key's own family (and the key's `alg`
//! when its JWK names one): `jsonwebtoken` refuses a key of another family too, so an RSA
//! public key can never be used as an HMAC secret (the algorithm-confusion attack), and
//! `none` is not an algorithm it knows. Then the signature, then `exp`/`nbf` (with the
//! issuer's leeway), `iss` and `aud`, then that it is an access token and not an ID token
//! (or another JWT) issued to the same audience ([`is_access_token`]), then the subject claim.

use std::{collections::HashMap, str::FromStr, sync::Arc};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, Validation, errors::ErrorKind};
use prometheus::IntCounterVec;
use serde_json::{Map, Value};

use super::{
    Claims, Rejection,
    jwks::{KeyCache, Lookup, VerifyingKey, http_client},
};
use crate::config::{IssuerConfig, JwtLimits};

/// A verified token's caller.
#[derive(Debug, Clone)]
pub struct Verified {
    pub issuer: String,
    pub subject: String,
    pub claims: Claims,
}

struct Issuer {
    config: IssuerConfig,
    algorithms: Vec<Algorithm>,
    keys: KeyCache,
}

/// Every configured issuer, by its `iss`.
pub struct JwtVerifier {
    issuers: HashMap<String, Arc<Issuer>>,
}

impl JwtVerifier {
    /// `None` when no issuer is configured. `fetches` counts key fetches by outcome.
    pub fn new(
        issuers: &[IssuerConfig],
        limits: &JwtLimits,
        fetches: IntCounterVec,
    ) -> Option<Self> {
        if issuers.is_empty() {
            return None;
        }
        let http = http_client(limits);
        let issuers = issuers
            .iter()
            .map(|config| {
                let algorithms = config
                    .algorithms
                    .iter()
                    .filter_map(|a| Algorithm::from_str(a).ok())
                    .collect();
                let keys = KeyCache::new(
                    &config.issuer,
                    config.jwks_url.as_deref(),
                    http.clone(),
                    limits.clone(),
                    fetches.clone(),
                );
                let issuer = Issuer {
                    config: config.clone(),
                    algorithms,
                    keys,
                };
                (config.issuer.clone(), Arc::new(issuer))
            })
            .collect();
        Some(Self { issuers })
    }

    pub fn issuers(&self) -> impl Iterator<Item = &str> {
        self.issuers.keys().map(String::as_str)
    }

    /// Whether `token` has the shape of a JWS compact serialization (three segments).
    pub fn looks_like_jwt(token: &str) -> bool {
        token.bytes().filter(|&b| b == b'.').count() == 2
    }

    pub async fn verify(&self, token: &str) -> Result<Verified, Rejection> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Rejection::Malformed);
        };
        let header = decode_segment(header)?;
        let payload = decode_segment(payload)?;
        let alg = header.get("alg").and_then(Value::as_str);
        let kid = match header.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.as_str()),
            Some(_) => return Err(Rejection::Malformed),
        };
        let issuer = match payload.get("iss") {
            Some(Value::String(iss)) => self.issuers.get(iss).ok_or(Rejection::WrongIssuer)?,
            Some(_) => return Err(Rejection::Malformed),
            None => return Err(Rejection::MissingClaim),
        };
        let alg = alg
            .and_then(|a| Algorithm::from_str(a).ok())
            .filter(|a| issuer.algorithms.contains(a))
            .ok_or(Rejection::Algorithm)?;
        let keys = match issuer.keys.lookup(kid).await {
            Lookup::Found(keys) => keys,
            Lookup::Unknown => return Err(Rejection::UnknownKey),
            Lookup::Unavailable => return Err(Rejection::KeysUnavailable),
        };
        let validation = issuer.validation(alg);
        let mut last = Rejection::UnknownKey;
        for key in keys {
            match decode(token, &key, alg, &validation) {
                Ok(claims) => return issuer.verified(&header, claims),
                // Another key (of a token without `kid`) may still verify it.
                Err(Rejection::BadSignature | Rejection::Algorithm) if kid.is_none() => {
                    last = Rejection::BadSignature;
                }
                Err(rejection) => return Err(rejection),
            }
        }
        Err(last)
    }
}

/// A base64url JSON object segment (header or payload).
fn decode_segment(segment: &str) -> Result<Map<String, Value>, Rejection> {
    let bytes = URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .map_err(|_| Rejection::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| Rejection::Malformed)
}

fn decode(
    token: &str,
    key: &VerifyingKey,
    alg: Algorithm,
    validation: &Validation,
) -> Result<Map<String, Value>, Rejection> {
    if key.alg.is_some_and(|a| a != alg) || key.key.family() != alg.family() {
        return Err(Rejection::Algorithm);
    }
    jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation)
        .map(|data| data.claims)
        .map_err(|e| match e.kind() {
            ErrorKind::InvalidSignature => Rejection::BadSignature,
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => Rejection::Algorithm,
            ErrorKind::ExpiredSignature => Rejection::Expired,
            ErrorKind::ImmatureSignature => Rejection::NotYetValid,
            ErrorKind::InvalidAudience => Rejection::WrongAudience,
            ErrorKind::InvalidIssuer => Rejection::WrongIssuer,
            ErrorKind::MissingRequiredClaim(_) => Rejection::MissingClaim,
            _ => Rejection::Malformed,
        })
}

impl Issuer {
    fn validation(&self, alg: Algorithm) -> Validation {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&self.config.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.config.leeway_secs;
        validation
    }

    fn verified(
        &self,
        header: &Map<String, Value>,
        claims: Map<String, Value>,
    ) -> Result<Verified, Rejection> {
        if self.config.check_token_type
            && !is_access_token(header, &claims, is_entra(&self.config.issuer))
        {
            return Err(Rejection::NotAccessToken);
        }
        let subject = match claims.get(&self.config.subject_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) | None => return Err(Rejection::MissingClaim),
            Some(_) => return Err(Rejection::Malformed),
        };
        let roles = self
            .config
            .role_claims
            .iter()
            .flat_map(|claim| strings(claims.get(claim)))
            .collect();
        // `scp` (Entra ID) and `scope` (RFC 8693, RFC 9068): space-separated, or a list.
        let scopes = ["scp", "scope"]
            .iter()
            .flat_map(|claim| strings(claims.get(*claim)))
            .flat_map(|s| {
                s.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        Ok(Verified {
            issuer: self.config.issuer.clone(),
            subject: subject.clone(),
            claims: Claims {
                token_name: None,
                issuer: Some(self.config.issuer.clone()),
                subject: Some(subject),
                roles,
                scopes,
            },
        })
    }
}

/// `typ` values of an access token: RFC 9068's, and the plain `JWT` most issuers set (Entra ID
/// on access and ID tokens alike, hence the claims below).
const ACCESS_TOKEN_TYPES: [&str; 3] = ["at+jwt", "application/at+jwt", "jwt"];
/// Claims only an OpenID Connect ID token carries (OIDC Core 3.1.3.6, 3.3.2.11, 2).
const ID_TOKEN_CLAIMS: [&str; 3] = ["nonce", "at_hash", "c_hash"];
/// Hosts of Entra ID's token issuers (v1 `sts.*`, v2 `login.*`), public and national clouds.
const ENTRA_HOSTS: [&str; 6] = [
    "login.microsoftonline.com",
    "sts.windows.net",
    "login.microsoftonline.us",
    "login.chinacloudapi.cn",
    "login.partner.microsoftonline.cn",
    "sts.chinacloudapi.cn",
];

/// Whether `issuer` is Entra ID's.
fn is_entra(issuer: &str) -> bool {
    url::Url::parse(issuer)
        .ok()
        .and_then(|u| u.host_str().map(|h| ENTRA_HOSTS.contains(&h)))
        .unwrap_or(false)
}

/// Whether a verified token is an access token. An ID token issued to the bridge's own client
/// ID has the bridge as its audience too: with Entra ID v2 and `audiences = [client-id]`, a
/// user's ID token would otherwise open `/mcp`. Refused: a `typ` of another kind of JWT, the
/// claims of an ID token; for Entra ID, a token without the client it was issued to (`azp`,
/// v2; `appid`, v1) or without what it grants (`scp`, `roles`): its access tokens have both,
/// its ID tokens no client claim.
fn is_access_token(header: &Map<String, Value>, claims: &Map<String, Value>, entra: bool) -> bool {
    let typ_ok = match header.get("typ") {
        None => true,
        Some(Value::String(typ)) => ACCESS_TOKEN_TYPES.contains(&typ.to_ascii_lowercase().as_str()),
        Some(_) => false,
    };
    let id_token = ID_TOKEN_CLAIMS.iter().any(|c| claims.contains_key(*c));
    let entra_ok = !entra
        || (["azp", "appid"].iter().any(|c| claims.contains_key(*c))
            && ["scp", "roles"].iter().any(|c| claims.contains_key(*c)));
    typ_ok && !id_token && entra_ok
}

/// A claim that holds a string or a list of strings.
fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn access_tokens_are_told_from_id_tokens() {
        let jwt = map(json!({"typ": "JWT"}));
        let at = map(json!({"typ": "at+jwt"}));
        let none = map(json!({}));
        let plain = map(json!({"sub": "u", "aud": "a"}));
        assert!(is_access_token(&at, &plain, false));
        assert!(is_access_token(&none, &plain, false));
        assert!(!is_access_token(
            &map(json!({"typ": "logout+jwt"})),
            &plain,
            false
        ));
        assert!(!is_access_token(
            &jwt,
            &map(json!({"sub": "u", "nonce": "n"})),
            false
        ));
        assert!(!is_access_token(
            &jwt,
            &map(json!({"sub": "u", "at_hash": "h"})),
            false
        ));
        // Entra ID v2: an access token names its client and what it grants.
        let access = map(json!({"ver": "2.0", "azp": "c", "scp": "mcp.call", "oid": "o"}));
        let app = map(json!({"ver": "1.0", "appid": "c", "roles": ["Bridge.Admin"]}));
        let id_token =
            map(json!({"ver": "2.0", "oid": "o", "roles": ["Bridge.Admin"], "aio": "x"}));
        assert!(is_access_token(&jwt, &access, true));
        assert!(is_access_token(&jwt, &app, true));
        assert!(!is_access_token(&jwt, &id_token, true));
        assert!(is_entra("https://login.microsoftonline.com/t/v2.0"));
        assert!(is_entra("https://sts.windows.net/t/"));
        assert!(!is_entra("https://idp.example/"));
    }
}
