//! The Redis store's shared state (`Inner`) and its write path: every append goes through
//! the fenced `APPEND` script here, so the fence (a job another replica adopted is written no
//! more: `lose`, `refused_as_lost`) lives beside it. The duties that act on this state are
//! free functions of their own files: `creation.rs`, `adoption.rs`, `handover.rs`,
//! `maintenance.rs`; none of them is called from here.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use ::redis::Value;
use bytes::Bytes;
use dashmap::DashMap;
use futures::{StreamExt, stream::BoxStream};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{
    codec::{self, SplitData, changed_fields, entry_seq, snapshot_fields},
    hub::{Hub, LookMessage},
    keys::Keys,
    link::{Link, LinkError},
    outbox::{Fence, Held, Owned, Write},
    scripts::Scripts,
    shared::SharedHistory,
};
use crate::events::{Adopted, CancelRequest, StoreError, StoredEvent};
use crate::metrics::AdoptionEvent;
use crate::model::{
    Channel, CorrelationId, EventBody, FailureReason, JobFailure, JobId, JobSnapshot, Seq, now_ms,
    wire::render_job_event,
};

pub(super) struct Inner {
    pub(super) keys: Keys,
    pub(super) replica: String,
    pub(super) cmd: Arc<Link>,
    pub(super) sub: Arc<Link>,
    pub(super) hub: Arc<Hub>,
    pub(super) scripts: Scripts,
    /// Jobs this replica runs whose terminal event is not in Redis yet.
    pub(super) owned: DashMap<JobId, Arc<Owned>>,
    pub(super) history: usize,
    pub(super) retention_ms: u64,
    /// The TTL of a running job's keys (and of the sets naming replicas and their jobs):
    /// renewed by the owner while the job runs ([`maintenance`]), so that nothing the bridge
    /// writes stays for ever when every replica is gone. At least `retention_ms`.
    pub(super) live_ttl_ms: u64,
    pub(super) lease: Duration,
    pub(super) outage_buffer: usize,
    pub(super) relay_timeout: Duration,
    /// Wakes the maintenance task to write held events.
    pub(super) flush: Notify,
    /// Large history events read back, one copy for every reader holding them.
    pub(super) read_back: SharedHistory,
    /// Jobs another replica adopted from this one, until their runner here has stopped: no
    /// write of this replica reaches them any more (`adoption.rs`).
    pub(super) lost: DashMap<JobId, std::time::Instant>,
    /// The jobs this replica adopts, on their way to whoever carries them on.
    pub(super) adoptions: Adoptions,
    /// The drain's hand-over of re-attachable jobs to other replicas.
    pub(super) handover: Handover,
    /// `bridge_job_adoptions_total`.
    pub(super) adoption_events: crate::metrics::Adoptions,
}

/// The hash field of a resumable job's stream cursor: the upstream event id of its last event
/// that had one, written by the `APPEND` of that event (it overrides the re-attach record's).
pub(super) const CURSOR_FIELD: &str = "_cursor";

/// How an append script call ended.
pub(super) enum Written {
    Stored(Seq),
    Unknown,
    Ended,
    /// The job is another replica's now, at this generation (the fence).
    Fenced(u64),
}

/// How long a caller's task index outlives its newest task beyond the retention: a day for
/// that task to run. A task that runs longer, with no newer task of its caller, is then no
/// longer listed (it stays readable by `tasks/get`); its job's own keys expire on their own.
const TASK_INDEX_RUN_MS: u64 = 24 * 3600 * 1000;

impl Inner {
    /// The TTL a caller's task index is given each time a task is added to it.
    pub(super) fn tasks_ttl_ms(&self) -> u64 {
        self.retention_ms.saturating_add(TASK_INDEX_RUN_MS)
    }

