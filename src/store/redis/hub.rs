//! Live fan-out inside one replica: every SSE subscriber of a channel shares one Redis
//! subscription on the replica's single pub/sub connection.
//!
//! A channel's first local reader makes the replica `SUBSCRIBE` (confirmed before it reads
//! history, so it cannot miss an event); later readers join a local broadcast ring. Each
//! message is parsed once into an `Arc<StoredEvent>`; a reader that falls behind is told it
//! lagged and re-reads history. One task sends every `SUBSCRIBE`/`UNSUBSCRIBE`, in the order it
//! decides them; whenever the pub/sub connection comes up it subscribes the control channel and
//! every channel again and tells every reader it lagged.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    },
    time::Duration,
};

use ::redis::{PushInfo, PushKind, Value};
use bytes::Bytes;
use dashmap::DashMap;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OnceCell, broadcast, mpsc, oneshot, watch};
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use tokio_util::sync::CancellationToken;

use super::{
    link::{Link, LinkError},
    relays::{RelayPlace, Relays, RelaysFull},
};
use crate::{
    events::{
        AnswerRequest, CancelRequest, LiveItem, LiveStream, RelayedAnswer, ReplyTo, StoredEvent,
    },
    model::{AnswerVerdict, InputAnswer, JobId, Principal},
};

/// Live events buffered per channel for readers momentarily behind (as in the memory store).
const LIVE_CAPACITY: usize = 256;
/// Cancel requests between the control channel and this replica's job runner.
const CANCEL_CAPACITY: usize = 1024;
/// Relayed answers between the control channel and this replica's job runner (one lost to a
/// full ring is unconfirmed for its sender, as if it had timed out).
const ANSWER_CAPACITY: usize = 256;
/// What a control message may carry besides the answer itself (IDs, names, the JSON around).
const CONTROL_OVERHEAD: usize = 4096;
/// Subscribe requests waiting for the subscription task; a full queue makes callers wait.
const REQUEST_CAPACITY: usize = 1024;
/// Most channels in one `SUBSCRIBE`/`UNSUBSCRIBE` command.
const BATCH: usize = 256;
/// How often idle channels are looked for. A channel without readers is unsubscribed after
/// two looks, so a reader that reconnects at once finds it still subscribed.
const JANITOR_INTERVAL: Duration = Duration::from_secs(5);
/// Pause before subscribing again when Redis refused while the connection stayed up.
const RESUBSCRIBE_RETRY: Duration = Duration::from_millis(500);

/// A cancel request as it travels on a replica's control channel.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ControlMessage {
    pub job_id: JobId,
    pub reason: String,
}

/// An answer for a job the receiving replica runs, from the replica it reached: to a question
/// (`answer`, the shape replicas of earlier versions send), or to a request the job's tool made
/// of its caller (`caller_answer`). One of the two; a message with neither is dropped.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct AnswerMessage {
    pub answer_for: JobId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<InputAnswer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_answer: Option<CallerAnswer>,
    pub by: String,
    /// The sender, and its number for this answer: where the verdict goes.
    pub reply_to: String,
    pub request: u64,
    pub expires_ms: u64,
}

/// An answer to a sample or the roots a job's tool asked its caller for, under its key.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct CallerAnswer {
    pub key: String,
    pub value: serde_json::Value,
}

impl AnswerMessage {
    /// The message for `answer`.
    pub(super) fn of(answer: RelayedAnswer) -> (Option<InputAnswer>, Option<CallerAnswer>) {
        match answer {
            RelayedAnswer::Question(answer) => (Some(answer), None),
            RelayedAnswer::CallerRequest { key, value } => {
                (None, Some(CallerAnswer { key, value }))
            }
        }
    }
}

/// The verdict on a relayed answer, back to the replica that sent it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct VerdictMessage {
    pub verdict_for: u64,
    pub verdict: AnswerVerdict,
}

/// A hand-over nudge: jobs were offered for adoption (to the replicas that may take them), or
/// one was taken (to the draining owner): look now, not at the next maintenance tick.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct LookMessage {
    pub look: String,
}

/// Whatever arrives on a replica's control channel. Untagged, so that a cancel keeps the
/// shape replicas of earlier versions send and read; the others have fields a cancel has
/// not (and lack its `job_id`), so they are never taken for one another.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Incoming {
    Answer(AnswerMessage),
    Verdict(VerdictMessage),
    Look(LookMessage),
    Cancel(ControlMessage),
}

