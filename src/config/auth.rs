//! `[auth]`: who may call tools on `/mcp` (named static tokens; JWT issuers in `issuers.rs`;
//! admin and tool policies in `access.rs`), and the secret that signs job URLs. Also the
//! validation of the security keys of `[server]` (`allowed_origins`, `cors_origins`,
//! `admin_listen`), so that everything about access is checked in one place.
//!
//! Secrets are given as a literal, `env:NAME` or `file:/path`, resolved when the config is
//! loaded (so a missing variable or file stops the bridge at start, naming the key), and never
//! printed: [`Secret`]'s `Debug` says where the value came from, not what it is.

use std::{fmt, path::PathBuf, sync::Arc};

use serde::{Deserialize, Deserializer};

use super::{
    ConfigError, ServerConfig,
    access::{Callers, PolicyConfig},
    bounds::{self, Bound},
    issuers::{IssuerConfig, JwtLimits},
};

/// An environment variable that, when set, adds one more `/mcp` token (for containers, where
/// the config file is baked into the image).
pub const TOKEN_ENV: &str = "BRIDGE_MCP_TOKEN";

/// Shortest bearer token accepted on `/mcp`.
pub const MIN_TOKEN_LEN: usize = 16;
/// Shortest `auth.job_secret` accepted: HMAC-SHA256 keys should carry 256 bits.
pub const MIN_JOB_SECRET_LEN: usize = 32;
/// Default of `auth.job_token_ttl_secs`: a day.
pub const DEFAULT_JOB_TOKEN_TTL_SECS: u64 = 86_400;
/// Longest `auth.job_token_ttl_secs`: ten years (beyond that a token is as good as eternal).
pub const MAX_JOB_TOKEN_TTL_SECS: u64 = 10 * 366 * 86_400;
/// Longest name of a static token.
pub const MAX_TOKEN_NAME_LEN: usize = 64;

/// One `auth.mcp_tokens` entry: a secret alone (`"env:TOKEN"`, named `token-<position>`
/// from 1), or `{ name = "ci", token = "env:CI_TOKEN" }`. The name is the caller's principal
/// (`token:<name>`): it owns the jobs it starts, and `auth.admin` and `auth.policies` name it.
#[derive(Debug, Clone)]
pub struct McpToken {
    /// Set for every entry once the config is validated.
    pub name: String,
    pub token: Secret,
}

impl From<Secret> for McpToken {
    /// An entry without a name; validation names it after its position.
    fn from(token: Secret) -> Self {
        Self {
            name: String::new(),
            token,
        }
    }
}

impl McpToken {
    pub fn named(name: &str, token: Secret) -> Self {
        Self {
            name: name.into(),
            token,
        }
    }
}

/// The schema the configuration reference is checked against (tests/it/config_reference.rs): a
/// token is a leaf key there, written either way.
impl schemars::JsonSchema for McpToken {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "McpToken".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "properties": { "name": { "type": "string" }, "token": { "type": "string" } },
                    "required": ["name", "token"]
                }
            ]
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedToken {
    name: String,
    token: Secret,
}

