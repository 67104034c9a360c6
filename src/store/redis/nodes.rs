//! The nodes of a Redis Cluster a replica may connect to: the `store.redis_url` seed and every
//! node the cluster named at the last connect of either link (`CLUSTER SLOTS`: primaries and
//! their replicas). The pub/sub link goes round them when it reconnects (a plain `PUBLISH`
//! reaches every node, so any one carries every channel), and the command link's cluster
//! client is seeded with all of them: a dead seed node leaves neither link without Redis while
//! the cluster lives on. Each node gets the seed's credentials, protocol and TLS roots.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use ::redis::{
    Client, ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisResult, TlsCertificates, Value,
    cluster::{ClusterClient, ClusterClientBuilder},
};
use parking_lot::Mutex;

use super::conn::Conn;

/// At most this many learned nodes are kept: a cluster larger than this is still reached, from
/// any of them, and a hostile or broken reply cannot grow the list.
const MAX_NODES: usize = 64;

pub(super) struct Nodes {
    seed: ConnectionInfo,
    /// `store.redis_ca_file`'s PEM roots, for every node.
    ca: Option<Vec<u8>>,
    timeout: Duration,
    /// Other nodes the cluster named, `(host, port)`, in its order.
    learned: Mutex<Vec<(String, u16)>>,
    /// Where the pub/sub link's next connect starts (one past the node it used last).
    next: AtomicUsize,
}

impl Nodes {
    pub(super) fn new(seed: ConnectionInfo, ca: Option<Vec<u8>>, timeout: Duration) -> Self {
        Self {
            seed,
            ca,
            timeout,
            learned: Mutex::default(),
            next: AtomicUsize::new(0),
        }
    }

    /// The seed first, then every learned node that is not the seed.
    fn all(&self) -> Vec<ConnectionInfo> {
        let learned = self.learned.lock().clone();
        let others = learned
            .into_iter()
            .map(|(host, port)| self.at(host, port))
            .filter(|info| info.addr() != self.seed.addr());
        std::iter::once(self.seed.clone()).chain(others).collect()
    }

    /// The seed's settings, for the node at `host:port`.
    fn at(&self, host: String, port: u16) -> ConnectionInfo {
        let addr = match self.seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        self.seed.clone().set_addr(addr)
    }

    fn certs(&self) -> Option<TlsCertificates> {
        self.ca.clone().map(|root| TlsCertificates {
            client_tls: None,
            root_cert: Some(root),
        })
    }

    /// A client of one node, with the seed's TLS roots.
    fn client(&self, info: ConnectionInfo) -> RedisResult<Client> {
        match self.certs() {
            Some(certs) => Client::build_with_tls(info, certs),
            None => Client::open(info),
        }
    }

    /// The clients the pub/sub link tries, in turn, at its next connect: from one past the node
    /// it used last, round the list. Call [`Nodes::used`] with the index of the one that took.
    pub(super) fn in_turn(&self) -> Vec<(usize, String, RedisResult<Client>)> {
        let all = self.all();
        let start = self.next.load(Ordering::Acquire) % all.len();
        let mut turn: Vec<_> = all.into_iter().enumerate().collect();
        turn.rotate_left(start);
        turn.into_iter()
            .map(|(index, info)| (index, info.addr().to_string(), self.client(info)))
            .collect()
    }

    /// The pub/sub link is connected to node `index` of [`Nodes::in_turn`]'s list: when it is
    /// lost, the next connect starts at the node after it.
    pub(super) fn used(&self, index: usize) {
        self.next.store(index + 1, Ordering::Release);
    }

    /// A cluster client seeded with every known node (it connects to those that answer and
    /// reads the slots from them). Its timeouts: `Link::run` bounds each command, and its
    /// probe waits longer, so the crate's response timeout is longer than both.
    pub(super) fn cluster_client(&self) -> RedisResult<ClusterClient> {
        let mut builder = ClusterClientBuilder::new(self.all())
            .use_protocol(ProtocolVersion::RESP3)
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout * 3);
        if let Some(certs) = self.certs() {
            builder = builder.certs(certs);
        }
        builder.build()
    }

    /// Ask the cluster on `conn` which nodes it has (`CLUSTER SLOTS`), and keep them. A reply
    /// that names none (not a cluster, or not yet formed) leaves the list as it was.
    pub(super) async fn learn(&self, conn: &mut Conn) {
        let mut slots = ::redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let ask = slots.query_async::<Value>(conn);
        let Ok(Ok(reply)) = tokio::time::timeout(self.timeout, ask).await else {
            return;
        };
        let seed_host = match self.seed.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => return,
        };
        let named = slot_nodes(&reply, &seed_host);
        if !named.is_empty() {
            *self.learned.lock() = named;
        }
    }
}

/// The nodes of a `CLUSTER SLOTS` reply, each once, in its order: `[start, end, node...]` per
/// range, a node `[host, port, id, ...]`. An empty host is the asked node's own (the seed's
/// host); `?` (no known endpoint) is skipped.
fn slot_nodes(reply: &Value, seed_host: &str) -> Vec<(String, u16)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut nodes = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        for node in fields.iter().skip(2) {
            let Value::Array(node) = node else { continue };
            let host = match node.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = node.get(1) else {
                continue;
            };
            let (host, Ok(port)) = (host, u16::try_from(*port)) else {
                continue;
            };
            let host = match host.as_str() {
                "?" => continue,
                "" => seed_host.to_string(),
                _ => host,
            };
            if port != 0 && !nodes.contains(&(host.clone(), port)) && nodes.len() < MAX_NODES {
                nodes.push((host, port));
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::redis::IntoConnectionInfo;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn the_nodes_of_a_cluster_slots_reply_each_once_in_order() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("", 7001),
                node("?", 7004),
                node("10.0.0.1", 7000),
            ]),
            Value::Int(3),
        ]);
        assert_eq!(
            slot_nodes(&reply, "seed"),
            vec![
                ("10.0.0.1".to_string(), 7000),
                ("10.0.0.4".to_string(), 7003),
                ("seed".to_string(), 7001),
            ]
        );
        assert!(slot_nodes(&Value::Nil, "seed").is_empty());
    }

    #[test]
    fn the_pub_sub_link_goes_round_the_nodes_from_one_past_the_last_it_used() {
        let seed = "redis://:pw@seed:7000/?protocol=resp3"
            .into_connection_info()
            .unwrap();
        let nodes = Nodes::new(seed, None, Duration::from_secs(1));
        *nodes.learned.lock() = vec![
            ("seed".into(), 7000),
            ("b".into(), 7001),
            ("c".into(), 7002),
        ];
        let order =
            |nodes: &Nodes| -> Vec<usize> { nodes.in_turn().into_iter().map(|t| t.0).collect() };
        assert_eq!(order(&nodes), vec![0, 1, 2], "the seed first, once");
        nodes.used(0);
        assert_eq!(order(&nodes), vec![1, 2, 0]);
        nodes.used(2);
        assert_eq!(order(&nodes), vec![0, 1, 2]);
        let (_, _, client) = &nodes.in_turn()[1];
        let info = client.as_ref().unwrap().get_connection_info();
        assert_eq!(
            info.redis_settings().password(),
            Some("pw"),
            "the seed's credentials"
        );
    }
}
