//! The shared store: jobs, histories and live fan-out in Redis, so several bridge replicas
//! behind a load balancer serve every job, whichever replica runs its upstream call.
//!
//! Per job: a hash (the snapshot), a stream (the capped history, entry IDs `<seq>-0`) and a
//! pub/sub channel (live frames), named in [`keys`]. One Lua script per operation keeps each
//! step atomic, and Redis assigns the sequence numbers, so replay is the same on every
//! replica. Every key has a TTL. Two connections per replica ([`link`]); one subscription per
//! channel for all local readers ([`hub`]); a lease per owner ([`maintenance`]), whose expiry
//! hands the owner's re-attachable jobs to another replica and ends the rest `owner_lost`
//! ([`adoption`], fenced by generation); cancels and answers relayed on control channels
//! (`relay_answer`); events held while Redis is away ([`outbox`]).
//! The details and their reasons: docs/design/store.md.

mod adoption;
mod codec;
mod conn;
mod creation;
mod eviction;
mod handover;
mod hub;
mod keys;
mod link;
mod maintenance;
mod nodes;
mod outbox;
mod relays;
mod scripts;
mod sessions;
mod shared;
mod state;

use std::{sync::Arc, time::Duration};

use ::redis::{Client, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, Value};
use async_trait::async_trait;
use dashmap::DashMap;
use futures::{StreamExt, stream::BoxStream};
use tokio::sync::Notify;
use tokio_stream::wrappers::BroadcastStream;

use self::{
    codec::SplitData,
    creation::Created,
    hub::{AnswerMessage, ControlMessage, Hub, VerdictMessage},
    keys::Keys,
    link::{Endpoint, Link, LinkError, Role},
    nodes::Nodes,
    outbox::{Fence, Owned},
    relays::{Relays, RelaysFull},
    scripts::Scripts,
    shared::SharedHistory,
    state::{Adoptions, Handover, Inner, Top, pairs},
};
use super::task_index::Store;
use crate::config::redact_url;
use crate::events::{
    Adopted, AnswerRequest, Broker, Bus, CancelRequest, ChannelSnapshot, Opened, Relay, Relayed,
    Replay, ReplyTo, StoreError,
};
use crate::model::{AnswerVerdict, CancelAck};
use crate::model::{
    Channel, EventBody, Heartbeat, JobId, JobSnapshot, NewJob, Principal, Reattach, Seq, now_ms,
    wire::render_heartbeat,
};
use crate::shutdown::{Shutdown, Stage};
use crate::wait::Backoff;

/// Everything the Redis store needs, taken from the config by the app's wiring
/// (`app::redis_options`): the store itself does not read the config.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub url: String,
    pub key_prefix: String,
    /// Events kept per job (and per correlation) for replay.
    pub history: usize,
    pub retention: Duration,
    pub lease: Duration,
    pub outage_buffer: usize,
    pub command_timeout: Duration,
    /// How long an answer relayed to the job's replica waits for its verdict.
    pub relay_timeout: Duration,
    /// The larger of `jobs.max_input_bytes` and `jobs.max_sample_bytes`: bounds what a
    /// control message may carry (a relayed answer to a question, a sample or the roots).
    pub max_answer_bytes: usize,
    /// `limits.max_input_relays`: this replica's relayed answers waiting for verdicts at once.
    pub max_relays: usize,
    /// `limits.max_input_relays_per_principal`: of them, answers to one principal's jobs.
    pub max_relays_per_principal: usize,
    /// `bridge_job_adoptions_total`.
    pub adoption_events: crate::metrics::Adoptions,
    /// `store.redis_eviction_check = "refuse"`: a Redis whose `maxmemory-policy` may evict
    /// job keys is not used (else the policy is only logged).
    pub refuse_evicting_policy: bool,
    /// `store.redis_ca_file`: the PEM roots a `rediss://` Redis's certificate is checked
    /// against, instead of the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// `store.redis_cluster`: `url` is a node of a Redis Cluster; commands go to the node of
    /// their keys' slot.
    pub cluster: bool,
}

#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl From<LinkError> for StoreError {
    fn from(e: LinkError) -> Self {
        StoreError::Unavailable(Box::new(e))
    }
}

/// `store.redis_url` cannot be used (caught by config validation first; this is the engine's
/// own word on it).
#[derive(Debug, thiserror::Error)]
#[error("store.redis_url {target:?}{what}: {cause}")]
struct UnusableUrl {
    target: String,
    what: &'static str,
    #[source]
    cause: ::redis::RedisError,
}

