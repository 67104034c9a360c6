//! Checks a parsed config and turns every problem into one line naming the file and the key.

use std::collections::HashSet;

use super::{
    ConfigError, JobsConfig, ServerConfig, StoreBackend, StoreConfig, TransportKind,
    UpstreamConfig, auth,
    bounds::{self, Bound},
};

/// The longest drain `jobs.drain_secs` may ask for: a day. A drain waits for the longest job
/// the operator means to let finish, and the stop timeouts of the deployment must cover it.
const MAX_DRAIN_SECS: u64 = 86_400;

/// `server.ready_requires`: `"*"` or the names of configured upstreams.
pub(super) fn validate_ready_requires(
    names: &[String],
    upstreams: &[UpstreamConfig],
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, name) in names.iter().enumerate() {
        if name != "*" && !upstreams.iter().any(|u| &u.name == name) {
            return Err(err(
                &format!("server.ready_requires[{i}]"),
                format!(
                    "{name:?} is not the name of an upstream; name one of [[upstreams]] or \"*\" (all)"
                ),
            ));
        }
    }
    Ok(())
}

/// `[server]`: the public URL (its trailing `/` dropped), host names, the correlation header
/// (lower-cased) and the keep-alive period.
pub(super) fn validate_server(
    server: &mut ServerConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let public_url = server.public_url.trim_end_matches('/').to_string();
    match url::Url::parse(&public_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.query().is_none() => {}
        Ok(_) => {
            return Err(err(
                "server.public_url",
                format!("must be an http(s) URL without a query, got {public_url:?}"),
            ));
        }
        Err(e) => {
            return Err(err(
                "server.public_url",
                format!("invalid URL {public_url:?}: {e}"),
            ));
        }
    }
    server.public_url = public_url;

    for (i, host) in server.allowed_hosts.iter().enumerate() {
        if host.trim().is_empty() {
            return Err(err(
                &format!("server.allowed_hosts[{i}]"),
                "empty host name; remove it (an empty list turns the check off)".into(),
            ));
        }
    }
    let header = server.correlation_header.to_ascii_lowercase();
    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
        return Err(err(
            "server.correlation_header",
            format!("not a valid HTTP header name: {header:?}"),
        ));
    }
    server.correlation_header = header;
    let s = server;
    #[rustfmt::skip]
    let bounds = [
        Bound::says("keep_alive_secs", s.keep_alive_secs, 1..=300,
            "must be between 1 and 300 (proxies cut idle streams after about 60 s)"),
        Bound::says("session_idle_secs", s.session_idle_secs, 1..=7 * 24 * 3600,
            "must be between 1 and 604800 (a week)"),
        Bound::says("sse_writers", s.sse_writers.unwrap_or(0), 0..=64,
            "must be between 0 and 64 (a few tasks are enough; 0 turns shared writers off)"),
        Bound::new("header_read_timeout_secs", s.header_read_timeout_secs, 1..=3600),
        Bound::says("keep_alive_idle_secs", s.keep_alive_idle_secs, 1..=3600,
            "must be between 1 and 3600, and longer than the idle timeout of the proxy in front (75 by default)"),
        Bound::says("trusted_proxies", s.trusted_proxies.len(), 0..=256,
            "at most 256 ranges: write wider CIDRs"),
        Bound::new("body_read_timeout_secs", s.body_read_timeout_secs, 1..=3600),
    ];
    bounds::check("server", bounds).map_err(|(key, message)| err(&key, message))
}

