//! The bridge's one typed configuration: a TOML file, then environment overrides, then CLI
//! flags. Every default lives in this module; every validation error names the file and the
//! key, so a bad deployment fails at start with one line that says what to fix.

mod access;
mod advice;
mod auth;
mod bounds;
mod env;
mod error;
mod glob;
mod issuers;
mod limits;
mod proxies;
#[cfg(test)]
mod reload;
mod sections;
mod upstream_tasks;
mod validate;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use schemars::JsonSchema;
use serde::Deserialize;

pub use crate::redact::url as redact_url;
pub use access::{Callers, PolicyConfig, tool_glob};
pub use advice::{public_url_mismatch, public_url_on};
pub use auth::{AuthConfig, JobSecrets, McpToken, Secret, without_secret_env};
pub use env::PREFIX as ENV_KEY_PREFIX;
pub use error::ConfigError;
pub use glob::{GlobError, GlobList};
pub use issuers::{IssuerConfig, JWT_ALGORITHMS, JwtLimits, check_key_url};
pub use limits::LimitsConfig;
pub use proxies::{Cidr, ForwardedHeader};
pub use sections::{
    CallLimits, CallMode, Durable, EvictionCheck, Expose, JobsConfig, LogAttribution, ServerConfig,
    StoreBackend, StoreConfig, ToolConfig, TransportKind, UpstreamConfig, UpstreamProtocol,
};
pub use upstream_tasks::UpstreamTasksConfig;

/// The file loaded when no `--config` is given (relative to the working directory).
pub const DEFAULT_CONFIG_PATH: &str = "config/bridge.toml";

/// The executable name that, used as an upstream `command`, means "this very binary", so the
/// default config runs the built-in demo tools from `cargo run` with nothing installed.
pub const SELF_COMMAND: &str = "mcp-progress-bridge";

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub jobs: JobsConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub upstream_tasks: UpstreamTasksConfig,
    /// Where the file came from, for error messages and the startup log line.
    #[serde(skip)]
    pub source: PathBuf,
    /// Keys the file sets under a deprecated name, each a line for the log (see
    /// `advice::deprecated_keys`).
    #[serde(skip)]
    pub deprecations: Vec<String>,
}

/// `BRIDGE_LISTEN`: overrides `server.listen` (`--listen` overrides it in turn).
pub const LISTEN_ENV: &str = "BRIDGE_LISTEN";
/// `BRIDGE_PUBLIC_URL`: overrides `server.public_url`.
pub const PUBLIC_URL_ENV: &str = "BRIDGE_PUBLIC_URL";
/// `BRIDGE_REDIS_URL`: overrides `store.redis_url`, so a Redis password need not sit in a file.
pub const REDIS_URL_ENV: &str = "BRIDGE_REDIS_URL";

/// Every environment variable that sets a config key, with the key it sets. The configuration
/// reference (docs/configuration.md) lists each in its key's row; tests/it/config_reference.rs
/// checks the two agree. Add a variable here when you add one to [`Overrides::from_env`].
pub const ENV_OVERRIDES: [(&str, &str); 4] = [
    (LISTEN_ENV, "server.listen"),
    (PUBLIC_URL_ENV, "server.public_url"),
    (REDIS_URL_ENV, "store.redis_url"),
    (auth::TOKEN_ENV, "auth.mcp_tokens"),
];

/// Values given on the command line or in the environment; they win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub public_url: Option<String>,
    /// `BRIDGE_REDIS_URL`: keeps Redis credentials out of the config file.
    pub redis_url: Option<String>,
    /// `BRIDGE__SECTION__KEY=value`: any key (see `env`), laid over the file.
    pub keys: Vec<(String, String)>,
}

