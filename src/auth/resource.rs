//! The bridge as an OAuth 2.1 protected resource (RFC 9728, as the MCP authorization spec
//! asks): the metadata document that tells an MCP client which authorization servers issue
//! tokens for `/mcp` and which scopes to ask for, and the URL a 401 points it to.

use serde_json::{Value, json};

use crate::config::Config;

/// Where the bridge serves its metadata: the plain well-known path, and the one with `/mcp`
/// appended (RFC 9728 §3.1 inserts the well-known segment before the resource's path; the
/// MCP spec's clients ask there first).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
pub const METADATA_PATH_MCP: &str = "/.well-known/oauth-protected-resource/mcp";

/// What `bearer_methods_supported` says: only the `Authorization` header (a token in a query
/// string ends up in logs).
const BEARER_METHODS: [&str; 1] = ["header"];

#[derive(Debug, Clone)]
pub struct ProtectedResource {
    /// The resource identifier (`auth.resource`, else `server.public_url` + `/mcp`).
    pub resource: String,
    /// The public URL of the metadata, for `resource_metadata` in `WWW-Authenticate`.
    pub metadata_url: String,
    /// The document served at both paths.
    pub document: Value,
}

impl ProtectedResource {
    /// `None` when no issuer is configured: with static tokens alone there is nowhere to get a
    /// token, and an advertised metadata document would send clients looking.
    pub fn from_config(config: &Config) -> Option<Self> {
        let auth = &config.auth;
        if auth.issuers.is_empty() {
            return None;
        }
        let public = config.server.public_url.trim_end_matches('/');
        let resource = auth
            .resource
            .clone()
            .unwrap_or_else(|| format!("{public}/mcp"));
        let metadata_url = match url::Url::parse(public) {
            Ok(url) => format!(
                "{}{METADATA_PATH}{}/mcp",
                url.origin().ascii_serialization(),
                url.path().trim_end_matches('/')
            ),
            Err(_) => format!("{public}{METADATA_PATH_MCP}"),
        };
        let servers: Vec<&str> = if auth.authorization_servers.is_empty() {
            auth.issuers.iter().map(|i| i.issuer.as_str()).collect()
        } else {
            auth.authorization_servers
                .iter()
                .map(String::as_str)
                .collect()
        };
        let mut document = json!({
            "resource": resource,
            "authorization_servers": servers,
            "bearer_methods_supported": BEARER_METHODS,
            "resource_name": "mcp-progress-bridge",
        });
        if !auth.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(auth.scopes_supported);
        }
        Some(Self {
            resource,
            metadata_url,
            document,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IssuerConfig;

    fn config(public_url: &str) -> Config {
        let mut c = Config::default_for_tests();
        c.server.public_url = public_url.into();
        c.auth.issuers = vec![IssuerConfig {
            issuer: "https://login.microsoftonline.com/t/v2.0".into(),
            jwks_url: None,
            audiences: vec!["api://bridge".into()],
            algorithms: vec!["RS256".into()],
            leeway_secs: 60,
            subject_claim: "oid".into(),
            role_claims: vec!["roles".into()],
            check_token_type: true,
        }];
        c.auth.scopes_supported = vec!["api://bridge/.default".into()];
        c
    }

    #[test]
    fn names_the_resource_its_servers_and_where_it_is() {
        let r = ProtectedResource::from_config(&config("https://bridge.example.com/")).unwrap();
        assert_eq!(r.resource, "https://bridge.example.com/mcp");
        assert_eq!(
            r.metadata_url,
            "https://bridge.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            r.document["authorization_servers"][0],
            "https://login.microsoftonline.com/t/v2.0"
        );
        assert_eq!(r.document["scopes_supported"][0], "api://bridge/.default");
        assert_eq!(r.document["bearer_methods_supported"][0], "header");
        // Behind a path prefix, the well-known segment goes before the path (RFC 9728 §3.1).
        let r = ProtectedResource::from_config(&config("https://h.example/bridge")).unwrap();
        assert_eq!(
            r.metadata_url,
            "https://h.example/.well-known/oauth-protected-resource/bridge/mcp"
        );
        assert!(ProtectedResource::from_config(&Config::default_for_tests()).is_none());
    }
}