struct Topic {
    live: broadcast::Sender<LiveItem>,
    /// Local readers. Raised under the map's entry lock, so the janitor's `remove_if` and a
    /// new reader never race.
    readers: AtomicUsize,
    idle_looks: AtomicU32,
    /// Set once Redis has confirmed the subscription.
    subscribed: OnceCell<()>,
    /// Set by the first event it carries.
    carried: AtomicBool,
}

/// Drops a reader from its topic when its live stream is dropped. The last reader of a topic
/// that never carried an event (a correlation read with a made-up ID, say) removes it at once:
/// left for the janitor, each one kept its ring (256 slots) for up to two looks, and 20,000
/// made-up correlations opened in a few seconds grew the replica by 87 MB.
struct Reader {
    topic: Arc<Topic>,
    channel: String,
    hub: Weak<Hub>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        let last = self.topic.readers.fetch_sub(1, Ordering::AcqRel) == 1;
        if !last || self.topic.carried.load(Ordering::Acquire) {
            return;
        }
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        // Under the map's entry lock, where a new reader is counted: none can join meanwhile.
        let removed = hub.topics.remove_if(&self.channel, |_, topic| {
            Arc::ptr_eq(topic, &self.topic) && topic.readers.load(Ordering::Acquire) == 0
        });
        if removed.is_some() {
            hub.unsubscribe_later(self.channel.clone());
        }
    }
}

struct SubscribeRequest {
    channel: String,
    done: oneshot::Sender<Result<(), LinkError>>,
}

pub(super) struct Hub {
    topics: DashMap<String, Arc<Topic>>,
    control: String,
    cancels: broadcast::Sender<CancelRequest>,
    answers: broadcast::Sender<AnswerRequest>,
    /// This replica's relayed answers waiting for their verdicts, by request number.
    relays: Arc<Relays>,
    /// Larger control messages are dropped unread (an answer is at most
    /// `jobs.max_input_bytes`, a sample or the roots `jobs.max_sample_bytes`, plus
    /// [`CONTROL_OVERHEAD`]).
    max_control_bytes: usize,
    requests: mpsc::Sender<SubscribeRequest>,
    /// Channels whose topic went with its last reader, to `UNSUBSCRIBE` at the janitor's next
    /// look unless a reader has come back meanwhile.
    gone: parking_lot::Mutex<Vec<String>>,
    /// Bumped each time everything has been subscribed again after a (re)connect; the store
    /// then looks for cancel requests it may have missed meanwhile.
    resubscribed: watch::Sender<u64>,
    /// Woken by a [`LookMessage`]: the maintenance task looks at the hand-over at once.
    looks: Notify,
}

impl Hub {
    /// The hub, and the receiving end of its subscribe requests for [`Hub::run`]. `relays`
    /// holds this replica's answers waiting for verdicts.
    pub(super) fn new(
        control: String,
        max_answer_bytes: usize,
        relays: Arc<Relays>,
    ) -> (Arc<Self>, HubTask) {
        let (requests, inbox) = mpsc::channel(REQUEST_CAPACITY);
        let hub = Arc::new(Self {
            topics: DashMap::new(),
            control,
            cancels: broadcast::channel(CANCEL_CAPACITY).0,
            answers: broadcast::channel(ANSWER_CAPACITY).0,
            relays,
            max_control_bytes: max_answer_bytes.saturating_add(CONTROL_OVERHEAD),
            requests,
            gone: parking_lot::Mutex::default(),
            resubscribed: watch::channel(0).0,
            looks: Notify::new(),
        });
        (hub, HubTask { inbox })
    }

    pub(super) fn cancels(&self) -> broadcast::Sender<CancelRequest> {
        self.cancels.clone()
    }

    pub(super) fn answers(&self) -> broadcast::Sender<AnswerRequest> {
        self.answers.clone()
    }

    /// Resolves when a [`LookMessage`] came (one kept if nobody waited).
    pub(super) fn looks(&self) -> &Notify {
        &self.looks
    }

    /// Wait for the verdict on a relayed answer to a job of `principal`: its request number,
    /// its place (given back when dropped, which ends the wait) and where the verdict arrives;
    /// or the bound that is full (see `relays`).
    pub(super) fn await_verdict(
        &self,
        principal: Option<&Principal>,
    ) -> Result<(u64, RelayPlace, oneshot::Receiver<AnswerVerdict>), RelaysFull> {
        self.relays.wait(principal)
    }