    /// A job's creation script may have run before Redis was lost with its answer. Hold a
    /// failure for the job: written when Redis returns, it ends the job if it does exist.
    pub(super) fn hold_failed_start(&self, job: JobId, snapshot: JobSnapshot) {
        let owned = Owned::new(snapshot, 0);
        {
            let mut state = owned.lock();
            let body = EventBody::Failed {
                failure: JobFailure {
                    reason: FailureReason::StoreUnavailable,
                    message: "the bridge lost Redis while starting this job".into(),
                },
                result: None,
                rpc_error: None,
            };
            let write = Inner::prepare(job, &mut state.snapshot, &body);
            state.hold(write, self.outage_buffer);
        }
        self.owned.insert(job, owned);
    }

    pub(super) fn cancel_locally(&self, job_id: JobId, reason: &str) {
        let _ = self.hub.cancels().send(CancelRequest {
            job_id,
            reason: reason.to_string(),
            abandon: false,
        });
    }

    /// Publish `message` on `channel`: how many replicas it reached.
    pub(super) async fn publish(&self, channel: String, message: String) -> Result<i64, LinkError> {
        self.cmd
            .run(|mut conn| async move {
                ::redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(message)
                    .query_async(&mut conn)
                    .await
            })
            .await
    }

    /// Write one event: the job's script, then its correlation's copy (a slot of its own, so
    /// a script of its own, made idempotent by the job's mark there); a terminal event then
    /// takes the job off its owner's `running` set (if that fails, the owner-loss check does).
    /// A retry after the job's part ran (`Write::stored`) only copies.
    pub(super) async fn write(&self, job: JobId, w: &Write) -> Result<Written, LinkError> {
        let (written, seq) = match w.stored.load(Ordering::Acquire) {
            0 => match self.write_job(job, w).await? {
                (Written::Stored(head), seq) => {
                    w.stored.store(seq, Ordering::Release);
                    (Written::Stored(head), seq)
                }
                (other, _) => return Ok(other),
            },
            seq => (Written::Stored(seq), seq),
        };
        if let Some(c) = &w.correlation {
            self.copy_to_correlation(job, c, seq, w).await?;
        }
        if w.terminal {
            self.delist(&w.owner, &job.to_string()).await;
        }
        Ok(written)
    }