impl<'de> Deserialize<'de> for McpToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = McpToken;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a token (\"env:NAME\", \"file:/path\" or a literal) or { name, token }",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<McpToken, E> {
                Ok(Secret::from(v.to_string()).into())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<McpToken, A::Error> {
                let named =
                    NamedToken::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(McpToken::named(&named.name, named.token))
            }
        }
        d.deserialize_any(Entry)
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Static bearer tokens accepted on `/mcp` (and on `/upstreams`, `/metrics`, and on job
    /// URLs for the token's own jobs). With no tokens and no `issuers`, `/mcp` is open, which
    /// the bridge allows only on a loopback address unless `allow_open` is set.
    pub mcp_tokens: Vec<McpToken>,
    /// Issuers whose JWT access tokens `/mcp` accepts (OAuth 2.1 resource server).
    pub issuers: Vec<IssuerConfig>,
    /// Bounds on JWTs and on fetching issuers' keys.
    pub jwt: JwtLimits,
    /// Callers who see and cancel every job, not only their own.
    pub admin: Callers,
    /// Which upstream tools each caller may list and call. None: every caller, every tool.
    /// Otherwise a caller gets the tools of every policy it matches, and no other.
    pub policies: Vec<PolicyConfig>,
    /// The resource identifier in the Protected Resource Metadata (RFC 9728) and the
    /// audience MCP clients ask tokens for. Unset: `server.public_url` + `/mcp`.
    pub resource: Option<String>,
    /// `scopes_supported` in the Protected Resource Metadata.
    pub scopes_supported: Vec<String>,
    /// `authorization_servers` in the Protected Resource Metadata. Unset: every issuer.
    pub authorization_servers: Vec<String>,
    /// Let the bridge listen on a non-loopback address with no credentials configured
    /// (something in front of it authenticates).
    pub allow_open: bool,
    /// The HMAC key of job and correlation tokens, or a list of them: the first signs new
    /// tokens, every one verifies (rotation: put the new key first and keep the old one until
    /// its tokens have expired). Unset: a random key per process (tokens do not survive a
    /// restart, and replicas cannot read each other's tokens).
    pub job_secret: Option<JobSecrets>,
    /// How long a job or correlation token opens its URL, from when it is minted. Past it the
    /// URL answers 404, as for a wrong token. It must outlive a job's run plus
    /// `jobs.retention_secs`, so the default is a day (24 times the default retention).
    pub job_token_ttl_secs: u64,
    /// Job and correlation URLs need their `?token=` (or an MCP bearer token). `false` makes
    /// them readable, and jobs cancellable, by anyone who knows the ID.
    pub require_job_tokens: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mcp_tokens: Vec::new(),
            issuers: Vec::new(),
            jwt: JwtLimits::default(),
            admin: Callers::default(),
            policies: Vec::new(),
            resource: None,
            scopes_supported: Vec::new(),
            authorization_servers: Vec::new(),
            allow_open: false,
            job_secret: None,
            job_token_ttl_secs: DEFAULT_JOB_TOKEN_TTL_SECS,
            require_job_tokens: true,
        }
    }
}

impl AuthConfig {
    /// The environment variables the bridge's own secrets come from: stdio upstreams, which
    /// inherit the bridge's environment, get them blanked.
    pub fn secret_env_names(&self) -> Vec<String> {
        self.mcp_tokens
            .iter()
            .map(|t| &t.token)
            .chain(self.job_secret.iter().flat_map(JobSecrets::iter))
            .filter_map(Secret::env_name)
            .map(str::to_string)
            .collect()
    }
}

/// The upstreams as configured, except that a stdio child (which inherits the bridge's
/// environment) sees the variables the bridge's own secrets come from blanked, unless its
/// config sets them on purpose.
pub fn without_secret_env(
    auth: &AuthConfig,
    upstreams: &[super::UpstreamConfig],
) -> Vec<super::UpstreamConfig> {
    let hidden = auth.secret_env_names();
    let mut upstreams = upstreams.to_vec();
    for upstream in &mut upstreams {
        if upstream.transport == super::TransportKind::Stdio {
            for name in &hidden {
                upstream.env.entry(name.clone()).or_default();
            }
        }
    }
    upstreams
}

/// `auth.job_secret`: one secret (`"env:JOB_SECRET"`) or a list (`["env:NEW", "env:OLD"]`).
/// The first signs new tokens; every one verifies, so a key can be rotated without breaking the
/// URLs already handed out.
#[derive(Debug, Clone)]
pub struct JobSecrets(Vec<Secret>);

impl JobSecrets {
    pub fn new(secrets: Vec<Secret>) -> Self {
        Self(secrets)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Secret> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Secret> for JobSecrets {
    fn from(secret: Secret) -> Self {
        Self(vec![secret])
    }
}

impl<'de> Deserialize<'de> for JobSecrets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(
            untagged,
            expecting = "a secret (\"env:NAME\", \"file:/path\" or a literal) or a list of them, the signing one first"
        )]
        enum OneOrMany {
            One(Secret),
            Many(Vec<Secret>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(secret) => secret.into(),
            OneOrMany::Many(secrets) => Self(secrets),
        })
    }
}

/// Written as a string or an array of strings.
impl schemars::JsonSchema for JobSecrets {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JobSecrets".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        })
    }
}

