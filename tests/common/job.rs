//! Jobs as a test sees them: the handle an async call answers with, typed, and the URLs of a
//! job whose ID a test learned some other way (signed as the handle's would be).

use serde::Deserialize;
use serde_json::Value;

use super::{
    bridge::job_tokens,
    mcp::{McpClient, call, structured},
};

/// The job handle of an async answer (the contract's fields; `raw` is the whole object).
#[derive(Debug, Clone, Deserialize)]
pub struct JobHandle {
    pub job_id: String,
    pub status: String,
    pub tool: String,
    pub events_url: String,
    pub status_url: String,
    pub cancel_url: String,
    pub instructions: String,
    #[serde(skip)]
    pub raw: Value,
}

impl JobHandle {
    /// Read a handle from a tool answer's JSON; panics, showing it, if it is not one.
    pub fn from_value(value: Value) -> Self {
        let mut handle: Self = serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("not a job handle ({e}): {value}"));
        handle.raw = value;
        handle
    }

    /// The `?token=` value of its events (and status) URL: the job's read token.
    pub fn read_token(&self) -> &str {
        token_of(&self.events_url)
    }

    /// The `?token=` value of its cancel URL.
    pub fn cancel_token(&self) -> &str {
        token_of(&self.cancel_url)
    }
}

/// The `token=` value of a URL.
pub fn token_of(url: &str) -> &str {
    url.split("token=")
        .nth(1)
        .unwrap_or_else(|| panic!("no token in {url}"))
}

/// Call a tool that must answer with a job handle (async mode, or a slow auto call), and
/// return the handle; fails the test if the answer is not a running job's handle.
pub async fn running_job(client: &McpClient, tool: &str, arguments: Value) -> JobHandle {
    let answer = structured(&call(client, tool, arguments).await);
    assert_eq!(
        answer["status"], "running",
        "a job handle (the call answered with its handle): {answer}"
    );
    JobHandle::from_value(answer)
}

/// A job's URLs on a test bridge, signed with the test job secret (what the job handle would
/// carry), for tests that learn a job's ID some other way than from its handle.
pub fn job_events_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/events?token={token}")
}

pub fn job_status_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().job(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}?token={token}")
}

pub fn job_cancel_url(base: &str, job_id: &str) -> String {
    let token = job_tokens().cancel(job_id.parse().expect("a job ID"));
    format!("{base}/jobs/{job_id}/cancel?token={token}")
}