    /// The append script on the job's own keys: how it ended, and the seq of this event (for
    /// a retried write already stored, the one it had then).
    pub(super) async fn write_job(
        &self,
        job: JobId,
        w: &Write,
    ) -> Result<(Written, Seq), LinkError> {
        let keys = &self.keys;
        let mut call = self.scripts.append.prepare_invoke();
        call.key(keys.job(job)).key(keys.job_events(job));
        call.arg(w.kind.as_str())
            .arg(&w.data.before[..])
            .arg(&w.data.after[..])
            .arg(if w.terminal { "1" } else { "0" })
            .arg(self.history)
            .arg(self.retention_ms)
            .arg(keys.job_channel(job))
            .arg(w.expect)
            .arg(self.live_ttl_ms);
        match &w.fence {
            Some(fence) => call.arg(&fence.owner).arg(fence.generation),
            None => call.arg("").arg(0),
        };
        for (name, value) in &w.fields {
            call.arg(name).arg(value);
        }
        let (code, head): (i64, i64) = self
            .cmd
            .run(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(match code {
            0 => (Written::Unknown, 0),
            -1 => (Written::Ended, 0),
            -2 => (Written::Stored(head as Seq), w.expect),
            -3 => (Written::Fenced(head.max(0) as u64), 0),
            seq => (Written::Stored(seq as Seq), seq as Seq),
        })
    }

    /// The correlation's copy of the job's event `seq` (`CORR_COPY`).
    pub(super) async fn copy_to_correlation(
        &self,
        job: JobId,
        correlation: &CorrelationId,
        seq: Seq,
        w: &Write,
    ) -> Result<(), LinkError> {
        let keys = &self.keys;
        let mut data = Vec::with_capacity(w.data.before.len() + w.data.after.len() + 20);
        data.extend_from_slice(&w.data.before);
        data.extend_from_slice(seq.to_string().as_bytes());
        data.extend_from_slice(&w.data.after);
        let mut call = self.scripts.corr_copy.prepare_invoke();
        call.key(keys.corr(correlation))
            .key(keys.corr_events(correlation))
            .key(keys.corr_jobs(correlation))
            .arg(job.to_string())
            .arg(seq)
            .arg(w.kind.as_str())
            .arg(data)
            .arg(if w.terminal { "1" } else { "0" })
            .arg(self.history)
            .arg(self.retention_ms)
            .arg(keys.corr_channel(correlation));
        self.cmd
            .run(|mut conn| async move { call.invoke_async::<i64>(&mut conn).await })
            .await?;
        Ok(())
    }

    /// Fold `body` into the owner's copy of the snapshot: the write for Redis, and the number
    /// it will get.
    pub(super) fn prepare(job: JobId, snapshot: &mut JobSnapshot, body: &EventBody) -> Write {
        let seq = snapshot.seq + 1;
        let ts = now_ms();
        let before = snapshot_fields(snapshot);
        snapshot.apply(seq, ts, body);
        let fields = changed_fields(&before, &snapshot_fields(snapshot));
        Write {
            kind: body.kind(),
            data: SplitData::new(job, render_job_event(job, 0, ts, body)),
            terminal: body.kind().is_terminal(),
            fields,
            expect: seq,
            owner: snapshot.owner.clone(),
            correlation: snapshot.correlation_id.clone(),
            fence: None,
            stored: AtomicU64::new(0),
        }
    }

    pub(super) async fn append_owned(
        &self,
        job: JobId,
        owned: Arc<Owned>,
        body: EventBody,
        cursor: Option<&str>,
    ) -> Result<Option<Seq>, StoreError> {
        let write = {
            let mut state = owned.lock();
            let mut write = Self::prepare(job, &mut state.snapshot, &body);
            write.fence = Some(Fence::new(&self.replica, owned.generation));
            if let Some(cursor) = cursor {
                write.fields.push((CURSOR_FIELD.into(), cursor.into()));
            }
            if !state.held.is_empty() || !self.cmd.is_up() {
                let seq = write.expect;
                let held = state.hold(write, self.outage_buffer);
                drop(state);
                if held != Held::Queued {
                    tracing::debug!(job = %job, ?held, "outage buffer full");
                }
                self.flush.notify_one();
                return Ok(Some(seq));
            }
            write
        };
        match self.write(job, &write).await {
            Ok(Written::Stored(seq)) => {
                if write.terminal {
                    self.owned.remove(&job);
                }
                Ok(Some(seq))
            }
            Ok(Written::Unknown) => {
                self.owned.remove(&job);
                self.cancel_locally(job, "the job's record is gone from Redis");
                Ok(None)
            }
            Ok(Written::Ended) => {
                self.owned.remove(&job);
                self.cancel_locally(job, "the job was ended by another replica (owner lost)");
                Ok(None)
            }
            Ok(Written::Fenced(generation)) => {
                self.fenced(job, generation);
                Ok(None)
            }
            Err(LinkError::Down { reason, .. }) => {
                tracing::debug!(job = %job, %reason, "Redis away: holding the event");
                let seq = write.expect;
                owned.lock().hold(write, self.outage_buffer);
                self.flush.notify_one();
                Ok(Some(seq))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// An event for a job this replica does not run (ending a dead owner's job).
    pub(super) async fn append_foreign(
        &self,
        job: JobId,
        body: EventBody,
    ) -> Result<Option<Seq>, StoreError> {
        let Some(mut snapshot) = self.snapshot(job).await? else {
            return Ok(None);
        };
        if snapshot.status.is_terminal() {
            return Ok(None);
        }
        let mut write = Self::prepare(job, &mut snapshot, &body);
        write.expect = 0;
        match self.write(job, &write).await? {
            Written::Stored(seq) => Ok(Some(seq)),
            Written::Unknown | Written::Ended | Written::Fenced(_) => Ok(None),
        }
    }

    pub(super) async fn snapshot(&self, job: JobId) -> Result<Option<JobSnapshot>, StoreError> {
        let fields = self.job_fields(job).await?;
        Ok(if fields.is_empty() {
            None
        } else {
            codec::snapshot_from_fields(&fields)
        })
    }

    /// Every field of job `job`'s hash (none for an unknown job).
    pub(super) async fn job_fields(
        &self,
        job: JobId,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let key = self.keys.job(job);
        let reply: Value = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(pairs(reply))
    }

    /// The other replicas that named themselves in the replicas set.
    pub(super) async fn other_replicas(&self) -> Result<Vec<String>, LinkError> {
        let replicas_key = self.keys.replicas();
        let replicas = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("SMEMBERS")
                    .arg(&replicas_key)
                    .query_async::<Vec<String>>(&mut conn)
                    .await
            })
            .await?;
        Ok(replicas
            .into_iter()
            .filter(|r| *r != self.replica)
            .collect())
    }

    pub(super) async fn snapshots(&self, jobs: &[JobId]) -> Result<Vec<JobSnapshot>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = ::redis::pipe();
        for job in jobs {
            pipe.cmd("HGETALL").arg(self.keys.job(*job));
        }
        let all: Vec<Value> = self
            .cmd
            .run(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        Ok(all
            .into_iter()
            .map(pairs)
            .filter(|f| !f.is_empty())
            .filter_map(|f| codec::snapshot_from_fields(&f))
            .collect())
    }

    /// Snapshot (or the correlation's head and jobs), and history from `after + 1`, in one
    /// atomic read. `None` when the channel is unknown.
    pub(super) async fn read(
        &self,
        channel: &Channel,
        after: Seq,
    ) -> Result<Option<Read>, StoreError> {
        let value = self.run_open_script(channel, after).await?;
        let Value::Array(parts) = value else {
            return Ok(None);
        };
        let malformed =
            || StoreError::Unavailable("Redis returned a malformed channel read".into());
        let mut parts = parts.into_iter();
        let (head, top) = match channel {
            Channel::Job(_) => {
                let fields = pairs(parts.next().ok_or_else(malformed)?);
                let snapshot = codec::snapshot_from_fields(&fields).ok_or_else(malformed)?;
                (snapshot.seq, Top::Job(Box::new(snapshot)))
            }
            Channel::Correlation(_) => {
                let head: Seq = ::redis::from_redis_value(parts.next().ok_or_else(malformed)?)
                    .map_err(|_| malformed())?;
                let ids: Vec<String> =
                    ::redis::from_redis_value(parts.next().ok_or_else(malformed)?)
                        .map_err(|_| malformed())?;
                (
                    head,
                    Top::Correlation(ids.iter().filter_map(|i| i.parse().ok()).collect()),
                )
            }
        };
        let oldest = entries(parts.next().ok_or_else(malformed)?, Arc::new)
            .first()
            .map(|e| e.seq);
        let events = entries(parts.next().ok_or_else(malformed)?, |event| {
            self.read_back.share(channel, event)
        });
        let oldest = oldest.unwrap_or(head + 1);
        let covered = after >= head || after + 1 >= oldest;
        Ok(Some(Read {
            head,
            top,
            events: if after >= head { Vec::new() } else { events },
            covered,
        }))
    }

    /// The channel's open script: its snapshot (a job's) or head and jobs (a correlation's),
    /// its oldest kept event and the events after `after`, as Redis returns them.
    pub(super) async fn run_open_script(
        &self,
        channel: &Channel,
        after: Seq,
    ) -> Result<Value, StoreError> {
        let keys = &self.keys;
        let value: Value = match channel {
            Channel::Job(id) => {
                let mut call = self.scripts.open_job.prepare_invoke();
                call.key(keys.job(*id))
                    .key(keys.job_events(*id))
                    .arg(after + 1);
                self.cmd
                    .run(|mut conn| async move { call.invoke_async(&mut conn).await })
                    .await?
            }
            Channel::Correlation(c) => {
                let mut call = self.scripts.open_correlation.prepare_invoke();
                call.key(keys.corr(c))
                    .key(keys.corr_events(c))
                    .key(keys.corr_jobs(c))
                    .arg(after + 1);
                self.cmd
                    .run(|mut conn| async move { call.invoke_async(&mut conn).await })
                    .await?
            }
        };
        Ok(value)
    }

    /// A write for `job` was refused by the fence: another replica owns it, at `generation`.
    pub(super) fn fenced(&self, job: JobId, generation: u64) {
        self.adoption_events.count(AdoptionEvent::WriteFenced);
        self.lose(job, generation);
    }

    /// Another replica adopted `job` (now at `generation`) while this one's lease had lapsed:
    /// stop working on it, here, without a word to its upstream call (the adopter carries it).
    pub(super) fn lose(&self, job: JobId, generation: u64) {
        self.owned.remove(&job);
        self.lost.insert(job, Instant::now());
        if self.handover.was_offered(job) {
            self.adoption_events.count(AdoptionEvent::HandedOver);
            tracing::info!(job = %job, generation,
                "handed over: another replica took this job and follows its upstream task; \
                 this draining replica stops working on it");
        } else {
            tracing::warn!(job = %job, generation,
                "another replica adopted this job while this replica's lease had lapsed (a \
                 pause, or Redis out of reach): this replica stops working on it and writes \
                 nothing more to it");
        }
        let _ = self.hub.cancels().send(CancelRequest {
            job_id: job,
            reason: "another replica adopted this job".into(),
            abandon: true,
        });
    }

    /// Forget the jobs lost to an adopter longer ago than a running job's keys live: their
    /// runners here stopped long since.
    pub(super) fn forget_lost(&self) {
        let keep = Duration::from_millis(self.live_ttl_ms);
        self.lost.retain(|_, at| at.elapsed() < keep);
    }

    /// A write for a job this replica lost to an adopter: refused here, never sent. The lost
    /// job's runner ends with a terminal write, after which the job is forgotten here.
    pub(super) fn refused_as_lost(&self, job: JobId, body: &EventBody) -> bool {
        if !self.lost.contains_key(&job) {
            return false;
        }
        if body.kind().is_terminal() {
            self.lost.remove(&job);
        } else {
            // A runner that started after the job was lost missed the first word: stop it.
            let _ = self.hub.cancels().send(CancelRequest {
                job_id: job,
                reason: "another replica adopted this job".into(),
                abandon: true,
            });
        }
        tracing::debug!(job = %job, kind = body.kind().as_str(), "a write for a job another replica adopted: refused");
        true
    }

    /// Tell `replica` to look at the hand-over now (its maintenance tick would, later).
    pub(super) async fn nudge(&self, replica: &str) {
        let message = serde_json::to_string(&LookMessage {
            look: "handover".into(),
        })
        .unwrap_or_default();
        let _ = self.publish(self.keys.control(replica), message).await;
    }

    /// Put `job` on `replica`'s `running` set (and the replica on the replicas set).
    pub(super) async fn enlist(&self, replica: &str, job: &str) -> Result<(), LinkError> {
        let mut pipe = ::redis::pipe();
        let (running, replicas) = (self.keys.running(replica), self.keys.replicas());
        pipe.cmd("SADD").arg(&running).arg(job).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&running)
            .arg(self.live_ttl_ms)
            .ignore();
        pipe.cmd("SADD").arg(&replicas).arg(replica).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&replicas)
            .arg(self.live_ttl_ms)
            .ignore();
        self.cmd
            .run(|mut conn| async move { pipe.exec_async(&mut conn).await })
            .await
    }