/// A secret from the config. Deserialized from `"literal"`, `"env:NAME"` or `"file:/path"`.
#[derive(Clone, Deserialize)]
#[serde(from = "String")]
pub struct Secret {
    origin: Origin,
    /// The value, once resolved (literals at once; env and files at validation).
    value: Option<Arc<str>>,
}

/// Written as a string (`"literal"`, `"env:NAME"`, `"file:/path"`).
impl schemars::JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <String as schemars::JsonSchema>::json_schema(generator)
    }
}

#[derive(Clone)]
enum Origin {
    Literal,
    Env(String),
    File(PathBuf),
}

impl From<String> for Secret {
    fn from(spec: String) -> Self {
        if let Some(name) = spec.strip_prefix("env:") {
            Self {
                origin: Origin::Env(name.to_string()),
                value: None,
            }
        } else if let Some(path) = spec.strip_prefix("file:") {
            Self {
                origin: Origin::File(path.into()),
                value: None,
            }
        } else {
            Self::literal(spec)
        }
    }
}

/// `"env:NAME"` or `"file:/path"` read (as a [`Secret`] is); `None` for any other text, which is
/// its own value. For the secret-bearing fields that are plain text (an upstream's `url`,
/// `headers` and `env`).
pub(super) fn indirect(spec: &str) -> Option<Result<String, String>> {
    let mut secret = Secret::from(spec.to_string());
    if matches!(secret.origin, Origin::Literal) {
        return None;
    }
    Some(secret.resolve().map(|()| secret.value().to_string()))
}

impl Secret {
    /// A secret given directly (tests, embedding).
    pub fn literal(value: impl Into<String>) -> Self {
        Self {
            origin: Origin::Literal,
            value: Some(value.into().into()),
        }
    }

    /// The value: empty if this secret was never resolved (the config was not validated).
    pub fn value(&self) -> &str {
        self.value.as_deref().unwrap_or_default()
    }

    /// The environment variable the value comes from, if it does.
    pub fn env_name(&self) -> Option<&str> {
        match &self.origin {
            Origin::Env(name) => Some(name),
            _ => None,
        }
    }

    /// Where the value comes from, for messages (never the value itself).
    pub fn origin(&self) -> String {
        match &self.origin {
            Origin::Literal => "a literal in the config".into(),
            Origin::Env(name) => format!("environment variable {name}"),
            Origin::File(path) => format!("file {}", path.display()),
        }
    }

    /// Read the variable or file. A file's trailing newline is not part of the secret.
    fn resolve(&mut self) -> Result<(), String> {
        let value = match &self.origin {
            Origin::Literal => return Ok(()),
            Origin::Env(name) if name.is_empty() => {
                return Err("`env:` needs a variable name, as in \"env:BRIDGE_MCP_TOKEN\"".into());
            }
            Origin::Env(name) => std::env::var(name).map_err(|e| match e {
                std::env::VarError::NotPresent => {
                    format!("environment variable {name} is not set; set it, or name another")
                }
                std::env::VarError::NotUnicode(_) => {
                    format!("environment variable {name} is not valid UTF-8")
                }
            })?,
            Origin::File(path) => std::fs::read_to_string(path)
                .map_err(|e| {
                    format!(
                        "cannot read the secret file {}: {e}; check the path and its permissions",
                        path.display()
                    )
                })?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        };
        self.value = Some(value.into());
        Ok(())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::Literal => f.write_str("Secret(<literal>)"),
            Origin::Env(name) => write!(f, "Secret(env:{name})"),
            Origin::File(path) => write!(f, "Secret(file:{})", path.display()),
        }
    }
}

/// The security checks of a loaded config. `err(key, message)` makes the error.
pub(super) fn validate(
    auth: &mut AuthConfig,
    server: &ServerConfig,
    err: impl Fn(&str, String) -> ConfigError + Copy,
) -> Result<(), ConfigError> {
    validate_secrets(auth, err)?;
    validate_exposure(auth, server, err)?;
    validate_identities(auth, err)
}

