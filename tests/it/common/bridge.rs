//! Starting the bridge: in this process on a free port ([`start_bridge`], [`start_config`]),
//! or as a child process ([`spawn_bridge`], on [`super::process`]); the upstreams tests give it
//! (the demo tools as a real stdio child, or served over Streamable HTTP in this process); and
//! the job secret every test bridge signs job URLs with.

use std::time::Duration;

use mcp_progress_bridge::{
    app::{self, RunningBridge},
    auth::JobTokens,
    config::{CallMode, Config, McpToken, Secret, StoreBackend, UpstreamConfig},
};
use tokio_util::sync::CancellationToken;

use super::{
    process::BridgeProcess,
    redis::{RedisPrefix, test_redis},
    wait::{WAIT, eventually},
};

/// The built bridge binary: the bridge as a child process, and the demo tool server.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-progress-bridge");

/// The `auth.job_secret` of test bridges that set none: every test bridge (and every replica
/// in a test) signs job URLs alike, and tests can mint tokens with [`job_tokens`].
pub const TEST_JOB_SECRET: &str = "test-job-secret-0123456789abcdef-not-for-production";

/// Mints the tokens a test bridge with [`TEST_JOB_SECRET`] accepts.
pub fn job_tokens() -> JobTokens {
    JobTokens::new(TEST_JOB_SECRET.as_bytes())
}

/// Static MCP tokens by name (`auth.mcp_tokens`): each `(name, token)` a principal of its own.
pub fn named_tokens(tokens: &[(&str, &str)]) -> Vec<McpToken> {
    let named = |&(name, token): &(&str, &str)| McpToken::named(name, Secret::literal(token));
    tokens.iter().map(named).collect()
}

/// The demo tool server as a stdio upstream: this test binary's sibling, the bridge itself.
pub fn demo_stdio_upstream(name: &str) -> UpstreamConfig {
    UpstreamConfig::stdio(name, BIN, &["demo-tools"])
}

pub fn http_upstream(name: &str, url: &str) -> UpstreamConfig {
    UpstreamConfig::http(name, url)
}

/// Set one tool's mode on an upstream config.
pub fn with_tool_mode(mut upstream: UpstreamConfig, tool: &str, mode: CallMode) -> UpstreamConfig {
    upstream.tools.entry(tool.into()).or_default().mode = Some(mode);
    upstream
}

/// The test-only misbehaving MCP server (tests/fixtures/misbehaving_upstream.py) as a stdio
/// upstream.
pub fn misbehaving_upstream(name: &str, python: &str) -> UpstreamConfig {
    let mut upstream = demo_stdio_upstream(name);
    upstream.command = Some(python.into());
    upstream.args = vec![
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/misbehaving_upstream.py"
        )
        .into(),
    ];
    upstream
}

/// A bridge running in this process on 127.0.0.1 with a free port.
pub struct TestBridge {
    pub bridge: Option<RunningBridge>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The Redis key prefix of a bridge moved onto the test Redis (`BRIDGE_TEST_STORE=redis`):
    /// its keys go when the bridge does (dropped after `bridge`: fields drop in order).
    _redis_prefix: Option<RedisPrefix>,
}

