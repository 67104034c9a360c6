//! What the agent is answered besides a tool's own result: the job handle an async answer
//! carries, the `_meta` a sync answer carries, and the bridge's errors as the agent sees them.

use rmcp::{
    ErrorData,
    model::{CallToolResult, ContentBlock},
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    auth::{JobTokens, TokenScope},
    jobs::JobsError,
    model::{
        JobId, JobStatus,
        meta::{JOB_META_KEY, RETRY_META_KEY},
    },
    redact,
    upstream::RequestError,
};

/// Builds the URLs a job handle points to, each with the capability token it needs
/// (`?token=`, see `auth::JobTokens`): the read token on the status and events URLs, the
/// cancel token on the cancel URL, the input token on the input URL. Tokens expire
/// `auth.job_token_ttl_secs` after they are minted; the URLs of one handle share one expiry.
#[derive(Debug, Clone)]
pub struct Links {
    public_url: String,
    tokens: JobTokens,
}

impl Links {
    /// `public_url` without a trailing slash.
    pub fn new(public_url: &str, tokens: JobTokens) -> Self {
        Self {
            public_url: public_url.trim_end_matches('/').to_string(),
            tokens,
        }
    }

    /// `<public_url>/jobs/<id><path>?token=…` with a `scope` token good until `expires`.
    fn url(&self, id: JobId, path: &str, scope: TokenScope, expires: u64) -> String {
        let token = self.tokens.mint_until(scope, &id.to_string(), expires);
        format!("{}/jobs/{id}{path}?token={token}", self.public_url)
    }

    pub fn events_url(&self, id: JobId) -> String {
        self.url(id, "/events", TokenScope::JobRead, self.tokens.expiry())
    }

    pub fn input_url(&self, id: JobId) -> String {
        self.url(id, "/input", TokenScope::JobInput, self.tokens.expiry())
    }
}

/// What an `async` answer (or a slow `auto` one) gives the agent.
#[derive(Debug, Clone, Serialize)]
pub struct JobHandleBody {
    pub job_id: JobId,
    pub status: JobStatus,
    pub events_url: String,
    pub status_url: String,
    /// `POST` here cancels the job: a separate capability, for whoever may stop it.
    pub cancel_url: String,
    /// `POST` an answer here when the tool asks a question (status `input_required`): a
    /// capability of its own, for whoever may answer.
    pub input_url: String,
    pub tool: String,
    pub instructions: String,
}

impl JobHandleBody {
    pub fn new(links: &Links, id: JobId, tool: &str) -> Self {
        // One expiry for all four, so the status and events URLs carry the same token.
        let expires = links.tokens.expiry();
        Self {
            job_id: id,
            status: JobStatus::Running,
            events_url: links.url(id, "/events", TokenScope::JobRead, expires),
            status_url: links.url(id, "", TokenScope::JobRead, expires),
            cancel_url: links.url(id, "/cancel", TokenScope::JobCancel, expires),
            input_url: links.url(id, "/input", TokenScope::JobInput, expires),
            tool: tool.to_string(),
            instructions: format!(
                "The tool is running as job {id}. Call wait_for_job with job_id \"{id}\" to get \
                 its result; live progress streams at events_url."
            ),
        }
    }

    /// The handle of a job that this replica cancelled as it shut down (`reason`, one of the
    /// drain's), for a caller that was waiting for its result: a tool error that names the job
    /// and says the call was not completed.
    pub fn cancelled_by_drain(links: &Links, id: JobId, tool: &str, reason: &str) -> Self {
        Self {
            status: JobStatus::Cancelled,
            instructions: format!(
                "Job {id} did not finish: the bridge replica running it shut down and cancelled \
                 it ({reason}). Its result is lost; call the tool again to run it anew (another \
                 replica will take the call)."
            ),
            ..Self::new(links, id, tool)
        }
    }

    /// The handle as a tool result: `structuredContent` is the handle, `content[0].text` the
    /// same object as JSON text (platforms such as Foundry pass only the text on).
    pub fn into_result(self, links: &Links) -> CallToolResult {
        let value = serde_json::to_value(&self).unwrap_or_default();
        let mut result = if self.status == JobStatus::Running {
            CallToolResult::structured(value)
        } else {
            CallToolResult::structured_error(value)
        };
        attach_job_meta(&mut result, links, self.job_id);
        result
    }
}

/// Name the job in a result's `_meta`, so a sync caller can still find the job channel.
pub fn attach_job_meta(result: &mut CallToolResult, links: &Links, id: JobId) {
    let meta = result.meta.get_or_insert_with(Default::default);
    meta.insert(
        JOB_META_KEY.to_string(),
        json!({ "job_id": id, "events_url": links.events_url(id) }),
    );
}

/// How long a caller refused by a draining replica is told to wait before it calls again: about
/// the time a load balancer takes to see the replica unready (two readiness probes).
pub const DRAINING_RETRY_AFTER_MS: u64 = 2000;

/// The tool error of a call refused because this replica is draining: `message` for the agent,
/// and under [`RETRY_META_KEY`] what a client needs to retry it by itself.
pub fn draining_refusal(message: String) -> CallToolResult {
    let mut result = error_result(message);
    result.meta.get_or_insert_with(Default::default).insert(
        RETRY_META_KEY.to_string(),
        json!({ "reason": "draining", "retry_after_ms": DRAINING_RETRY_AFTER_MS }),
    );
    result
}

/// A tool error result with one text line (redacted: it may quote an upstream's error).
pub fn error_result(text: impl Into<String>) -> CallToolResult {
    let text: String = text.into();
    CallToolResult::error(vec![ContentBlock::text(redact::text(&text).into_owned())])
}

/// A successful tool result whose structured content is `value`, with the JSON as text.
pub fn json_result(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}

/// The agent gets a clean message; the log gets the detail (the Redis address, the OS error).
pub fn store_error(e: JobsError) -> ErrorData {
    tracing::warn!(error = %e, "a job tool could not reach the job store");
    ErrorData::internal_error(e.public_message(), None)
}

/// An upstream's failure as the agent sees it: its own JSON-RPC errors unchanged, the bridge's
/// (not connected, timed out, too large) as errors that say what happened.
pub fn upstream_error(error: RequestError, method: &str) -> ErrorData {
    match error {
        RequestError::Upstream(error) => error,
        RequestError::Input { .. } => ErrorData::invalid_request(error.to_string(), None),
        RequestError::TooLarge { .. } => ErrorData::invalid_request(error.to_string(), None),
        other => {
            tracing::info!(%method, error = %other, "a routed request failed");
            ErrorData::internal_error(other.to_string(), None)
        }
    }
}

/// The most of a client's string (a task ID, a `requestState`, an `inputResponses` key) an
/// error quotes back: the request may hold megabytes of it, the answer need not.
const SHOWN_CHARS: usize = 64;

/// `text` as an error quotes it: its first [`SHOWN_CHARS`] characters, `…` when cut.
pub fn shown(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(SHOWN_CHARS).collect();
    match chars.next() {
        Some(_) => format!("{head}…"),
        None => head,
    }
}