/// JWT issuers, the admin and policy entries (whose names must exist), the resource URL.
fn validate_identities(
    auth: &AuthConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    super::issuers::validate(&auth.issuers, &auth.jwt, &err)?;
    let token_names: Vec<String> = auth.mcp_tokens.iter().map(|t| t.name.clone()).collect();
    let issuers: Vec<&str> = auth.issuers.iter().map(|i| i.issuer.as_str()).collect();
    super::access::validate(&auth.admin, &auth.policies, &token_names, &issuers, &err)?;
    if let Some(resource) = &auth.resource {
        let ok = url::Url::parse(resource)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.fragment().is_none());
        if !ok {
            return Err(err(
                "auth.resource",
                format!(
                    "{resource:?} is not an http(s) URL without a fragment; use the public URL \
                     of /mcp, for example \"https://bridge.example.com/mcp\""
                ),
            ));
        }
    }
    Ok(())
}

/// The MCP tokens (the environment's added) and the job secret: resolved, long enough, sendable.
fn validate_secrets(
    auth: &mut AuthConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    validate_mcp_tokens(auth, &err)?;
    validate_job_secret(auth, &err)?;
    let ttl = auth.job_token_ttl_secs;
    let message = format!(
        "is {ttl}; use 1 to {MAX_JOB_TOKEN_TTL_SECS} seconds (ten years); the default, a day, \
         suits most deployments"
    );
    let range = 1..=MAX_JOB_TOKEN_TTL_SECS;
    let bounds = [Bound::says("job_token_ttl_secs", ttl, range, message)];
    bounds::check("auth", bounds).map_err(|(key, message)| err(&key, message))
}

/// `auth.mcp_tokens` (with [`TOKEN_ENV`]'s added): named uniquely, resolved, long enough,
/// sendable in an `Authorization` header.
fn validate_mcp_tokens(
    auth: &mut AuthConfig,
    err: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if std::env::var_os(TOKEN_ENV).is_some_and(|v| !v.is_empty()) {
        auth.mcp_tokens
            .push(Secret::from(format!("env:{TOKEN_ENV}")).into());
    }
    let mut names = std::collections::HashSet::new();
    for (i, entry) in auth.mcp_tokens.iter_mut().enumerate() {
        let key = format!("auth.mcp_tokens[{i}]");
        if entry.name.is_empty() {
            entry.name = format!("token-{}", i + 1);
        }
        check_token_name(&entry.name).map_err(|m| err(&format!("{key}.name"), m))?;
        if !names.insert(entry.name.clone()) {
            return Err(err(
                &format!("{key}.name"),
                format!(
                    "{:?} names two tokens; give each its own name (it is the owner of the jobs \
                     the token starts)",
                    entry.name
                ),
            ));
        }
        let token = &mut entry.token;
        token.resolve().map_err(|m| err(&key, m))?;
        let value = token.value();
        if value.len() < MIN_TOKEN_LEN {
            return Err(err(
                &key,
                format!(
                    "the token from {} is {} characters; use at least {MIN_TOKEN_LEN} random ones \
                     (for example the output of `openssl rand -hex 32`)",
                    token.origin(),
                    value.len()
                ),
            ));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(err(
                &key,
                format!(
                    "the token from {} must be printable ASCII without spaces: it is sent as \
                     `Authorization: Bearer <token>`",
                    token.origin()
                ),
            ));
        }
    }
    Ok(())
}

/// `auth.job_secret`: a non-empty list of resolved secrets, each long enough.
fn validate_job_secret(
    auth: &mut AuthConfig,
    err: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if auth.job_secret.as_ref().is_some_and(JobSecrets::is_empty) {
        return Err(err(
            "auth.job_secret",
            "is an empty list; give at least one secret (the first signs tokens), or leave the \
             key out for a random key per process"
                .into(),
        ));
    }
    let listed = auth.job_secret.as_ref().is_some_and(|s| s.0.len() > 1);
    for (i, secret) in auth
        .job_secret
        .iter_mut()
        .flat_map(|s| s.0.iter_mut())
        .enumerate()
    {
        let key = if listed {
            format!("auth.job_secret[{i}]")
        } else {
            "auth.job_secret".to_string()
        };
        secret.resolve().map_err(|m| err(&key, m))?;
        if secret.value().len() < MIN_JOB_SECRET_LEN {
            return Err(err(
                &key,
                format!(
                    "the secret from {} is {} bytes; use at least {MIN_JOB_SECRET_LEN} random ones \
                     (for example the output of `openssl rand -hex 32`)",
                    secret.origin(),
                    secret.value().len()
                ),
            ));
        }
    }
    Ok(())
}

