//! Between replicas: a cancel routed to the job's owner, an answer relayed to it and its
//! verdict back.

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};

use super::error::StoreError;
use crate::model::{
    AnswerVerdict, CancelAck, InputAnswer, JobId, JobSnapshot, Principal, Reattach, now_ms,
};

/// A request to stop a running job, routed to the replica that runs its upstream call.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    pub job_id: JobId,
    pub reason: String,
    /// The job is no longer this replica's (another one adopted it): stop working on it, write
    /// nothing more and leave its upstream call alone, which the adopter carries on.
    pub abandon: bool,
}

/// A job this replica adopted from an owner whose lease lapsed (`docs/replicas.md`): it is this
/// replica's now, at the snapshot's `seq`, to carry on by re-attaching to its upstream call.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub snapshot: JobSnapshot,
    pub record: Reattach,
}

/// An answer for a job this replica runs, passed on by the replica it reached (what it answers
/// waits only here, in the job's runner).
#[derive(Debug, Clone)]
pub struct AnswerRequest {
    pub job_id: JobId,
    pub answer: RelayedAnswer,
    /// The answer path, for the job's `input_answered` event.
    pub by: String,
    /// Where the verdict goes ([`Store::reply_answer`]).
    pub reply: ReplyTo,
}

/// What a relayed answer answers.
#[derive(Debug, Clone, PartialEq)]
pub enum RelayedAnswer {
    /// A question of the job (it waits on the job's input desk for anyone who may answer).
    Question(InputAnswer),
    /// A request the job's tool made of its waiting caller (a sample, the roots: the revision
    /// whose answers come back in the retried call), under the key the caller's `inputResponses` names it by, and the answer as the caller
    /// gave it (unchecked: the owner checks it as a local one).
    CallerRequest {
        key: String,
        value: serde_json::Value,
    },
}

/// The replica waiting for the verdict on a relayed answer, and until when it waits.
#[derive(Debug, Clone)]
pub struct ReplyTo {
    pub(crate) replica: String,
    pub(crate) id: u64,
    /// Milliseconds since the epoch: past it the answering replica has told its client the
    /// answer is unconfirmed, so the answer must not be taken any more.
    pub(crate) expires_ms: u64,
}

impl ReplyTo {
    /// The answering replica no longer waits: the answer must be dropped, not taken.
    pub fn expired(&self) -> bool {
        now_ms() > self.expires_ms
    }
}

/// How relaying an answer to the job's replica ended, for the answering replica.
#[derive(Debug, Clone, PartialEq)]
pub enum Relayed {
    Verdict(AnswerVerdict),
    /// No verdict within the wait (`store.input_relay_timeout_ms`): the job's replica drops
    /// the answer if it gets it later, but one on its way at the deadline may have been taken.
    Unconfirmed {
        waited_ms: u64,
    },
    /// Nobody listens on the job's replica's channel (it is gone, or reconnecting to Redis):
    /// nothing was delivered.
    OwnerAway,
    /// Too many answers of this replica wait for verdicts already: in all
    /// (`limits.max_input_relays`), or to jobs of the answered job's principal
    /// (`per_principal`, `limits.max_input_relays_per_principal`).
    Busy {
        per_principal: bool,
    },
}

/// An answer (to a question, or to a request the tool made of its caller) on its way to the
/// replica that runs its job (`Bus::relay_answer`).
#[derive(Debug, Clone)]
pub struct Relay {
    /// The replica running the job (not this one).
    pub owner: String,
    pub job: JobId,
    pub answer: RelayedAnswer,
    /// Who answered.
    pub by: String,
    /// The job's principal: the wait counts against its share.
    pub principal: Option<Principal>,
}

#[async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Ask the job's owner to cancel it.
    async fn request_cancel(&self, job: JobId, reason: String) -> Result<CancelAck, StoreError>;

    /// Cancel requests for jobs that this replica owns.
    fn cancel_requests(&self) -> BoxStream<'static, CancelRequest>;

    /// Pass an answer to the replica that runs its job, and wait (bounded) for its verdict.
    /// A store of one replica has nobody to pass it to.
    async fn relay_answer(&self, relay: Relay) -> Result<Relayed, StoreError> {
        let _ = relay;
        Ok(Relayed::OwnerAway)
    }

    /// Answers other replicas passed on for jobs this replica runs (none have expired yet).
    fn answer_requests(&self) -> BoxStream<'static, AnswerRequest> {
        futures::stream::pending().boxed()
    }

    /// Send the verdict on a relayed answer back to the replica that waits for it.
    async fn reply_answer(&self, _to: ReplyTo, _verdict: AnswerVerdict) -> Result<(), StoreError> {
        Ok(())
    }

    /// The jobs this replica adopts from lost owners, for the one caller that carries them on
    /// (the first call takes them; a store of one replica adopts none). A store adopts only
    /// once this has been called.
    fn adoptions(&self) -> BoxStream<'static, Adopted> {
        futures::stream::pending().boxed()
    }

    /// This replica drains: from now on it adopts nothing, and offers every job it runs whose
    /// upstream call another replica can re-attach. Each stays here until another replica
    /// takes it (the job then goes on there under the same `seq` line; here it ends as
    /// abandoned, its upstream call untouched), or runs here to its end when none does. A
    /// store of one replica has nobody to offer to.
    fn hand_over(&self) {}
}
