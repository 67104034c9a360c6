//! Whether a job's upstream call can outlive the replica that runs it, and the record another
//! replica re-attaches to it with.

use serde::{Deserialize, Serialize};

/// Which durability applies to a job (its snapshot's `durability`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// The call dies with its replica: a lost owner ends the job `owner_lost`.
    #[default]
    None,
    /// The call is an upstream task on a Streamable HTTP upstream, its [`Reattach`] record is
    /// in the store: when its owner is lost, another replica adopts the job.
    UpstreamTask,
    /// The call is a plain one on a Streamable HTTP upstream whose SSE events carry ids; its
    /// [`Reattach`] record holds the last event id the job took in: another replica resumes
    /// the call's stream (`GET` with `Last-Event-ID`) and adopts the job.
    UpstreamStream,
}

/// How another replica re-attaches to a job's upstream call: the upstream task, or the call's
/// response stream, on the upstream session it was made in. Kept by the store beside the job, never shown to its
/// readers (the session ID is the bridge's own credential with the upstream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reattach {
    /// The upstream's name in the config (every replica has the same upstreams).
    pub upstream: String,
    /// The upstream's `Mcp-Session-Id` the task was created in (none: a session-less
    /// upstream).
    pub session_id: Option<String>,
    /// The protocol revision of that session (its `MCP-Protocol-Version` header).
    pub protocol: Option<String>,
    /// The upstream's `taskId` (empty for a resumable stream).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Set for a plain call whose response stream can be resumed: where it stood.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamCursor>,
}

impl Reattach {
    /// The durability this record gives its job.
    pub fn durability(&self) -> Durability {
        if self.stream.is_some() {
            Durability::UpstreamStream
        } else {
            Durability::UpstreamTask
        }
    }
}

/// Where a resumable call's response stream stood: what the `GET` that resumes it sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCursor {
    /// The JSON-RPC id of the `tools/call` (its answer on the stream names it; a cancel too).
    pub request_id: serde_json::Value,
    /// The id of the last SSE event whose report the job took in (its `Last-Event-ID`).
    pub last_event_id: String,
    /// The `progressToken` of the call's progress: a resumed stream's progress with another
    /// token is another call's (an upstream that replays more than the one stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<serde_json::Value>,
}
