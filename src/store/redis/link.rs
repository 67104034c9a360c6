//! One named, supervised connection to Redis.
//!
//! A replica holds exactly two, whatever the number of SSE subscribers: `cmd` for every
//! command (pipelined on one socket) and `sub` for pub/sub (RESP3 pushes), so a large history
//! read never sits in front of live events. Not the crate's `ConnectionManager`: the bridge
//! needs a hook after each reconnect and must fail fast while Redis is away.
//!
//! While the link is down every command fails at once with the reason, and one task
//! reconnects with backoff and jitter. A command timeout alone does not take the link down:
//! the supervisor sends a `PING` bounded by [`PROBE_FACTOR`] times the command timeout, and
//! only an unanswered probe (or a real disconnection) makes the link again.
//! Why: docs/design/store.md.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use ::redis::{AsyncConnectionConfig, Client, PushInfo, PushKind, RedisError};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, watch};

use super::{
    conn::Conn,
    eviction::{Policy, refusal},
    nodes::Nodes,
};
use crate::{shutdown::Tasks, wait::Backoff};

/// How many command timeouts the liveness probe after a slow command may take before the link
/// counts as lost: long enough for a busy Redis (or a starved process) to answer the commands
/// queued in front of it.
const PROBE_FACTOR: u32 = 3;

/// Why a command did not get an answer. The message is whole (it names Redis, the link, and
/// what to check); the Redis error behind it, when there is one, is also its `source()`.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum LinkError {
    /// Redis is unreachable (or did not answer in time): nothing is known to have happened.
    #[error("{reason}")]
    Down {
        reason: String,
        #[source]
        cause: Option<RedisError>,
    },
    /// Redis answered with an error.
    #[error("Redis at {target} answered with an error: {cause}")]
    Server {
        target: String,
        #[source]
        cause: RedisError,
    },
}

impl LinkError {
    /// Down, for a reason of the bridge's own (no Redis error behind it).
    pub(super) fn down(reason: impl Into<String>) -> Self {
        LinkError::Down {
            reason: reason.into(),
            cause: None,
        }
    }
}

/// What a link does with the pub/sub messages it receives (called on the connection's read
/// path: it must not block).
pub(super) type PushHandler = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// Where a link connects.
// One per link, made once at start: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Endpoint {
    /// One Redis.
    Node(Client),
    /// A Redis Cluster's commands: a cluster client seeded with every node known when it
    /// connects.
    Cluster(Arc<Nodes>),
    /// Pub/sub on a Redis Cluster: one node at a time (see docs/design/store.md for why), the
    /// next known node at each reconnect.
    ClusterNode(Arc<Nodes>),
}

/// What a link is for.
pub(super) enum Role {
    /// Every command. `refuse_evicting`: a Redis whose `maxmemory-policy` may evict job keys
    /// is not used (else only logged); see [`super::eviction`].
    Commands { refuse_evicting: bool },
    /// Pub/sub, its messages given to the handler.
    Subscriber(PushHandler),
}

pub(super) struct Link {
    role: &'static str,
    name: String,
    endpoint: Endpoint,
    /// The URL without its password, for messages.
    target: String,
    timeout: Duration,
    /// Pauses between reconnect attempts.
    reconnect: Backoff,
    /// The live connection and its generation. A plain (`parking_lot`) lock: held only to clone or swap the
    /// handle, never across an `.await`.
    conn: RwLock<Option<(u64, Conn)>>,
    up: AtomicBool,
    generation: AtomicU64,
    last_error: Mutex<String>,
    /// When the current connection was made (owner-loss checks wait until the link has been
    /// up for a whole lease, so a Redis restart does not look like dead replicas).
    up_since: Mutex<Option<Instant>>,
    broken: Notify,
    /// A command on this generation got no answer in time: the supervisor probes the link.
    suspect: Notify,
    suspect_generation: AtomicU64,
    /// Bumped after every successful (re)connect.
    connected: watch::Sender<u64>,
    on_push: Option<PushHandler>,
    /// `Some(refuse)` on the command link: the eviction policy is checked at each connect.
    eviction: Option<bool>,
    /// The last connect was refused for the eviction policy (`last_error` says why).
    refused: AtomicBool,
}

/// Why a connect attempt failed.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// Redis answered, but the bridge must not use it.
    #[error("{0}")]
    Refused(String),
}

impl Link {
    pub(super) fn new(
        role: Role,
        name: String,
        endpoint: Endpoint,
        target: String,
        timeout: Duration,
        reconnect: Backoff,
    ) -> Arc<Self> {
        let (role, on_push, eviction) = match role {
            Role::Commands { refuse_evicting } => ("cmd", None, Some(refuse_evicting)),
            Role::Subscriber(handler) => ("sub", Some(handler), None),
        };
        Arc::new(Self {
            role,
            name,
            endpoint,
            target,
            timeout,
            reconnect,
            conn: RwLock::new(None),
            up: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            last_error: Mutex::new("not connected yet".into()),
            up_since: Mutex::new(None),
            broken: Notify::new(),
            suspect: Notify::new(),
            suspect_generation: AtomicU64::new(0),
            connected: watch::channel(0).0,
            on_push,
            eviction,
            refused: AtomicBool::new(false),
        })
    }