impl TestBridge {
    /// A handle on a bridge started some other way (at `base`), for the helpers that take one.
    pub fn at(base: &str) -> Self {
        Self {
            bridge: None,
            base: base.to_string(),
            _redis_prefix: None,
        }
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The events URL of a correlation, with its token.
    pub fn correlation_events_url(&self, cid: &str) -> String {
        let token = job_tokens().correlation(&cid.parse().expect("a valid correlation ID"));
        format!("{}/correlations/{cid}/events?token={token}", self.base)
    }

    pub fn running(&self) -> &RunningBridge {
        self.bridge.as_ref().expect("bridge running")
    }

    /// Stop the bridge in order, its running jobs given `drain` to end (see
    /// `RunningBridge::shutdown`).
    pub async fn shutdown(mut self, drain: Duration) {
        if let Some(bridge) = self.bridge.take() {
            bridge.shutdown(drain).await;
        }
    }
}

/// Start a bridge with the demo tools as stdio upstream `demo`, after `configure` has had its
/// say, and wait until every upstream is ready.
pub async fn start_bridge(configure: impl FnOnce(&mut Config)) -> TestBridge {
    start_config(demo_config(configure)).await
}

/// The test config with the demo tools as stdio upstream `demo`, after `configure`.
pub fn demo_config(configure: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default_for_tests();
    config.upstreams = vec![demo_stdio_upstream("demo")];
    configure(&mut config);
    config
}

/// Start a bridge with exactly this config (its listen address is replaced by a free port; a
/// missing `auth.job_secret` becomes [`TEST_JOB_SECRET`]).
pub async fn start_config(config: Config) -> TestBridge {
    start_config_at(config, None).await
}

/// [`start_config`], with job handles pointing at `public_url` instead of the bridge itself
/// (for a bridge behind a [`super::proxy::DropProxy`]).
/// With `BRIDGE_TEST_STORE=redis` (a second pass in `.ci/run`), a memory-store config runs on
/// the test Redis instead, under a fresh key prefix: the whole end-to-end suite then checks
/// that both stores behave alike.
pub async fn start_config_at(config: Config, public_url: Option<String>) -> TestBridge {
    start_config_then(config, public_url, |_| {}).await
}

/// [`start_config_at`], with `finish` given the config once its address is known (for
/// settings that name the bridge's own URL, such as the audience of its tokens).
pub async fn start_config_then(
    mut config: Config,
    public_url: Option<String>,
    finish: impl FnOnce(&mut Config),
) -> TestBridge {
    let on_test_redis = std::env::var("BRIDGE_TEST_STORE").is_ok_and(|v| v == "redis")
        && config.store.backend == StoreBackend::Memory;
    let mut redis_prefix = None;
    if on_test_redis {
        let url = test_redis("BRIDGE_TEST_STORE=redis")
            .await
            .expect("BRIDGE_TEST_STORE=redis needs a Redis");
        let prefix = RedisPrefix::new(&url, "e2e");
        config.store.backend = StoreBackend::Redis;
        config.store.redis_url = url;
        config.store.key_prefix = prefix.to_string();
        redis_prefix = Some(prefix);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    config.server.listen = addr;
    config.server.public_url = public_url.unwrap_or_else(|| format!("http://{addr}"));
    if config.auth.job_secret.is_none() {
        config.auth.job_secret = Some(Secret::literal(TEST_JOB_SECRET).into());
    }
    finish(&mut config);
    let bridge = app::start_with_listener(config, listener)
        .await
        .expect("bridge starts");
    for upstream in bridge.upstreams.iter() {
        assert!(
            upstream.ready(WAIT).await,
            "upstream {} did not become ready",
            upstream.name()
        );
    }
    // (A test that configures Redis itself may keep it down on purpose: no wait then.)
    if on_test_redis {
        let store = bridge.store.clone();
        eventually("the store is ready", || {
            let store = store.clone();
            async move { store.ping().await.is_ok() }
        })
        .await;
    }
    TestBridge {
        bridge: Some(bridge),
        base: format!("http://{addr}"),
        _redis_prefix: redis_prefix,
    }
}

/// The `[[upstreams]]` entry of the demo tools as a stdio child, for a config file;
/// `tools`: the inline table of per-tool settings (`{}` for none).
pub fn demo_upstream_toml(tools: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"demo\"\ntransport = \"stdio\"\ncommand = \"{BIN}\"\n\
         args = [\"demo-tools\"]\ntools = {tools}\n"
    )
}

/// The `[server]` section of a bridge child: it binds a port of its own choosing (port 0) and
/// its job URLs name that port; its banner says which ([`BridgeProcess`] reads it). No port is
/// picked here and bound later, so runs of several suites at once cannot take each other's.
pub const SERVER_ON_PORT_0: &str =
    "[server]\nlisten = \"127.0.0.1:0\"\npublic_url = \"http://127.0.0.1:0\"\n";

/// The bridge binary as a child process on a port of its own: [`SERVER_ON_PORT_0`] followed by
/// `config`, with `env` added (`RUST_LOG` is `info,rmcp=warn` unless given).
/// Panics with the bridge's log if it does not start.
pub async fn spawn_bridge(config: &str, env: &[(&str, &str)]) -> BridgeProcess {
    let text = format!("{SERVER_ON_PORT_0}\n{config}");
    let mut env = env.to_vec();
    if !env.iter().any(|(k, _)| *k == "RUST_LOG") {
        env.push(("RUST_LOG", "info,rmcp=warn"));
    }
    BridgeProcess::start(std::path::Path::new(BIN), None, "bridge", &text, &env)
        .await
        .unwrap_or_else(|e| panic!("the bridge process did not start: {e}"))
}

/// A TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The demo tools served over Streamable HTTP in this process; stops when dropped.
pub struct HttpDemo {
    pub url: String,
    ct: CancellationToken,
}

impl Drop for HttpDemo {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

impl HttpDemo {
    /// `host:port` of the server.
    pub fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }

    /// Stop the server and wait until its port is free again.
    pub async fn stop(self) {
        let authority = self.authority();
        drop(self);
        eventually("the demo server stops", || async {
            tokio::net::TcpStream::connect(&authority).await.is_err()
        })
        .await;
    }
}

pub async fn start_http_demo() -> HttpDemo {
    start_http_demo_at("127.0.0.1:0").await
}

/// The demo tools over Streamable HTTP on a given address.
pub async fn start_http_demo_at(addr: &str) -> HttpDemo {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind the demo's address");
    start_http_demo_on(listener)
}

/// The demo tools over Streamable HTTP on `listener` (a [`super::listen::HeldPort`]'s, to
/// start one where the bridge already expects it, or to restart one on the same port).
pub fn start_http_demo_on(listener: tokio::net::TcpListener) -> HttpDemo {
    let ct = CancellationToken::new();
    let addr = listener.local_addr().expect("local address");
    let router = demo_tools::http_router(ct.clone());
    let stop = ct.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    HttpDemo {
        url: format!("http://{addr}/mcp"),
        ct,
    }
}
