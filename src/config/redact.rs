//! The config's secret-bearing fields, handed to the one redaction ([`crate::redact`]) at
//! start: every text the bridge prints is then shown without them.

use super::Config;

pub use crate::redact::url as redact_url;

impl Config {
    /// Register every secret this config holds: upstream URLs (userinfo, query), headers and
    /// env values; the Redis URL; MCP tokens and job secrets (resolved: call after
    /// validation). Issuer and JWKS URLs are public and stay as they are.
    pub fn register_secrets(&self) {
        for upstream in &self.upstreams {
            if let Some(url) = &upstream.url {
                crate::redact::register_url(url);
            }
            for value in upstream.headers.values().chain(upstream.env.values()) {
                crate::redact::register_value(value);
            }
        }
        crate::redact::register_url(&self.store.redis_url);
        let tokens = self.auth.mcp_tokens.iter().map(|t| &t.token);
        let job_secrets = self.auth.job_secret.iter().flat_map(|s| s.iter());
        for secret in tokens.chain(job_secrets) {
            crate::redact::register_value(secret.value());
        }
    }
}
