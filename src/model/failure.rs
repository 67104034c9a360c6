//! Why a job failed: a machine-readable [`FailureReason`] plus a sentence for people.
//!
//! The reasons are part of the external contract (a `failed` event's `reason`, a snapshot's
//! `error.reason`): this enum is the one place they are named, and serde writes each as its
//! documented snake_case string.
//!
//! Reading a reason this version does not know (a snapshot written to Redis by a newer replica
//! during a rolling upgrade, or by an older one with a reason since retired) must not make the
//! snapshot unreadable, so such a string becomes [`FailureReason::Other`], kept verbatim and
//! written back byte for byte. `#[serde(other)]` was the alternative; it would collapse every
//! unknown reason into one fixed word, and a replica serving another's job would then show
//! clients a different reason than the replica that ended it.

use serde::{Deserialize, Serialize};

/// The `reason` of a failed job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The tool answered `isError: true`; the job's `result` is its answer.
    ToolError,
    /// The upstream answered with a JSON-RPC error (in the event's `rpc_error`).
    UpstreamError,
    /// The tool server exited or stopped answering during the call.
    UpstreamLost,
    /// The upstream was not connected when the call came.
    UpstreamUnavailable,
    /// The call ran past its time limit, or past its limit without progress.
    Timeout,
    /// The upstream answered in a way the bridge cannot turn into a result.
    Unsupported,
    /// The upstream's answer was larger than `limits.max_result_bytes`; it was dropped unread.
    ResultTooLarge,
    /// Redis store: the replica running the call died (its lease expired).
    OwnerLost,
    /// Redis store: Redis went away while the job was being created.
    StoreUnavailable,
    /// The job was cancelled; in a snapshot's `error` only (a `cancelled` event says why in
    /// its own `reason` sentence).
    Cancelled,
    /// The bridge lost track of the job's outcome (a bug, never expected).
    Internal,
    /// A reason this version does not know, read from elsewhere; kept as it was written.
    #[serde(untagged)]
    Other(String),
}

/// Why a job failed, as a short machine-readable word plus a sentence for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobFailure {
    pub reason: FailureReason,
    pub message: String,
}

impl JobFailure {
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented strings (README, "Event stream"), one per reason.
    const DOCUMENTED: [(FailureReason, &str); 11] = [
        (FailureReason::ToolError, "tool_error"),
        (FailureReason::UpstreamError, "upstream_error"),
        (FailureReason::UpstreamLost, "upstream_lost"),
        (FailureReason::UpstreamUnavailable, "upstream_unavailable"),
        (FailureReason::Timeout, "timeout"),
        (FailureReason::Unsupported, "unsupported"),
        (FailureReason::OwnerLost, "owner_lost"),
        (FailureReason::StoreUnavailable, "store_unavailable"),
        (FailureReason::Cancelled, "cancelled"),
        (FailureReason::Internal, "internal"),
        (FailureReason::ResultTooLarge, "result_too_large"),
    ];

    #[test]
    fn each_reason_is_written_as_its_documented_string_and_read_back() {
        for (reason, text) in DOCUMENTED {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            let back: FailureReason = serde_json::from_str(&json).unwrap();
            assert_eq!(back, reason);
        }
    }

    /// Keeps [`DOCUMENTED`] complete: a new reason does not compile here until it has an
    /// index, and fails the test until it is listed.
    #[test]
    fn the_documented_list_names_every_reason() {
        let mut listed = [false; DOCUMENTED.len()];
        for (reason, _) in DOCUMENTED {
            let index = match reason {
                FailureReason::ToolError => 0,
                FailureReason::UpstreamError => 1,
                FailureReason::UpstreamLost => 2,
                FailureReason::UpstreamUnavailable => 3,
                FailureReason::Timeout => 4,
                FailureReason::Unsupported => 5,
                FailureReason::OwnerLost => 6,
                FailureReason::StoreUnavailable => 7,
                FailureReason::Cancelled => 8,
                FailureReason::Internal => 9,
                FailureReason::ResultTooLarge => 10,
                FailureReason::Other(_) => panic!("Other is not a documented reason"),
            };
            listed[index] = true;
        }
        assert!(listed.iter().all(|l| *l), "{listed:?}");
    }

    #[test]
    fn an_unknown_reason_is_kept_verbatim() {
        let failure: JobFailure =
            serde_json::from_str(r#"{"reason":"quota_exceeded","message":"m"}"#).unwrap();
        assert_eq!(
            failure.reason,
            FailureReason::Other("quota_exceeded".into())
        );
        assert_eq!(
            serde_json::to_string(&failure).unwrap(),
            r#"{"reason":"quota_exceeded","message":"m"}"#
        );
    }

    #[test]
    fn a_failure_round_trips_byte_for_byte() {
        let text = r#"{"reason":"owner_lost","message":"the replica running the call died"}"#;
        let failure: JobFailure = serde_json::from_str(text).unwrap();
        assert_eq!(failure.reason, FailureReason::OwnerLost);
        assert_eq!(serde_json::to_string(&failure).unwrap(), text);
    }
}
