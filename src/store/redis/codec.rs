//! Between the bridge's types and what sits in Redis: snapshot hash fields, event JSON split
//! around its sequence number, and SSE frames read back from history or pub/sub.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::model::{JobId, JobSnapshot, Seq};

/// The snapshot as hash fields: each value is the field's JSON text. `seq` is kept as a plain
/// integer (it is the `HINCRBY` counter), which is also its JSON text.
pub(super) fn snapshot_fields(snapshot: &JobSnapshot) -> Map<String, Value> {
    match serde_json::to_value(snapshot) {
        Ok(Value::Object(map)) => map,
        // A struct of plain fields always serializes to an object.
        _ => Map::new(),
    }
}

/// The bookkeeping field that holds the job's principal (JSON text). Not a snapshot field:
/// the snapshot JSON never shows it (see `model::Principal`), but the owner check needs it.
const PRINCIPAL_FIELD: &str = "_principal";

/// All fields, for a new job: the snapshot's, and its principal's.
pub(super) fn all_fields(snapshot: &JobSnapshot) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = snapshot_fields(snapshot)
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    if let Some(principal) = &snapshot.principal {
        fields.push((
            PRINCIPAL_FIELD.into(),
            Value::from(principal.as_str()).to_string(),
        ));
    }
    fields
}

/// The fields that differ between two states of a snapshot, except `seq`, which the append
/// script counts itself.
pub(super) fn changed_fields(
    before: &Map<String, Value>,
    after: &Map<String, Value>,
) -> Vec<(String, String)> {
    after
        .iter()
        .filter(|(k, v)| k.as_str() != "seq" && before.get(k.as_str()) != Some(v))
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

/// Rebuild a snapshot from `HGETALL`. Fields starting with `_` are the bridge's own
/// bookkeeping, not part of the snapshot.
pub(super) fn snapshot_from_fields(fields: &[(String, Vec<u8>)]) -> Option<JobSnapshot> {
    let mut json = Vec::with_capacity(fields.iter().map(|(k, v)| k.len() + v.len() + 4).sum());
    json.push(b'{');
    for (name, value) in fields.iter().filter(|(k, _)| !k.starts_with('_')) {
        if json.len() > 1 {
            json.push(b',');
        }
        json.push(b'"');
        json.extend_from_slice(name.as_bytes());
        json.extend_from_slice(b"\":");
        json.extend_from_slice(value);
    }
    json.push(b'}');
    match serde_json::from_slice::<JobSnapshot>(&json) {
        Ok(mut snapshot) => {
            snapshot.principal = fields
                .iter()
                .find(|(k, _)| k == PRINCIPAL_FIELD)
                .and_then(|(_, v)| serde_json::from_slice(v).ok());
            Some(snapshot)
        }
        Err(error) => {
            tracing::error!(%error, "a job snapshot in Redis does not parse; treating the job as unknown");
            None
        }
    }
}

/// An event's JSON data, rendered once with `seq` 0 and cut around that 0, so the append
/// script can put the number Redis assigns in between.
#[derive(Debug, Clone)]
pub(super) struct SplitData {
    pub before: Bytes,
    pub after: Bytes,
}

impl SplitData {
    /// `data` is what `render_job_event` / `render_heartbeat` made with seq 0: it starts with
    /// `{"job_id":"<id>","seq":0,`.
    pub(super) fn new(job: JobId, data: Bytes) -> Self {
        let head = format!("{{\"job_id\":\"{job}\",\"seq\":");
        let at = if data.starts_with(head.as_bytes()) && data.get(head.len()) == Some(&b'0') {
            head.len()
        } else {
            // Not the envelope shape expected: find the field instead (never seen so far).
            let needle = b"\"seq\":0";
            data.windows(needle.len())
                .position(|w| w == needle)
                .map_or(data.len(), |p| p + needle.len() - 1)
        };
        let after_zero = (at + 1).min(data.len());
        Self {
            before: data.slice(..at),
            after: data.slice(after_zero..),
        }
    }
}

/// The sequence number of a stream entry ID `<seq>-0`.
pub(super) fn entry_seq(id: &str) -> Option<Seq> {
    id.split_once('-').and_then(|(seq, _)| seq.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        EventBody, Heartbeat, NewJob, ProgressUpdate,
        wire::{render_heartbeat, render_job_event},
    };

    #[test]
    fn split_data_puts_any_seq_where_the_renderer_would() {
        let job = JobId::random();
        let body = EventBody::Progress(ProgressUpdate {
            progress: 2.5,
            total: None,
            message: Some("a \"quoted\" 0".into()),
        });
        let split = SplitData::new(job, render_job_event(job, 0, 77, &body));
        let joined = [&split.before[..], b"1234", &split.after[..]].concat();
        assert_eq!(joined, render_job_event(job, 1234, 77, &body));
        let beat = Heartbeat {
            elapsed_ms: 5,
            since_progress_ms: 1,
        };
        let split = SplitData::new(job, render_heartbeat(job, 0, 9, &beat));
        let joined = [&split.before[..], b"8", &split.after[..]].concat();
        assert_eq!(joined, render_heartbeat(job, 8, 9, &beat));
    }

    #[test]
    fn snapshot_round_trips_through_hash_fields() {
        let mut s = JobSnapshot::new(
            &NewJob {
                id: JobId::random(),
                tool: "demo__t".into(),
                upstream: "demo".into(),
                upstream_tool: "t".into(),
                correlation_id: Some("c-1".parse().unwrap()),
                owner: "r".into(),
                principal: Some(crate::model::Principal::jwt("https://idp.example/", "u-1")),
            },
            10,
        );
        let before = snapshot_fields(&s);
        s.apply(
            1,
            20,
            &EventBody::Completed {
                result: serde_json::json!({"content": [], "isError": false}),
            },
        );
        let changed = changed_fields(&before, &snapshot_fields(&s));
        assert!(changed.iter().any(|(k, _)| k == "status"));
        assert!(!changed.iter().any(|(k, _)| k == "seq" || k == "tool"));
        let mut fields: Vec<(String, Vec<u8>)> = all_fields(&s)
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        fields.push(("_cancel".into(), b"whatever".to_vec()));
        assert_eq!(snapshot_from_fields(&fields), Some(s));
    }
}
