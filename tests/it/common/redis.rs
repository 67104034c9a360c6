//! Redis for the tests: the shared test server, a key prefix per test that is swept when the
//! test is done (so no test leaves keys behind), a `redis-server` of a test's own that it may
//! stop and restart, and the Redis store opened directly (as one replica would).

use std::time::Duration;

use mcp_progress_bridge::{
    events::Broker,
    shutdown::{Shutdown, ShutdownGuard},
    store::{RedisOptions, RedisStore},
};

use super::{listen::child_port, prereq::skip, wait::eventually};

/// The Redis the tests share: `BRIDGE_TEST_REDIS_URL`, else the default local one, if it
/// answers `PING`.
pub async fn test_redis(test: &str) -> Option<String> {
    let url = std::env::var("BRIDGE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    match redis_ping(&url).await {
        Ok(()) => Some(url),
        Err(e) => skip(
            test,
            &format!(
                "no Redis answers at {url} ({e}); start one (`redis-server`) or set BRIDGE_TEST_REDIS_URL"
            ),
        ),
    }
}

/// How long a `PING` may take before Redis counts as missing: generous, since a strict run
/// fails on it and a machine at load 13 was seen to take over 2 s.
const REDIS_ANSWERS_WITHIN: Duration = Duration::from_secs(10);

async fn redis_ping(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(REDIS_ANSWERS_WITHIN, ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {REDIS_ANSWERS_WITHIN:?}")),
    }
}

/// A key prefix no other test (or run) uses.
pub fn unique_prefix(test: &str) -> String {
    format!("test-{test}-{:016x}", fastrand::u64(..))
}

/// A [`unique_prefix`] on a Redis, whose keys are deleted when it is dropped: a test leaves
/// nothing behind on a Redis others share, whatever the bridge left (with or without a TTL).
/// Declare it before what writes under it (the bridge, the processes), so it drops after them.
/// `BRIDGE_TEST_KEEP_KEYS=1` keeps the keys, to see what a run leaves.
pub struct RedisPrefix {
    url: String,
    prefix: String,
}

impl RedisPrefix {
    pub fn new(url: &str, test: &str) -> Self {
        Self {
            url: url.to_string(),
            prefix: unique_prefix(test),
        }
    }

    /// Delete every key under the prefix (blocking: this runs in `Drop`).
    fn sweep(&self) -> redis::RedisResult<usize> {
        let client = redis::Client::open(self.url.as_str())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        let pattern = format!("{}:*", self.prefix);
        let (mut cursor, mut deleted) = (0u64, 0);
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut conn)?;
            if !keys.is_empty() {
                redis::cmd("UNLINK").arg(&keys).query::<()>(&mut conn)?;
                deleted += keys.len();
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}

impl std::ops::Deref for RedisPrefix {
    type Target = str;
    fn deref(&self) -> &str {
        &self.prefix
    }
}

impl std::fmt::Display for RedisPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.prefix)
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        if std::env::var("BRIDGE_TEST_KEEP_KEYS").is_ok_and(|v| v == "1") {
            return;
        }
        if let Err(error) = self.sweep() {
            eprintln!("could not delete the keys under {}: {error}", self.prefix);
        }
    }
}

/// The Redis store opened in this process, as one replica named `name` would; stopped when
/// dropped.
pub struct StoreReplica {
    pub store: RedisStore,
    pub name: String,
    /// Stops the store's tasks when the replica is dropped.
    _stop: ShutdownGuard,
}

/// Open the Redis store at `url` under `prefix` (history `history`, retention 60 s, lease
/// 15 s) as a new replica, once it answers.
pub async fn store_replica(url: &str, prefix: &str, history: usize) -> StoreReplica {
    store_replica_with(url, prefix, history, Duration::from_secs(2)).await
}

/// [`store_replica`] with its own command timeout.
pub async fn store_replica_with(
    url: &str,
    prefix: &str,
    history: usize,
    command_timeout: Duration,
) -> StoreReplica {
    let replica = open_store_replica(url, prefix, history, command_timeout, true, None);
    eventually("the store connects", || async {
        replica.store.ping().await.is_ok()
    })
    .await;
    replica
}