    pub(super) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub(super) fn up_for(&self) -> Option<Duration> {
        let since = *self.up_since.lock();
        since.filter(|_| self.is_up()).map(|s| s.elapsed())
    }

    /// Wakes at every (re)connect from now on. If the link is up already, the current
    /// connection counts as news too: a task that starts after the first connect (its spawn
    /// was polled late) must still set that connection up, or the hub would never subscribe
    /// the control channel and cancel requests would be lost until the next reconnect.
    pub(super) fn connected(&self) -> watch::Receiver<u64> {
        let mut connected = self.connected.subscribe();
        if self.is_up() {
            connected.mark_changed();
        }
        connected
    }

    /// Why the link is down, in words for `/readyz` and errors.
    pub(super) fn down_reason(&self) -> String {
        let last = self.last_error.lock().clone();
        if self.refused.load(Ordering::Acquire) {
            return format!("Redis at {} is not used: {last}", self.target);
        }
        format!(
            "Redis at {} is unreachable ({} connection: {last}); the bridge keeps reconnecting, \
             check that Redis runs and store.redis_url is right",
            self.target, self.role
        )
    }

    /// The link is down: [`Link::down_reason`] as an error.
    pub(super) fn down_error(&self) -> LinkError {
        LinkError::down(self.down_reason())
    }

    /// The connection, or at once the reason there is none.
    pub(super) fn get(&self) -> Result<(u64, Conn), LinkError> {
        if !self.is_up() {
            return Err(self.down_error());
        }
        self.conn.read().clone().ok_or_else(|| self.down_error())
    }

