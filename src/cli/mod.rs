//! The client-side commands: `watch` follows a job's event stream with a progress bar, `call`
//! calls a tool through a bridge and watches the job it starts. One file per command; `main.rs`
//! only dispatches.

pub mod call;
mod display;
pub mod watch;

use std::process::ExitCode;

use serde_json::Value;

/// How a watched job ended, and the exit code that says so to a shell.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Exit 0: the terminal event's data (with the tool's `result`).
    Completed(Value),
    /// Exit 1: the tool or the bridge failed the job.
    Failed(Value),
    /// Exit 130 (what a shell reports for a Ctrl-C): the job was cancelled.
    Cancelled(Value),
}

/// The job could not be followed at all: a bad URL, an unknown job, an unreachable bridge.
pub const EXIT_CANNOT_FOLLOW: u8 = 2;

impl Outcome {
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Outcome::Completed(_) => 0,
            Outcome::Failed(_) => 1,
            Outcome::Cancelled(_) => 130,
        })
    }
}

/// What stops `watch` or `call` before the job has an outcome.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Stream(String),
    #[error("{0}")]
    Mcp(String),
}

/// The text a person wants from a `CallToolResult` (JSON): its text blocks, else the structured
/// content, else the whole value, pretty-printed.
pub fn result_text(result: &Value) -> String {
    let texts: Vec<&str> = result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect()
        })
        .unwrap_or_default();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    let value = match &result["structuredContent"] {
        Value::Null => result,
        structured => structured,
    };
    serde_json::to_string_pretty(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn result_text_prefers_text_then_structured_content() {
        let with_text = json!({"content": [{"type": "text", "text": "counted to 3"}], "structuredContent": {"counted": 3}});
        assert_eq!(result_text(&with_text), "counted to 3");
        let structured = json!({"content": [], "structuredContent": {"counted": 3}});
        assert_eq!(result_text(&structured), "{\n  \"counted\": 3\n}");
        assert_eq!(result_text(&json!({"x": 1})), "{\n  \"x\": 1\n}");
    }
}
