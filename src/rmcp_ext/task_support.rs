//! Which of an upstream's tools declare `execution.taskSupport` (MCP 2025-11-25 tasks).
//!
//! rmcp 3.11's `Tool` has no `execution` field and keeps no unknown ones, so the declaration is
//! gone once rmcp has parsed a `tools/list` answer. A stdio upstream's lines pass through
//! [`LineCap`](super::line_cap) first: a line that mentions `"taskSupport"` (found with
//! `memmem`, so other lines cost one scan) and is no longer than
//! `upstream_tasks.max_declaration_bytes` is parsed here too, and every tool of a `tools/list` page it holds is recorded: its declaration, or
//! none. The bridge needs it for `required` tools, which the upstream refuses to run unless the
//! call is task-augmented (server-everything: "requires task augmentation"); the bridge then
//! runs the call as a task itself (`task_call.rs`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use serde_json::Value;

use crate::metrics::Metrics;

/// The `limit` label of a declaration too long to read (`bridge_limit_hits_total`).
const LIMIT: &str = "upstream_tasks.max_declaration_bytes";
/// The default of that key, for the unit tests.
#[cfg(test)]
pub const DEFAULT_MAX: usize = 4 * 1024 * 1024;

/// A tool's `execution.taskSupport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// The upstream runs the tool only as a task.
    Required,
    /// The upstream runs it either way.
    Optional,
}

/// The declarations seen on one upstream, by the upstream's own tool name.
#[derive(Clone)]
pub struct TaskSupportMap {
    map: Arc<Mutex<HashMap<String, TaskSupport>>>,
    /// The longest message parsed for declarations (`upstream_tasks.max_declaration_bytes`):
    /// a tool list larger than this (a thousand tools with long schemas) loses its
    /// `taskSupport` and is called the plain way.
    max: usize,
    /// Counts a declaration left unread for its size.
    hits: Option<prometheus::IntCounter>,
}

impl TaskSupportMap {
    pub fn new(max: usize, metrics: Option<&Metrics>) -> Self {
        Self {
            map: Arc::default(),
            max,
            hits: metrics.map(|m| m.limit_hits.with_label_values(&[LIMIT])),
        }
    }

    pub fn get(&self, tool: &str) -> Option<TaskSupport> {
        self.map.lock().ok()?.get(tool).copied()
    }

    /// The longest message [`Self::sniff`] reads.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A message longer than [`Self::max`] that named `taskSupport` was not read.
    pub fn too_long(&self) {
        if let Some(hits) = &self.hits {
            hits.inc();
        }
        tracing::warn!(
            max = self.max,
            "a tools/list answer longer than {LIMIT} was not read for execution.taskSupport: \
             its `required` tools fail as plain calls"
        );
    }

    /// Record the tools of `line` if it is a `tools/list` answer that declares task support.
    pub fn sniff(&self, line: &[u8]) {
        if memchr::memmem::find(line, b"\"taskSupport\"").is_none() {
            return;
        }
        if line.len() > self.max {
            self.too_long();
            return;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let Some(tools) = message["result"]["tools"].as_array() else {
            return;
        };
        let Ok(mut map) = self.map.lock() else { return };
        for tool in tools {
            let Some(name) = tool["name"].as_str() else {
                continue;
            };
            match tool["execution"]["taskSupport"].as_str() {
                Some("required") => map.insert(name.to_string(), TaskSupport::Required),
                Some("optional") => map.insert(name.to_string(), TaskSupport::Optional),
                _ => map.remove(name),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_list_line_records_each_declaration() {
        let map = TaskSupportMap::new(DEFAULT_MAX, None);
        map.sniff(
            br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a","execution":{"taskSupport":"required"}},{"name":"b","execution":{"taskSupport":"optional"}},{"name":"c"}]}}"#,
        );
        assert_eq!(map.get("a"), Some(TaskSupport::Required));
        assert_eq!(map.get("b"), Some(TaskSupport::Optional));
        assert_eq!(map.get("c"), None);
        // A later list without the declaration drops it; other messages change nothing.
        map.sniff(br#"{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"a","execution":{"taskSupport":"forbidden"}}]}}"#);
        map.sniff(
            br#"{"jsonrpc":"2.0","method":"x","params":{"taskSupport":"required","name":"b"}}"#,
        );
        assert_eq!(map.get("a"), None);
        assert_eq!(map.get("b"), Some(TaskSupport::Optional));
    }

    #[test]
    fn a_declaration_past_the_bound_is_not_read_and_is_counted() {
        let metrics = Metrics::new();
        let map = TaskSupportMap::new(120, Some(&metrics));
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"tools":[{{"name":"a","description":"{}","execution":{{"taskSupport":"required"}}}}]}}}}"#,
            "x".repeat(40)
        );
        assert!(line.len() > 120);
        map.sniff(line.as_bytes());
        assert_eq!(map.get("a"), None);
        assert_eq!(metrics.limit_hits.with_label_values(&[LIMIT]).get(), 1);
        TaskSupportMap::new(line.len(), Some(&metrics)).sniff(line.as_bytes());
        assert_eq!(metrics.limit_hits.with_label_values(&[LIMIT]).get(), 1);
    }
}