/// `[jobs]`: each bound with the reason it has.
pub(super) fn validate_jobs(
    jobs: &JobsConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let j = jobs;
    #[rustfmt::skip]
    let bounds = [
        Bound::says("history", j.history, 1..=1_000_000, "must be between 1 and 1000000"),
        Bound::says("retention_secs", j.retention_secs, 1..=u64::MAX,
            "must be at least 1, or finished jobs could not be read at all"),
        Bound::says("sync_budget_ms", j.sync_budget_ms, 0..=50_000,
            "must be at most 50000: agent platforms cut tool calls off after 60-100 s"),
        Bound::says("min_progress_interval_ms", j.min_progress_interval_ms, 0..=60_000,
            "must be at most 60000"),
        Bound::says("heartbeat_secs", j.heartbeat_secs, 0..=3600,
            "must be at most 3600 (0 turns heartbeats off)"),
        Bound::says("max_jobs", j.max_jobs, 1..=u64::MAX,
            "must be at least 1, or no call could run"),
        Bound::says("drain_secs", j.drain_secs, 0..=MAX_DRAIN_SECS,
            "must be at most 86400 (a day); 0 cancels running jobs at once on SIGTERM"),
    ];
    bounds::check("jobs", bounds).map_err(|(key, message)| err(&key, message))?;
    for (client, &secs) in &jobs.wait_for_job_secs_by_client {
        if !(1..=50).contains(&secs) {
            return Err(err(
                &format!("jobs.wait_for_job_secs_by_client.{client}"),
                format!("must be between 1 and 50 (the longest wait_for_job), got {secs}"),
            ));
        }
    }
    validate_tasks(jobs, err)
}

/// `[jobs]` keys of tasks and of questions to callers. `max_input_responses` is checked after
/// `max_pending_inputs`, whose double is its floor.
fn validate_tasks(
    jobs: &JobsConfig,
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let j = jobs;
    let fewest = j.max_pending_inputs.saturating_mul(2);
    #[rustfmt::skip]
    let bounds = [
        Bound::says("task_poll_interval_ms", j.task_poll_interval_ms, 100..=60_000,
            "must be between 100 and 60000: clients poll tasks/get this often"),
        Bound::says("input_timeout_secs", j.input_timeout_secs, 1..=86_400,
            "must be between 1 and 86400: a question nobody answers is declined after it"),
        Bound::says("max_input_bytes", j.max_input_bytes, 64..=16_777_216,
            "must be between 64 and 16777216"),
        Bound::says("max_pending_inputs", j.max_pending_inputs, 1..=1000,
            "must be between 1 and 1000"),
        Bound::says("max_input_responses", j.max_input_responses, fewest as u64..=10_000,
            format!("must be between {fewest} (twice jobs.max_pending_inputs: a round of \
                     questions and samples must fit) and 10000")),
        Bound::says("max_question_bytes", j.max_question_bytes, 1024..=16_777_216,
            "must be between 1024 and 16777216"),
        Bound::says("max_sample_bytes", j.max_sample_bytes, 1024..=16_777_216,
            "must be between 1024 and 16777216"),
        Bound::says("max_listed_tasks", j.max_listed_tasks, 1..=1_000_000,
            "must be between 1 and 1000000"),
        Bound::says("max_task_status_notifications", j.max_task_status_notifications,
            0..=1_000_000, "must be between 0 and 1000000"),
        Bound::says("task_list_page_size", j.task_list_page_size, 1..=1000,
            "must be between 1 and 1000"),
    ];
    bounds::check("jobs", bounds).map_err(|(key, message)| err(&key, message))
}

/// `[[upstreams]]`: unique valid names, a transport with the fields it needs (and none of the
/// other's), and no zero time limit, for the upstream or any of its tools.
pub(super) fn validate_upstreams(
    upstreams: &mut [UpstreamConfig],
    err: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, upstream) in upstreams.iter_mut().enumerate() {
        let at = |field: &str| format!("upstreams[{i}].{field}");
        resolve_indirect(upstream).map_err(|(field, m)| err(&at(&field), m))?;
        let upstream = &*upstream;
        validate_name(&upstream.name).map_err(|m| err(&at("name"), m))?;
        if !names.insert(upstream.name.clone()) {
            return Err(err(
                &at("name"),
                format!(
                    "duplicate upstream name {:?}; names must be unique",
                    upstream.name
                ),
            ));
        }
        validate_transport(upstream).map_err(|(field, m)| err(&at(field), m))?;
        check_limits(upstream.timeout_secs, upstream.idle_timeout_secs)
            .map_err(|(field, m)| err(&at(field), m))?;
        for (tool, overrides) in &upstream.tools {
            if tool.is_empty() {
                return Err(err(
                    &at("tools"),
                    "a tool override has an empty name".into(),
                ));
            }
            check_limits(overrides.timeout_secs, overrides.idle_timeout_secs)
                .map_err(|(field, m)| err(&at(&format!("tools.{tool}.{field}")), m))?;
        }
    }
    Ok(())
}