impl Overrides {
    /// `BRIDGE_LISTEN`, `BRIDGE_PUBLIC_URL` and `BRIDGE_REDIS_URL`, when set. CLI flags are applied on top by the
    /// caller.
    pub fn from_env() -> Result<Self, ConfigError> {
        let listen = match std::env::var(LISTEN_ENV) {
            Ok(v) => Some(v.parse().map_err(|e| {
                ConfigError::env(LISTEN_ENV, format!("not a socket address ({e}): {v:?}"))
            })?),
            Err(_) => None,
        };
        let vars = std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        });
        Ok(Self {
            listen,
            public_url: std::env::var(PUBLIC_URL_ENV).ok(),
            redis_url: std::env::var(REDIS_URL_ENV).ok(),
            keys: env::key_vars(vars)?,
        })
    }
}

impl Config {
    /// The config file's JSON Schema (draft 2020-12), generated from the types serde reads the
    /// file into: what `mcp-progress-bridge config-schema` prints and docs/config.schema.json
    /// holds, for editors (taplo's `#:schema`) and CI checks of a config before it ships. It
    /// describes the file's shape; ranges and cross-key rules are `check-config`'s.
    pub fn file_schema() -> serde_json::Value {
        let mut schema = schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<Config>();
        schema.insert("title".into(), "mcp-progress-bridge configuration".into());
        schema.to_value()
    }