/// Who can reach the bridge: no open `/mcp` on a public address by accident, well-formed
/// origins, and an admin listener of its own.
fn validate_exposure(
    auth: &AuthConfig,
    server: &ServerConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if auth.mcp_tokens.is_empty()
        && auth.issuers.is_empty()
        && !auth.allow_open
        && !server.listen.ip().is_loopback()
    {
        return Err(err(
            "auth.mcp_tokens",
            format!(
                "none configured, and server.listen is {}, not a loopback address: anyone who \
                 can reach it could call every tool. Set auth.mcp_tokens (for example \
                 [\"env:MY_TOKEN_VARIABLE\"]) or the environment variable {TOKEN_ENV}, or \
                 auth.issuers, or set auth.allow_open = true if something in front of the \
                 bridge authenticates",
                server.listen
            ),
        ));
    }
    for (i, origin) in server.allowed_origins.iter().enumerate() {
        check_origin(origin).map_err(|m| err(&format!("server.allowed_origins[{i}]"), m))?;
    }
    for (i, origin) in server.cors_origins.iter().enumerate() {
        check_origin(origin).map_err(|m| err(&format!("server.cors_origins[{i}]"), m))?;
        if origin.ends_with(":*") {
            return Err(err(
                &format!("server.cors_origins[{i}]"),
                "a port wildcard is not possible in CORS; list each origin, or use \"*\"".into(),
            ));
        }
    }
    if let Some(admin) = server.admin_listen
        && admin == server.listen
        && admin.port() != 0
    {
        return Err(err(
            "server.admin_listen",
            format!(
                "is the same address as server.listen ({admin}); give the admin listener its own port"
            ),
        ));
    }
    Ok(())
}

/// A token name: it appears in principals, logs and the config's own references.
fn check_token_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TOKEN_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?}: a token name is 1 to {MAX_TOKEN_NAME_LEN} letters, digits and . _ -"
        ))
    }
}

/// An origin as a browser sends it: `scheme://host[:port]` (a port of `*` matches any), the
/// word `null`, or `*` for any origin.
fn check_origin(origin: &str) -> Result<(), String> {
    if origin == "*" || origin == "null" {
        return Ok(());
    }
    let base = origin.strip_suffix(":*").unwrap_or(origin);
    let parsed = url::Url::parse(base).map_err(|e| {
        format!("{origin:?} is not an origin ({e}); write it as scheme://host[:port]")
    })?;
    let bare = matches!(parsed.scheme(), "http" | "https")
        && parsed.host().is_some()
        && parsed.path() == "/"
        && !base.ends_with('/')
        && parsed.query().is_none()
        && parsed.fragment().is_none()
        && parsed.username().is_empty();
    if !bare {
        return Err(format!(
            "{origin:?} is not an origin: write it as scheme://host[:port], with no path or \
             trailing slash (for example \"https://app.example.com\")"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_never_shows_the_value() {
        let s = Secret::literal("hunter2-hunter2-hunter2");
        assert_eq!(format!("{s:?}"), "Secret(<literal>)");
        let s = Secret::from("env:X".to_string());
        assert_eq!(format!("{s:?}"), "Secret(env:X)");
    }

    #[test]
    fn every_job_secret_of_a_list_is_hidden_from_stdio_children() {
        let auth = AuthConfig {
            job_secret: Some(JobSecrets::new(vec![
                Secret::from("env:NEW_JOB_SECRET".to_string()),
                Secret::from("env:OLD_JOB_SECRET".to_string()),
            ])),
            ..AuthConfig::default()
        };
        assert_eq!(
            auth.secret_env_names(),
            ["NEW_JOB_SECRET", "OLD_JOB_SECRET"]
        );
    }

    #[test]
    fn origins() {
        for ok in [
            "*",
            "null",
            "https://a.example",
            "http://127.0.0.1:8080",
            "http://localhost:*",
        ] {
            assert!(check_origin(ok).is_ok(), "{ok}");
        }
        for bad in [
            "a.example",
            "https://a.example/",
            "https://a.example/x",
            "ftp://a",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }
}