/// An upstream's `url` and each value of its `headers` and `env` may be `"env:NAME"` or
/// `"file:/path"` (a credential kept out of the file): read here, once, at start.
fn resolve_indirect(upstream: &mut UpstreamConfig) -> Result<(), (String, String)> {
    if let Some(url) = &mut upstream.url
        && let Some(value) = auth::indirect(url)
    {
        *url = value.map_err(|m| ("url".to_string(), m))?;
    }
    for (field, map) in [
        ("headers", &mut upstream.headers),
        ("env", &mut upstream.env),
    ] {
        for (name, text) in map.iter_mut() {
            if let Some(value) = auth::indirect(text) {
                *text = value.map_err(|m| (format!("{field}.{name}"), m))?;
            }
        }
    }
    Ok(())
}

/// Upstream names become tool-name prefixes (`<name>__<tool>`), so they must be short, plain
/// and free of the separator.
fn validate_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if name.is_empty() || name.len() > 32 || !ok_chars || name.starts_with(['-', '_']) {
        return Err(format!(
            "{name:?} is not a valid upstream name: use 1-32 letters, digits, '-' or '_', \
             starting with a letter or digit"
        ));
    }
    if name.contains("__") {
        return Err(format!(
            "{name:?} contains \"__\", which separates the upstream from the tool name"
        ));
    }
    Ok(())
}

/// A zero limit would fail every call at once: surely a mistake, so say so.
fn check_limits(timeout: Option<u64>, idle: Option<u64>) -> Result<(), (&'static str, String)> {
    match [("timeout_secs", timeout), ("idle_timeout_secs", idle)]
        .into_iter()
        .find(|(_, secs)| *secs == Some(0))
    {
        Some((key, _)) => Err((key, "must be at least 1 (leave it out for no limit)".into())),
        None => Ok(()),
    }
}

fn validate_transport(upstream: &UpstreamConfig) -> Result<(), (&'static str, String)> {
    match upstream.transport {
        TransportKind::Stdio => validate_stdio(upstream),
        TransportKind::Http => validate_http(upstream),
    }
}

/// A stdio upstream: a command, and none of the http fields.
fn validate_stdio(upstream: &UpstreamConfig) -> Result<(), (&'static str, String)> {
    match upstream.command.as_deref().map(str::trim) {
        None => return Err(("command", "a stdio upstream needs a command".into())),
        Some("") => return Err(("command", "the command is empty".into())),
        Some(_) => {}
    }
    let http_only = [
        ("url", "is", upstream.url.is_some()),
        ("headers", "are", !upstream.headers.is_empty()),
        ("ca_file", "is", upstream.ca_file.is_some()),
    ];
    if let Some((field, is, _)) = http_only.into_iter().find(|(_, _, set)| *set) {
        let message = format!("`{field}` {is} for http upstreams; this one is stdio");
        return Err((field, message));
    }
    if matches!(
        upstream.durable,
        super::Durable::Tasks | super::Durable::Resume
    ) {
        return Err((
            "durable",
            format!(
                "\"{}\" needs an http upstream: a stdio child dies with the replica that runs \
                 it, so no other replica can take its calls over; use \"auto\" or \"off\"",
                upstream.durable.as_str()
            ),
        ));
    }
    Ok(())
}

/// An http upstream: an http(s) URL with a host, valid headers, and none of the stdio fields.
fn validate_http(upstream: &UpstreamConfig) -> Result<(), (&'static str, String)> {
    let Some(url) = upstream.url.as_deref() else {
        return Err(("url", "an http upstream needs a url".into()));
    };
    let https = match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
            u.scheme() == "https"
        }
        Ok(u) => {
            return Err((
                "url",
                format!(
                    "must be an http(s) URL with a host, got scheme {:?}",
                    u.scheme()
                ),
            ));
        }
        Err(e) => return Err(("url", format!("invalid URL {url:?}: {e}"))),
    };
    if let Some(ca_file) = &upstream.ca_file {
        if !https {
            return Err((
                "ca_file",
                format!("`ca_file` is for an https url; this one is {url:?}"),
            ));
        }
        crate::tls::read_ca_file(ca_file).map_err(|e| ("ca_file", e.to_string()))?;
    }
    if upstream.command.is_some() || !upstream.args.is_empty() {
        return Err((
            "command",
            "`command`/`args` are for stdio upstreams; this one is http".into(),
        ));
    }
    if !upstream.env.is_empty() || upstream.cwd.is_some() {
        return Err((
            "env",
            "`env`/`cwd` are for stdio upstreams; this one is http".into(),
        ));
    }
    for (name, value) in &upstream.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(("headers", format!("{name:?} is not a valid header name")));
        }
        if http::HeaderValue::from_str(value).is_err() {
            return Err((
                "headers",
                format!("the value of {name:?} is not a valid header value"),
            ));
        }
    }
    Ok(())
}