    /// Load `path` (or the default file), apply overrides, validate.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let path = path.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, &e))?;
        Self::from_toml(&text, path, overrides)
    }

    /// Load `path` (or the default file) with the overrides, and every problem found: a file
    /// that cannot be read or parsed has one, a parsed one each section's first
    /// (`mcp-progress-bridge check-config`).
    pub fn check(path: Option<&Path>, overrides: &Overrides) -> Result<Self, Vec<ConfigError>> {
        let mut config = Self::parse(path, overrides).map_err(|e| vec![e])?;
        let problems: Vec<ConfigError> = config
            .problems()
            .into_iter()
            .map(|e| env::said_of_vars(e, &overrides.keys))
            .collect();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// Read, parse and override, not validated yet.
    fn parse(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let path = path.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, &e))?;
        Self::unchecked(&text, path, overrides)
    }

    /// Parse and validate TOML text; `path` is only used to name the source in errors.
    pub fn from_toml(text: &str, path: &Path, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut config = Self::unchecked(text, path, overrides)?;
        config
            .validate()
            .map_err(|e| env::said_of_vars(e, &overrides.keys))?;
        Ok(config)
    }

    /// Parse TOML text and apply the overrides, without validating.
    fn unchecked(text: &str, path: &Path, overrides: &Overrides) -> Result<Self, ConfigError> {
        let deserializer =
            toml::Deserializer::parse(text).map_err(|e| ConfigError::syntax(path, &e))?;
        let deprecations = advice::deprecated_keys(text, path)?;
        let mut config: Config = if overrides.keys.is_empty() {
            serde_path_to_error::deserialize(deserializer)
                .map_err(|e| ConfigError::from_serde(path, e))?
        } else {
            // The file as a table, the `BRIDGE__…` variables laid over it.
            let mut table: toml::Table = text.parse().map_err(|e| ConfigError::syntax(path, &e))?;
            env::overlay(&mut table, &overrides.keys)?;
            serde_path_to_error::deserialize(toml::Value::Table(table))
                .map_err(|e| env::said_of_vars(ConfigError::from_serde(path, e), &overrides.keys))?
        };
        config.source = path.to_path_buf();
        config.deprecations = deprecations;
        if let Some(listen) = overrides.listen {
            config.server.listen = listen;
        }
        if let Some(url) = &overrides.public_url {
            config.server.public_url = url.clone();
        }
        if let Some(url) = &overrides.redis_url {
            config.store.redis_url = url.clone();
        }
        Ok(config)
    }

    /// Check every section; the first problem found is the error.
    pub(super) fn validate(&mut self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every section's first problem (`check-config` shows them all). Sections that normalize
    /// a value (a trailing `/`, a header name's case) write it back.
    pub(super) fn problems(&mut self) -> Vec<ConfigError> {
        let file = self.source.clone();
        let err = |key: &str, message: String| ConfigError::new(&file, key, message);
        let ttl = if self.auth.job_token_ttl_secs < self.jobs.retention_secs {
            Err(err(
                "auth.job_token_ttl_secs",
                format!(
                    "is {} s, shorter than jobs.retention_secs ({} s): a job's URLs would stop \
                     working before the job is forgotten. Raise it to cover a job's run plus its \
                     retention (default: a day)",
                    self.auth.job_token_ttl_secs, self.jobs.retention_secs
                ),
            ))
        } else {
            Ok(())
        };
        let checks = [
            validate::validate_server(&mut self.server, err),
            validate::validate_jobs(&self.jobs, err),
            auth::validate(&mut self.auth, &self.server, err),
            ttl,
            limits::validate(&self.limits, err),
            upstream_tasks::validate(&self.upstream_tasks, err),
            validate::validate_store(&self.store).map_err(|(key, m)| err(&key, m)),
            validate::validate_upstreams(&mut self.upstreams, err),
            validate::validate_ready_requires(&self.server.ready_requires, &self.upstreams, err),
        ];
        checks.into_iter().filter_map(Result::err).collect()
    }

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

    /// This running config with `next`'s reloadable keys (SIGHUP): who may call it, i.e.
    /// `auth.mcp_tokens`, `auth.admin` and `auth.policies`; everything else is read at start.
    pub fn reloaded(&self, next: &Config) -> Config {
        let mut applied = self.clone();
        applied.auth.mcp_tokens = next.auth.mcp_tokens.clone();
        applied.auth.admin = next.auth.admin.clone();
        applied.auth.policies = next.auth.policies.clone();
        applied
    }

    /// The keys (or sections) `next` changes that a reload does not apply. Compared by their
    /// `Debug` form, where a secret shows where it comes from, not its value: a literal secret
    /// changed in place is not seen (an `env:`/`file:` one is re-read only at start).
    pub fn kept_until_restart(&self, next: &Config) -> Vec<&'static str> {
        fn differs(a: &impl std::fmt::Debug, b: &impl std::fmt::Debug) -> bool {
            format!("{a:?}") != format!("{b:?}")
        }
        let (a, b) = (&self.auth, &next.auth);
        [
            ("server", differs(&self.server, &next.server)),
            ("jobs", differs(&self.jobs, &next.jobs)),
            ("store", differs(&self.store, &next.store)),
            ("upstreams", differs(&self.upstreams, &next.upstreams)),
            ("limits", differs(&self.limits, &next.limits)),
            (
                "upstream_tasks",
                differs(&self.upstream_tasks, &next.upstream_tasks),
            ),
            ("auth.issuers", differs(&a.issuers, &b.issuers)),
            ("auth.jwt", differs(&a.jwt, &b.jwt)),
            ("auth.resource", differs(&a.resource, &b.resource)),
            (
                "auth.scopes_supported",
                differs(&a.scopes_supported, &b.scopes_supported),
            ),
            (
                "auth.authorization_servers",
                differs(&a.authorization_servers, &b.authorization_servers),
            ),
            ("auth.allow_open", a.allow_open != b.allow_open),
            ("auth.job_secret", differs(&a.job_secret, &b.job_secret)),
            (
                "auth.job_token_ttl_secs",
                a.job_token_ttl_secs != b.job_token_ttl_secs,
            ),
            (
                "auth.require_job_tokens",
                a.require_job_tokens != b.require_job_tokens,
            ),
        ]
        .into_iter()
        .filter_map(|(key, changed)| changed.then_some(key))
        .collect()
    }

    /// The default config as a value, for tests and embedding.
    pub fn default_for_tests() -> Self {
        Self {
            server: ServerConfig::default(),
            jobs: JobsConfig::default(),
            store: StoreConfig::default(),
            upstreams: Vec::new(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            upstream_tasks: UpstreamTasksConfig::default(),
            source: PathBuf::from("<built-in>"),
            deprecations: Vec::new(),
        }
    }
}