    /// Run one request with the command timeout. A connection-level failure marks the link
    /// down (so the next callers fail fast) and wakes the reconnect task; no answer in time
    /// fails this request only, and has the link probed (see the module doc).
    pub(super) async fn run<T, F, Fut>(&self, request: F) -> Result<T, LinkError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let (generation, conn) = self.get()?;
        match tokio::time::timeout(self.timeout, request(conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) if error.is_timeout() => Err(self.slow(generation, Some(error))),
            Ok(Err(error)) if is_connection_error(&error) => {
                self.fail(generation, &error.to_string());
                Err(LinkError::Down {
                    reason: self.down_reason(),
                    cause: Some(error),
                })
            }
            // The connection is fine but Redis cannot serve yet (LOADING after a restart,
            // TRYAGAIN, MASTERDOWN): nothing happened, so callers treat it as an outage (an
            // owner holds the event and writes it later) instead of losing the write.
            Ok(Err(error)) if is_transient(&error) => Err(LinkError::Down {
                reason: format!(
                    "Redis at {} cannot serve yet ({error}); the bridge retries",
                    self.target
                ),
                cause: Some(error),
            }),
            Ok(Err(error)) => Err(LinkError::Server {
                target: self.target.clone(),
                cause: error,
            }),
            Err(_) => Err(self.slow(generation, None)),
        }
    }

    /// A request on connection `generation` got no answer in time: it fails as an outage does
    /// (nothing is known to have happened: an owner holds its event and writes it again, which
    /// the append script recognises), and the supervisor checks whether the link itself is gone.
    fn slow(&self, generation: u64, cause: Option<RedisError>) -> LinkError {
        self.suspect_generation.store(generation, Ordering::Release);
        self.suspect.notify_one();
        LinkError::Down {
            reason: format!(
                "Redis at {} did not answer within {} ms ({} connection); the bridge retries",
                self.target,
                self.timeout.as_millis(),
                self.role
            ),
            cause,
        }
    }

    /// After a slow request: `PING` on the same connection, behind what is in flight, with
    /// [`PROBE_FACTOR`] times the command timeout. No answer: the connection is lost.
    async fn probe(&self) {
        let generation = self.suspect_generation.load(Ordering::Acquire);
        let Ok((current, mut conn)) = self.get() else {
            return;
        };
        if current != generation {
            return;
        }
        let bound = self.timeout * PROBE_FACTOR;
        let ping_cmd = ::redis::cmd("PING");
        let ping = ping_cmd.exec_async(&mut conn);
        match tokio::time::timeout(bound, ping).await {
            Ok(Ok(())) => {
                tracing::info!(link = self.role, target = %self.target, "a Redis command was slow, but the connection answers; keeping it");
            }
            Ok(Err(error)) if !error.is_timeout() && !is_connection_error(&error) => {}
            Ok(Err(_)) | Err(_) => {
                let why = format!(
                    "no answer within {} ms, nor to a PING within {} ms",
                    self.timeout.as_millis(),
                    bound.as_millis()
                );
                self.fail(generation, &why);
            }
        }
    }

    /// Mark connection `generation` as lost (a later one is left alone).
    pub(super) fn fail(&self, generation: u64, why: &str) {
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        *self.last_error.lock() = why.to_string();
        if self.up.swap(false, Ordering::AcqRel) {
            tracing::warn!(link = self.role, target = %self.target, error = why, "lost the Redis connection; reconnecting");
            *self.conn.write() = None;
            *self.up_since.lock() = None;
        }
        self.broken.notify_one();
    }

    /// Keep the link connected until `tasks` stop: connect, and after every loss reconnect
    /// with exponential backoff (with jitter, so replicas do not reconnect in lockstep). At
    /// the stop the connection is closed (see [`Link::close`]).
    pub(super) async fn supervise(self: Arc<Self>, tasks: Tasks) {
        self.keep_connected(&tasks).await;
        self.close();
    }

    async fn keep_connected(self: &Arc<Self>, tasks: &Tasks) {
        let stop = tasks.stopping();
        let mut pauses = self.reconnect.pauses();
        let mut reported = false;
        loop {
            if !self.is_up() {
                let attempt = tokio::select! {
                    attempt = self.connect(tasks) => attempt,
                    _ = stop.cancelled() => return,
                };
                match attempt {
                    Ok(()) => {
                        pauses.reset();
                        reported = false;
                    }
                    Err(error) => {
                        *self.last_error.lock() = error.to_string();
                        let refused = matches!(error, ConnectError::Refused(_));
                        self.refused.store(refused, Ordering::Release);
                        if refused && !reported {
                            tracing::error!(link = self.role, target = %self.target, %error, "not using this Redis");
                            reported = true;
                        } else if !reported {
                            tracing::warn!(link = self.role, target = %self.target, %error, "cannot connect to Redis; retrying with backoff");
                            reported = true;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(pauses.next_pause()) => continue,
                            _ = stop.cancelled() => return,
                        }
                    }
                }
            }
            tokio::select! {
                _ = self.broken.notified() => {}
                _ = self.suspect.notified() => {
                    tokio::select! {
                        _ = self.probe() => {}
                        _ = stop.cancelled() => return,
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Drop the link's connection for good (the bridge is stopping): commands fail at once
    /// from now on, and once the last in-flight one returns its handle, the crate's task
    /// that drives the connection ends and closes the socket.
    fn close(&self) {
        *self.last_error.lock() = "the bridge is shutting down".into();
        self.up.store(false, Ordering::Release);
        *self.conn.write() = None;
        *self.up_since.lock() = None;
    }

    async fn connect(self: &Arc<Self>, tasks: &Tasks) -> Result<(), ConnectError> {
        let generation = self.generation.load(Ordering::Acquire) + 1;
        let mut conn = match &self.endpoint {
            Endpoint::Node(client) => {
                Conn::Node(self.connect_node(client, generation, tasks).await?)
            }
            // The cluster connection makes and mends its connections to the nodes itself;
            // `run` still takes this link down when a command meets a connection error.
            Endpoint::Cluster(nodes) => {
                Conn::Cluster(nodes.cluster_client()?.get_async_connection().await?)
            }
            Endpoint::ClusterNode(nodes) => {
                Conn::Node(self.connect_in_turn(nodes, generation, tasks).await?)
            }
        };
        let mut setname_cmd = ::redis::cmd("CLIENT");
        setname_cmd.arg("SETNAME").arg(&self.name);
        let setname = setname_cmd.exec_async(&mut conn);
        tokio::time::timeout(self.timeout, setname)
            .await
            .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))??;
        if let Some(refuse) = self.eviction {
            self.check_eviction(&mut conn, refuse).await?;
        }
        if let Endpoint::Cluster(nodes) | Endpoint::ClusterNode(nodes) = &self.endpoint {
            nodes.learn(&mut conn).await;
        }
        self.refused.store(false, Ordering::Release);
        self.generation.store(generation, Ordering::Release);
        *self.conn.write() = Some((generation, conn));
        *self.up_since.lock() = Some(Instant::now());
        self.up.store(true, Ordering::Release);
        self.connected.send_modify(|n| *n += 1);
        tracing::info!(link = self.role, target = %self.target, name = %self.name, "connected to Redis");
        Ok(())
    }

    /// A connection to the first of the cluster's known nodes that takes one, going round
    /// from the node after the one used last (any node carries every plain `PUBLISH`).
    async fn connect_in_turn(
        self: &Arc<Self>,
        nodes: &Nodes,
        generation: u64,
        tasks: &Tasks,
    ) -> Result<::redis::aio::MultiplexedConnection, RedisError> {
        let mut failed = None;
        for (index, node, client) in nodes.in_turn() {
            let connected = match client {
                Ok(client) => self.connect_node(&client, generation, tasks).await,
                Err(error) => Err(error),
            };
            match connected {
                Ok(conn) => {
                    nodes.used(index);
                    tracing::info!(link = self.role, target = %self.target, %node, "using this Redis Cluster node");
                    return Ok(conn);
                }
                Err(error) => {
                    tracing::debug!(link = self.role, %node, %error, "cannot connect to this Redis Cluster node; trying the next");
                    failed = Some(error);
                }
            }
        }
        Err(failed.unwrap_or_else(|| RedisError::from(std::io::Error::other("no node known"))))
    }

    /// A connection to one Redis, its pushes (pub/sub messages, the disconnection notice)
    /// handed to this link.
    async fn connect_node(
        self: &Arc<Self>,
        client: &Client,
        generation: u64,
        tasks: &Tasks,
    ) -> Result<::redis::aio::MultiplexedConnection, RedisError> {
        let weak: Weak<Self> = Arc::downgrade(self);
        let on_push = self.on_push.clone();
        // The crate drives the connection on a task of its own, which owns this handler and
        // drops it when the connection ends: the hold makes shutdown wait for that.
        let hold = tasks.hold();
        let push = move |info: PushInfo| -> Result<(), std::convert::Infallible> {
            let _hold = &hold;
            if info.kind == PushKind::Disconnection {
                if let Some(link) = weak.upgrade() {
                    link.fail(generation, "the connection closed");
                }
            } else if let Some(handler) = &on_push {
                handler(info);
            }
            Ok(())
        };
        // No response timeout in the crate: `run` bounds each request itself, and the probe
        // must be able to wait longer than a request.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None)
            .set_push_sender(push);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Read Redis's eviction policy on a new connection: one that may evict job keys is
    /// refused (`refuse`) or logged as an error.
    async fn check_eviction(&self, conn: &mut Conn, refuse: bool) -> Result<(), ConnectError> {
        let read = tokio::time::timeout(self.timeout, Policy::read(conn))
            .await
            .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))??;
        match read {
            Policy::Safe => Ok(()),
            Policy::Evicts(policy) if refuse => Err(ConnectError::Refused(refusal(&policy))),
            Policy::Evicts(policy) => {
                tracing::error!(target = %self.target, policy = %policy, "Redis may evict job keys (store.redis_eviction_check = \"warn\": serving anyway): {}", refusal(&policy));
                Ok(())
            }
            Policy::Unknown(why) => {
                tracing::warn!(target = %self.target, %why, "cannot read Redis's maxmemory-policy; make sure it is noeviction, or job keys may be evicted (docs/replicas.md#which-redis)");
                Ok(())
            }
        }
    }
}

/// Server errors that say "not now" rather than "never".
fn is_transient(error: &RedisError) -> bool {
    use ::redis::{ErrorKind, ServerErrorKind};
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
        )
    )
}