/// The Redis settings are checked whatever the backend, except the URL, which only has to
/// work when it is used.
pub(super) fn validate_store(store: &StoreConfig) -> Result<(), (String, String)> {
    let at = |field: &str, message: String| (format!("store.{field}"), message);
    if store.backend == StoreBackend::Redis {
        validate_redis_url(&store.redis_url).map_err(|m| at("redis_url", m))?;
        if let Some(ca_file) = &store.redis_ca_file {
            if !store.redis_url.starts_with("rediss://") {
                return Err(at(
                    "redis_ca_file",
                    "is for a rediss:// (TLS) redis_url; this one is not".into(),
                ));
            }
            crate::tls::read_ca_file(ca_file).map_err(|e| at("redis_ca_file", e.to_string()))?;
        }
        if store.redis_cluster {
            validate_cluster_url(&store.redis_url).map_err(|m| at("redis_cluster", m))?;
        }
    }
    let prefix = &store.key_prefix;
    let plain = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if prefix.is_empty() || prefix.len() > 64 || !plain {
        return Err(at(
            "key_prefix",
            format!(
                "{prefix:?} is not a valid key prefix: use 1-64 letters, digits, '-', '_', '.' \
                 or ':' (it also names the bridge's Redis connections)"
            ),
        ));
    }
    let s = store;
    #[rustfmt::skip]
    let bounds = [
        Bound::says("lease_secs", s.lease_secs, 1..=3600,
            "must be between 1 and 3600 (a dead replica's jobs fail about lease_secs * 4/3 \
             after it stopped)"),
        Bound::says("outage_buffer", s.outage_buffer, 1..=100_000, "must be between 1 and 100000"),
        Bound::says("command_timeout_ms", s.command_timeout_ms, 100..=60_000,
            "must be between 100 and 60000"),
        Bound::says("input_relay_timeout_ms", s.input_relay_timeout_ms, 100..=60_000,
            "must be between 100 and 60000 (an answer routed to another replica waits this \
             long for its verdict)"),
    ];
    bounds::check("store", bounds)
}

/// A Redis Cluster is reached over TCP and has database 0 only.
fn validate_cluster_url(raw: &str) -> Result<(), String> {
    let shown = super::redact_url(raw);
    let url = url::Url::parse(raw).map_err(|e| format!("invalid URL {shown:?}: {e}"))?;
    if !matches!(url.scheme(), "redis" | "rediss") {
        return Err(format!(
            "is true, so redis_url must be a redis:// or rediss:// address of a cluster node, \
             got {shown:?}"
        ));
    }
    if !matches!(url.path(), "" | "/" | "/0") {
        return Err(format!(
            "is true, and a Redis Cluster has database 0 only: drop the database from \
             redis_url {shown:?}"
        ));
    }
    Ok(())
}

fn validate_redis_url(raw: &str) -> Result<(), String> {
    let shown = super::redact_url(raw);
    let url = url::Url::parse(raw).map_err(|e| format!("invalid URL {shown:?}: {e}"))?;
    if !matches!(url.scheme(), "redis" | "rediss" | "unix" | "redis+unix") {
        return Err(format!(
            "must start with redis://, rediss:// or unix://, got {shown:?}"
        ));
    }
    redis::IntoConnectionInfo::into_connection_info(raw)
        .map(|_| ())
        .map_err(|e| format!("not a usable Redis URL {shown:?}: {e}"))
}