impl RedisStore {
    /// The MCP session store for rmcp's Streamable HTTP server (see the module doc); a record
    /// lives `ttl` (the sessions' idle time) unless a replica restores its session.
    pub fn mcp_sessions(
        &self,
        ttl: Duration,
    ) -> Arc<dyn rmcp::transport::streamable_http_server::session::SessionStore> {
        Arc::new(sessions::RedisSessions {
            cmd: self.inner.cmd.clone(),
            keys: self.inner.keys.clone(),
            ttl,
        })
    }

    /// Start the store for replica `replica`. Returns at once: the connections are made in the
    /// background (until then every call fails with the reason, and `ping` says why), so a
    /// bridge starts even while Redis is down. The subscription task and the lease maintenance
    /// run in the shutdown's store stage; the connections in its connections stage, so that
    /// the maintenance gives the lease up before they close.
    // Long because: the store's state and its five tasks are built in one place.
    pub fn start(
        options: RedisOptions,
        replica: String,
        shutdown: &Shutdown,
    ) -> Result<Self, StoreError> {
        let target = redact_url(&options.url);
        let (info, ca) = seed(&options.url, &target, options.ca_file.as_deref())?;
        let (commands, pubsub) = match options.cluster {
            true => {
                let nodes = Arc::new(Nodes::new(info, ca, options.command_timeout));
                nodes
                    .cluster_client()
                    .map_err(|e| unusable(&target, " is not usable as a Redis Cluster node", e))?;
                (
                    Endpoint::Cluster(nodes.clone()),
                    Endpoint::ClusterNode(nodes),
                )
            }
            false => {
                let client = node_client(info, ca, &target)?;
                (Endpoint::Node(client.clone()), Endpoint::Node(client))
            }
        };
        let keys = Keys::new(&options.key_prefix);
        let relays = Relays::new(options.max_relays, options.max_relays_per_principal);
        let (hub, hub_task) = Hub::new(keys.control(&replica), options.max_answer_bytes, relays);
        // Reconnect at least every third of a lease, so a replica that lost Redis renews its
        // lease before the others may count it as dead.
        let reconnect = Backoff {
            first: Duration::from_millis(100),
            cap: (options.lease / 3).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        };
        let cmd = Link::new(
            Role::Commands {
                refuse_evicting: options.refuse_evicting_policy,
            },
            keys.client_name(&replica, "cmd"),
            commands,
            target.clone(),
            options.command_timeout,
            reconnect,
        );
        let dispatch = hub.clone();
        let sub = Link::new(
            Role::Subscriber(Arc::new(move |push| dispatch.dispatch(push))),
            keys.client_name(&replica, "sub"),
            pubsub,
            target,
            options.command_timeout,
            reconnect,
        );
        let inner = Arc::new(Inner {
            keys,
            replica,
            cmd: cmd.clone(),
            sub: sub.clone(),
            hub: hub.clone(),
            scripts: Scripts::new(),
            owned: DashMap::new(),
            history: options.history.max(1),
            retention_ms: options.retention.as_millis().max(1) as u64,
            live_ttl_ms: live_ttl_ms(options.retention),
            lease: options.lease,
            outage_buffer: options.outage_buffer.max(1),
            relay_timeout: options.relay_timeout,
            flush: Notify::new(),
            read_back: SharedHistory::default(),
            lost: DashMap::new(),
            adoptions: Adoptions::default(),
            handover: Handover::default(),
            adoption_events: options.adoption_events.clone(),
        });
        let connections = shutdown.tasks(Stage::Connections);
        connections.spawn(cmd.clone().supervise(connections.clone()));
        connections.spawn(sub.clone().supervise(connections.clone()));
        let upkeep = shutdown.tasks(Stage::Store);
        let stop = upkeep.stopping().clone();
        upkeep.spawn(hub_task.run(hub, sub, cmd.clone(), stop.clone()));
        upkeep.spawn(maintenance::keep_lease(inner.clone(), stop.clone()));
        upkeep.spawn(maintenance::run(inner.clone(), stop));
        Ok(Self { inner })
    }
}

/// The TTL of a running job's keys: the retention, and at least a minute (the owner renews it
/// every quarter of that, see `maintenance`).
fn live_ttl_ms(retention: Duration) -> u64 {
    retention.max(Duration::from_secs(60)).as_millis() as u64
}

