//! Which `Host` and `Origin` values `/mcp` accepts (DNS-rebinding protection, checked by rmcp's
//! Streamable HTTP service), and which origins may read the job endpoints cross-origin (CORS).
//!
//! `/mcp` always accepts the bridge's own origin, the one of `server.public_url`: the jobs page
//! the bridge serves calls `/mcp` from it. When that URL names a loopback address, the other
//! loopback names with the same port count as the bridge's own too (a browser on
//! `http://localhost:8080` reaches `http://127.0.0.1:8080`).

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, header};
use rmcp::transport::StreamableHttpServerConfig;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::ServerConfig;

const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];
/// How long a browser may cache a CORS preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The origins of `public_url`: itself, and its loopback aliases.
pub fn own_origins(public_url: &str) -> Vec<String> {
    let Ok(url) = url::Url::parse(public_url) else {
        return Vec::new();
    };
    let Some(host) = url.host_str() else {
        return Vec::new();
    };
    let scheme = url.scheme();
    let port = url.port_or_known_default().unwrap_or(80);
    let is_loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    let hosts: Vec<&str> = if is_loopback {
        LOOPBACK_NAMES.to_vec()
    } else {
        vec![host]
    };
    hosts
        .into_iter()
        .map(|h| format!("{scheme}://{h}:{port}"))
        .collect()
}

/// rmcp's Host and Origin checks and body limit, from the config.
pub fn mcp_transport(
    mut config: StreamableHttpServerConfig,
    server: &ServerConfig,
    max_request_bytes: usize,
) -> StreamableHttpServerConfig {
    config = if server.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        // The bridge is reached at its public URL: its host is always allowed.
        let mut hosts = server.allowed_hosts.clone();
        if let Ok(url) = url::Url::parse(&server.public_url)
            && let Some(host) = url.host_str()
        {
            hosts.push(host.to_string());
        }
        config.with_allowed_hosts(hosts)
    };
    config = if server.allowed_origins.iter().any(|o| o == "*") {
        config.disable_allowed_origins()
    } else {
        let mut origins = own_origins(&server.public_url);
        origins.extend(server.allowed_origins.iter().cloned());
        config
            .with_allowed_origins(origins)
            .enforce_origin_validation()
    };
    config.with_max_request_body_bytes(max_request_bytes)
}

/// CORS for the job and correlation endpoints, when `server.cors_origins` lists any.
pub fn cors(server: &ServerConfig) -> Option<CorsLayer> {
    if server.cors_origins.is_empty() {
        return None;
    }
    let origin = if server.cors_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            server
                .cors_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
            ])
            // A page on another origin may read how long a refusal asks it to wait.
            .expose_headers([header::RETRY_AFTER])
            .max_age(PREFLIGHT_MAX_AGE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_origins_of_loopback_and_public_urls() {
        assert_eq!(
            own_origins("http://127.0.0.1:8080"),
            vec![
                "http://127.0.0.1:8080",
                "http://localhost:8080",
                "http://[::1]:8080"
            ]
        );
        assert_eq!(
            own_origins("https://bridge.example.com"),
            vec!["https://bridge.example.com:443"]
        );
        assert_eq!(
            own_origins("https://bridge.example.com:8443/base"),
            vec!["https://bridge.example.com:8443"]
        );
    }
}
