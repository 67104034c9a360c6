//! One handle for either kind of Redis: a single node (the crate's multiplexed connection) or
//! a Redis Cluster (its cluster connection: each command to the node that holds its keys'
//! slot, following `MOVED`/`ASK` and failovers), so the store's code is the same for both.
//!
//! A pipeline on a cluster may touch many slots (a lease and a replica's set, or the keys of
//! many jobs); the crate sends a pipeline to one node and fails it `CROSSSLOT`. Here its
//! commands are sent one by one, all at once, and answered in order: no longer one round trip,
//! and never atomic, which no pipeline of the bridge is (each command stands alone).

use ::redis::{
    Cmd, Pipeline, RedisFuture, RedisResult, ToRedisArgs, Value,
    aio::{ConnectionLike, MultiplexedConnection},
    cluster_async::ClusterConnection,
};

#[derive(Clone)]
pub(super) enum Conn {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Subscribe on this connection (RESP3: messages arrive as pushes).
    pub(super) async fn subscribe(&mut self, channels: impl ToRedisArgs) -> RedisResult<()> {
        match self {
            Conn::Node(c) => c.subscribe(channels).await,
            Conn::Cluster(c) => c.subscribe(channels).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channels: impl ToRedisArgs) -> RedisResult<()> {
        match self {
            Conn::Node(c) => c.unsubscribe(channels).await,
            Conn::Cluster(c) => c.unsubscribe(channels).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => {
                // A clone shares the one cluster connection.
                let conn = c.clone();
                if pipeline.is_transaction() {
                    return c.req_packed_commands(pipeline, offset, count);
                }
                Box::pin(async move {
                    let each = pipeline.cmd_iter().map(|cmd| {
                        let mut conn = conn.clone();
                        async move { conn.req_packed_command(cmd).await }
                    });
                    futures::future::join_all(each)
                        .await
                        .into_iter()
                        .collect::<RedisResult<Vec<Value>>>()
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