    /// Like [`Link::connected`]: a round that happened before the receiver was taken counts.
    pub(super) fn resubscribed(&self) -> watch::Receiver<u64> {
        let mut rounds = self.resubscribed.subscribe();
        if *rounds.borrow() > 0 {
            rounds.mark_changed();
        }
        rounds
    }

    /// A live stream of `channel`, once Redis has confirmed this replica's subscription.
    pub(super) async fn subscribe(
        self: &Arc<Self>,
        channel: String,
    ) -> Result<LiveStream, LinkError> {
        let (topic, rx) = {
            let entry = self.topics.entry(channel.clone()).or_insert_with(|| {
                Arc::new(Topic {
                    live: broadcast::channel(LIVE_CAPACITY).0,
                    readers: AtomicUsize::new(0),
                    idle_looks: AtomicU32::new(0),
                    subscribed: OnceCell::new(),
                    carried: AtomicBool::new(false),
                })
            });
            entry.readers.fetch_add(1, Ordering::AcqRel);
            (entry.value().clone(), entry.live.subscribe())
        };
        let reader = Reader {
            topic: topic.clone(),
            channel: channel.clone(),
            hub: Arc::downgrade(self),
        };
        topic
            .subscribed
            .get_or_try_init(|| async {
                let (done, answer) = oneshot::channel();
                let request = SubscribeRequest { channel, done };
                let gone = || LinkError::down("the bridge is shutting down");
                self.requests.send(request).await.map_err(|_| gone())?;
                answer.await.map_err(|_| gone())?
            })
            .await?;
        let stream = BroadcastStream::new(rx).map(move |item| {
            let _reader = &reader;
            match item {
                Ok(item) => item,
                Err(BroadcastStreamRecvError::Lagged(_)) => LiveItem::Lagged,
            }
        });
        Ok(stream.boxed())
    }

    /// A pub/sub push from Redis (on the connection's read path: parse, hand over, return).
    pub(super) fn dispatch(&self, push: PushInfo) {
        if push.kind != PushKind::Message {
            return;
        }
        let mut data = push.data.into_iter();
        let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
            return;
        };
        let (Some(channel), Some(payload)) = (bytes_of(channel), bytes_of(payload)) else {
            return;
        };
        let Ok(channel) = std::str::from_utf8(&channel) else {
            return;
        };
        if channel == self.control {
            self.control_message(&payload);
            return;
        }
        let Some(topic) = self.topics.get(channel) else {
            return;
        };
        match StoredEvent::from_frame(payload) {
            Some(event) => {
                topic.carried.store(true, Ordering::Release);
                let _ = topic.live.send(LiveItem::Event(Arc::new(event)));
            }
            None => tracing::warn!(channel, "malformed event frame on a job channel"),
        }
    }
}

impl Hub {
    fn unsubscribe_later(&self, channel: String) {
        self.gone.lock().push(channel);
    }

    /// A message on this replica's control channel: a cancel or an answer for a job it runs,
    /// or a verdict on an answer it relayed.
    fn control_message(&self, payload: &[u8]) {
        if payload.len() > self.max_control_bytes {
            tracing::warn!(
                bytes = payload.len(),
                limit = self.max_control_bytes,
                "a control message larger than jobs.max_input_bytes or jobs.max_sample_bytes allows was dropped"
            );
            return;
        }
        match serde_json::from_slice::<Incoming>(payload) {
            Ok(Incoming::Cancel(m)) => {
                let _ = self.cancels.send(CancelRequest {
                    job_id: m.job_id,
                    reason: m.reason,
                    abandon: false,
                });
            }
            Ok(Incoming::Answer(m)) => {
                let reply = ReplyTo {
                    replica: m.reply_to,
                    id: m.request,
                    expires_ms: m.expires_ms,
                };
                // Its sender no longer waits: it told its client the answer is unconfirmed.
                if reply.expired() {
                    tracing::info!(job = %m.answer_for, "a relayed answer arrived after its sender stopped waiting; dropped");
                    return;
                }
                let answer = match (m.answer, m.caller_answer) {
                    (Some(answer), None) => RelayedAnswer::Question(answer),
                    (None, Some(CallerAnswer { key, value })) => {
                        RelayedAnswer::CallerRequest { key, value }
                    }
                    _ => {
                        tracing::warn!(job = %m.answer_for, "a relayed answer that answers nothing (or two things) was dropped");
                        return;
                    }
                };
                let _ = self.answers.send(AnswerRequest {
                    job_id: m.answer_for,
                    answer,
                    by: m.by,
                    reply,
                });
            }
            Ok(Incoming::Verdict(m)) => {
                self.relays.settle(m.verdict_for, m.verdict);
            }
            Ok(Incoming::Look(m)) => {
                tracing::debug!(look = %m.look, "asked to look at the drain's hand-over");
                self.looks.notify_one();
            }
            Err(error) => {
                tracing::warn!(%error, "malformed message on the control channel")
            }
        }
    }
}

