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
}

/// How another replica re-attaches to a job's upstream call: the upstream task, on the
/// upstream session it was created in. Kept by the store beside the job, never shown to its
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
    /// The upstream's `taskId`.
    pub task_id: String,
}
