//! The job snapshot: everything `GET /jobs/{id}` shows, folded from the job's events.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CorrelationId, Durability, EventBody, FailureReason, InputQuestion, JobFailure, JobId,
    JobStatus, Principal, Seq,
};

/// What a new job is, before it has events.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: JobId,
    /// The name the agent called, `<upstream>__<tool>`.
    pub tool: String,
    pub upstream: String,
    pub upstream_tool: String,
    pub correlation_id: Option<CorrelationId>,
    /// The replica that runs the upstream call (cancel routing, owner-loss detection).
    pub owner: String,
    /// Who started it (the MCP request's principal): only they, an admin, or a capability
    /// URL may see it.
    pub principal: Option<Principal>,
}

/// A job's state as of event `seq`. Timestamps are Unix epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSnapshot {
    pub job_id: JobId,
    pub tool: String,
    pub upstream: String,
    pub upstream_tool: String,
    pub status: JobStatus,
    pub progress: Option<f64>,
    pub total: Option<f64>,
    pub message: Option<String>,
    /// Sequence number of the last event folded in; a `status` event carries it as its `id:`.
    pub seq: Seq,
    pub created_at: u64,
    pub updated_at: u64,
    pub finished_at: Option<u64>,
    pub last_progress_at: Option<u64>,
    /// Estimated time left, from the rate so far, when progress and total allow one.
    pub eta_ms: Option<u64>,
    pub correlation_id: Option<CorrelationId>,
    /// The upstream's `CallToolResult` once terminal (also for a tool error).
    pub result: Option<Value>,
    pub error: Option<JobFailure>,
    /// The JSON-RPC error object the upstream answered with, for a job that failed so: what a
    /// sync call passes on, and a task's `error`. Absent otherwise (older snapshots lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_error: Option<Value>,
    /// The questions the tool asked that nobody has answered yet (status `input_required`
    /// while there are any). Always written, also when empty, so a store that keeps fields
    /// sees it emptied.
    #[serde(default)]
    pub input_requests: Vec<InputQuestion>,
    pub owner: String,
    /// Whether the upstream call outlives this job's owner: `upstream_task` once the call is
    /// an upstream task another replica can re-attach to (docs/replicas.md).
    #[serde(default)]
    pub durability: Durability,
    /// Who started the job. Never serialized: it may be personal data, and the snapshot JSON
    /// is what every reader of the job sees (see [`Principal`]). Stores keep it beside the
    /// snapshot; `None` for a job recorded before principals existed (only an admin or a
    /// capability URL opens it).
    #[serde(skip)]
    pub principal: Option<Principal>,
}

impl JobSnapshot {
    pub fn new(job: &NewJob, now: u64) -> Self {
        Self {
            job_id: job.id,
            tool: job.tool.clone(),
            upstream: job.upstream.clone(),
            upstream_tool: job.upstream_tool.clone(),
            status: JobStatus::Running,
            progress: None,
            total: None,
            message: None,
            seq: 0,
            created_at: now,
            updated_at: now,
            finished_at: None,
            last_progress_at: None,
            eta_ms: None,
            correlation_id: job.correlation_id.clone(),
            result: None,
            error: None,
            rpc_error: None,
            input_requests: Vec::new(),
            owner: job.owner.clone(),
            durability: Durability::None,
            principal: job.principal.clone(),
        }
    }

    /// Fold one event (already given `seq` and timestamp `ts`) into the snapshot.
    pub fn apply(&mut self, seq: Seq, ts: u64, body: &EventBody) {
        self.seq = seq;
        self.updated_at = ts;
        match body {
            EventBody::Progress(p) => {
                self.progress = Some(p.progress);
                self.total = p.total;
                if p.message.is_some() {
                    self.message = p.message.clone();
                }
                self.last_progress_at = Some(ts);
                self.eta_ms = estimate_eta(self.created_at, ts, p.progress, p.total);
            }
            EventBody::Log { .. } => {}
            EventBody::Completed { result } => {
                self.finish(JobStatus::Completed, ts);
                self.result = Some(result.clone());
            }
            EventBody::Failed {
                failure,
                result,
                rpc_error,
            } => {
                self.finish(JobStatus::Failed, ts);
                self.error = Some(failure.clone());
                self.result = result.clone();
                self.rpc_error = rpc_error.clone();
            }
            EventBody::Cancelled { reason } => {
                self.finish(JobStatus::Cancelled, ts);
                self.error = Some(JobFailure::new(FailureReason::Cancelled, reason.clone()));
            }
            EventBody::InputRequired(question) => {
                self.input_requests.push(question.clone());
                self.status = JobStatus::InputRequired;
            }
            EventBody::InputAnswered { key, .. } => {
                self.input_requests.retain(|q| &q.key != key);
                if self.input_requests.is_empty() {
                    self.status = JobStatus::Running;
                }
            }
        }
    }