    /// Take `job` off `replica`'s `running` set, if Redis answers (else the owner-loss check
    /// does, once it finds the job ended or another's).
    pub(super) async fn delist(&self, replica: &str, job: &str) {
        self.remove_member(self.keys.running(replica), job).await;
    }

    /// `SREM` `member` from the set at `key`, if Redis answers: every caller leaves a stale
    /// member to a later look (the owner-loss check, the next hand-over pass).
    pub(super) async fn remove_member(&self, key: String, member: &str) {
        let member = member.to_string();
        let _ = self
            .cmd
            .run(|mut conn| async move {
                ::redis::cmd("SREM")
                    .arg(&key)
                    .arg(&member)
                    .exec_async(&mut conn)
                    .await
            })
            .await;
    }
}

/// The jobs this replica adopted, on their way to the one consumer that carries them on.
/// Unbounded: each item is one job that this replica now owns and must not lose; their number
/// is bounded by the running jobs of the replicas that were lost.
pub(super) struct Adoptions {
    pub(super) tx: mpsc::UnboundedSender<Adopted>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Adopted>>>,
    taken: AtomicBool,
}

impl Default for Adoptions {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            taken: AtomicBool::new(false),
        }
    }
}

impl Adoptions {
    /// The stream of adopted jobs, for the first caller; nothing for any other.
    pub(super) fn take(&self) -> BoxStream<'static, Adopted> {
        match self.rx.lock().take() {
            Some(rx) => {
                self.taken.store(true, Ordering::Release);
                UnboundedReceiverStream::new(rx).boxed()
            }
            None => {
                tracing::warn!("the adopted jobs were asked for twice; the second asker gets none");
                futures::stream::pending().boxed()
            }
        }
    }

    /// Whether someone carries adopted jobs on: without, this replica adopts none.
    pub(super) fn wanted(&self) -> bool {
        self.taken.load(Ordering::Acquire) && !self.tx.is_closed()
    }
}