fn unusable(target: &str, what: &'static str, cause: ::redis::RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(UnusableUrl {
        target: target.to_string(),
        what,
        cause,
    }))
}

/// `url` (shown as `target`, its password hidden) as connection settings that speak RESP3
/// (pub/sub pushes on a connection that also answers commands, CLIENT SETNAME), and the PEM
/// roots of `ca_file`, which every node's certificate is checked against instead of the
/// system's.
fn seed(
    url: &str,
    target: &str,
    ca_file: Option<&std::path::Path>,
) -> Result<(ConnectionInfo, Option<Vec<u8>>), StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| unusable(target, " is not usable", e))?;
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(settings);
    let ca = ca_file.map(std::fs::read).transpose().map_err(|e| {
        let what = " has a store.redis_ca_file that cannot be read";
        unusable(target, what, ::redis::RedisError::from(e))
    })?;
    Ok((info, ca))
}

/// A client of the one Redis at `info`.
fn node_client(
    info: ConnectionInfo,
    ca: Option<Vec<u8>>,
    target: &str,
) -> Result<Client, StoreError> {
    let Some(root) = ca else {
        return Client::open(info).map_err(|e| unusable(target, "", e));
    };
    let roots = ::redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(root),
    };
    Client::build_with_tls(info, roots)
        .map_err(|e| unusable(target, " with store.redis_ca_file", e))
}