    fn finish(&mut self, status: JobStatus, ts: u64) {
        self.status = status;
        self.input_requests.clear();
        self.finished_at = Some(ts);
        self.eta_ms = None;
    }
}

/// Linear estimate: if `progress` of `total` took `now - start`, the rest takes proportionally
/// long. None without a total, before any progress, or once past the total.
fn estimate_eta(start: u64, now: u64, progress: f64, total: Option<f64>) -> Option<u64> {
    let total = total?;
    let estimable = progress > 0.0 && total > progress;
    if !estimable {
        return None;
    }
    let elapsed = now.saturating_sub(start) as f64;
    let eta = elapsed * (total - progress) / progress;
    eta.is_finite().then(|| eta.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProgressUpdate;

    #[test]
    fn eta_is_linear_and_absent_without_total() {
        assert_eq!(estimate_eta(0, 1000, 1.0, Some(4.0)), Some(3000));
        assert_eq!(estimate_eta(0, 1000, 1.0, None), None);
        assert_eq!(estimate_eta(0, 1000, 0.0, Some(4.0)), None);
        assert_eq!(estimate_eta(0, 1000, 5.0, Some(4.0)), None);
    }

    #[test]
    fn terminal_events_fold_into_status() {
        let job = NewJob {
            id: JobId::random(),
            tool: "demo__x".into(),
            upstream: "demo".into(),
            upstream_tool: "x".into(),
            correlation_id: None,
            owner: "r1".into(),
            principal: Some(Principal::token("t")),
        };
        let mut s = JobSnapshot::new(&job, 0);
        s.apply(
            1,
            10,
            &EventBody::Progress(ProgressUpdate {
                progress: 1.0,
                total: Some(2.0),
                message: Some("a".into()),
            }),
        );
        assert_eq!(
            (s.seq, s.progress, s.message.as_deref()),
            (1, Some(1.0), Some("a"))
        );
        s.apply(
            2,
            20,
            &EventBody::Cancelled {
                reason: "asked".into(),
            },
        );
        assert_eq!(s.status, JobStatus::Cancelled);
        assert_eq!(s.finished_at, Some(20));
        assert_eq!(s.eta_ms, None);
    }

    /// The exact JSON of a snapshot (`GET /jobs/{id}`, the Redis hash fields), as it was while
    /// `status` and `error.reason` were strings; and it reads back to the same value. The
    /// principal is not in it (it may be personal data), so it reads back as `None`.
    #[test]
    fn snapshot_json_is_unchanged_by_the_enums_and_round_trips() {
        let job = NewJob {
            id: "0123456789abcdef0123456789abcdef".parse().unwrap(),
            tool: "demo__x".into(),
            upstream: "demo".into(),
            upstream_tool: "x".into(),
            correlation_id: None,
            owner: "r1".into(),
            principal: Some(Principal::token("t")),
        };
        let mut s = JobSnapshot::new(&job, 10);
        s.apply(
            1,
            20,
            &EventBody::Cancelled {
                reason: "asked".into(),
            },
        );
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(
            text,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","tool":"demo__x","upstream":"demo","upstream_tool":"x","status":"cancelled","progress":null,"total":null,"message":null,"seq":1,"created_at":10,"updated_at":20,"finished_at":20,"last_progress_at":null,"eta_ms":null,"correlation_id":null,"result":null,"error":{"reason":"cancelled","message":"asked"},"input_requests":[],"owner":"r1","durability":"none"}"#
        );
        assert!(!text.contains("token:t"));
        let read = serde_json::from_str::<JobSnapshot>(&text).unwrap();
        assert_eq!(
            read,
            JobSnapshot {
                principal: None,
                ..s
            }
        );
    }

    /// A snapshot whose failure reason this version does not know still reads, and keeps it.
    #[test]
    fn a_snapshot_with_an_unknown_reason_still_reads() {
        let text = r#"{"job_id":"0123456789abcdef0123456789abcdef","tool":"demo__x","upstream":"demo","upstream_tool":"x","status":"failed","progress":null,"total":null,"message":null,"seq":3,"created_at":10,"updated_at":20,"finished_at":20,"last_progress_at":null,"eta_ms":null,"correlation_id":null,"result":null,"error":{"reason":"from_the_future","message":"m"},"input_requests":[],"owner":"r1","durability":"none"}"#;
        let s: JobSnapshot = serde_json::from_str(text).unwrap();
        assert_eq!(
            s.error.as_ref().map(|e| &e.reason),
            Some(&FailureReason::Other("from_the_future".into()))
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), text);
    }
}