/// [`store_replica_with`] returned at once, connected or not; `refuse_evicting_policy` as
/// `store.redis_eviction_check = "refuse"` sets it.
pub fn open_store_replica(
    url: &str,
    prefix: &str,
    history: usize,
    command_timeout: Duration,
    refuse_evicting_policy: bool,
    ca_file: Option<std::path::PathBuf>,
) -> StoreReplica {
    let name = format!("replica-{:08x}", fastrand::u32(..));
    let options = RedisOptions {
        url: url.to_string(),
        key_prefix: prefix.to_string(),
        history,
        retention: Duration::from_secs(60),
        lease: Duration::from_secs(15),
        outage_buffer: 100,
        command_timeout,
        relay_timeout: Duration::from_secs(5),
        max_answer_bytes: 65_536,
        max_relays: 1024,
        max_relays_per_principal: 256,
        adoption_events: Default::default(),
        refuse_evicting_policy,
        ca_file,
        cluster: false,
    };
    start_replica(options, name)
}

/// The Redis store of a replica on the Redis Cluster whose node `url` is, once it answers.
pub async fn cluster_store_replica(url: &str, prefix: &str, history: usize) -> StoreReplica {
    let name = format!("replica-{:08x}", fastrand::u32(..));
    let options = RedisOptions {
        url: url.to_string(),
        key_prefix: prefix.to_string(),
        history,
        retention: Duration::from_secs(60),
        lease: Duration::from_secs(15),
        outage_buffer: 100,
        command_timeout: Duration::from_secs(2),
        relay_timeout: Duration::from_secs(5),
        max_answer_bytes: 65_536,
        max_relays: 1024,
        max_relays_per_principal: 256,
        adoption_events: Default::default(),
        refuse_evicting_policy: true,
        ca_file: None,
        cluster: true,
    };
    let replica = start_replica(options, name);
    eventually("the store connects to the cluster", || async {
        replica.store.ping().await.is_ok()
    })
    .await;
    replica
}

fn start_replica(options: RedisOptions, name: String) -> StoreReplica {
    let shutdown = Shutdown::new();
    let store = RedisStore::start(options, name.clone(), &shutdown).expect("store");
    StoreReplica {
        store,
        name,
        _stop: shutdown.drop_guard(),
    }
}

/// A `redis-server` of the test's own, on a free port, with its data in a temporary
/// directory (append-only file, fsync always: a restart loses nothing). Stopped when dropped.
pub struct PrivateRedis {
    pub port: u16,
    pub url: String,
    dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    pub async fn start(test: &str) -> Option<Self> {
        let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        if binary.is_none() {
            return skip(
                test,
                "redis-server is not installed (apt-get install redis-server)",
            );
        }
        // redis-server cannot take port 0 (that turns TCP off): it gets a free port, and
        // another, should another run's process take that one before it binds.
        for _ in 0..5 {
            let port = super::bridge::free_port();
            let mut redis = Self {
                port,
                url: format!("redis://127.0.0.1:{port}"),
                dir: tempfile::tempdir().expect("a temporary directory"),
                child: None,
            };
            if redis.run().await {
                return Some(redis);
            }
        }
        panic!("{test}: redis-server could not bind any of five free ports");
    }

    /// Start redis-server on `self.port` and wait until it answers. `false`: it exited first
    /// (its port was taken), and nothing is running.
    async fn run(&mut self) -> bool {
        let dir = self.dir.path();
        let mut child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts");
        // It, and not another process that took the port, listens there.
        let listens = child_port(child.id(), "the private redis-server", || {
            matches!(child.try_wait(), Ok(Some(_)))
        })
        .await;
        if listens != Some(self.port) {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        self.child = Some(child);
        let url = self.url.clone();
        eventually("the private redis-server answers", || async {
            redis_ping(&url).await.is_ok()
        })
        .await;
        true
    }

    /// Stop it (SIGTERM: Redis finishes writing its data) and wait until it has exited.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling the redis-server this test started and still owns.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            eventually("redis-server exits", || {
                let exited = child.try_wait().expect("wait").is_some();
                async move { exited }
            })
            .await;
        }
    }

    /// Stop it and start it again on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        assert!(
            self.run().await,
            "redis-server could not bind port {} again: another process took it while it was down",
            self.port
        );
    }

    /// `CLIENT LIST` lines of every connection but the one asking.
    pub async fn other_clients(&self) -> Vec<String> {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        // The crate's default response timeout (500 ms) is short for a loaded test machine.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let me: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .unwrap();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await
            .unwrap();
        list.lines()
            .filter(|l| !l.starts_with(&format!("id={me} ")))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `[store]` section for a Redis-backed bridge in tests: short lease, so owner loss is
/// noticed within a few seconds.
pub fn redis_store_toml(url: &str, prefix: &str, lease_secs: u64) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\nkey_prefix = \"{prefix}\"\nlease_secs = {lease_secs}\n"
    )
}
