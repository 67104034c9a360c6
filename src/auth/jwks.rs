//! One issuer's signing keys (JWKS), fetched, cached, and fetched again when needed.
//!
//! - A cached `kid` is verified from the cache: an unreachable issuer does not stop it.
//! - An unknown `kid` fetches the keys again, at most once per
//!   `auth.jwt.jwks_refresh_min_secs`; requests arriving meanwhile wait for that one fetch.
//! - Keys older than `auth.jwt.jwks_max_age_secs` are fetched again by the next request that
//!   needs one (a withdrawn key stops working); a failed fetch keeps the cache.
//! - Every fetch is bounded (`jwks_timeout_ms`, `jwks_max_bytes`, `jwks_max_keys`); only
//!   asymmetric signature keys are kept (an `oct` key in a public JWKS is ignored).

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use futures::StreamExt;
use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{AlgorithmParameters, Jwk, PublicKeyUse},
};
use prometheus::IntCounterVec;
use serde::Deserialize;

use crate::config::{JwtLimits, check_key_url};

/// A key a token may be verified with.
pub struct VerifyingKey {
    pub key: DecodingKey,
    /// The JWK's own `alg`, when it names one: then only that algorithm may use the key.
    pub alg: Option<Algorithm>,
}

#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("cannot reach {url}: {source}")]
    Fetch { url: String, source: reqwest::Error },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url} sent more than {limit} bytes (auth.jwt.jwks_max_bytes)")]
    TooLarge { url: String, limit: usize },
    #[error("{url} did not send a JSON {what}: {source}")]
    Parse {
        url: String,
        what: &'static str,
        source: serde_json::Error,
    },
    #[error(
        "the discovery document names issuer {found:?}, not {expected:?}; set jwks_url for this issuer"
    )]
    IssuerMismatch { expected: String, found: String },
    #[error("{url} has no signature key the bridge can use (RSA, EC or Ed25519)")]
    NoKeys { url: String },
    #[error("the discovery document's jwks_uri is refused: {0}; set jwks_url for this issuer")]
    InsecureJwksUri(String),
}

#[derive(Default)]
struct Cached {
    by_kid: HashMap<String, Arc<VerifyingKey>>,
    /// Keys without a `kid`, tried for tokens without one.
    unnamed: Vec<Arc<VerifyingKey>>,
    fetched_at: Option<Instant>,
}

#[derive(Default)]
struct Refresh {
    last_attempt: Option<Instant>,
    /// Found by discovery, when not configured.
    jwks_url: Option<String>,
}

/// What a lookup found.
pub enum Lookup {
    /// Keys to try (one for a token with a `kid`).
    Found(Vec<Arc<VerifyingKey>>),
    /// The issuer's keys are known, but none fits.
    Unknown,
    /// No key was ever fetched, and fetching failed.
    Unavailable,
}

pub struct KeyCache {
    issuer: String,
    configured_url: Option<String>,
    http: reqwest::Client,
    limits: JwtLimits,
    cached: RwLock<Cached>,
    /// Held for the duration of a fetch: one fetch at a time per issuer.
    refresh: tokio::sync::Mutex<Refresh>,
    /// `bridge_jwks_fetches_total{outcome}`.
    fetches: IntCounterVec,
}