fn is_connection_error(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(reply: &str) -> RedisError {
        match ::redis::parse_redis_value(reply.as_bytes()) {
            Ok(::redis::Value::ServerError(error)) => error.into(),
            other => panic!("not a server error: {other:?}"),
        }
    }

    /// A store error says everything in its message, and keeps the Redis error reachable as
    /// a typed source (so a later client-facing message can hide it and logs still have it).
    #[test]
    fn a_redis_error_is_in_the_message_and_is_the_source() {
        use std::error::Error as _;
        let error: crate::events::StoreError = LinkError::Server {
            target: "redis://cache:6379".into(),
            cause: server_error("-WRONGTYPE Operation against a key holding the wrong kind\r\n"),
        }
        .into();
        let text = error.to_string();
        assert!(
            text.starts_with(
                "the job store is unavailable: Redis at redis://cache:6379 answered with an error: "
            ) && text.contains("WRONGTYPE"),
            "{text}"
        );
        let link = error.source().expect("the link error");
        assert!(link.downcast_ref::<LinkError>().is_some());
        let redis = link.source().expect("the Redis error");
        assert!(redis.downcast_ref::<RedisError>().is_some());
        assert!(LinkError::down("gone").source().is_none());
    }

    /// After a restart Redis accepts connections while it loads its data and answers
    /// `-LOADING`: an owner's write must then be held and written later, not dropped.
    #[test]
    fn redis_saying_not_now_is_an_outage_and_a_real_error_is_not() {
        for reply in [
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
        ] {
            assert!(is_transient(&server_error(reply)), "{reply}");
        }
        for reply in [
            "-ERR Error running script\r\n",
            "-NOSCRIPT No matching script\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ] {
            assert!(!is_transient(&server_error(reply)), "{reply}");
        }
    }
}