fn bytes_of(value: Value) -> Option<Bytes> {
    match value {
        Value::BulkString(b) => Some(Bytes::from(b)),
        Value::SimpleString(s) => Some(Bytes::from(s)),
        _ => None,
    }
}

/// The one task that sends subscription commands (see the module doc).
pub(super) struct HubTask {
    inbox: mpsc::Receiver<SubscribeRequest>,
}

impl HubTask {
    /// `link` is the pub/sub connection; `cmd` the command connection, which readers need to
    /// catch up after a reconnect.
    // The reconnect arm stays inline: it ends the task on `stop` from inside its own waits,
    // which a helper would have to report back as a value to return on.
    pub(super) async fn run(
        mut self,
        hub: Arc<Hub>,
        link: Arc<Link>,
        cmd: Arc<Link>,
        stop: CancellationToken,
    ) {
        let mut connected = link.connected();
        let mut janitor = tokio::time::interval(JANITOR_INTERVAL);
        janitor.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = connected.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if !resubscribe(&hub, &link).await {
                        // Down again: its next connect comes back here. Still up (Redis
                        // answered "not now", e.g. LOADING): nothing else would retry.
                        if link.is_up() {
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                _ = tokio::time::sleep(RESUBSCRIBE_RETRY) => connected.mark_changed(),
                            }
                        }
                        continue;
                    }
                    // Readers catch up from history: once it can be read, so that they do
                    // not have to wait and retry.
                    let mut cmd_connected = cmd.connected();
                    while !cmd.is_up() {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            changed = cmd_connected.changed() => if changed.is_err() { return },
                        }
                    }
                    for topic in hub.topics.iter() {
                        let _ = topic.live.send(LiveItem::Lagged);
                    }
                    hub.resubscribed.send_modify(|n| *n += 1);
                }
                request = self.inbox.recv() => {
                    let Some(first) = request else { return };
                    self.subscribe(first, &hub, &link).await;
                }
                _ = janitor.tick() => unsubscribe_idle(&hub, &link).await,
            }
        }
    }

    /// `SUBSCRIBE` the channels of `first` and of the requests queued behind it (at most
    /// [`BATCH`]) in one command, and tell each request how it went.
    async fn subscribe(&mut self, first: SubscribeRequest, hub: &Hub, link: &Link) {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match self.inbox.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let channels: Vec<&str> = batch.iter().map(|r| r.channel.as_str()).collect();
        let result = send(link, "SUBSCRIBE", &channels).await;
        // A reader that left while its request waited took its topic with it: the
        // subscription just made is nobody's.
        for channel in channels {
            if !hub.topics.contains_key(channel) {
                hub.unsubscribe_later(channel.to_string());
            }
        }
        for request in batch {
            let _ = request.done.send(result.clone());
        }
    }
}

async fn send(link: &Link, command: &'static str, channels: &[&str]) -> Result<(), LinkError> {
    if channels.is_empty() {
        return Ok(());
    }
    link.run(|mut conn| async move {
        if command == "SUBSCRIBE" {
            conn.subscribe(channels).await
        } else {
            conn.unsubscribe(channels).await
        }
    })
    .await
}

/// After a (re)connect: the control channel and every channel in the map. Not only those
/// whose subscription is confirmed: a reader may have its confirmation from the old connection
/// in hand without having recorded it yet, and it would then read from a channel nobody
/// subscribed on the new one. A channel whose subscribe request is still queued is subscribed
/// twice, which Redis ignores. False when Redis did not take the commands.
async fn resubscribe(hub: &Hub, link: &Link) -> bool {
    let mut channels = vec![hub.control.clone()];
    channels.extend(hub.topics.iter().map(|t| t.key().clone()));
    for chunk in channels.chunks(BATCH) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        if let Err(error) = send(link, "SUBSCRIBE", &chunk).await {
            tracing::warn!(%error, "subscribing again after a reconnect failed");
            return false;
        }
    }
    true
}