/// Return once the wall clock (`now_ms`) is past `expires_ms`, as the owner of a job reads it
/// when it decides whether it may still take a relayed answer; after `cap` at most. Without
/// the cap, a wall clock set back during the wait would stretch it by the jump: an hour back,
/// an answer reported an hour late.
async fn wall_clock_past(expires_ms: u64, cap: Duration, now_ms: impl Fn() -> u64) {
    let past = async {
        while now_ms() <= expires_ms {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let _capped = tokio::time::timeout(cap, past).await;
}
#[async_trait]
impl Broker for RedisStore {
    async fn create_job(&self, job: NewJob) -> Result<JobSnapshot, StoreError> {
        let inner = &self.inner;
        let snapshot = JobSnapshot::new(&job, now_ms());
        let owned_here = job.owner == inner.replica;
        if !inner.cmd.is_up() {
            return Err(inner.cmd.down_error().into());
        }
        match creation::create(inner, &job, &snapshot).await {
            Ok(Created::Duplicate) => Err(StoreError::Duplicate(job.id)),
            Ok(Created::Created) => {
                if owned_here {
                    inner.owned.insert(job.id, Owned::new(snapshot.clone(), 0));
                }
                Ok(snapshot)
            }
            Err(error @ LinkError::Down { .. }) if owned_here => {
                inner.hold_failed_start(job.id, snapshot);
                Err(error.into())
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn append(&self, job: JobId, body: EventBody) -> Result<Option<Seq>, StoreError> {
        let now = std::time::Instant::now();
        self.append_received(job, body, now, None).await
    }

    /// The cursor goes into the job's hash by the same `APPEND` that stores the event.
    async fn append_received(
        &self,
        job: JobId,
        body: EventBody,
        _received: std::time::Instant,
        cursor: Option<&str>,
    ) -> Result<Option<Seq>, StoreError> {
        if self.inner.refused_as_lost(job, &body) {
            return Ok(None);
        }
        let owned = self.inner.owned.get(&job).map(|o| o.value().clone());
        match owned {
            Some(owned) => self.inner.append_owned(job, owned, body, cursor).await,
            None => self.inner.append_foreign(job, body).await,
        }
    }

    async fn record_reattach(&self, job: JobId, record: &Reattach) -> Result<bool, StoreError> {
        adoption::record_reattach(&self.inner, job, record).await
    }

    async fn heartbeat(&self, job: JobId, beat: Heartbeat) -> Result<(), StoreError> {
        let inner = &self.inner;
        let keys = &inner.keys;
        // Only the owner beats for a job, and only while it is its own (the fence).
        let Some(owned) = inner.owned.get(&job).map(|o| o.value().clone()) else {
            return Ok(());
        };
        let correlation = owned.lock().snapshot.correlation_id.clone();
        let fence = Fence::new(&inner.replica, owned.generation);
        let data = SplitData::new(job, render_heartbeat(job, 0, now_ms(), &beat));
        let mut call = inner.scripts.heartbeat.prepare_invoke();
        call.key(keys.job(job))
            .arg(&data.before[..])
            .arg(&data.after[..])
            .arg(keys.job_channel(job))
            .arg(&fence.owner)
            .arg(fence.generation);
        let seq: i64 = inner
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        if seq == -3 {
            inner.fenced(job, fence.generation + 1);
        }
        let Some(c) = correlation.filter(|_| seq >= 0) else {
            return Ok(());
        };
        let mut filled = data.before.to_vec();
        filled.extend_from_slice(seq.to_string().as_bytes());
        filled.extend_from_slice(&data.after);
        let mut call = inner.scripts.corr_heartbeat.prepare_invoke();
        call.key(keys.corr(&c))
            .arg(filled)
            .arg(keys.corr_channel(&c));
        inner
            .cmd
            .run(|mut conn| async move { call.invoke_async::<i64>(&mut conn).await })
            .await?;
        Ok(())
    }

    async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError> {
        self.inner.snapshot(job).await
    }

    async fn open(
        &self,
        channel: &Channel,
        after: Option<Seq>,
    ) -> Result<Option<Opened>, StoreError> {
        let inner = &self.inner;
        let name = match channel {
            Channel::Job(id) => inner.keys.job_channel(*id),
            Channel::Correlation(c) => inner.keys.corr_channel(c),
        };
        // Subscribed (and confirmed) before reading: an event is then in the history read, or
        // live, or both (readers skip what they already have), never in neither.
        let live = inner.hub.subscribe(name).await?;
        let Some(read) = inner.read(channel, after.unwrap_or(u64::MAX - 1)).await? else {
            return Ok(None);
        };
        let (snapshot, ended) = match read.top {
            Top::Job(s) => {
                let ended = s.status.is_terminal();
                (ChannelSnapshot::Job(s), ended)
            }
            Top::Correlation(ids) => (
                ChannelSnapshot::Correlation(inner.snapshots(&ids).await?),
                false,
            ),
        };
        let fresh = after.is_none();
        Ok(Some(Opened {
            head: read.head,
            snapshot,
            backlog: if fresh { Vec::new() } else { read.events },
            covered: fresh || read.covered,
            ended,
            live,
        }))
    }

    async fn replay(&self, channel: &Channel, after: Seq) -> Result<Replay, StoreError> {
        Ok(match self.inner.read(channel, after).await? {
            Some(read) => Replay {
                events: read.events,
                covered: read.covered,
                head: read.head,
            },
            None => Replay {
                events: Vec::new(),
                covered: false,
                head: after,
            },
        })
    }

    async fn expire(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        for link in [&inner.cmd, &inner.sub] {
            if !link.is_up() {
                return Err(link.down_error().into());
            }
        }
        inner
            .cmd
            .run(|mut conn| async move { ::redis::cmd("PING").exec_async(&mut conn).await })
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Bus for RedisStore {
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError> {
        let inner = &self.inner;
        let message = serde_json::to_string(&ControlMessage {
            job_id: job,
            reason,
        })
        .unwrap_or_default();
        let mut call = inner.scripts.request_cancel.prepare_invoke();
        call.key(inner.keys.job(job))
            .arg(inner.keys.control_prefix())
            .arg(message);
        let reply: Value = inner
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        let Some(snapshot) = codec::snapshot_from_fields(&pairs(reply)) else {
            return Ok(CancelAck::Unknown);
        };
        Ok(if snapshot.status.is_terminal() {
            CancelAck::AlreadyTerminal(Box::new(snapshot))
        } else {
            CancelAck::Requested(Box::new(snapshot))
        })
    }

    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest> {
        BroadcastStream::new(self.inner.hub.cancels().subscribe())
            .filter_map(|r| async move { r.ok() })
            .boxed()
    }

    /// Publish the answer on the owner's control channel and wait for the verdict on this
    /// replica's own (subscribed since it connected). The message says until when this replica
    /// waits; the owner drops it past that, so an unconfirmed answer is, but for one that was
    /// taken in the last instant, not taken.
    async fn relay_answer(&self, relay: Relay) -> Result<Relayed, StoreError> {
        let Relay {
            owner,
            job,
            answer,
            by,
            principal,
        } = relay;
        let inner = &self.inner;
        let (request, _place, verdict) = match inner.hub.await_verdict(principal.as_ref()) {
            Ok(waiting) => waiting,
            Err(full) => {
                return Ok(Relayed::Busy {
                    per_principal: full == RelaysFull::Principal,
                });
            }
        };
        let waited_ms = inner.relay_timeout.as_millis() as u64;
        let (answer, caller_answer) = AnswerMessage::of(answer);
        let expires_ms = now_ms() + waited_ms;
        let message = serde_json::to_string(&AnswerMessage {
            answer_for: job,
            answer,
            caller_answer,
            by,
            reply_to: inner.replica.clone(),
            request,
            expires_ms,
        })
        .unwrap_or_default();
        let started = tokio::time::Instant::now();
        let listeners = inner.publish(inner.keys.control(&owner), message).await?;
        if listeners == 0 {
            return Ok(Relayed::OwnerAway);
        }
        let rest = inner.relay_timeout.saturating_sub(started.elapsed());
        Ok(match tokio::time::timeout(rest, verdict).await {
            Ok(Ok(verdict)) => Relayed::Verdict(verdict),
            _ => {
                // The owner drops the answer once the wall clock is past `expires_ms`; the
                // timer above runs on the monotonic one and may end a millisecond short of it.
                // "Unconfirmed" is said only when the owner no longer takes the answer (or,
                // should the wall clock be set back meanwhile, one relay timeout later).
                wall_clock_past(expires_ms, inner.relay_timeout, now_ms).await;
                Relayed::Unconfirmed { waited_ms }
            }
        })
    }

    fn adoptions(&self) -> BoxStream<'static, Adopted> {
        self.inner.adoptions.take()
    }

    fn hand_over(&self) {
        self.inner.handover.begin();
    }

    fn answer_requests(&self) -> BoxStream<'static, AnswerRequest> {
        BroadcastStream::new(self.inner.hub.answers().subscribe())
            .filter_map(|r| async move { r.ok() })
            .boxed()
    }

    async fn reply_answer(&self, to: ReplyTo, verdict: AnswerVerdict) -> Result<(), StoreError> {
        let inner = &self.inner;
        let message = serde_json::to_string(&VerdictMessage {
            verdict_for: to.id,
            verdict,
        })
        .unwrap_or_default();
        inner
            .publish(inner.keys.control(&to.replica), message)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Store for RedisStore {
    /// Redis expires finished jobs itself: the terminal event sets a TTL of `retention_secs`
    /// on the job's keys.
    async fn list_task(
        &self,
        principal: &Principal,
        job: JobId,
        cap: usize,
    ) -> Result<bool, StoreError> {
        let inner = &self.inner;
        let mut call = inner.scripts.list_task.prepare_invoke();
        call.key(inner.keys.tasks(principal))
            .arg(now_ms())
            .arg(job.to_string())
            .arg(cap.max(1))
            .arg(inner.tasks_ttl_ms());
        let forgot: i64 = inner
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(forgot > 0)
    }

    async fn listed_tasks(
        &self,
        principal: &Principal,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Option<Vec<JobId>>, StoreError> {
        let inner = &self.inner;
        let mut call = inner.scripts.listed_tasks.prepare_invoke();
        call.key(inner.keys.tasks(principal))
            .arg(after.map(|id| id.to_string()).unwrap_or_default())
            .arg(limit.max(1));
        let page: Option<Vec<String>> = inner
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        // A member that is no job ID was not written by the bridge: skipped.
        Ok(page.map(|ids| ids.iter().filter_map(|id| id.parse().ok()).collect()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// The wall clock set back an hour during the wait: the wait ends at its cap, not an
    /// hour later. (The outer bound only keeps a failure from hanging the test run.)
    #[tokio::test]
    async fn the_wait_for_the_wall_clock_ends_at_its_cap_when_the_clock_is_set_back() {
        let expires_ms = now_ms();
        let set_back = || expires_ms - 3_600_000;
        let cap = Duration::from_millis(10);
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            wall_clock_past(expires_ms, cap, set_back),
        )
        .await;
        assert!(waited.is_ok(), "the wait ended at its cap");
    }

    /// A clock that moves on ends the wait as soon as it is past the expiry, long before the
    /// cap.
    #[tokio::test]
    async fn the_wait_for_the_wall_clock_ends_once_the_clock_is_past_the_expiry() {
        let expires_ms = 1_000;
        let clock = AtomicU64::new(expires_ms - 3);
        let ticking = || clock.fetch_add(1, Ordering::Relaxed);
        let cap = Duration::from_secs(3600);
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            wall_clock_past(expires_ms, cap, ticking),
        )
        .await;
        assert!(waited.is_ok(), "the wait ended with the clock");
        assert_eq!(
            clock.load(Ordering::Relaxed),
            expires_ms + 2,
            "read until past"
        );
    }
}
