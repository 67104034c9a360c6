//! The record of cancellations this server has seen.
//!
//! It exists for the bridge's tests: a cancel travels bridge → upstream as a
//! `notifications/cancelled`, and the only way to prove from outside that it
//! arrived is to ask the upstream afterwards (the `cancellations` tool).

use std::sync::Arc;

use parking_lot::Mutex;

use rmcp::model::{NumberOrString, RequestId};
use serde::{Deserialize, Serialize};

/// At most this many records are kept; older ones are dropped first. A demo
/// process serves a test run, so this is never reached in practice, but a
/// long-lived `demo-tools` child must not grow without bound.
const MAX_RECORDS: usize = 1024;

/// One cancelled tool call, as the `cancellations` tool reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancellationRecord {
    /// The tool that was running.
    pub tool: String,
    /// The JSON-RPC id of the cancelled `tools/call`, as the caller sent it
    /// (number or string).
    pub request_id: serde_json::Value,
    /// How many steps the tool had finished when it saw the cancel.
    pub at_step: u64,
}

/// A cheap, cloneable handle on one shared list of [`CancellationRecord`]s.
///
/// Every clone of a `DemoTools` shares it, and the HTTP server hands a clone to
/// each session, so a call in one session can read what another recorded.
///
/// A plain (`parking_lot`) mutex, not a tokio one: it is held only to push or copy
/// a small `Vec`, never across an `.await`. It does not poison: a panic elsewhere
/// cannot leave a half-pushed `Vec`.
#[derive(Debug, Clone, Default)]
pub struct CancellationLog {
    records: Arc<Mutex<Vec<CancellationRecord>>>,
}

impl CancellationLog {
    /// Adds a record. Also logged (to stderr), which helps when reading the
    /// output of a failed bridge test.
    pub fn record(&self, tool: &str, request_id: &RequestId, at_step: u64) {
        let request_id = match request_id {
            NumberOrString::Number(n) => serde_json::Value::from(*n),
            NumberOrString::String(s) => serde_json::Value::from(s.as_ref()),
        };
        tracing::info!(tool, %request_id, at_step, "demo tool call cancelled");
        let mut records = self.records.lock();
        if records.len() >= MAX_RECORDS {
            records.remove(0);
        }
        records.push(CancellationRecord {
            tool: tool.to_owned(),
            request_id,
            at_step,
        });
    }

    /// A copy of every record, oldest first.
    pub fn snapshot(&self) -> Vec<CancellationRecord> {
        self.records.lock().clone()
    }
}