impl KeyCache {
    pub fn new(
        issuer: &str,
        jwks_url: Option<&str>,
        http: reqwest::Client,
        limits: JwtLimits,
        fetches: IntCounterVec,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            configured_url: jwks_url.map(str::to_string),
            http,
            limits,
            cached: RwLock::new(Cached::default()),
            refresh: tokio::sync::Mutex::new(Refresh::default()),
            fetches,
        }
    }

    /// The keys for a token with this `kid`, fetching the issuer's keys when they are unknown,
    /// missing the `kid`, or old (each within the limits of the module doc).
    pub async fn lookup(&self, kid: Option<&str>) -> Lookup {
        let (found, fresh) = self.cached_keys(kid);
        if !found.is_empty() {
            if fresh {
                return Lookup::Found(found);
            }
            // Old keys: fetch again if nobody else is (this request waits for it); a key the
            // issuer has withdrawn then stops working.
            if let Ok(refresh) = self.refresh.try_lock() {
                self.refresh_locked(refresh).await;
                let (found, _) = self.cached_keys(kid);
                return if found.is_empty() {
                    Lookup::Unknown
                } else {
                    Lookup::Found(found)
                };
            }
            return Lookup::Found(found);
        }
        let refresh = self.refresh.lock().await;
        self.refresh_locked(refresh).await;
        let (found, _) = self.cached_keys(kid);
        if !found.is_empty() {
            Lookup::Found(found)
        } else if self.read().fetched_at.is_none() {
            Lookup::Unavailable
        } else {
            Lookup::Unknown
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cached> {
        self.cached.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached keys that fit `kid`, and whether they are younger than the maximum age.
    fn cached_keys(&self, kid: Option<&str>) -> (Vec<Arc<VerifyingKey>>, bool) {
        let cached = self.read();
        let max_age = Duration::from_secs(self.limits.jwks_max_age_secs);
        let fresh = cached.fetched_at.is_some_and(|at| at.elapsed() < max_age);
        let found = match kid {
            Some(kid) => cached.by_kid.get(kid).cloned().into_iter().collect(),
            None => cached.unnamed.clone(),
        };
        (found, fresh)
    }

    /// Fetch the keys unless the last attempt is too recent (another request fetched them
    /// while this one waited, or a flood of unknown key IDs).
    async fn refresh_locked(&self, mut refresh: tokio::sync::MutexGuard<'_, Refresh>) {
        let min = Duration::from_secs(self.limits.jwks_refresh_min_secs);
        if refresh.last_attempt.is_some_and(|at| at.elapsed() < min) {
            return;
        }
        refresh.last_attempt = Some(Instant::now());
        match self.fetch(&mut refresh).await {
            Ok(fresh) => {
                self.fetches.with_label_values(&["ok"]).inc();
                tracing::info!(issuer = %self.issuer, keys = fresh.by_kid.len() + fresh.unnamed.len(), "fetched the issuer's signing keys");
                *self.cached.write().unwrap_or_else(PoisonError::into_inner) = fresh;
            }
            Err(error) => {
                self.fetches.with_label_values(&["error"]).inc();
                tracing::warn!(issuer = %self.issuer, %error, "could not fetch the issuer's signing keys; the cached ones (if any) go on verifying");
            }
        }
    }

    async fn fetch(&self, refresh: &mut Refresh) -> Result<Cached, JwksError> {
        let url = match (&self.configured_url, &refresh.jwks_url) {
            (Some(url), _) | (None, Some(url)) => url.clone(),
            (None, None) => {
                let url = self.discover().await?;
                refresh.jwks_url = Some(url.clone());
                url
            }
        };
        let body = self.get(&url).await?;
        #[derive(Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let document: Document =
            serde_json::from_slice(&body).map_err(|source| JwksError::Parse {
                url: url.clone(),
                what: "key set",
                source,
            })?;
        if document.keys.len() > self.limits.jwks_max_keys {
            tracing::warn!(issuer = %self.issuer, keys = document.keys.len(), kept = self.limits.jwks_max_keys, "the key set has more keys than auth.jwt.jwks_max_keys; the rest are ignored");
        }
        let mut cached = Cached {
            fetched_at: Some(Instant::now()),
            ..Cached::default()
        };
        for value in document.keys.into_iter().take(self.limits.jwks_max_keys) {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
                continue;
            };
            let Some(key) = verifying_key(&jwk) else {
                continue;
            };
            match jwk.common.key_id {
                Some(kid) => {
                    cached.by_kid.insert(kid, Arc::new(key));
                }
                None => cached.unnamed.push(Arc::new(key)),
            }
        }
        if cached.by_kid.is_empty() && cached.unnamed.is_empty() {
            return Err(JwksError::NoKeys { url });
        }
        Ok(cached)
    }

    /// The JWKS URL from the issuer's OpenID Connect discovery document.
    async fn discover(&self) -> Result<String, JwksError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let body = self.get(&url).await?;
        #[derive(Deserialize)]
        struct Discovery {
            issuer: String,
            jwks_uri: String,
        }
        let found: Discovery =
            serde_json::from_slice(&body).map_err(|source| JwksError::Parse {
                url,
                what: "discovery document with issuer and jwks_uri",
                source,
            })?;
        if found.issuer != self.issuer {
            return Err(JwksError::IssuerMismatch {
                expected: self.issuer.clone(),
                found: found.issuer,
            });
        }
        // The same rule as a configured jwks_url: a document that names an http:// key URL
        // elsewhere would have the keys fetched in the clear.
        check_key_url(&found.jwks_uri).map_err(JwksError::InsecureJwksUri)?;
        Ok(found.jwks_uri)
    }

    /// GET `url`, reading at most `jwks_max_bytes`, within `jwks_timeout_ms` (the client's).
    async fn get(&self, url: &str) -> Result<Vec<u8>, JwksError> {
        let fetch = |source| JwksError::Fetch {
            url: url.into(),
            source,
        };
        let response = self.http.get(url).send().await.map_err(fetch)?;
        if !response.status().is_success() {
            return Err(JwksError::Status {
                url: url.into(),
                status: response.status().as_u16(),
            });
        }
        let limit = self.limits.jwks_max_bytes;
        let too_large = || JwksError::TooLarge {
            url: url.into(),
            limit,
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(fetch)?;
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// The key of a JWK, if it is an asymmetric signature key the bridge can use.
fn verifying_key(jwk: &Jwk) -> Option<VerifyingKey> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
        return None;
    }
    let alg = match jwk.common.key_algorithm {
        // A key for something else than signatures (RSA-OAEP): not for tokens.
        Some(alg) => Some(Algorithm::try_from(alg).ok()?),
        None => None,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerifyingKey { key, alg })
}

/// The HTTP client for keys: bounded in time, no redirects (a key URL that moves is
/// configured anew, not followed).
pub fn http_client(limits: &JwtLimits) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(limits.jwks_timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_and_encryption_keys_are_never_kept() {
        let oct: Jwk = serde_json::from_value(serde_json::json!({
            "kty": "oct", "kid": "h", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"
        }))
        .unwrap();
        assert!(verifying_key(&oct).is_none());
        let rsa = serde_json::json!({
            "kty": "RSA", "kid": "r", "e": "AQAB",
            "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw",
        });
        assert!(verifying_key(&serde_json::from_value(rsa.clone()).unwrap()).is_some());
        let mut enc = rsa.clone();
        enc["use"] = "enc".into();
        assert!(verifying_key(&serde_json::from_value(enc).unwrap()).is_none());
        let mut oaep = rsa;
        oaep["alg"] = "RSA-OAEP".into();
        assert!(verifying_key(&serde_json::from_value(oaep).unwrap()).is_none());
    }
}
