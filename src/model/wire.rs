//! Events as they go out: each event's JSON `data` (the contract's event schema), rendered
//! once when the event is appended; the SSE frame around it is `crate::events::sse_frame`'s.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::{
    EventBody, FailureReason, Heartbeat, InputQuestion, JobId, JobStatus, ProgressUpdate, Seq,
};

/// The JSON `data` of a stored job event: `job_id`, `seq`, `ts` and the body's own fields.
pub fn render_job_event(job_id: JobId, seq: Seq, ts: u64, body: &EventBody) -> Bytes {
    Bytes::from(to_vec(&Envelope {
        job_id,
        seq,
        ts,
        body: BodyView::from(body),
    }))
}

/// What every stored event's data starts with; the body's fields follow at the same level.
#[derive(Serialize)]
struct Envelope<B> {
    job_id: JobId,
    seq: Seq,
    ts: u64,
    #[serde(flatten)]
    body: B,
}

/// An [`EventBody`] as the contract writes it. Untagged: the SSE `event:` line names the kind,
/// and the terminal kinds carry `status` as a field of their own. Field order is the order on
/// the wire (`every_event_shape_renders_the_same_bytes` pins the bytes).
#[derive(Serialize)]
#[serde(untagged)]
enum BodyView<'a> {
    Progress(&'a ProgressUpdate),
    Log {
        level: &'a str,
        logger: &'a Option<String>,
        data: &'a Value,
    },
    Completed {
        status: JobStatus,
        result: &'a Value,
    },
    Failed {
        status: JobStatus,
        reason: &'a FailureReason,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: &'a Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        rpc_error: &'a Option<Value>,
    },
    Cancelled {
        status: JobStatus,
        reason: &'a str,
    },
    InputRequired(&'a InputQuestion),
    InputAnswered {
        key: &'a str,
        action: &'a str,
        by: &'a str,
    },
}

impl<'a> From<&'a EventBody> for BodyView<'a> {
    fn from(body: &'a EventBody) -> Self {
        match body {
            EventBody::Progress(update) => BodyView::Progress(update),
            EventBody::Log {
                level,
                logger,
                data,
            } => BodyView::Log {
                level,
                logger,
                data,
            },
            EventBody::Completed { result } => BodyView::Completed {
                status: JobStatus::Completed,
                result,
            },
            EventBody::Failed {
                failure,
                result,
                rpc_error,
            } => BodyView::Failed {
                status: JobStatus::Failed,
                reason: &failure.reason,
                message: &failure.message,
                result,
                rpc_error,
            },
            EventBody::Cancelled { reason } => BodyView::Cancelled {
                status: JobStatus::Cancelled,
                reason,
            },
            EventBody::InputRequired(question) => BodyView::InputRequired(question),
            EventBody::InputAnswered { key, action, by } => {
                BodyView::InputAnswered { key, action, by }
            }
        }
    }
}

/// The JSON `data` of a heartbeat.
pub fn render_heartbeat(job_id: JobId, seq: Seq, ts: u64, beat: &Heartbeat) -> Bytes {
    Bytes::from(to_vec(&Envelope {
        job_id,
        seq,
        ts,
        body: beat,
    }))
}