async fn unsubscribe_idle(hub: &Hub, link: &Link) {
    // Those that went with their last reader, unless one has come back since.
    let mut gone: Vec<String> = std::mem::take(&mut *hub.gone.lock());
    gone.retain(|channel| !hub.topics.contains_key(channel));
    let mut idle = Vec::new();
    for topic in hub.topics.iter() {
        if topic.readers.load(Ordering::Acquire) > 0 {
            topic.idle_looks.store(0, Ordering::Relaxed);
        } else if topic.idle_looks.fetch_add(1, Ordering::Relaxed) >= 1 {
            idle.push(topic.key().clone());
        }
    }
    // Every removed channel is unsubscribed, confirmed or not: a reconnect may have subscribed
    // it (see `resubscribe`), and unsubscribing a channel that is not subscribed is a no-op.
    gone.extend(idle.into_iter().filter_map(|channel| {
        hub.topics
            .remove_if(&channel, |_, t| t.readers.load(Ordering::Acquire) == 0)
            .map(|(channel, _)| channel)
    }));
    for chunk in gone.chunks(BATCH) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        // If the link is down the subscriptions are gone with it, and they are not renewed.
        let _ = send(link, "UNSUBSCRIBE", &chunk).await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::link::Role;
    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    /// The Redis the tests share (as in `tests/it/common`), or `None` (the test is skipped, or
    /// fails under `BRIDGE_TEST_STRICT=1`) when none answers.
    async fn test_redis() -> Option<::redis::Client> {
        let url = std::env::var("BRIDGE_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
        let client = ::redis::Client::open(format!("{url}?protocol=resp3")).ok()?;
        let ping = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            ::redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(Duration::from_secs(10), ping).await {
            Ok(Ok(_)) => Some(client),
            _ if std::env::var("BRIDGE_TEST_STRICT").is_ok_and(|v| v == "1") => {
                panic!("no Redis answers at {url} (BRIDGE_TEST_STRICT=1)")
            }
            _ => {
                eprintln!("SKIPPED: no Redis answers at {url}");
                None
            }
        }
    }

    /// The hub task may first run after the pub/sub connection is up (a spawned task is
    /// polled late on a busy machine). It must still subscribe the control channel, not wait
    /// for a *next* connect: else no cancel request sent to this replica would arrive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hub_task_that_starts_after_the_connection_is_up_still_subscribes_the_control_channel()
     {
        let Some(client) = test_redis().await else {
            return;
        };
        let control = format!("test-hub-late-{:016x}:control", fastrand::u64(..));
        let (hub, task) = Hub::new(control.clone(), 65_536, Relays::new(1024, 256));
        let dispatch = hub.clone();
        let link = |role, name| {
            Link::new(
                role,
                format!("test-hub-late:{name}"),
                super::super::link::Endpoint::Node(client.clone()),
                "redis://test".into(),
                Duration::from_secs(5),
                crate::wait::Backoff {
                    first: Duration::from_millis(100),
                    cap: Duration::from_millis(200),
                },
            )
        };
        let sub = link(
            Role::Subscriber(Arc::new(move |push| dispatch.dispatch(push))),
            "sub",
        );
        let cmd = link(
            Role::Commands {
                refuse_evicting: true,
            },
            "cmd",
        );
        let shutdown = crate::shutdown::Shutdown::new();
        let _stop = shutdown.drop_guard();
        let connections = shutdown.tasks(crate::shutdown::Stage::Connections);
        tokio::spawn(sub.clone().supervise(connections.clone()));
        tokio::spawn(cmd.clone().supervise(connections));
        let stop = shutdown
            .tasks(crate::shutdown::Stage::Store)
            .stopping()
            .clone();
        tokio::time::timeout(WAIT, async {
            while !(sub.is_up() && cmd.is_up()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("both connections come up");

        // Only now does the hub task run for the first time.
        let mut cancels = hub.cancels().subscribe();
        tokio::spawn(task.run(hub.clone(), sub.clone(), cmd.clone(), stop.clone()));

        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        tokio::time::timeout(WAIT, async {
            loop {
                let (_, count): (String, u64) = ::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&control)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if count == 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the control channel is subscribed although the connection came up first");

        let job_id = JobId::random();
        let message = serde_json::to_string(&ControlMessage {
            job_id,
            reason: "test".into(),
        })
        .unwrap();
        let _: i64 = ::redis::cmd("PUBLISH")
            .arg(&control)
            .arg(message)
            .query_async(&mut conn)
            .await
            .unwrap();
        let request = tokio::time::timeout(WAIT, cancels.recv())
            .await
            .expect("the cancel request arrives")
            .unwrap();
        assert_eq!(request.job_id, job_id);
    }
}
