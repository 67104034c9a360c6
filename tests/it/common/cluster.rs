//! A Redis Cluster of the test's own: three primaries (and, for failovers, a replica each) from
//! `redis-server --cluster-enabled yes` on free ports in a temporary directory, joined by
//! `redis-cli --cluster create`, ready once every node says `cluster_state:ok`; killed (and the
//! directory removed) when dropped. A node may be killed on its own (`kill_primary`), for an
//! unplanned failover.

use std::process::{Child, Command, Stdio};

use super::{
    bridge::free_port,
    listen::listening_ports,
    prereq::skip,
    wait::{eventually, eventually_within},
};

/// How long a replica may take to catch up with its primary, or to be promoted: longer than
/// the common bound, as six nodes on a machine busy with other tests can be slow to agree.
const FAILOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Redis's own `cluster-node-timeout`.
const DEFAULT_NODE_TIMEOUT_MS: u32 = 15_000;
/// The node timeout of a cluster whose primaries are killed: short enough for a quick
/// election, long enough that a node starved of CPU for a moment is not counted as failed.
const KILL_NODE_TIMEOUT_MS: u32 = 3_000;

pub struct RedisCluster {
    /// The nodes' ports; the first is the seed the bridge is given.
    pub ports: Vec<u16>,
    nodes: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Three primaries, no replicas. `None` (the test skips; under `BRIDGE_TEST_STRICT=1` it
    /// fails) when `redis-server` or `redis-cli` is missing.
    pub async fn start(test: &str) -> Option<Self> {
        Self::start_with(test, 0, DEFAULT_NODE_TIMEOUT_MS).await
    }

    /// Three primaries with one replica each (six nodes; the replicas are `ports[3..]`), for
    /// failovers.
    pub async fn start_with_replicas(test: &str) -> Option<Self> {
        Self::start_with(test, 1, DEFAULT_NODE_TIMEOUT_MS).await
    }

    /// As [`RedisCluster::start_with_replicas`], with nodes that count a silent node as failed
    /// after [`KILL_NODE_TIMEOUT_MS`] (Redis's default is 15 s), so that a killed primary's
    /// replica is elected within seconds.
    pub async fn start_for_kills(test: &str) -> Option<Self> {
        Self::start_with(test, 1, KILL_NODE_TIMEOUT_MS).await
    }

    async fn start_with(test: &str, replicas: usize, node_timeout_ms: u32) -> Option<Self> {
        let nodes = 3 * (1 + replicas);
        let missing = ["redis-server", "redis-cli"].into_iter().find(|tool| {
            !["/usr/bin", "/usr/local/bin"]
                .iter()
                .any(|d| std::path::Path::new(d).join(tool).exists())
        });
        if let Some(tool) = missing {
            return skip(
                test,
                &format!("{tool} is not installed (apt-get install redis-server)"),
            );
        }
        let mut cluster = Self {
            ports: Vec::new(),
            nodes: Vec::new(),
            _dir: tempfile::tempdir().expect("a temporary directory"),
        };
        let dir = cluster._dir.path().to_path_buf();
        for _ in 0..nodes * 4 {
            if cluster.nodes.len() == nodes {
                break;
            }
            if let Some((port, child)) = node(&dir, node_timeout_ms).await {
                cluster.ports.push(port);
                cluster.nodes.push(child);
            }
        }
        assert_eq!(
            cluster.nodes.len(),
            nodes,
            "{test}: {nodes} cluster nodes could not bind free ports"
        );
        let addresses: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let created = tokio::task::spawn_blocking(move || {
            Command::new("redis-cli")
                .arg("--cluster")
                .arg("create")
                .args(&addresses)
                .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
                .stdin(Stdio::null())
                .output()
                .expect("redis-cli runs")
        })
        .await
        .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        for port in cluster.ports.clone() {
            eventually("every cluster node says cluster_state:ok", || async move {
                cluster_state_ok(port).await
            })
            .await;
        }
        Some(cluster)
    }

    /// Promote every replica to primary with `CLUSTER FAILOVER` (the manual, lossless one: the
    /// primary stops taking writes until its replica has caught up), one after the other, and
    /// wait until each says it is a primary and the cluster is ok again. Redis drops a manual
    /// failover that does not finish within 5 s (a busy machine): it is asked for again.
    pub async fn fail_over_every_primary(&self) {
        for &port in &self.ports[3..] {
            eventually_within(
                FAILOVER_WAIT,
                "the replica is in sync with its primary",
                || async move {
                    role(port).await.get(3)
                        == Some(&redis::Value::BulkString(b"connected".to_vec()))
                },
            )
            .await;
            eventually_within(
                FAILOVER_WAIT,
                "the replica is a primary now",
                || async move {
                    let mut conn = node_connection(port).await;
                    let _: Result<(), _> = redis::cmd("CLUSTER")
                        .arg("FAILOVER")
                        .query_async(&mut conn)
                        .await;
                    tokio::time::timeout(std::time::Duration::from_secs(8), async {
                        while !is_primary(port).await {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                    })
                    .await
                    .is_ok()
                },
            )
            .await;
        }
        for port in self.ports.clone() {
            eventually_within(
                FAILOVER_WAIT,
                "every cluster node says cluster_state:ok",
                || async move { cluster_state_ok(port).await },
            )
            .await;
        }
    }

    /// Kill the primary at `port` (`SIGKILL`: no failover command, no goodbye), and wait until
    /// its replica has been elected in its place and the cluster is ok again. Returns the new
    /// primary's port.
    pub async fn kill_primary(&mut self, port: u16) -> u16 {
        let replica = eventually_within(FAILOVER_WAIT, "the primary's replica is in sync", || {
            let ports = self.ports.clone();
            async move {
                for other in ports.into_iter().filter(|p| *p != port) {
                    let role = role(other).await;
                    let of = |i: usize| match role.get(i) {
                        Some(redis::Value::BulkString(b)) => {
                            String::from_utf8_lossy(b).into_owned()
                        }
                        Some(redis::Value::Int(n)) => n.to_string(),
                        _ => String::new(),
                    };
                    if of(0) == "slave" && of(2) == port.to_string() && of(3) == "connected" {
                        return Some(other);
                    }
                }
                None
            }
        })
        .await;
        let index = self.ports.iter().position(|p| *p == port).expect("a node");
        let mut node = self.nodes.remove(index);
        self.ports.remove(index);
        let _ = node.kill();
        let _ = node.wait();
        eventually_within(
            FAILOVER_WAIT,
            "the killed primary's replica is elected",
            || async move { is_primary(replica).await },
        )
        .await;
        for port in self.ports.clone() {
            eventually_within(
                FAILOVER_WAIT,
                "every live cluster node says cluster_state:ok",
                || async move { cluster_state_ok(port).await },
            )
            .await;
        }
        replica
    }

    /// The seed node's URL (any node would do).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.ports[0])
    }
}

/// One cluster-enabled node on a free port (its bus port free too), or `None` when another
/// process took a port first.
async fn node(dir: &std::path::Path, node_timeout_ms: u32) -> Option<(u16, Child)> {
    let (port, bus) = (free_port(), free_port());
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus.to_string(),
        ])
        .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
        .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join(format!("redis-{port}.log")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    // It listens on its port and its bus port, in whichever order the kernel lists them.
    let pid = child.id();
    let listens = eventually("a cluster redis-server listens on both its ports", || {
        let answer = if matches!(child.try_wait(), Ok(Some(_))) {
            Some(false)
        } else {
            let ports = listening_ports(pid);
            (ports.contains(&port) && ports.contains(&bus)).then_some(true)
        };
        async move { answer }
    })
    .await;
    if !listens {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    Some((port, child))
}

/// A node's `ROLE` reply (empty when it does not answer).
async fn role(port: u16) -> Vec<redis::Value> {
    let mut conn = node_connection(port).await;
    redis::cmd("ROLE")
        .query_async(&mut conn)
        .await
        .unwrap_or_default()
}

async fn is_primary(port: u16) -> bool {
    role(port).await.first() == Some(&redis::Value::BulkString(b"master".to_vec()))
}

async fn node_connection(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .expect("a node URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to a cluster node")
}

async fn cluster_state_ok(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.contains("cluster_state:ok")
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