/// Serializing these plain structs cannot fail (string keys, finite numbers checked by
/// progress hygiene); should it ever, the event still goes out as an empty object rather than
/// taking the job down.
pub(crate) fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| {
        tracing::error!(error = %e, "event did not serialize");
        b"{}".to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobFailure;

    #[test]
    fn progress_event_data_has_the_contract_fields() {
        let id = JobId::random();
        let body = EventBody::Progress(ProgressUpdate {
            progress: 3.0,
            total: None,
            message: Some("three".into()),
        });
        let data = render_job_event(id, 7, 1000, &body);
        let v: Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(v["job_id"], id.to_string());
        assert_eq!(v["seq"], 7);
        assert_eq!(v["progress"], 3.0);
        assert!(v["total"].is_null());
        assert_eq!(v["message"], "three");
        assert_eq!(v["ts"], 1000);
    }

    /// The exact bytes of the terminal events' data, as they were while `status` and `reason`
    /// were strings.
    #[test]
    fn terminal_event_data_is_unchanged_by_the_enums() {
        let id: JobId = "0123456789abcdef0123456789abcdef".parse().unwrap();
        let cases = [
            (
                EventBody::Failed {
                    failure: JobFailure::new(FailureReason::Timeout, "took too long"),
                    result: None,
                    rpc_error: Some(serde_json::json!({"code": -1})),
                },
                r#""status":"failed","reason":"timeout","message":"took too long","rpc_error":{"code":-1}}"#,
            ),
            (
                EventBody::Completed {
                    result: serde_json::json!({"content": []}),
                },
                r#""status":"completed","result":{"content":[]}}"#,
            ),
            (
                EventBody::Cancelled {
                    reason: "asked".into(),
                },
                r#""status":"cancelled","reason":"asked"}"#,
            ),
        ];
        for (body, tail) in cases {
            assert_eq!(
                std::str::from_utf8(&render_job_event(id, 4, 99, &body)).unwrap(),
                format!(r#"{{"job_id":"0123456789abcdef0123456789abcdef","seq":4,"ts":99,{tail}"#)
            );
        }
    }

    /// Every event kind, in every shape its optional fields give it: the exact bytes the
    /// contract's consumers have been reading (captured before the view type replaced the
    /// per-kind structs). A change here is a change of the external contract.
    fn every_event_shape() -> Vec<EventBody> {
        use serde_json::json;
        vec![
            EventBody::Progress(ProgressUpdate {
                progress: 3.0,
                total: None,
                message: None,
            }),
            EventBody::Progress(ProgressUpdate {
                progress: 0.5,
                total: Some(10.0),
                message: Some("half \"a\" step\n".into()),
            }),
            EventBody::Log {
                level: "warning".into(),
                logger: None,
                data: json!("disk almost full"),
            },
            EventBody::Log {
                level: "info".into(),
                logger: Some("db".into()),
                data: json!({"rows": 3, "nested": [1, null]}),
            },
            EventBody::Completed {
                result: json!({"content": [{"type": "text", "text": "done"}], "isError": false}),
            },
            EventBody::Failed {
                failure: JobFailure::new(FailureReason::ToolError, "bad input"),
                result: Some(json!({"content": [], "isError": true})),
                rpc_error: None,
            },
            EventBody::Failed {
                failure: JobFailure::new(FailureReason::UpstreamError, "upstream said no"),
                result: None,
                rpc_error: Some(json!({"code": -32602, "message": "no"})),
            },
            EventBody::Failed {
                failure: JobFailure::new(FailureReason::UpstreamLost, "gone"),
                result: None,
                rpc_error: None,
            },
            EventBody::Cancelled {
                reason: "cancelled by the client".into(),
            },
        ]
    }

    #[test]
    fn every_event_shape_renders_the_same_bytes() {
        let id: JobId = "0123456789abcdef0123456789abcdef".parse().unwrap();
        let want = [
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"progress":3.0,"total":null,"message":null}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"progress":0.5,"total":10.0,"message":"half \"a\" step\n"}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"level":"warning","logger":null,"data":"disk almost full"}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"level":"info","logger":"db","data":{"nested":[1,null],"rows":3}}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"status":"completed","result":{"content":[{"text":"done","type":"text"}],"isError":false}}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"status":"failed","reason":"tool_error","message":"bad input","result":{"content":[],"isError":true}}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"status":"failed","reason":"upstream_error","message":"upstream said no","rpc_error":{"code":-32602,"message":"no"}}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"status":"failed","reason":"upstream_lost","message":"gone"}"#,
            r#"{"job_id":"0123456789abcdef0123456789abcdef","seq":12,"ts":1700000000123,"status":"cancelled","reason":"cancelled by the client"}"#,
        ];
        let shapes = every_event_shape();
        assert_eq!(shapes.len(), want.len());
        for (body, want) in shapes.iter().zip(want) {
            let data = render_job_event(id, 12, 1_700_000_000_123, body);
            assert_eq!(std::str::from_utf8(&data).unwrap(), want);
        }
    }
}
