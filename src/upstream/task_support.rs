//! Which of an upstream's tools declare `execution.taskSupport` (MCP 2025-11-25 tasks).
//!
//! rmcp 3.11's `Tool` has no `execution` field and keeps no unknown ones, so the declaration is
//! gone once rmcp has parsed a `tools/list` answer. A stdio upstream's lines pass through
//! [`LineCap`](super::line_cap) first: a line that mentions `"taskSupport"` (found with
//! `memmem`, so other lines cost one scan) and is no longer than [`MAX_SNIFFED_LINE`] is parsed
//! here too, and every tool of a `tools/list` page it holds is recorded: its declaration, or
//! none. The bridge needs it for `required` tools, which the upstream refuses to run unless the
//! call is task-augmented (server-everything: "requires task augmentation"); the bridge then
//! runs the call as a task itself (`task_call.rs`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use serde_json::Value;

/// The longest line parsed for declarations: a tool list larger than this (a thousand tools
/// with long schemas) loses its `taskSupport` and is called the plain way.
pub(super) const MAX_SNIFFED_LINE: usize = 4 * 1024 * 1024;

/// A tool's `execution.taskSupport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// The upstream runs the tool only as a task.
    Required,
    /// The upstream runs it either way.
    Optional,
}

/// The declarations seen on one upstream, by the upstream's own tool name.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskSupportMap(Arc<Mutex<HashMap<String, TaskSupport>>>);

impl TaskSupportMap {
    pub(super) fn get(&self, tool: &str) -> Option<TaskSupport> {
        self.0.lock().ok()?.get(tool).copied()
    }

    /// Record the tools of `line` if it is a `tools/list` answer that declares task support.
    pub(super) fn sniff(&self, line: &[u8]) {
        if line.len() > MAX_SNIFFED_LINE || memchr::memmem::find(line, b"\"taskSupport\"").is_none()
        {
            return;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let Some(tools) = message["result"]["tools"].as_array() else {
            return;
        };
        let Ok(mut map) = self.0.lock() else { return };
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
        let map = TaskSupportMap::default();
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
}