/// This replica's side of the hand-over.
#[derive(Default)]
pub(super) struct Handover {
    /// Set when the drain begins: offer, adopt nothing.
    draining: AtomicBool,
    /// The jobs offered so far (each once; the set is cleared by the process's end).
    pub(super) offered: Mutex<HashSet<JobId>>,
    /// Wakes the maintenance task to offer at once.
    pub(super) wake: Notify,
}

impl Handover {
    pub(super) fn begin(&self) {
        self.draining.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether `job` was offered by this replica (its loss is then a hand-over, not a pause).
    pub(super) fn was_offered(&self, job: JobId) -> bool {
        self.offered.lock().contains(&job)
    }
}

pub(super) enum Top {
    Job(Box<JobSnapshot>),
    Correlation(Vec<JobId>),
}

pub(super) struct Read {
    pub(super) head: Seq,
    pub(super) top: Top,
    pub(super) events: Vec<Arc<StoredEvent>>,
    pub(super) covered: bool,
}

/// Field/value pairs from a RESP3 map or a flat RESP2 array (what scripts return).
pub(super) fn pairs(value: Value) -> Vec<(String, Vec<u8>)> {
    pub(super) fn text(v: Value) -> Option<Vec<u8>> {
        match v {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.into_bytes()),
            Value::Int(i) => Some(i.to_string().into_bytes()),
            _ => None,
        }
    }
    let items: Vec<(Value, Value)> = match value {
        Value::Map(items) => items,
        Value::Array(flat) => {
            let mut flat = flat.into_iter();
            std::iter::from_fn(|| Some((flat.next()?, flat.next()?))).collect()
        }
        _ => Vec::new(),
    };
    items
        .into_iter()
        .filter_map(|(k, v)| Some((String::from_utf8(text(k)?).ok()?, text(v)?)))
        .collect()
}

/// Stream entries (`[[id, [field, value]], …]`) as events, each made shareable by `share`.
pub(super) fn entries(
    value: Value,
    share: impl Fn(StoredEvent) -> Arc<StoredEvent>,
) -> Vec<Arc<StoredEvent>> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(mut pair) = item else {
                return None;
            };
            let fields = pair.pop()?;
            let id: String = ::redis::from_redis_value(pair.pop()?).ok()?;
            let seq = entry_seq(&id)?;
            let (_, frame) = pairs(fields).pop()?;
            let event = StoredEvent::from_frame(Bytes::from(frame))?;
            (event.seq == seq).then(|| share(event))
        })
        .collect()
}
